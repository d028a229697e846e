"""What the writer ratchet counts, on small synthetic trees: every ServerArgs
write form and receiver, whatever the layout, and nothing else; and which
edits make a new site.

TestTheDraftSide scans a package of several files: what the shipped check
pins. Each other test scans a throwaway package holding one file, its source::

    <tmp>/sglang/__init__.py
    <tmp>/sglang/srt/a.py        the test's source

and looks at the sites found there (``sites_in``), their writes (``writes_in``)
or their keys (``keys_in``).
"""

import unittest

from ratchet_harness import load_ratchet, synthetic_package

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=5, suite="base-a-test-cpu")

wr = load_ratchet()


class RatchetCase(CustomTestCase):
    def sites_in(self, source, rel="srt/a.py"):
        """The sites the ratchet finds in a package holding only ``source``."""
        return wr.scan(synthetic_package(self, {rel: source})).sites

    def writes_in(self, source):
        """The write (the site less its values) of each site in ``source``."""
        return [site.write for site in self.sites_in(source)]

    def keys_in(self, source):
        """The keys of the sites in ``source``, sorted."""
        return sorted(wr.site_key(site) for site in self.sites_in(source))


class TestMentionsAreNotWrites(RatchetCase):
    def test_a_comment_docstring_or_string_that_spells_a_write_is_not_counted(self):
        writes = self.writes_in('''
            """server_args.override("x", port=1) and server_args.port = 1"""

            def f(server_args):
                """setattr(server_args, "port", 1)"""
                # server_args.override("y", port=2); del server_args.port
                msg = "server_args.port = 3; sa.override('z', a=1)"
                return server_args.port, f"{msg} server_args.x = 1"
            ''')
        self.assertEqual(writes, [])

    def test_reads_and_writes_into_a_fields_value_are_not_counted(self):
        writes = self.writes_in("""
            def f(server_args):
                server_args.lora_paths[0] = "a"
                server_args.model_config.x = 1
                return server_args.port + len(server_args.lora_paths)
            """)
        self.assertEqual(writes, [])

    def test_an_argparse_namespace_and_other_override_apis_are_not_server_args(self):
        # args counts for args.override(...) alone; the ServerArgs class's own
        # writes onto self are how it builds itself.
        writes = self.writes_in("""
            def main(parser):
                args = parser.parse_args()
                args.port = 1
                envs.SGLANG_X.override(True)
                get_parallel().override(tp=2)

            class ServerArgs:
                def __post_init__(self):
                    self.port = 1
                    setattr(self, "host", "h")
            """)
        self.assertEqual(writes, [])


class TestEveryWriteForm(RatchetCase):
    def test_each_way_of_writing_a_field_is_one_site(self):
        sites = self.sites_in("""
            def f(server_args, n):
                server_args.override("src", port=1, host=2)
                server_args.port = 1
                server_args.port += n
                server_args.port: int = 2
                del server_args.host
                server_args.a, (server_args.b, *server_args.c) = 1, (2, 3)
                for server_args.d in range(n):
                    pass
                with open("x") as server_args.e:
                    pass
                setattr(server_args, "f", 1)
                object.__setattr__(server_args, "g", 1)
                declare_load_time_override("model", {"dtype": "half"})
            """)
        self.assertEqual(
            sorted((site.kind, site.write) for site in sites),
            [
                ("assign", "del server_args.host"),
                ("assign", "server_args.a ="),
                ("assign", "server_args.b ="),
                ("assign", "server_args.c ="),
                ("assign", "server_args.d ="),
                ("assign", "server_args.e ="),
                ("assign", "server_args.port ="),
                ("assign", "server_args.port ="),
                ("assign", "server_args.port ="),
                ("declare", "declare_load_time_override('model', {'dtype'})"),
                ("override", "server_args.override('src', host=..., port=...)"),
                ("setattr", "object.__setattr__(server_args, 'g', ...)"),
                ("setattr", "setattr(server_args, 'f', ...)"),
            ],
        )

    def test_each_receiver_form_is_a_server_args(self):
        writes = self.writes_in("""
            import copy

            def f(self, draft_server_args, model_runner, cfg: "Optional[ServerArgs]"):
                self.server_args.override("a", x=1)
                self.scheduler.target_server_args.port = 1
                get_server_args().override("b", x=1)
                get_global_server_args().port = 2
                draft_server_args_copy(self.server_args).port = 3
                ServerArgs(model_path="m").port = 4
                ServerArgs.from_cli_args(ns).port = 5
                copy.deepcopy(self.server_args).port = 6
                draft_server_args.port = 7
                cfg.port = 8
                args.override("c", x=1)
                sa.override("d", x=1)
            """)
        self.assertEqual(len(writes), 12, writes)

    def test_names_bound_to_a_server_args_are_followed_in_their_scope(self):
        # inner() sees the aliases of f; shadowed() has a parameter args that
        # hides f's.
        writes = self.writes_in("""
            import copy, dataclasses

            def f(self, model_runner):
                args = model_runner.server_args
                args.a = 1
                other = args
                other.b = 2
                clone = copy.copy(other)
                clone.c = 3
                for sa in (self.server_args, self.draft_server_args):
                    sa.override("d", x=1)
                if (cfg := get_server_args()) is not None:
                    cfg.e = 5
                typed: ServerArgs = make()
                typed.f = 6
                replaced = dataclasses.replace(self.server_args)
                replaced.g = 7

                def inner():
                    args.h = 8

                def shadowed(args):
                    args.i = 9
            """)
        self.assertEqual(
            writes,
            ["args.a =", "other.b =", "clone.c =", "sa.override('d', x=...)",
             "cfg.e =", "typed.f =", "replaced.g =", "args.h ="],
        )  # fmt: skip


class TestAnyLayout(RatchetCase):
    def test_an_alias_written_without_spaces_is_counted(self):
        sites = self.sites_in("""
            class Worker:
                def init(self):
                    cfg=self.server_args
                    cfg.port=1
                def one_line(self): cfg=self.server_args;cfg.host=2
            """)
        self.assertEqual(
            [(s.line, s.write, s.function) for s in sites],
            [(5, "cfg.port =", "Worker.init"), (6, "cfg.host =", "Worker.one_line")],
        )

    def test_a_receiver_split_across_lines_is_counted(self):
        sites = self.sites_in("""
            def f(self):
                (
                    self
                    .server_args
                ).port = 1
                (self.
                    server_args.
                    override)(
                        "src", port=2)
                x = [1, 2, \\
                     3]; self.server_args \\
                    .host = x
            """)
        self.assertEqual(
            [(s.line, s.kind, s.code) for s in sites],
            [
                (3, "assign", "(self .server_args).port = 1"),
                (7, "override", '(self. server_args. override)("src", port=2)'),
                (12, "assign", "self.server_args .host = x"),
            ],
        )

    def test_writes_at_module_level_in_class_bodies_lambdas_and_decorators_count(self):
        # A decorator's write counts in the function it decorates.
        sites = self.sites_in("""
            get_server_args().port = 1

            @register(lambda: setattr(get_server_args(), "a", 1))
            def f():
                g = lambda server_args: server_args.override("src", x=1)

            class C:
                get_server_args().host = 2
            """)
        self.assertEqual(
            [(s.function, s.kind) for s in sites],
            [("<module>", "assign"), ("f", "setattr"), ("f", "override"),
             ("C", "assign")],
        )  # fmt: skip

    def test_a_tab_indented_file_with_crlf_line_ends_is_counted(self):
        sites = self.sites_in(
            "def f(server_args):\r\n\tif 1:\r\n\t\tserver_args.port = 1\r\n"
        )
        self.assertEqual(
            [(s.line, s.code) for s in sites], [(3, "server_args.port = 1")]
        )

    def test_a_write_deep_inside_a_long_expression_is_counted(self):
        # ast parses this, but a walk that recursed once per node would run
        # out of Python's stack on it.
        deep = 'x = server_args.override("src", y=1)' + " + a" * 1500
        sites = self.sites_in(deep + "\n")
        self.assertEqual(
            [(s.line, s.write) for s in sites],
            [(1, "server_args.override('src', y=...)")],
        )


class TestWhatMakesANewSite(RatchetCase):
    BEFORE = """
        def f(server_args, value):
            server_args.override("src", port=value, host=1)
            server_args.port = value
        """

    def test_a_moved_line_an_edited_value_or_reordered_keywords_keep_the_key(self):
        after = """
            import os


            def f(server_args, value):
                server_args.override(
                    "src", host=os.environ["H"], port=value + 1,
                )
                server_args.port = value * 2
            """
        self.assertEqual(self.keys_in(after), self.keys_in(self.BEFORE))

    def test_another_field_source_or_function_is_another_key(self):
        for after in (
            self.BEFORE.replace("host=1", "host=1, dtype=2"),
            self.BEFORE.replace('"src"', '"other"'),
            self.BEFORE.replace("server_args.port =", "server_args.host ="),
            self.BEFORE.replace("def f(", "def g("),
        ):
            with self.subTest(after=after):
                self.assertNotEqual(self.keys_in(after), self.keys_in(self.BEFORE))


class TestTheDraftSide(RatchetCase):
    def test_it_is_the_speculative_folder_and_the_functions_that_build_the_draft(
        self,
    ):
        root = synthetic_package(
            self,
            {
                "srt/speculative/parts/worker.py": """
                    def build(server_args):
                        server_args.a = 1
                    """,
                "srt/managers/scheduler.py": """
                    class Scheduler:
                        def maybe_init_draft_worker(self):
                            def hand_over(draft_server_args):
                                draft_server_args.b = 2

                        def init_all_attention_backends(self):
                            self.draft_server_args.c = 3

                        def init_memory_pool(self):
                            self.server_args.d = 4
                    """,
                "srt/server_args.py": """
                    def draft_server_args_copy(server_args):
                        server_args.e = 5

                    def prepare_server_args(server_args):
                        server_args.f = 6
                    """,
                "srt/managers/other.py": """
                    def maybe_init_draft_worker(server_args):
                        server_args.g = 7
                    """,
            },
        )

        found = [(s.file, s.function, s.write) for s in wr.draft_side_sites(root)]

        self.assertEqual(
            found,
            [
                (
                    "srt/managers/scheduler.py",
                    "Scheduler.maybe_init_draft_worker.hand_over",
                    "draft_server_args.b =",
                ),
                (
                    "srt/managers/scheduler.py",
                    "Scheduler.init_all_attention_backends",
                    "self.draft_server_args.c =",
                ),
                ("srt/server_args.py", "draft_server_args_copy", "server_args.e ="),
                ("srt/speculative/parts/worker.py", "build", "server_args.a ="),
            ],
        )


if __name__ == "__main__":
    unittest.main()

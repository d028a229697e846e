"""What the shipped writer ratchet counts, on small synthetic trees: every
write form it pins, through every receiver it knows, whatever the layout; what
it leaves out; which edits make a new site; and where the draft side ends.

TestTheDraftSide scans a package of several files. Each other test scans a
throwaway package holding one draft-side file, its source::

    <tmp>/sglang/__init__.py
    <tmp>/sglang/srt/speculative/a.py        the test's source

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
    def sites_in(self, source):
        """The sites the ratchet finds in a package holding only ``source``,
        as srt/speculative/a.py."""
        root = synthetic_package(self, {"srt/speculative/a.py": source})
        return wr.draft_side_sites(root)

    def writes_in(self, source):
        """The write (the site less its values) of each site in ``source``."""
        return [site.write for site in self.sites_in(source)]

    def keys_in(self, source):
        """The keys of the sites in ``source``, sorted."""
        return sorted(site.key() for site in self.sites_in(source))


class TestMentionsAreNotWrites(RatchetCase):
    def test_a_comment_docstring_or_string_that_spells_a_write_is_not_counted(self):
        writes = self.writes_in('''
            """server_args.override("x", port=1) and server_args.port = 1"""

            def f(server_args):
                """setattr(server_args, "port", 1)"""
                # server_args.override("y", port=2); del server_args.port
                msg = "server_args.port = 3; draft_server_args.override('z', a=1)"
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

    def test_other_objects_and_other_override_apis_are_not_server_args(self):
        # The ServerArgs class's own writes onto self are how it builds itself.
        writes = self.writes_in("""
            def main(parser):
                args = parser.parse_args()
                args.port = 1
                args.override("c", x=1)
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
        writes = self.writes_in("""
            def f(server_args, n, pairs):
                server_args.override("src", port=1, host=2)
                server_args.port = 1
                server_args.port += n
                del server_args.host
                setattr(server_args, "f", 1)
                setattr(server_args, name, value)
                server_args.a, (server_args.b, n) = 1, (2, 3)
                server_args.c: int = 1
                for server_args.d in range(2):
                    pass
                with open("x") as server_args.e:
                    pass
                server_args.override("src", **pairs)
                server_args.override("src", **{"g": 1})
                server_args.override("src")
            """)
        self.assertEqual(
            writes,
            [
                "server_args.override(host)",
                "server_args.override(port)",
                "server_args.port =",
                "server_args.port =",
                "del server_args.host",
                "setattr(server_args, 'f')",
                "setattr(server_args, ...)",
                "server_args.a =",
                "server_args.b =",
                "server_args.c =",
                "server_args.d =",
                "server_args.e =",
                "server_args.override(**pairs)",
                "server_args.override(**...)",
                "server_args.override(...)",
            ],
        )

    def test_each_receiver_form_is_a_server_args(self):
        writes = self.writes_in("""
            def f(self, draft_server_args, fields):
                self.server_args.override("a", x=1)
                self.scheduler.target_server_args.port = 1
                draft_server_args.override("b", **fields)
                self.draft_server_args.port = 2
                server_args.port = 3
            """)
        self.assertEqual(
            writes,
            [
                "self.server_args.override(x)",
                "self.scheduler.target_server_args.port =",
                "draft_server_args.override(**fields)",
                "self.draft_server_args.port =",
                "server_args.port =",
            ],
        )

    def test_a_name_bound_to_a_server_args_in_the_same_function_is_one(self):
        writes = self.writes_in("""
            class Worker:
                def init(self, model_runner):
                    cfg = self.server_args
                    cfg.port = 1
                    other = cfg
                    other.override("src", host=2)
                    args = model_runner.server_args
                    setattr(args, "dtype", "half")
                    del args.tp_size
            """)
        self.assertEqual(
            writes,
            [
                "cfg.port =",
                "other.override(host)",
                "setattr(args, 'dtype')",
                "del args.tp_size",
            ],
        )


class TestWhatItLeavesOut(RatchetCase):
    def test_forms_no_draft_side_code_has_are_not_counted(self):
        # Calls as receivers, walrus, object.__setattr__, and aliases bound in
        # another function or only after the write.
        writes = self.writes_in("""
            import copy

            def f(self):
                cfg = self.server_args

                def inner():
                    cfg.a = 1

                get_server_args().b = 2
                copy.deepcopy(self.server_args).c = 3
                ServerArgs(model_path="m").d = 4
                if (sa := self.server_args) is not None:
                    sa.e = 5
                object.__setattr__(server_args, "h", 1)

            def g(self):
                later.i = 1
                later = self.server_args
            """)
        self.assertEqual(writes, [])


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
        # The first two as black lays them out; the others by hand.
        sites = self.sites_in("""
            def f(self, target_worker):
                self.draft_worker.model_runner.server_args.override(
                    "src", context_length=target_worker.context_len
                )
                (
                    self.draft_worker.model_runner.server_args.context_length
                ) = target_worker.model_runner.model_config.context_len
                (self.
                    server_args.
                    override)(
                        "src", port=2)
                x = [1, 2, \\
                     3]; self.server_args \\
                    .host = x
            """)
        self.assertEqual(
            [(s.line, s.write) for s in sites],
            [
                (
                    3,
                    "self.draft_worker.model_runner.server_args.override(context_length)",
                ),
                (7, "self.draft_worker.model_runner.server_args.context_length ="),
                (9, "self.server_args.override(port)"),
                (14, "self.server_args.host ="),
            ],
        )

    def test_writes_at_module_level_in_class_bodies_lambdas_and_decorators_count(self):
        # A decorator's write counts in the function it decorates.
        sites = self.sites_in("""
            server_args.port = 1

            @register(lambda: setattr(server_args, "a", 1))
            def f():
                g = lambda server_args: server_args.override("src", x=1)

            class C:
                server_args.host = 2
            """)
        self.assertEqual(
            [(s.function, s.write) for s in sites],
            [("<module>", "server_args.port ="), ("f", "setattr(server_args, 'a')"),
             ("f", "server_args.override(x)"), ("C", "server_args.host =")],
        )  # fmt: skip

    def test_a_tab_indented_file_with_crlf_line_ends_is_counted(self):
        sites = self.sites_in(
            "def f(server_args):\r\n\tif 1:\r\n\t\tserver_args.port = 1\r\n"
        )
        self.assertEqual(
            [(s.line, s.write) for s in sites], [(3, "server_args.port =")]
        )


class TestWhatMakesANewSite(RatchetCase):
    BEFORE = """
        def f(server_args, value):
            server_args.override("src", port=value, host=1)
            server_args.port = value
        """

    def test_a_moved_line_an_edited_value_or_source_or_reordered_keywords_keep_the_key(
        self,
    ):
        after = """
            import os


            def f(server_args, value):
                server_args.override(
                    "relabelled", host=os.environ["H"], port=value + 1,
                )
                server_args.port = value * 2
            """
        self.assertEqual(self.keys_in(after), self.keys_in(self.BEFORE))

    def test_another_field_receiver_or_function_is_another_key(self):
        # The receiver too: the same write moved from the draft's copy onto
        # the target's config is a new site.
        for after in (
            self.BEFORE.replace("host=1", "host=1, dtype=2"),
            self.BEFORE.replace("server_args.port =", "server_args.host ="),
            self.BEFORE.replace("server_args.port =", "target_server_args.port ="),
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

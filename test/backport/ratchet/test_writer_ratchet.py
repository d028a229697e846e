"""The ServerArgs writer ratchet (scripts/ratchet/writer_ratchet.py) on small
synthetic sglang trees: what it counts, how the check reports, bad input.

The command is run as a developer runs it, in a subprocess; a few tests call
the module's functions directly.
"""

import importlib.util
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 4))
SCRIPT = os.path.join(REPO, "scripts", "ratchet", "writer_ratchet.py")


def _load_ratchet():
    spec = importlib.util.spec_from_file_location("writer_ratchet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wr = _load_ratchet()


class _Tree:
    """A throwaway sglang-like package with its own baseline file."""

    def __init__(self, files):
        self._tmp = tempfile.TemporaryDirectory(prefix="ratchet-")
        self.dir = self._tmp.name
        self.root = os.path.join(self.dir, "sglang")
        self.baseline = os.path.join(self.dir, "baseline.json")
        os.makedirs(self.root)
        self.write("__init__.py", "")
        for rel, text in files.items():
            self.write(rel, text)

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(textwrap.dedent(text))

    def run(self, *args, root=None, baseline=True):
        cmd = [sys.executable, SCRIPT, "--root", root or self.root]
        if baseline:
            cmd += ["--baseline", self.baseline]
        proc = subprocess.run(
            cmd + list(args), capture_output=True, text=True, cwd=self.dir
        )
        return proc.returncode, proc.stdout + proc.stderr

    def sites(self, prefilter=True):
        return wr.collect_sites(self.root, prefilter=prefilter)[0]

    def cleanup(self):
        self._tmp.cleanup()


class _TreeCase(CustomTestCase):
    def tree(self, files):
        tree = _Tree(files)
        self.addCleanup(tree.cleanup)
        return tree

    def writes(self, files):
        """The normalized writes found, checking that the fast path and the
        full parse agree on them."""
        tree = self.tree(files)
        fast = tree.sites(prefilter=True)
        full = tree.sites(prefilter=False)
        self.assertEqual(fast, full, "pre-filter and full parse disagree")
        return [s.write for s in fast]


class TestWhatIsCounted(_TreeCase):
    def test_a_comment_mention_is_not_counted(self):
        writes = self.writes({"srt/a.py": """
                def f(server_args):
                    # server_args.override("x", port=1)
                    # server_args.port = 1; setattr(server_args, "port", 1)
                    return server_args.port  # server_args.override("y", a=2)
                """})
        self.assertEqual(writes, [])

    def test_a_docstring_mention_is_not_counted(self):
        writes = self.writes({"srt/a.py": '''
                """Module docstring: call server_args.override("x", port=1).

                def g(server_args):
                    server_args.override("in a docstring", port=2)
                """


                class A:
                    def f(self, server_args):
                        """server_args.port = 3 and sa.override("z", a=1)"""
                        return server_args.port
                '''})
        self.assertEqual(writes, [])

    def test_a_string_literal_mention_is_not_counted(self):
        writes = self.writes({"srt/a.py": """
                def f(server_args):
                    msg = "use server_args.override(source, ...) instead"
                    raise AttributeError(f"server_args.{msg} = 1")
                """})
        self.assertEqual(writes, [])

    def test_override_calls_on_server_args_receivers_are_counted(self):
        writes = self.writes({"srt/a.py": """
                from sglang.srt.runtime_context import get_server_args


                class Worker:
                    def __init__(self, server_args, dp_server_args, sa, args):
                        server_args.override("w.a", port=1)
                        self.server_args.override("w.b", port=2)
                        self.scheduler.server_args.override(source="w.c", port=3)
                        get_server_args().override("w.d", port=4)
                        dp_server_args.override("w.e", port=5)
                        sa.override("w.f", port=6)
                        args.override("w.g", port=7)
                """})
        self.assertEqual(
            writes,
            [
                "server_args.override('w.a', port=...)",
                "self.server_args.override('w.b', port=...)",
                "self.scheduler.server_args.override('w.c', port=...)",
                "get_server_args().override('w.d', port=...)",
                "dp_server_args.override('w.e', port=...)",
                "sa.override('w.f', port=...)",
                "args.override('w.g', port=...)",
            ],
        )

    def test_override_on_other_objects_is_not_counted(self):
        writes = self.writes({"srt/a.py": """
                def f(server_args, envs, stack):
                    envs.SGLANG_FLAG.override(True)
                    get_parallel().override(tp_rank=0)
                    stack.enter_context(getattr(envs, "X").override(1))
                    server_args.model_config.override("not the ServerArgs", a=1)
                """})
        self.assertEqual(writes, [])

    def test_assignments_setattr_and_del_on_a_receiver_are_counted(self):
        writes = self.writes({"srt/a.py": """
                def f(server_args, value):
                    server_args.port = 1
                    server_args.port += 1
                    server_args.tp_size: int = 2
                    server_args.host, other = "h", 3
                    (
                        server_args.dp_size,
                        server_args.ep_size,
                    ) = (1, 2)
                    del server_args.nnodes
                    setattr(server_args, "page_size", 16)
                    object.__setattr__(server_args, "_resolved", True)
                    server_args.__setattr__("device", "cpu")
                """})
        self.assertEqual(
            writes,
            [
                "server_args.port =",
                "server_args.port +=",
                "server_args.tp_size =",
                "server_args.host =",
                "server_args.dp_size =",
                "server_args.ep_size =",
                "del server_args.nnodes",
                "setattr(server_args, 'page_size')",
                "object.__setattr__(server_args, '_resolved')",
                "server_args.__setattr__('device')",
            ],
        )

    def test_reads_and_writes_inside_a_field_are_not_counted(self):
        writes = self.writes({"srt/a.py": """
                def f(server_args):
                    x = server_args.port
                    server_args.model_config.dtype = "half"
                    server_args.lora_paths[0] = "p"
                    if server_args.port == 1:
                        return x
                """})
        self.assertEqual(writes, [])

    def test_a_local_bound_to_server_args_is_a_receiver(self):
        writes = self.writes({"srt/a.py": """
                import copy


                def npu_defaults(args: "ServerArgs"):
                    args.attention_backend = "ascend"


                def gdn_default(model_runner):
                    args = model_runner.server_args
                    args.linear_attn_prefill_backend = "flashinfer"


                def dp_worker(server_args, gpu_id):
                    args = copy.deepcopy(server_args)
                    args.base_gpu_id = gpu_id
                    cfg = args
                    cfg.tp_size = 1


                class W:
                    def capture(self):
                        sa = self.server_args
                        sa.speculative_num_steps = 2

                        def restore():
                            sa.speculative_num_steps = 1

                        return restore
                """})
        self.assertEqual(
            writes,
            [
                "args.attention_backend =",
                "args.linear_attn_prefill_backend =",
                "args.base_gpu_id =",
                "cfg.tp_size =",
                "sa.speculative_num_steps =",
                "sa.speculative_num_steps =",
            ],
        )

    def test_an_argparse_namespace_named_args_is_not_a_receiver(self):
        writes = self.writes({"bench_serving.py": """
                import argparse

                from sglang.srt.server_args import ServerArgs


                def main():
                    parser = argparse.ArgumentParser()
                    args = parser.parse_args()
                    args.port = 30000
                    args.model = args.model or "default"
                    setattr(args, "backend", "sglang")
                    server_args = ServerArgs.from_cli_args(args)
                    return server_args
                """})
        self.assertEqual(writes, [])

    def test_a_draft_copy_is_still_a_server_args(self):
        writes = self.writes(
            {
                "srt/server_args.py": """
                import copy


                class ServerArgs:
                    def __post_init__(self):
                        self.port = 30000
                        object.__setattr__(self, "_resolved", True)

                    def override(self, source, **fields):
                        for k, v in fields.items():
                            setattr(self, k, v)


                def draft_server_args_copy(server_args, context_len):
                    draft = copy.deepcopy(server_args)
                    draft.override("draft_copy", context_length=context_len)
                    return draft
                """,
                "srt/managers/scheduler.py": """
                from sglang.srt.server_args import draft_server_args_copy


                class Scheduler:
                    def maybe_init_draft_worker(self):
                        draft_server_args = draft_server_args_copy(self.server_args, 8)
                        draft_server_args.load_format = "dummy"
                        w = draft_server_args_copy(self.server_args, 8)
                        w.override("again", load_format="auto")
                """,
            }
        )
        # ServerArgs's own methods (self) are not receivers
        self.assertEqual(
            writes,
            [
                "draft_server_args.load_format =",
                "w.override('again', load_format=...)",
                "draft.override('draft_copy', context_length=...)",
            ],
        )

    def test_declare_load_time_override_is_counted(self):
        writes = self.writes({"srt/models/m.py": """
                class Model:
                    def determine(self):
                        from sglang.srt.arg_groups.overrides import (
                            declare_load_time_override,
                        )

                        declare_load_time_override(
                            "Model.determine", {"disable_shared_experts_fusion": True}
                        )
                """})
        self.assertEqual(
            writes,
            [
                "declare_load_time_override('Model.determine', "
                "{'disable_shared_experts_fusion'})"
            ],
        )

    def test_the_resolution_pipeline_and_multimodal_gen_are_not_scanned(self):
        tree = self.tree(
            {
                "srt/arg_groups/speculative_hook.py": """
                def hook(server_args):
                    server_args.disable_overlap_schedule = True
                """,
                "multimodal_gen/runtime/server_args.py": """
                def f(server_args):
                    server_args.override("mm", port=1)
                """,
                "srt/kept.py": """
                def f(server_args):
                    server_args.override("kept", port=1)
                """,
            }
        )
        self.assertEqual([s.file for s in tree.sites()], ["srt/kept.py"])

    def test_the_fast_path_agrees_with_a_full_parse_on_awkward_layouts(self):
        files = {
            "srt/strings.py": '''
            """Docstring with code at column 0:
            def fake(server_args):
                server_args.port = 1
            """
            TEMPLATE = """
            class Fake:
                def f(self):
                    self.server_args.override("in a string", a=1)
            """


            def real(server_args):
                server_args.port = 2
            ''',
            "srt/module_level.py": """
            server_args = None
            server_args.module_level = 1 if server_args else 2

            if __name__ == "__main__":
                server_args.override("main", port=1)
            """,
            "srt/members.py": """
            from dataclasses import dataclass


            @dataclass
            class Outer:
                field: int = 0

                @staticmethod
                def helper(server_args):
                    server_args.override("decorated", port=1)

                async def run(self):
                    self.server_args.port = \\
                        2

                class Inner:
                    def f(self, get_server_args):
                        get_server_args().port = 3
                        (
                            self.server_args.a,
                            self.server_args.b,
                        ) = 1, 2
            """,
            "srt/closure.py": """
            import copy


            def outer(server_args):
                def inner():
                    alias.override("closure", a=1)

                alias = copy.copy(server_args)
                return inner
            """,
            # one write per function: each must be found by the pre-filter
            "srt/lonely.py": """
            import copy


            def tuple_target(server_args):
                server_args.a, other = 1, 2


            def multi_line_target(x):
                (
                    other,
                    x.server_args.b,
                ) = 1, 2


            def deleted(server_args):
                del server_args.c


            def alias_of_alias(server_args):
                first = server_args
                second = first
                second.d = 4


            def copied_alias(server_args):
                mine = copy.deepcopy(
                    server_args
                )
                mine.e += 5


            def looped(self):
                for each in (self.server_args, self.draft_server_args):
                    setattr(each, "f", 6)


            def typed(cfg: "Optional[ServerArgs]"):
                cfg.__setattr__("g", 7)


            def walrus(self):
                if (cfg := self.server_args) is not None:
                    cfg.h = 8
            """,
            "srt/whole_file.py": """
            class K:
                server_args.class_level = 3

            try:
                import missing
            except ImportError:
                server_args.override("except", a=1)
            """,
        }
        parsed_whole = []
        full_parse = wr.sites_of_file

        def recording(rel, data, display_path):
            parsed_whole.append(rel)
            return full_parse(rel, data, display_path)

        tree = self.tree(files)
        with mock.patch.object(wr, "sites_of_file", recording):
            fast = tree.sites(prefilter=True)
        self.assertEqual(fast, tree.sites(prefilter=False))
        self.assertEqual(
            [(s.file, s.line, s.function, s.write) for s in fast],
            [
                (
                    "srt/closure.py",
                    7,
                    "outer.inner",
                    "alias.override('closure', a=...)",
                ),
                ("srt/lonely.py", 6, "tuple_target", "server_args.a ="),
                ("srt/lonely.py", 10, "multi_line_target", "x.server_args.b ="),
                ("srt/lonely.py", 17, "deleted", "del server_args.c"),
                ("srt/lonely.py", 23, "alias_of_alias", "second.d ="),
                ("srt/lonely.py", 30, "copied_alias", "mine.e +="),
                ("srt/lonely.py", 35, "looped", "setattr(each, 'f')"),
                ("srt/lonely.py", 39, "typed", "cfg.__setattr__('g')"),
                ("srt/lonely.py", 44, "walrus", "cfg.h ="),
                (
                    "srt/members.py",
                    11,
                    "Outer.helper",
                    "server_args.override('decorated', port=...)",
                ),
                ("srt/members.py", 14, "Outer.run", "self.server_args.port ="),
                ("srt/members.py", 19, "Outer.Inner.f", "get_server_args().port ="),
                ("srt/members.py", 20, "Outer.Inner.f", "self.server_args.a ="),
                ("srt/members.py", 20, "Outer.Inner.f", "self.server_args.b ="),
                ("srt/module_level.py", 3, "<module>", "server_args.module_level ="),
                (
                    "srt/module_level.py",
                    6,
                    "<module>",
                    "server_args.override('main', port=...)",
                ),
                ("srt/strings.py", 14, "real", "server_args.port ="),
                ("srt/whole_file.py", 3, "K", "server_args.class_level ="),
                (
                    "srt/whole_file.py",
                    8,
                    "<module>",
                    "server_args.override('except', a=...)",
                ),
            ],
        )
        # only the file whose writes sit outside any function was parsed whole
        self.assertEqual(parsed_whole, ["srt/whole_file.py"])


class TestCheck(_TreeCase):
    BASE = {"srt/worker.py": """
        class Worker:
            def __init__(self, server_args):
                self.server_args = server_args
                server_args.override("worker.init", context_length=8)

            def step(self):
                return self.server_args.port
        """}

    def checked_tree(self):
        tree = self.tree(self.BASE)
        rc, out = tree.run("--update")
        self.assertEqual(rc, 0, out)
        self.assertIn("records 1 ServerArgs writer sites", out)
        return tree

    def test_an_unchanged_tree_passes(self):
        tree = self.checked_tree()
        rc, out = tree.run()
        self.assertEqual(rc, 0, out)
        self.assertIn("OK, 1 ServerArgs writer sites", out)

    def test_a_new_call_fails_and_is_reported_with_its_line(self):
        tree = self.checked_tree()
        tree.write(
            "srt/worker.py",
            self.BASE["srt/worker.py"].replace(
                "                return self.server_args.port",
                '                self.server_args.override("worker.step", port=1)\n'
                "                return self.server_args.port",
            ),
        )
        rc, out = tree.run()
        self.assertEqual(rc, 1, out)
        self.assertIn("grew from 1 to 2", out)
        self.assertIn(
            'srt/worker.py:8: self.server_args.override("worker.step", port=1)', out
        )
        self.assertNotIn("srt/worker.py:5:", out)  # the old site is not new

    def test_a_new_bare_assignment_is_reported_with_its_line(self):
        tree = self.checked_tree()
        tree.write(
            "srt/other.py",
            """
            def tweak(model_runner):
                args = model_runner.server_args
                args.page_size = 64
            """,
        )
        rc, out = tree.run()
        self.assertEqual(rc, 1, out)
        self.assertIn("srt/other.py:4: args.page_size = 64", out)

    def test_a_moved_call_is_not_new(self):
        tree = self.checked_tree()
        moved = self.BASE["srt/worker.py"].replace(
            "                self.server_args = server_args\n"
            '                server_args.override("worker.init", context_length=8)\n',
            "                # a comment and a blank line push it down\n\n"
            '                server_args.override("worker.init", context_length=8)\n'
            "                self.server_args = server_args\n",
        )
        tree.write("srt/worker.py", "\n\n" + moved)
        rc, out = tree.run("--strict")
        self.assertEqual(rc, 0, out)
        self.assertIn("OK, 1 ServerArgs writer sites", out)

    def test_an_edited_value_is_not_a_new_site(self):
        tree = self.checked_tree()
        tree.write(
            "srt/worker.py",
            self.BASE["srt/worker.py"].replace("context_length=8", "context_length=16"),
        )
        rc, out = tree.run("--strict")
        self.assertEqual(rc, 0, out)

    def test_a_shrink_asks_for_update_and_update_locks_it_in(self):
        tree = self.checked_tree()
        tree.write(
            "srt/worker.py",
            self.BASE["srt/worker.py"].replace(
                '                server_args.override("worker.init", context_length=8)\n',
                "",
            ),
        )
        rc, out = tree.run()
        self.assertEqual(rc, 1, out)
        self.assertIn("shrank from 1 to 0", out)
        self.assertIn("--update", out)
        self.assertIn("srt/worker.py (in Worker.__init__, was line 5)", out)

        # the one command it prints lowers the baseline
        command = out.split("lowering the baseline with: ", 1)[1].splitlines()[0]
        proc = subprocess.run(
            shlex.split(command), capture_output=True, text=True, cwd=tree.dir
        )
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        rc, out = tree.run()
        self.assertEqual(rc, 0, out)
        self.assertIn("OK, 0 ServerArgs writer sites", out)

    def test_a_write_moved_to_another_function_is_listed_and_fails_only_strict(self):
        tree = self.checked_tree()
        tree.write(
            "srt/worker.py",
            """
            class Worker:
                def __init__(self, server_args):
                    self.server_args = server_args

                def step(self):
                    self.server_args.override("worker.init", context_length=8)
            """,
        )
        rc, out = tree.run()
        self.assertEqual(rc, 0, out)
        self.assertIn("not all the same ones", out)
        self.assertIn("srt/worker.py:7:", out)
        rc, out = tree.run("--strict")
        self.assertEqual(rc, 1, out)

    def test_list_prints_every_site_and_the_count(self):
        tree = self.tree(self.BASE)
        rc, out = tree.run("--list", baseline=False)
        self.assertEqual(rc, 0, out)
        self.assertIn(
            'srt/worker.py:5: server_args.override("worker.init", context_length=8)'
            "  [override in Worker.__init__]",
            out,
        )
        self.assertIn("1 ServerArgs writer sites", out)


class TestBadInput(_TreeCase):
    def assertCleanError(self, rc, out):
        self.assertEqual(rc, 2, out)
        self.assertNotIn("Traceback", out)
        self.assertEqual(len(out.strip().splitlines()), 1, out)
        self.assertTrue(out.startswith("writer ratchet: error: "), out)

    def test_an_unparsable_file_is_reported_by_path_and_line(self):
        tree = self.tree({"srt/broken.py": """
                def f(server_args):
                    server_args.override("x", port=1
                    return 1
                """})
        tree.run("--update")
        rc, out = tree.run()
        self.assertCleanError(rc, out)
        self.assertRegex(out, r"srt/broken\.py:3: cannot parse")

    def test_a_missing_root_says_what_it_expected(self):
        tree = self.tree({})
        rc, out = tree.run(root=os.path.join(tree.dir, "nope"))
        self.assertCleanError(rc, out)
        self.assertIn("does not exist; expected the sglang package directory", out)

    def test_an_empty_root_says_what_it_expected(self):
        tree = self.tree({})
        empty = os.path.join(tree.dir, "empty")
        os.makedirs(empty)
        rc, out = tree.run(root=empty)
        self.assertCleanError(rc, out)
        self.assertIn("no Python files under", out)
        self.assertIn("python/sglang of a fork checkout", out)

    def test_a_missing_baseline_says_to_run_update(self):
        tree = self.tree(TestCheck.BASE)
        rc, out = tree.run()
        self.assertCleanError(rc, out)
        self.assertIn("create it with --update", out)

    def test_a_fork_checkout_root_is_scanned_at_python_sglang(self):
        tree = self.tree({})
        fork = os.path.join(tree.dir, "fork")
        os.makedirs(os.path.join(fork, "python", "sglang", "srt"))
        with open(os.path.join(fork, "python", "sglang", "__init__.py"), "w"):
            pass
        with open(os.path.join(fork, "python", "sglang", "srt", "w.py"), "w") as fh:
            fh.write("def f(server_args):\n    server_args.port = 1\n")
        rc, out = tree.run("--list", root=fork, baseline=False)
        self.assertEqual(rc, 0, out)
        self.assertIn("python/sglang/srt/w.py:2: server_args.port = 1", out)


class TestUpstreamRegexCount(_TreeCase):
    def test_upstream_regex_counts_comments_and_docstrings_too(self):
        tree = self.tree(
            {
                "srt/a.py": '''
                def f(server_args):
                    """Calls server_args.override(...) once."""
                    # server_args.override("commented out", a=1)
                    server_args.override("real", a=1)
                ''',
                "srt/server_args.py": """
                def g(server_args):
                    server_args.override("excluded by upstream", a=1)
                """,
            }
        )
        rc, out = tree.run("--upstream-regex-count", baseline=False)
        self.assertEqual(rc, 0, out)
        self.assertIn("upstream regex count: 3 matches", out)
        self.assertEqual(len(tree.sites()), 2)


if __name__ == "__main__":
    unittest.main()

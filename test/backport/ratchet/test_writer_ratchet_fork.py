"""The writer ratchet in a drifted fork: a v0.5.16 fork with ServerArgs writes
of its own gets the series by ``git am -3 patches/v0.5.16/*.patch``; then the
shipped check passes with no further step, a new write on the draft side fails
it, named by file and line with its function and write, and that write, added
under its function to ``_BASELINE``, records the reviewed write.

The module builds one fork (see ratchet_harness), oldest commit first::

    A   "sglang 0.5.16"                                  <- tag v0.5.16
    F   "fork: our own change"   fork_writes: 3 writes, none on the draft side
    P1 P2 P3 P4                  the series; P4 adds the ratchet   <- main

and each test that changes it works in a clone of it (``clone``).
"""

import ast
import os
import shutil
import tempfile
import unittest

from ratchet_harness import (
    SHIPPED_TEST,
    apply_series,
    git,
    run_shipped_test,
    v0_5_16_fork,
    write_file,
)

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=60, suite="base-a-test-cpu")

FORK_FEATURE = "python/sglang/srt/fork_feature.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
MTP_WORKER = "python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py"


def fork_writes(fork):
    """Commit F: the fork's own three writes, none on the draft side, one of
    them in a file the series edits (scheduler.py)."""
    write_file(fork, FORK_FEATURE, """
        def tune(server_args):
            server_args.override("fork.tuning", chunked_prefill_size=4096)
            server_args.enable_fork_feature = True
        """)  # fmt: skip
    with open(os.path.join(fork, SCHEDULER), "a", encoding="utf-8") as fh:
        fh.write("\n\ndef fork_hook(scheduler):\n    scheduler.server_args.port += 1\n")


def function_of(tree, qualname):
    """The def of ``Class.method`` in a parsed module."""
    class_name, name = qualname.split(".")
    cls = next(n for n in tree.body if getattr(n, "name", "") == class_name)
    return next(n for n in cls.body if getattr(n, "name", "") == name)


def edit_function(fork, rel, qualname, edit):
    """Apply ``edit(lines, function)`` to the source of ``rel`` in ``fork``."""
    path = os.path.join(fork, rel)
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines(keepends=True)
    function = function_of(ast.parse("".join(lines)), qualname)
    edit(lines, function)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(lines)


def setUpModule():
    global TMP, FORK
    TMP = tempfile.mkdtemp(prefix="ratchet-fork-")
    FORK = v0_5_16_fork(os.path.join(TMP, "fork"), fork_writes)
    apply_series(FORK)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class ForkCase(CustomTestCase):
    def clone(self):
        """A clone of the patched fork, removed after the test."""
        clone = tempfile.mkdtemp(dir=TMP)
        self.addCleanup(shutil.rmtree, clone, ignore_errors=True)
        git(TMP, "clone", "-q", FORK, clone)
        return clone


class TestAfterGitAm(ForkCase):
    def test_the_check_passes_with_the_forks_own_writes_outside_the_draft_side(self):
        code, out = run_shipped_test(FORK)

        self.assertEqual(code, 0, out)

    def test_a_draft_write_in_the_scheduler_fails_until_its_entry_is_pinned(self):
        fork = self.clone()
        write = 'self.server_args.override("fork.draft", load_format="dummy")'

        def add_write(lines, function):
            first = function.body[0]
            indent = " " * first.col_offset
            lines.insert(first.lineno - 1, f"{indent}{write}\n")

        edit_function(fork, SCHEDULER, "Scheduler.maybe_init_draft_worker", add_write)
        with open(os.path.join(fork, SCHEDULER), encoding="utf-8") as fh:
            line = fh.read().splitlines().index(f"        {write}") + 1

        code, out = run_shipped_test(fork)

        self.assertNotEqual(code, 0, out)
        self.assertIn(
            f"{SCHEDULER}:{line}: Scheduler.maybe_init_draft_worker:"
            " self.server_args.override(load_format)\n",
            out,
        )
        self.assertIn("goes in _BASELINE[function]", out)

        # The reviewer's edit: the printed write, pinned under its function.
        entry = (
            '"Scheduler.maybe_init_draft_worker":'
            ' ["self.server_args.override(load_format)"],'
        )
        path = os.path.join(fork, SHIPPED_TEST)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(
                text.replace("_BASELINE = {\n", f"_BASELINE = {{\n    {entry}\n", 1)
            )
        code, out = run_shipped_test(fork)
        self.assertEqual(code, 0, out)

    def test_a_pinned_write_that_is_gone_fails_until_its_entry_is_removed(self):
        fork = self.clone()

        def drop_the_write(lines, function):
            # The pinned override(...) of alloc_memory_pool becomes `pass`.
            statement = next(
                node
                for node in function.body
                if isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Call)
                and "override" in ast.unparse(node.value.func)
            )
            indent = " " * statement.col_offset
            lines[statement.lineno - 1 : statement.end_lineno] = [f"{indent}pass\n"]

        pool = "MultiLayerEagleDraftWorker.alloc_memory_pool"
        edit_function(fork, MTP_WORKER, pool, drop_the_write)

        code, out = run_shipped_test(fork)

        self.assertNotEqual(code, 0, out)
        self.assertIn("draft-side writes onto a ServerArgs shrank", out)
        self.assertIn(
            "  MultiLayerEagleDraftWorker.alloc_memory_pool:"
            " self.server_args.override(max_mamba_cache_size)\n",
            out,
        )


if __name__ == "__main__":
    unittest.main()

"""The writer ratchet's script as a maintainer runs it by hand, on synthetic
trees: what it lists, a file it cannot parse, a folder that is no sglang
package, and which tree it scans by default.

Every test starts from a fresh temporary directory::

    <tmp>/sglang/__init__.py
    <tmp>/sglang/srt/speculative/worker.py   WORKER: one site, in build
    <tmp>/sglang/srt/managers/scheduler.py   SCHEDULER: one site on the draft
                                             side, one off it

TestDefaultTree moves the package into a checkout with a copy of the script,
and runs that copy with no PACKAGE::

    <tmp>/fork/python/sglang/                     the package above
    <tmp>/fork/python/docs/                       a folder to run it from
    <tmp>/fork/scripts/ratchet/writer_ratchet.py
"""

import os
import shutil
import subprocess
import sys
import textwrap
import unittest

from ratchet_harness import SCRIPT, run_ratchet, synthetic_package, write_file

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

WORKER = textwrap.dedent("""
    def build(server_args, target):
        server_args.override("draft.context_length", context_length=target.n)
    """)
SCHEDULER = textwrap.dedent("""
    class Scheduler:
        def maybe_init_draft_worker(self):
            self.server_args.load_format = "dummy"

        def init_memory_pool(self):
            self.server_args.max_running_requests = 8
    """)


class CheckCase(CustomTestCase):
    def setUp(self):
        self.root = synthetic_package(
            self,
            {
                "srt/speculative/worker.py": WORKER,
                "srt/managers/scheduler.py": SCHEDULER,
            },
        )
        self.dir = os.path.dirname(self.root)


class TestListing(CheckCase):
    def test_it_lists_the_draft_sides_writes_by_file_line_function_and_write(self):
        code, out, err = run_ratchet(self.root)

        self.assertEqual(code, 0, err)
        worker = os.path.join(self.root, "srt", "speculative", "worker.py")
        scheduler = os.path.join(self.root, "srt", "managers", "scheduler.py")
        self.assertEqual(
            out.splitlines(),
            [
                f"  {scheduler}:4: Scheduler.maybe_init_draft_worker:"
                " self.server_args.load_format =",
                f"  {worker}:3: build: server_args.override(context_length)",
                f"2 writes onto a ServerArgs on the draft side of {self.root}",
            ],
        )

    def test_a_file_it_cannot_parse_is_named_with_its_line(self):
        broken = "def f(server_args):\n    server_args.x = (\n"
        path = write_file(self.root, "srt/speculative/broken.py", broken)

        code, out, err = run_ratchet(self.root)

        self.assertNotEqual(code, 0, out)
        self.assertIn(f'File "{path}", line 2', err)
        self.assertIn("SyntaxError", err)

    def test_a_folder_that_is_no_sglang_package_is_named_without_a_traceback(self):
        code, out, err = run_ratchet(self.dir)

        self.assertEqual(code, 1, out)
        self.assertEqual(
            err,
            f"writer_ratchet: no srt/speculative/ in {self.dir};"
            " give an sglang package\n",
        )


class TestDefaultTree(CheckCase):
    def checkout(self):
        """<tmp>/fork of the module docstring, holding the test's package."""
        checkout = os.path.join(self.dir, "fork")
        os.makedirs(os.path.join(checkout, "python", "docs"))
        os.makedirs(os.path.join(checkout, "scripts", "ratchet"))
        os.rename(self.root, os.path.join(checkout, "python", "sglang"))
        shutil.copy(SCRIPT, os.path.join(checkout, "scripts", "ratchet"))
        return checkout

    def test_the_default_is_python_sglang_of_the_checkout_holding_the_script(self):
        # Run from another folder, so that the checkout is found from the
        # script's place, not from the current directory.
        checkout = self.checkout()
        copy = os.path.join(checkout, "scripts", "ratchet", "writer_ratchet.py")
        proc = subprocess.run(
            [sys.executable, copy],
            cwd=os.path.join(checkout, "python", "docs"),
            capture_output=True,
            text=True,
        )

        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(": build: server_args.override(context_length)", proc.stdout)
        self.assertIn(f"of {checkout}/python/sglang", proc.stdout)


if __name__ == "__main__":
    unittest.main()

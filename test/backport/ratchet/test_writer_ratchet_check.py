"""The writer ratchet's script as a user runs it, on synthetic trees: what it
lists (the draft side, or --all), bad input, and which tree it scans by
default.

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

    def assert_bad_input(self, result, *needles):
        """Exit 2 with one line on stderr that names the problem."""
        code, out, err = result
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith("writer ratchet: error: "), err)
        for needle in needles:
            self.assertIn(needle, err)


class TestListing(CheckCase):
    def test_it_lists_the_draft_sides_writes_by_file_line_code_and_function(self):
        code, out, err = run_ratchet(self.root)

        self.assertEqual(code, 0, err)
        worker = os.path.join(self.root, "srt", "speculative", "worker.py")
        scheduler = os.path.join(self.root, "srt", "managers", "scheduler.py")
        self.assertEqual(
            out.splitlines(),
            [
                f'{scheduler}:4: self.server_args.load_format = "dummy"'
                "  [assign in Scheduler.maybe_init_draft_worker]",
                f'{worker}:3: server_args.override("draft.context_length",'
                " context_length=target.n)  [override in build]",
                f"2 ServerArgs write sites on the draft side of {self.root}",
            ],
        )

    def test_all_lists_every_write_in_the_package(self):
        code, out, err = run_ratchet("--all", self.root)

        self.assertEqual(code, 0, err)
        self.assertIn("[assign in Scheduler.init_memory_pool]", out)
        self.assertIn(f"3 ServerArgs write sites of {self.root}", out)


class TestBadInput(CheckCase):
    def test_a_missing_package_is_not_a_directory(self):
        missing = run_ratchet(self.root + "-nope")
        self.assert_bad_input(missing, "is not a directory")

    def test_a_file_given_as_package_is_not_a_directory(self):
        path = os.path.join(self.root, "srt", "speculative", "worker.py")
        self.assert_bad_input(run_ratchet(path), "is not a directory")

    def test_a_package_without_python_files_has_nothing_to_list(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(os.path.join(empty, "srt"))
        self.assert_bad_input(run_ratchet("--all", empty), "no Python files in")

    def test_an_unparsable_file_is_named_with_its_line(self):
        broken = "def f(server_args):\n    server_args.x = (\n"
        path = write_file(self.root, "srt/speculative/broken.py", broken)
        self.assert_bad_input(run_ratchet(self.root), f"{path}:2: cannot parse")


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
        self.assertIn("[override in build]", proc.stdout)
        self.assertIn(f"of {checkout}/python/sglang", proc.stdout)

    def test_without_python_sglang_the_default_is_the_installed_sglang(self):
        # This repository holds no python/sglang.
        code, out, err = run_ratchet(cwd=self.dir)

        self.assertEqual(code, 0, err)
        import sglang

        installed = os.path.realpath(os.path.dirname(sglang.__file__))
        self.assertIn(f"sites on the draft side of {installed}", out)


if __name__ == "__main__":
    unittest.main()

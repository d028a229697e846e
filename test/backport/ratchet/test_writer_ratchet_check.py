"""The writer ratchet's check as a user runs it, on synthetic trees: the
verdicts and their exit status, what --update writes, bad input, and which
tree it scans by default.

Every test starts from a fresh temporary directory::

    <tmp>/sglang/__init__.py
    <tmp>/sglang/srt/worker.py     WORKER: one site, build's override(...)
    <tmp>/baseline.txt             once the test records it (--update)

and checks with ``--root <tmp>/sglang --baseline <tmp>/baseline.txt``.
TestDefaultTree moves the package into a checkout with a copy of the script,
and runs that copy with no --root::

    <tmp>/fork/python/sglang/                     the package above
    <tmp>/fork/python/docs/                       a folder to run it from
    <tmp>/fork/scripts/ratchet/writer_ratchet.py
"""

import os
import shlex
import shutil
import stat
import subprocess
import sys
import textwrap
import unittest

from ratchet_harness import REPO, SCRIPT, run_ratchet, synthetic_package, write_file

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

WORKER = textwrap.dedent("""
    def build(server_args, target):
        server_args.override("draft.context_length", context_length=target.n)
    """)
# Appended to WORKER: a second site, at line 7.
NEW_WRITE = textwrap.dedent("""

    def leak(server_args):
        server_args.load_format = "dummy"
    """)


class CheckCase(CustomTestCase):
    def setUp(self):
        self.root = synthetic_package(self, {"srt/worker.py": WORKER})
        self.dir = os.path.dirname(self.root)
        self.baseline = os.path.join(self.dir, "baseline.txt")

    def check(self, *args):
        """The ratchet on the test's package and baseline."""
        return run_ratchet("--root", self.root, "--baseline", self.baseline, *args)

    def record(self):
        """Record the baseline (--update), which must succeed."""
        self.assertEqual(self.check("--update")[0], 0)

    def append(self, rel, text):
        with open(os.path.join(self.root, rel), "a", encoding="utf-8") as fh:
            fh.write(text)

    def assert_bad_input(self, result, *needles):
        """Exit 2 with one line on stderr that names the problem."""
        code, out, err = result
        self.assertEqual((code, out), (2, ""), err)
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertTrue(err.startswith("writer ratchet: error: "), err)
        for needle in needles:
            self.assertIn(needle, err)

    def files_in_tmp(self):
        """Mode and bytes of each file in <tmp>, to show nothing was written."""
        found = {}
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if os.path.isfile(path):
                with open(path, "rb") as fh:
                    found[name] = (os.stat(path).st_mode, fh.read())
        return found


class TestVerdicts(CheckCase):
    def test_an_unchanged_tree_passes_and_the_report_names_tree_and_baseline(self):
        self.record()
        code, out, _ = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("OK: 1 ServerArgs writer sites in", out)
        self.assertIn(self.root, out)
        self.assertIn(self.baseline, out)

    def test_one_more_write_fails_and_is_named_with_file_line_and_code(self):
        self.record()
        self.append("srt/worker.py", NEW_WRITE)
        code, out, _ = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("grew from 1", out)
        path = os.path.join(self.root, "srt", "worker.py")
        self.assertIn(
            f'{path}:7: server_args.load_format = "dummy"  [assign in leak]', out
        )

    def test_a_write_moved_to_another_line_or_reformatted_still_passes(self):
        self.record()
        reformatted = WORKER.replace(
            "context_length=target.n", "\n        context_length=target.n + 1,\n    "
        )
        write_file(
            self.root, "srt/worker.py", '"""Docs."""\n\nimport os\n' + reformatted
        )
        code, out, _ = self.check()
        self.assertEqual(code, 0, out)
        self.assertNotIn("New sites", out)

    def test_a_write_that_moved_to_another_function_passes_and_is_listed(self):
        # The count is the baseline's, so it passes; the key is new, so the
        # site is shown for review.
        self.record()
        write_file(self.root, "srt/worker.py", WORKER.replace("def build", "def make"))
        code, out, _ = self.check()
        self.assertEqual(code, 0, out)
        self.assertIn("[override in make]", out)

    def test_a_shrink_fails_until_the_printed_command_locks_it_in(self):
        self.append("srt/worker.py", NEW_WRITE)
        self.record()
        write_file(self.root, "srt/worker.py", WORKER)
        code, out, _ = self.check()
        self.assertEqual(code, 1, out)
        self.assertIn("shrank from 2", out)
        command = out.split("To record the reviewed count: ")[1]
        command = command.split(", and commit")[0]
        subprocess.run(shlex.split(command), cwd=REPO, check=True, capture_output=True)
        self.assertEqual(self.check()[0], 0)

    def test_update_keeps_the_baseline_files_mode(self):
        self.record()
        os.chmod(self.baseline, 0o640)
        self.append("srt/worker.py", NEW_WRITE)
        self.record()
        self.assertEqual(stat.S_IMODE(os.stat(self.baseline).st_mode), 0o640)
        self.assertEqual(self.check()[0], 0)


class TestBadInput(CheckCase):
    def test_a_missing_root_is_not_a_directory(self):
        missing = run_ratchet("--root", self.root + "-nope")
        self.assert_bad_input(missing, "is not a directory")

    def test_a_file_given_as_root_is_not_a_directory(self):
        path = os.path.join(self.root, "srt", "worker.py")
        self.assert_bad_input(run_ratchet("--root", path), "is not a directory")

    def test_a_root_without_python_files(self):
        empty = os.path.join(self.dir, "empty")
        os.makedirs(os.path.join(empty, "srt"))
        self.assert_bad_input(run_ratchet("--root", empty), "no Python files in")

    def test_an_unparsable_file_is_named_with_its_line(self):
        self.record()
        broken = "def f(server_args):\n    server_args.x = (\n"
        path = write_file(self.root, "srt/broken.py", broken)
        self.assert_bad_input(self.check(), f"{path}:2: cannot parse", "fix it")
        self.assert_bad_input(self.check("--update"), f"{path}:2: cannot parse")

    def test_a_missing_baseline_cannot_be_read(self):
        self.assert_bad_input(self.check(), "cannot read", "--update")

    def test_a_corrupt_baseline(self):
        self.record()
        with open(self.baseline, encoding="utf-8") as fh:
            good = fh.read()
        for bad in (
            "",
            "{not json\n",
            good.splitlines()[0] + "\n",  # the header counts one site, none follows
            good.replace("\t", " "),
        ):
            with self.subTest(bad=bad[:20]):
                with open(self.baseline, "w", encoding="utf-8") as fh:
                    fh.write(bad)
                self.assert_bad_input(self.check(), "is corrupt", "--update")

    def test_a_baseline_that_is_not_utf_8_cannot_be_read(self):
        with open(self.baseline, "wb") as fh:
            fh.write(b"\xff\xfe")
        self.assert_bad_input(self.check(), "cannot read", "--update")

    def test_update_with_a_read_only_baseline_writes_nothing(self):
        self.record()
        os.chmod(self.baseline, 0o444)
        self.append("srt/worker.py", NEW_WRITE)
        before = self.files_in_tmp()
        self.assert_bad_input(self.check("--update"), "is read-only", "chmod u+w")
        self.assertEqual(self.files_in_tmp(), before)

    def test_update_into_a_read_only_directory_writes_nothing(self):
        # Checked by mode too, as root may write into it all the same.
        folder = os.path.join(self.dir, "ro")
        os.makedirs(folder)
        os.chmod(folder, 0o555)
        self.addCleanup(os.chmod, folder, 0o755)
        baseline = os.path.join(folder, "b.txt")
        result = run_ratchet("--root", self.root, "--baseline", baseline, "--update")
        self.assert_bad_input(result, "is read-only")
        self.assertEqual(os.listdir(folder), [])

    def test_update_into_a_missing_directory_cannot_write(self):
        missing = os.path.join(self.dir, "nope", "b.txt")
        result = run_ratchet("--root", self.root, "--baseline", missing, "--update")
        self.assert_bad_input(result, "cannot write")


class TestDefaultTree(CheckCase):
    def checkout(self):
        """<tmp>/fork of the module docstring, holding the test's package."""
        checkout = os.path.join(self.dir, "fork")
        os.makedirs(os.path.join(checkout, "python", "docs"))
        os.makedirs(os.path.join(checkout, "scripts", "ratchet"))
        os.rename(self.root, os.path.join(checkout, "python", "sglang"))
        shutil.copy(SCRIPT, os.path.join(checkout, "scripts", "ratchet"))
        return checkout

    def run_copy(self, checkout, *args, **kwargs):
        """The checkout's copy of the ratchet: (exit status, stdout, stderr)."""
        copy = os.path.join(checkout, "scripts", "ratchet", "writer_ratchet.py")
        proc = subprocess.run(
            [sys.executable, copy, *args], capture_output=True, text=True, **kwargs
        )
        return proc.returncode, proc.stdout, proc.stderr

    def test_the_default_is_python_sglang_of_the_checkout_holding_the_script(self):
        # Run from another folder, so that the checkout is found from the
        # script's place, not from the current directory.
        checkout = self.checkout()
        docs = os.path.join(checkout, "python", "docs")
        code, out, _ = self.run_copy(checkout, "--list", cwd=docs)
        self.assertEqual(code, 0, out)
        self.assertIn("[override in build]", out)
        self.assertIn(
            f"sites in {checkout}/python/sglang (the checkout {checkout})", out
        )

    def test_without_python_sglang_the_default_is_the_installed_sglang(self):
        # This repository holds no python/sglang.
        code, out, _ = run_ratchet("--list", cwd=self.dir)
        self.assertEqual(code, 0, out)
        import sglang

        installed = os.path.realpath(os.path.dirname(sglang.__file__))
        self.assertIn(f"sites in {installed} (the installed sglang)", out)

    def test_a_checkout_without_a_baseline_or_a_git_commit_is_told_what_to_do(self):
        checkout = self.checkout()
        # <tmp> may lie inside a git repository; git must not look above it.
        env = dict(os.environ, GIT_CEILING_DIRECTORIES=self.dir)
        result = self.run_copy(checkout, cwd=checkout, env=env)
        self.assert_bad_input(result, "no git commit added", "--update")


if __name__ == "__main__":
    unittest.main()

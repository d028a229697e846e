"""The writer ratchet in a drifted fork: a v0.5.16 fork with ServerArgs writes
of its own gets the series by ``git am -3 patches/v0.5.16/*.patch``; then the
shipped check passes with no further step, and one more write fails it, named
by file and line.

The module builds one fork (see ratchet_harness), oldest commit first::

    A   "sglang 0.5.16"                                  <- tag v0.5.16
    F   "fork: our own change"   fork_writes: 3 sites    <- FORK_HEAD
    P1 P2 P3 P4                  the series; P4 adds the ratchet   <- main

and each test works in a clone of it (``clone``), adding its own commits.
The ratchet's baseline there is the tree at P4, the commit that added it.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from ratchet_harness import (
    BASELINE,
    apply_series,
    commit_all,
    git,
    git_env,
    load_ratchet,
    run_shipped_test,
    v0_5_16_fork,
    write_file,
)

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=90, suite="base-a-test-cpu")

FORK_FEATURE = "python/sglang/srt/fork_feature.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"


def fork_writes(fork):
    """Commit F: the fork's own three writer sites, one in a file the series
    edits (scheduler.py)."""
    write_file(fork, FORK_FEATURE, """
        def tune(server_args):
            server_args.override("fork.tuning", chunked_prefill_size=4096)
            server_args.enable_fork_feature = True
        """)  # fmt: skip
    with open(os.path.join(fork, SCHEDULER), "a", encoding="utf-8") as fh:
        fh.write("\n\ndef fork_hook(scheduler):\n    scheduler.server_args.port += 1\n")


def setUpModule():
    global TMP, FORK, FORK_HEAD, SITES
    TMP = tempfile.mkdtemp(prefix="ratchet-fork-")
    FORK = v0_5_16_fork(os.path.join(TMP, "fork"), fork_writes)
    FORK_HEAD = git(FORK, "rev-parse", "HEAD")
    apply_series(FORK)
    # The patched 0.5.16's sites, which this repository records, and the fork's.
    SITES = len(load_ratchet().read_baseline(BASELINE)) + 3


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class ForkCase(CustomTestCase):
    def clone(self, *options):
        """A clone of the patched fork; a shallow one (options) goes through
        git's file:// transport, which --depth needs."""
        clone = tempfile.mkdtemp(dir=TMP)
        self.addCleanup(shutil.rmtree, clone, ignore_errors=True)
        source = f"file://{FORK}" if options else FORK
        git(TMP, "clone", "-q", *options, source, clone)
        return clone

    def ratchet(self, fork, *args):
        """The fork's own ratchet, run from its root: (exit status, output)."""
        proc = subprocess.run(
            [sys.executable, "scripts/ratchet/writer_ratchet.py", *args],
            cwd=fork,
            env=git_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        return proc.returncode, proc.stdout + proc.stderr

    def add_write(self, fork, commit=True):
        """One more write, in a file the series edits; its "file:line:"."""
        path = os.path.join(fork, SCHEDULER)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(
                "\n\ndef another(server_args):\n"
                "    server_args.disable_cuda_graph = True\n"
            )
        if commit:
            commit_all(fork, "fork: one more write")
        with open(path, encoding="utf-8") as fh:
            return f"{SCHEDULER}:{len(fh.read().splitlines())}:"


class TestAfterGitAm(ForkCase):
    def test_the_check_passes_with_the_forks_own_writes(self):
        # The shipped check test runs this command; test_apply_to_fork runs
        # that test in a patched fork, and the next test here runs it failing.
        fork = self.clone()
        code, out = self.ratchet(fork)
        self.assertEqual(code, 0, out)
        self.assertIn(
            f"OK: {SITES} ServerArgs writer sites in python/sglang (the checkout .)",
            out,
        )
        self.assertIn("the commit that added scripts/ratchet/writer_ratchet.py", out)

    def test_the_forks_own_writes_are_listed(self):
        fork = self.clone()
        _, out = self.ratchet(fork, "--list")
        self.assertIn(f"{FORK_FEATURE}:4: server_args.enable_fork_feature = True", out)

    def test_one_more_write_fails_the_shipped_check_naming_file_and_line(self):
        fork = self.clone()
        where = self.add_write(fork)
        code, out = run_shipped_test(fork)
        self.assertNotEqual(code, 0, out)
        self.assertIn(f"grew from {SITES}", out)
        self.assertIn(f"{where} server_args.disable_cuda_graph = True", out)

    def test_an_uncommitted_write_fails_too(self):
        fork = self.clone()
        where = self.add_write(fork, commit=False)
        code, out = self.ratchet(fork)
        self.assertEqual(code, 1, out)
        self.assertIn(where, out)

    def test_a_reviewed_write_is_accepted_by_committing_the_update(self):
        fork = self.clone()
        self.add_write(fork)
        code, out = self.ratchet(fork, "--update")
        self.assertEqual(code, 0, out)
        commit_all(fork, "ratchet: accept the reviewed write")
        self.assertEqual(self.ratchet(fork)[0], 0)

    def test_the_committed_update_is_the_baseline_from_then_on(self):
        fork = self.clone()
        self.add_write(fork)
        self.assertEqual(self.ratchet(fork, "--update")[0], 0)
        commit_all(fork, "ratchet: accept the reviewed write")
        self.add_write(fork)
        code, out = self.ratchet(fork)
        self.assertEqual(code, 1, out)
        self.assertIn(
            f"grew from {SITES + 1} to {SITES + 2} (scripts/ratchet/baseline.txt)", out
        )

    def test_a_removed_write_fails_until_the_lower_count_is_locked_in(self):
        fork = self.clone()
        os.remove(os.path.join(fork, FORK_FEATURE))
        code, out = self.ratchet(fork)
        self.assertEqual(code, 1, out)
        self.assertIn(f"shrank from {SITES}", out)
        self.assertEqual(self.ratchet(fork, "--update")[0], 0)
        self.assertEqual(self.ratchet(fork)[0], 0)

    def test_a_file_renamed_with_its_writes_is_no_change(self):
        fork = self.clone()
        git(fork, "mv", FORK_FEATURE, FORK_FEATURE.replace("feature", "tuning"))
        commit_all(fork, "fork: rename")
        code, out = self.ratchet(fork)
        self.assertEqual(code, 0, out)


class TestOtherWaysIn(ForkCase):
    def test_the_series_squashed_into_one_commit_works_the_same(self):
        fork = self.clone()
        git(fork, "reset", "-q", "--soft", FORK_HEAD)
        git(fork, "commit", "-q", "-m", "backport: the series as one commit")
        self.assertEqual(self.ratchet(fork)[0], 0)
        where = self.add_write(fork)
        code, out = self.ratchet(fork)
        self.assertEqual(code, 1, out)
        self.assertIn(where, out)

    def test_a_shallow_clone_without_the_ratchets_commit_is_told_to_fetch_it(self):
        # The clone's one commit is P4, grafted: with no parent, git shows it
        # adding every file, so it cannot tell which commit added the ratchet.
        fork = self.clone("--depth", "1")
        code, out = self.ratchet(fork)
        self.assertEqual(code, 2, out)
        self.assertEqual(len(out.splitlines()), 1, out)
        self.assertIn("shallow clone", out)
        self.assertIn("git fetch --unshallow", out)


if __name__ == "__main__":
    unittest.main()

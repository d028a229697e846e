"""The series of the older release lines, in forks made from their wheels.

``patches/v0.5.15.post1/`` is the series for the v0.5.15 line (its
``Applies-To:`` trailer names v0.5.15 and v0.5.15.post1) and
``patches/v0.5.14/`` the one for v0.5.14, each written for its line's code.
For each release a fork is made from the released wheel's package
(``.build/releases/vVERSION/sglang``, unpacked by the set-up) and takes its
line's series as a fork maintainer runs it::

    vVERSION --- 0001 --- 0002 --- 0003 --- 0004
    (the wheel's python/sglang)   (git am -3 patches/LINE/*.patch)

Then, in that fork:

- the shipped tests pass (``python -m pytest test/registered/unit``, the
  fork's own ``sglang`` first on ``PYTHONPATH``), on a fork with nothing of
  its own (``test_fork_ci.py`` runs them as the fork's CPU job does, on a
  fork that extends the draft path);
- at the release's tag, with only the shipped test files copied in, each of
  the test classes that pin the fix fails on its assertions: the regression
  proof of this line (``scripts/dev/test.sh`` proves the v0.5.16 series'
  against ``.build/pristine``);
- the ratchet script the series ships is this repository's, file for file
  (its check's pin, ``_BASELINE``, is the line's own).
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from release_forks import REPO, fork_with_series, git, series_patches

RATCHET_FILES = ("scripts/ratchet/writer_ratchet.py",)
# The shipped test classes that pin the fix on each line: each fails on the
# release as released, on its assertions (the draft's context length, load
# format or token map on the target's config, or the draft's load-time
# declarations reaching it).
REGRESSION_CLASSES = {
    "test/registered/unit/spec/test_draft_server_args.py": (
        "TestSchedulerDraftHandoff",
    ),
    "test/registered/unit/spec/test_eagle_draft_server_args.py": (
        "TestEagleDraftLeavesTheTargetAlone",
        "TestOtherDraftWorkersLeaveTheTargetAlone",
    ),
    "test/registered/unit/model_executor/test_draft_load_config.py": (
        "TestDraftLoadConfig",
    ),
}


def line_patches(line):
    """The patch files of a line's series, in the order they apply."""
    return series_patches(os.path.join(REPO, "patches", line))


def run_python(cwd, *argv):
    """Run the venv's Python in ``cwd`` with ``cwd/python`` first on the path."""
    env = dict(os.environ, PYTHONPATH=os.path.join(cwd, "python"))
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


class ReleaseLineForkTests:
    """A fork of RELEASE with the series of LINE applied, and the release
    beside it (mixed into one unittest.TestCase per release)."""

    LINE = ""  # the series' folder under patches/
    RELEASE = ""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"release-line-{cls.RELEASE}-")
        cls.fork = os.path.join(cls.tmp, "fork")
        fork_with_series(cls.fork, cls.RELEASE, cls.LINE)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_series_applies_as_one_commit_per_patch(self):
        log = git(self.fork, "log", "--format=%s", f"{self.RELEASE}..HEAD")

        self.assertEqual(len(log.splitlines()), len(line_patches(self.LINE)))
        self.assertEqual(git(self.fork, "status", "--porcelain"), "")

    def test_the_shipped_tests_pass_on_the_patched_fork(self):
        run = run_python(self.fork, "-m", "pytest", "-q", "test/registered/unit")

        self.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-2000:])

    def test_each_regression_class_fails_on_the_release_as_released(self):
        release = os.path.join(self.tmp, "release")
        git(self.fork, "worktree", "add", "-q", "--detach", release, self.RELEASE)
        for path in REGRESSION_CLASSES:
            os.makedirs(os.path.dirname(os.path.join(release, path)), exist_ok=True)
            shutil.copy(os.path.join(self.fork, path), os.path.join(release, path))

        node_ids = [
            f"{path}::{name}"
            for path, classes in REGRESSION_CLASSES.items()
            for name in classes
        ]
        # One process for all of them: -rfE lists each failing test (and
        # subtest) by node id in the summary.
        run = run_python(release, "-m", "pytest", "-q", "-rfE", *node_ids)
        said = run.stdout + run.stderr
        summary = [
            line
            for line in said.splitlines()
            if line.startswith(("FAILED ", "ERROR ", "SUBFAILED"))
        ]
        for node_id in node_ids:
            with self.subTest(test=node_id):
                failed = [line for line in summary if f"{node_id}::" in line]
                self.assertTrue(failed, said[-3000:])
        # On their assertions, not on a name the release lacks.
        self.assertIn("AssertionError", said, said[-3000:])
        self.assertNotIn("ImportError", said, said[-3000:])
        self.assertNotIn("AttributeError", said, said[-3000:])

    def test_the_ratchet_it_ships_is_this_repositorys(self):
        for path in RATCHET_FILES:
            with self.subTest(path=path):
                with open(os.path.join(self.fork, path), encoding="utf-8") as fh:
                    shipped = fh.read()
                with open(os.path.join(REPO, path), encoding="utf-8") as fh:
                    ours = fh.read()
                self.assertEqual(shipped, ours)


class TestTheSeriesOnV0_5_15Post1(ReleaseLineForkTests, unittest.TestCase):
    LINE = "v0.5.15.post1"
    RELEASE = "v0.5.15.post1"


class TestTheSeriesOnV0_5_15(ReleaseLineForkTests, unittest.TestCase):
    LINE = "v0.5.15.post1"
    RELEASE = "v0.5.15"


class TestTheSeriesOnV0_5_14(ReleaseLineForkTests, unittest.TestCase):
    LINE = "v0.5.14"
    RELEASE = "v0.5.14"


if __name__ == "__main__":
    unittest.main()

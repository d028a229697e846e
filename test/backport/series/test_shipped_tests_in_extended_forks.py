"""The shipped tests in forks whose scheduler reads more around the draft.

Real forks extend ``Scheduler.maybe_init_draft_worker``: one that added
speculative pipeline parallelism reads the pipeline rank off the scheduler's
parallel state, the pipeline group off the target worker and off its model
runner. The shipped tests must still pass there, and still fail on a fork
that undid the fix. For each release a fork is made from the released wheel's
package, the line's series is applied with ``git am -3``, and the fork's own
commit extends the scheduler's draft path::

    vVERSION --- 0001 ... 0004 --- fork: the draft on the last pipeline stage

(The extension sits in the lines patch 0002's scheduler hunk has as context:
committed before the series, ``git am -3`` merges it on the wheels whose blobs
the series records, v0.5.16, v0.5.15.post1 and v0.5.14, and stops on v0.5.15.)

Then, in that fork, with the fix (patch 0002) reverted, each test class that
pins the fix fails on its assertions, not on an ``AttributeError`` from the
fork's extra reads. That the shipped tests pass in such a fork, with the fix,
``test_fork_ci.py`` checks: the fork's CPU job runs them there, on this same
extension.

``test_release_lines.py`` proves the same on forks without the extension.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from release_forks import (
    EXTENSION,
    REPO,
    SCHEDULER,
    extend_the_draft_path,
    git,
    release_fork,
    release_package,
    series_patches,
)

SHIPPED_TESTS = (
    "test/registered/unit/spec/test_draft_server_args.py",
    "test/registered/unit/spec/test_eagle_draft_server_args.py",
    "test/registered/unit/model_executor/test_draft_load_config.py",
)


def wheel_package(release):
    """The released wheel's ``sglang`` package."""
    if release == "v0.5.16":
        return os.path.join(REPO, ".build", "pristine", "sglang")
    return os.path.join(release_package(release), "sglang")


def run_pytest(cwd, *args):
    """Run the venv's pytest in ``cwd``, ``cwd/python`` first on the path."""
    env = dict(os.environ, PYTHONPATH=os.path.join(cwd, "python"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


class ExtendedForkTests:
    """A fork of RELEASE that extends the draft path, with LINE's series."""

    RELEASE = ""
    LINE = ""  # the series' folder under patches/
    # Node ids of the shipped test classes that pin the fix on this line.
    REGRESSION_CLASSES = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"extended-fork-{cls.RELEASE}-")
        cls.fork = os.path.join(cls.tmp, "fork")
        release_fork(cls.fork, wheel_package(cls.RELEASE), cls.RELEASE)
        patches = series_patches(os.path.join(REPO, "patches", cls.LINE))
        git(cls.fork, "am", "-3", *patches)
        # Patch 0002 is the fix.
        series = git(cls.fork, "rev-list", "--reverse", f"{cls.RELEASE}..HEAD")
        cls.fix = series.split()[1]
        extend_the_draft_path(cls.fork)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_extension_sits_beside_the_fix(self):
        with open(os.path.join(self.fork, SCHEDULER), encoding="utf-8") as fh:
            scheduler = fh.read()

        self.assertIn(EXTENSION, scheduler)
        self.assertIn("draft_server_args_copy(", scheduler)

    def test_with_the_fix_undone_they_fail_on_their_assertions(self):
        undone = os.path.join(self.tmp, "undone")
        git(self.fork, "worktree", "add", "-q", "--detach", undone, "HEAD")
        # The tests (patch 0003) and the extension stay.
        git(undone, "revert", "--no-edit", self.fix)

        run = run_pytest(undone, "-q", "-rfE", *self.REGRESSION_CLASSES)
        said = run.stdout + run.stderr
        summary = [
            line
            for line in said.splitlines()
            if line.startswith(("FAILED ", "ERROR ", "SUBFAILED"))
        ]
        for node_id in self.REGRESSION_CLASSES:
            with self.subTest(test=node_id):
                failed = [line for line in summary if f"{node_id}::" in line]
                self.assertTrue(failed, said[-3000:])
        self.assertIn("AssertionError", said, said[-3000:])
        self.assertNotIn("AttributeError", said, said[-3000:])
        self.assertNotIn("ImportError", said, said[-3000:])


V0_5_16_REGRESSION_CLASSES = (
    f"{SHIPPED_TESTS[0]}::TestSchedulerDraftHandoff",
    f"{SHIPPED_TESTS[1]}::TestEagleDraftLeavesTheTargetAlone",
    f"{SHIPPED_TESTS[2]}::TestDraftLoadConfig",
)
OLDER_LINES_REGRESSION_CLASSES = V0_5_16_REGRESSION_CLASSES + (
    f"{SHIPPED_TESTS[1]}::TestOtherDraftWorkersLeaveTheTargetAlone",
)


class TestExtendedForkOfV0_5_16(ExtendedForkTests, unittest.TestCase):
    RELEASE = LINE = "v0.5.16"
    REGRESSION_CLASSES = V0_5_16_REGRESSION_CLASSES


class TestExtendedForkOfV0_5_15Post1(ExtendedForkTests, unittest.TestCase):
    RELEASE = LINE = "v0.5.15.post1"
    REGRESSION_CLASSES = OLDER_LINES_REGRESSION_CLASSES


class TestExtendedForkOfV0_5_15(ExtendedForkTests, unittest.TestCase):
    RELEASE = "v0.5.15"
    LINE = "v0.5.15.post1"
    REGRESSION_CLASSES = OLDER_LINES_REGRESSION_CLASSES


class TestExtendedForkOfV0_5_14(ExtendedForkTests, unittest.TestCase):
    RELEASE = LINE = "v0.5.14"
    REGRESSION_CLASSES = OLDER_LINES_REGRESSION_CLASSES


if __name__ == "__main__":
    unittest.main()

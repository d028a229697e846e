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

Then, in that fork:

- the shipped tests pass;
- with the fix (patch 0002) reverted, each test class that pins the fix fails
  on its assertions, not on an ``AttributeError`` from the fork's extra reads.

``test_release_lines.py`` proves the same on forks without the extension.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from release_forks import REPO, git, release_fork, release_package, series_patches

SCHEDULER = "python/sglang/srt/managers/scheduler.py"
# Where the extension goes in maybe_init_draft_worker, on every release: after
# the draft worker's kwargs, before the draft load format is handled.
KWARGS_END = "        )\n\n"
LOAD_FORMAT = "        if self.server_args.speculative_draft_load_format is not None:\n"
EXTENSION = """\
        # Speculative decoding with pipeline parallelism: the draft runs on
        # the last stage, beside the target's last layers.
        self.draft_pp_rank = self.ps.pp_rank
        self.draft_pp_group = self.tp_worker.pp_group
        self.draft_on_last_stage = self.tp_worker.model_runner.pp_group.is_last_rank

"""
SHIPPED_TESTS = (
    "test/registered/unit/spec/test_draft_server_args.py",
    "test/registered/unit/spec/test_eagle_draft_server_args.py",
    "test/registered/unit/model_executor/test_draft_load_config.py",
)


def extend_the_draft_path(fork):
    """Commit the fork's own change to maybe_init_draft_worker."""
    path = os.path.join(fork, SCHEDULER)
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    anchor = KWARGS_END + LOAD_FORMAT
    if source.count(anchor) != 1:
        raise AssertionError(f"{SCHEDULER}: no one place for the extension")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source.replace(anchor, KWARGS_END + EXTENSION + LOAD_FORMAT))
    git(fork, "commit", "-q", "-am", "fork: the draft on the last pipeline stage")


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

    def test_the_shipped_tests_pass(self):
        run = run_pytest(self.fork, "-q", *SHIPPED_TESTS)

        self.assertEqual(run.returncode, 0, run.stdout[-4000:] + run.stderr[-2000:])

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

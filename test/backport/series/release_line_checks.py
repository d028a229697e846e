"""What every release with a series is checked for, in a fork made from its
wheel: mixed into one ``unittest.TestCase`` per release by the
``test_release_lines*.py`` files (one file per group of releases, so that
pytest-xdist, which hands out whole files, can run the groups beside each
other).

For each release ``release_forks.LINES`` names, the shared fork of the release
(``release_forks.shared_fork``: the wheel's package, its line's series applied
with ``git am -3``, and C, a fork's own commit that reads more of the scheduler
and the target worker in the Scheduler method that builds the draft) is cloned
as the fork's CI clones it. Then:

- the series applies as one commit per patch;
- the apply tool, run on a fork at the release, names the release's line and
  makes the commits ``git am -3`` makes;
- the fork's CPU job (``cd test && python3 run_suite.py --hw cpu --suite
  SUITE``, the release's per-commit CPU suite, ``release_forks.cpu_suite``),
  in a depth-1 clone of C: the runner's collection, with its sanity check,
  selects exactly the test files the series adds, and they pass, with the
  stand-ins of ``release_forks.stand_ins`` for what that job has and this venv
  lacks. They run in the one interpreter that collected them, forked from
  the one that imported sglang's heaviest packages
  (``release_forks.python3``); that the runner's own way, a process per
  file, runs them and turns red on a failure is checked once per series, in
  ``fork_ci_checks.py``;
- what left the shipped files, this repository's lab
  (``test/backport/spec/test_beyond_the_shipped_tests.py``), passes on the
  fork of the series, with the line's shipped file first on the import path
  (the lab builds on its helpers), in a process forked as the CPU job's is;
- on the older lines, at the release's tag with only the shipped test files
  and the lab copied in, each test class that pins the fix, and each of the
  lab's regression tests, fails on its assertions (the draft's values on the
  target's config), not on a name the release lacks. The v0.5.16 series'
  and the lab's are proven on v0.5.16 by ``scripts/dev/test.sh``, against
  ``.build/pristine``;
- the ratchet script the series ships is this repository's, file for file
  (its check's pin, ``_BASELINE``, is the line's own).

What adding a release costs is a class in one of those files: a fork made
from its wheel (once per run, shared), three runs that import its sglang,
and one run of the apply tool.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

from release_forks import (
    REPO,
    clone,
    git,
    line_patches,
    python3,
    release_env,
    run_suite,
    shared_fork,
)

TOOL = os.path.join(REPO, "scripts", "fork", "apply_to_fork.py")

RATCHET_FILES = ("scripts/ratchet/writer_ratchet.py",)
SHIPPED_TESTS = ("test/registered/unit/spec/test_draft_server_args.py",)
# The shipped test classes that pin the fix on the older lines: each fails on
# the release as released, on its assertions (the scheduler hands the draft
# the target's config, and the draft's values land on it).
OLDER_LINES_REGRESSION_CLASSES = (
    f"{SHIPPED_TESTS[0]}::TestSchedulerDraftHandoff",
    f"{SHIPPED_TESTS[0]}::TestEagleDraftLeavesTheTargetAlone",
)
# The lab: what left the shipped files, and the module that looks up what the
# release under test has; test/conftest.py gives the shipped classes above
# the regression marker the lab's carry.
LAB = "test/backport/spec/test_beyond_the_shipped_tests.py"
LAB_FILES = (LAB, "test/backport/spec/release_facts.py", "test/conftest.py")


class ReleaseLineTests:
    """The shared fork of RELEASE, cloned (mixed into one unittest.TestCase
    per release)."""

    RELEASE = ""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"release-line-{cls.RELEASE}-")
        cls.fork = shared_fork(cls.RELEASE)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_series_applies_as_one_commit_per_patch(self):
        log = git(self.fork, "log", "--format=%s", f"{self.RELEASE}..series")

        self.assertEqual(len(log.splitlines()), len(line_patches(self.RELEASE)))

    def test_the_cpu_job_passes_every_shipped_file_in_a_depth_1_clone(self):
        checkout = clone(self.RELEASE, "main", os.path.join(self.tmp, "c"), depth=1)
        self.assertEqual(
            git(checkout, "rev-parse", "--is-shallow-repository"), "true\n"
        )

        said, returncode = run_suite(checkout, self.RELEASE, "--one-interpreter")

        self.assertEqual(returncode, 0, said[-6000:])
        added = git(
            self.fork, "diff", "--name-only", "--diff-filter=A", self.RELEASE, "main"
        )
        shipped = [p for p in added.split() if p.startswith("test/registered/")]
        selected = re.search(r"^selected: (.*)$", said, re.M).group(1).split()
        self.assertEqual(sorted(selected), sorted(p[len("test/") :] for p in shipped))
        self.assertRegex(said, r"\n\d+ passed")

    def test_the_apply_tool_names_the_release_and_makes_git_am_s_commits(self):
        fork = clone(self.RELEASE, self.RELEASE, os.path.join(self.tmp, "tool"))
        git(fork, "switch", "-q", "-c", "main")

        run = subprocess.run(
            [sys.executable, TOOL, fork], capture_output=True, text=True, timeout=600
        )

        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        said = run.stdout.splitlines()[0]
        self.assertRegex(
            said,
            f"^apply: {re.escape(fork)} is (on|closest to) the {self.RELEASE} line",
        )
        # The commits git am -3 makes: the same messages and the same tree.
        self.assertEqual(
            git(fork, "log", "--format=%B", f"{self.RELEASE}..HEAD"),
            git(self.fork, "log", "--format=%B", f"{self.RELEASE}..series"),
        )
        self.assertEqual(
            git(fork, "rev-parse", "HEAD^{tree}"),
            git(self.fork, "rev-parse", "series^{tree}"),
        )

    def test_the_lab_passes_on_the_series_with_the_lines_shipped_file(self):
        fork = clone(self.RELEASE, "series", os.path.join(self.tmp, "lab"))
        env = release_env(self.RELEASE, os.path.join(fork, "python"))
        shipped = os.path.join(fork, os.path.dirname(SHIPPED_TESTS[0]))
        env["PYTHONPATH"] = os.pathsep.join([shipped, env["PYTHONPATH"]])

        said, returncode = python3(
            ["-m", "pytest", "-q", "-p", "no:cacheprovider", LAB],
            cwd=REPO,
            env=env,
            timeout=600,
        )

        self.assertEqual(returncode, 0, said[-6000:])
        self.assertRegex(said, r"\n\d+ passed")

    def test_the_ratchet_it_ships_is_this_repositorys(self):
        for path in RATCHET_FILES:
            with self.subTest(path=path):
                shipped = git(self.fork, "show", f"main:{path}")
                with open(os.path.join(REPO, path), encoding="utf-8") as fh:
                    ours = fh.read()
                self.assertEqual(shipped, ours)


class RegressionAtTheRelease:
    """The shipped tests' regression classes at RELEASE as released."""

    RELEASE = ""
    REGRESSION_CLASSES = OLDER_LINES_REGRESSION_CLASSES

    def test_each_regression_class_fails_on_the_release_as_released(self):
        release = clone(self.RELEASE, self.RELEASE, os.path.join(self.tmp, "r"))
        for path in SHIPPED_TESTS:
            os.makedirs(os.path.dirname(os.path.join(release, path)), exist_ok=True)
            with open(os.path.join(release, path), "w", encoding="utf-8") as fh:
                fh.write(git(self.fork, "show", f"main:{path}"))
        for path in LAB_FILES:
            os.makedirs(os.path.dirname(os.path.join(release, path)), exist_ok=True)
            shutil.copyfile(os.path.join(REPO, path), os.path.join(release, path))

        # One process for all of them: -rfEp lists each failing test (and
        # subtest), and each passing one, by node id in the summary; short
        # tracebacks still name each exception.
        said, _ = python3(
            ["-m", "pytest", "-q", "-rfEp", "--tb=short", "-p", "no:cacheprovider"]
            + ["-m", "regression", *self.REGRESSION_CLASSES, LAB],
            cwd=release,
            env=release_env(self.RELEASE, os.path.join(release, "python")),
            timeout=600,
        )

        summary = [
            line
            for line in said.splitlines()
            if line.startswith(("FAILED ", "ERROR ", "SUBFAILED"))
        ]
        for node_id in self.REGRESSION_CLASSES:
            with self.subTest(test=node_id):
                failed = [line for line in summary if f"{node_id}::" in line]
                self.assertTrue(failed, said[-3000:])
        # So did every other test that ran: one whose subtests failed is
        # listed as passed, and each of its failed subtests as SUBFAILED.
        passed = re.findall(r"^PASSED (\S+)", said, re.M)
        self.assertTrue(re.search(rf"^FAILED {LAB}::", said, re.M), said[-3000:])
        for node_id in passed:
            with self.subTest(test=node_id):
                # The reason follows where the summary line has room for it.
                subfailed = rf"(?m)^SUBFAILED\S* {re.escape(node_id)}(?: - |$)"
                self.assertRegex(said, subfailed)
        # On their assertions, not on a name the release lacks.
        self.assertIn("AssertionError", said, said[-3000:])
        self.assertNotIn("ImportError", said, said[-3000:])
        self.assertNotIn("AttributeError", said, said[-3000:])

"""This repository's per-algorithm matrix and real construction on CPU, on
each older release line.

For v0.5.14 and v0.5.15.post1 (the release whose series also serves v0.5.15)
a fork is made from the released wheel's package and takes its line's series
with ``git am -3``, as in ``test_release_lines.py``. Then, with this process's
venv and pytest and the fork's ``python/`` first on ``PYTHONPATH``:

- ``test/backport/spec/test_draft_worker_matrix.py`` (every algorithm's real
  draft worker through the real ``Scheduler.maybe_init_draft_worker``) and
  ``test_real_draft_construction_cpu.py`` (the whole ``Scheduler.__init__``
  with tiny models) pass. DSPARK came in v0.5.16: its classes are skipped.

The shipped tests' regression proof on each line is in ``test_release_lines.py``
and the leak as a user sees it in ``test_release_line_servers.py``. The
matrix's 25 regression tests and real construction's 32 were seen to fail on
both releases as released (``PYTHONPATH=.build/releases/vVERSION pytest -m
regression -k "not DSpark" FILE``), which ``.ci/run`` does not repeat.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from release_forks import REPO, fork_with_series

MATRIX = "test/backport/spec/test_draft_worker_matrix.py"
REAL_CONSTRUCTION = "test/backport/spec/test_real_draft_construction_cpu.py"


def run_pytest(pythonpath, *args):
    """Run pytest in this repository with ``pythonpath`` first on the path."""
    env = dict(os.environ, PYTHONPATH=pythonpath)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


class ReleaseLineSpecTests:
    """The spec tests on a fork of RELEASE with its series (mixed into one
    unittest.TestCase per release)."""

    RELEASE = ""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=f"release-line-spec-{cls.RELEASE}-")
        cls.fork = os.path.join(cls.tmp, "fork")
        fork_with_series(cls.fork, cls.RELEASE, cls.RELEASE)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_matrix_and_real_construction_pass_on_the_patched_fork(self):
        run = run_pytest(
            os.path.join(self.fork, "python"), "-rs", MATRIX, REAL_CONSTRUCTION
        )

        said = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, said[-6000:])
        # Every skip is DSPARK's, and the tests ran this fork's sglang.
        skipped = [line for line in said.splitlines() if line.startswith("SKIPPED")]
        self.assertTrue(all("no DSPARK" in line for line in skipped), skipped)


class TestTheSpecTestsOnV0_5_15Post1(ReleaseLineSpecTests, unittest.TestCase):
    RELEASE = "v0.5.15.post1"


class TestTheSpecTestsOnV0_5_14(ReleaseLineSpecTests, unittest.TestCase):
    RELEASE = "v0.5.14"


if __name__ == "__main__":
    unittest.main()

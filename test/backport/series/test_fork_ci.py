"""A fork's own CI stays green with the series, on every release line.

A fork runs its tests through SGLang's runner, ``python3 test/run_suite.py
--hw cpu --suite base-a-test-cpu``, which collects every file under
``test/registered/`` and refuses to start when one registers to a suite it
does not know; and its pre-commit runs ruff, black, isort and codespell at
pinned versions. Both are checked for each series (``patches/v0.5.16/``,
``patches/v0.5.15.post1/`` for the v0.5.15 line, ``patches/v0.5.14/``) on one
fork made from its release's wheel::

    vVERSION --- 0001 --- 0002 --- 0003 --- 0004
    (the wheel's python/sglang, the fork's     (git am -3 SERIES/*.patch)
     linter configuration)

- every test file the series adds registers, as the wheel's own
  ``collect_tests`` reads it, to ``base-a-test-cpu``;
- each linter, at the fork's pinned version, reports nothing on the files the
  series touches that it did not report on the release's files.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections import Counter
from importlib import metadata

import pytest
from release_forks import git, release_fork, series_patches

from sglang.test.ci.ci_register import HWBackend, collect_tests

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)

# The per-commit CPU suites of SGLang's runner at the v0.5.16 cut: upstream's
# test/run_suite.py, PER_COMMIT_SUITES[HWBackend.CPU]. Its validate_all_suites()
# refuses every run when a registered file names any other CPU suite.
PER_COMMIT_CPU_SUITES = (
    "base-a-test-cpu",
    "base-b-test-cpu",
    "base-c-test-cpu",
    "base-b-test-cpu-arm64",
)
# Where the fork's own spec and server-args unit tests register.
SHIPPED_SUITE = "base-a-test-cpu"

# The linters of the fork's .pre-commit-config.yaml at the v0.5.16 cut (the
# same at the v0.5.14 to v0.5.15.post1 cuts), and
# how its hooks call them (ruff with --select=F401,F821,UP037 --fix; black and
# isort with no arguments; codespell with --config .codespellrc).
LINTER_PINS = {
    "ruff": "0.15.1",
    "black": "26.1.0",
    "isort": "7.0.0",
    "codespell": "2.4.1",
}
RUFF_RULES = "F401,F821,UP037"
# Upstream's .isort.cfg at the root of the tree. Black has no configuration
# there. Codespell runs here with no ignored words, which is stricter than the
# fork's .codespellrc.
ISORT_CFG = "[settings]\nprofile=black\nknown_first_party=sglang\n"
CODESPELL_RC = "[codespell]\n"


def run_linter(tree, *argv):
    """Run one of the venv's linters in ``tree``; return its stdout and stderr."""
    proc = subprocess.run(
        [os.path.join(BIN, argv[0]), *argv[1:]],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return proc.stdout + proc.stderr


class SeriesForkChecks:
    """A fork of RELEASE with SERIES applied, and the release beside it (mixed
    into one unittest.TestCase per series)."""

    PACKAGE = ""  # the release's sglang package, from the wheel
    RELEASE = ""  # its tag
    SERIES = ""  # the series' folder

    @classmethod
    def setUpClass(cls):
        if not os.path.isdir(cls.PACKAGE):
            pytest.fail(f"no {cls.PACKAGE}; run scripts/dev/setup.sh first")
        cls.tmp = tempfile.mkdtemp(prefix="fork-ci-")
        cls.fork = os.path.join(cls.tmp, "fork")
        cls.release = os.path.join(cls.tmp, "release")
        config = {".isort.cfg": ISORT_CFG, ".codespellrc": CODESPELL_RC}
        release_fork(cls.fork, cls.PACKAGE, cls.RELEASE, config)
        git(cls.fork, "am", "-3", *series_patches(cls.SERIES))
        git(cls.fork, "worktree", "add", "-q", "--detach", cls.release, cls.RELEASE)
        changes = git(
            cls.fork, "diff", "--name-status", "--no-renames", cls.RELEASE, "HEAD"
        )
        rows = [line.split("\t") for line in changes.splitlines()]
        cls.touched = sorted(path for status, path in rows)
        cls.added = sorted(path for status, path in rows if status == "A")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def touched_files(self, tree, suffix=""):
        """The files the series touches that ``tree`` has, ending in ``suffix``."""
        return [
            path
            for path in self.touched
            if path.endswith(suffix) and os.path.exists(os.path.join(tree, path))
        ]

    def test_every_test_file_the_series_adds_registers_to_base_a_test_cpu(self):
        tests = [p for p in self.added if p.startswith("test/registered/")]
        self.assertTrue(tests, "the series adds no test under test/registered/")

        registries = collect_tests(
            [os.path.join(self.fork, p) for p in tests], sanity_check=True
        )

        found = {os.path.relpath(r.filename, self.fork): r for r in registries}
        self.assertEqual(sorted(found), tests)
        for path, registry in found.items():
            with self.subTest(path=path):
                self.assertEqual(registry.backend, HWBackend.CPU)
                self.assertIn(registry.effective_suite, PER_COMMIT_CPU_SUITES)
                self.assertEqual(registry.effective_suite, SHIPPED_SUITE)
                self.assertFalse(registry.nightly)
                self.assertIsNone(registry.disabled)

    def test_the_linters_are_the_forks_pinned_versions(self):
        for name, version in LINTER_PINS.items():
            with self.subTest(linter=name):
                self.assertEqual(metadata.version(name), version)

    def ruff_findings(self, tree):
        out = run_linter(
            tree,
            "ruff",
            "check",
            "--no-cache",
            f"--select={RUFF_RULES}",
            "--output-format=json",
            "--exit-zero",
            *self.touched_files(tree, ".py"),
        )
        return Counter(
            (os.path.relpath(f["filename"], tree), f["code"], f["message"])
            for f in json.loads(out)
        )

    def test_ruff_reports_no_unused_import_or_undefined_name_the_series_added(self):
        new = self.ruff_findings(self.fork) - self.ruff_findings(self.release)

        self.assertEqual(sorted(new), [])

    def files_reported(self, tree, *argv):
        """The touched files in ``tree`` that a linter's --check names."""
        files = self.touched_files(tree, ".py")
        out = run_linter(tree, *argv, *files)
        return {path for path in files if path in out}

    def test_black_would_reformat_no_file_the_series_touched(self):
        argv = ("black", "--check")
        new = self.files_reported(self.fork, *argv)
        new -= self.files_reported(self.release, *argv)

        self.assertEqual(sorted(new), [])

    def test_isort_would_reorder_no_import_block_the_series_touched(self):
        argv = ("isort", "--check-only")
        new = self.files_reported(self.fork, *argv)
        new -= self.files_reported(self.release, *argv)

        self.assertEqual(sorted(new), [])

    def codespell_findings(self, tree):
        out = run_linter(tree, "codespell", *self.touched_files(tree))
        # path:line: word ==> fix; the line number moves with the patch.
        return Counter(
            (line.split(":")[0], line.split(": ", 1)[1])
            for line in out.splitlines()
            if "==>" in line
        )

    def test_codespell_finds_no_misspelling_the_series_added(self):
        new = self.codespell_findings(self.fork)
        new -= self.codespell_findings(self.release)

        self.assertEqual(sorted(new), [])


class TestTheV0_5_16Series(SeriesForkChecks, unittest.TestCase):
    PACKAGE = os.path.join(REPO, ".build", "pristine", "sglang")
    RELEASE = "v0.5.16"
    SERIES = os.path.join(REPO, "patches", "v0.5.16")


class TestTheV0_5_15Post1Series(SeriesForkChecks, unittest.TestCase):
    PACKAGE = os.path.join(REPO, ".build", "releases", "v0.5.15.post1", "sglang")
    RELEASE = "v0.5.15.post1"
    SERIES = os.path.join(REPO, "patches", "v0.5.15.post1")


class TestTheV0_5_14Series(SeriesForkChecks, unittest.TestCase):
    PACKAGE = os.path.join(REPO, ".build", "releases", "v0.5.14", "sglang")
    RELEASE = "v0.5.14"
    SERIES = os.path.join(REPO, "patches", "v0.5.14")


if __name__ == "__main__":
    unittest.main()

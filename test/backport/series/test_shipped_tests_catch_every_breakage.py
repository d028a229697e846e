"""On every line, the shipped tests fail for each way the fix can break.

For each series (one release per series: the release its folder under
patches/ is named after), the line's shipped tests run in a clone of its
shared fork at ``series``, the release with the series applied
(``release_forks.shared_fork``): first as patched, where they pass, then once
for each of the ways ``fix_breakages.BREAKAGES`` breaks the fix, each a source
edit of the fork's fix. The shipped tests are the files patch 0003 adds, read
from the fork, so that the check follows whatever they become; not the
ratchet of patch 0004, which turns red on the edit itself. Each breakage must
fail at least one of them on an assertion: an ImportError, AttributeError or
NameError would only show that the edit broke the file. Every failed test is
printed under its line and breakage.

A line's runs share one import of its sglang, which costs about 4 s of CPU
here: ``run_each_breakage.py``, run by python3 in the clone (forked from the
fork server that imported sglang's heavy dependencies,
``release_forks.python3``), imports it with the test files, then forks a
process for each run, which makes its edit by compiling the edited function
again, and runs the test files there.
"""

import json
import os
import re
import shutil
import tempfile
import unittest

from fix_breakages import BREAKAGES, WAYS
from release_forks import LINES, clone, git, python3, release_env, version_key

RUN_EACH_BREAKAGE = os.path.join(os.path.dirname(__file__), "run_each_breakage.py")

# Each series is named after the release it is made on.
SERIES = sorted(set(LINES.values()), key=version_key, reverse=True)


def shipped_tests(fork, release):
    """The test files patch 0003 of ``release``'s series adds, in ``fork``."""
    commit = git(fork, "rev-list", "--reverse", f"{release}..series").split()[2]
    added = git(
        fork,
        "diff-tree",
        "--no-commit-id",
        "--name-only",
        "--diff-filter=A",
        "-r",
        commit,
    )
    return [p for p in added.split() if p.startswith("test/") and p.endswith(".py")]


def run_each_breakage(fork, release, breakages, files):
    """Run ``files`` in ``fork`` as patched, then with each of ``breakages``;
    return each run's output and the (type raised, test id) of each test or
    subtest that failed in it."""
    env = release_env(release, os.path.join(fork, "python"))
    # A failed test runs once, in or out of sglang's CI.
    env["SGLANG_TEST_MAX_RETRY"] = "0"
    plan = json.dumps([[b.path, b.old, b.new] for b in breakages])
    run_path = (
        f"import runpy; runpy.run_path({RUN_EACH_BREAKAGE!r}, run_name='__main__')"
    )
    said, _ = python3(["-c", run_path, plan, *files], cwd=fork, env=env, timeout=600)
    runs = re.split(r"^=== breakage \d+\n", said, flags=re.M)[1:]
    if len(runs) != len(breakages) + 1:
        raise AssertionError(f"not every breakage ran:\n{said[-6000:]}")
    return [(run, re.findall(r"^FAILED (\S+) (.*)$", run, flags=re.M)) for run in runs]


class TestShippedTestsCatchEveryBreakage(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="breakages-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)

    def test_every_line_breaks_its_fix_each_of_the_six_ways(self):
        self.assertEqual(sorted(BREAKAGES), sorted(SERIES))
        for series in SERIES:
            with self.subTest(series=series):
                ways = {breakage.way for breakage in BREAKAGES[series]}
                self.assertEqual(sorted(ways), sorted(WAYS))

    def test_each_breakage_fails_a_shipped_test_on_an_assertion(self):
        for series in SERIES:
            with self.subTest(series=series):
                self.check_the_breakages_of(series)

    def check_the_breakages_of(self, series):
        fork = clone(series, "series", os.path.join(self.tmp, series))
        breakages = []
        for breakage in BREAKAGES[series]:
            with open(os.path.join(fork, breakage.path), encoding="utf-8") as fh:
                found = fh.read().count(breakage.old)
            with self.subTest(breakage=breakage.name):
                # A change of the fix fails here, not as an edit of nothing.
                self.assertEqual(
                    found,
                    1,
                    f"{breakage.path} has the text it replaces {found} times; "
                    f"make fix_breakages.py follow the fix:\n{breakage.old}",
                )
                breakages.append(breakage)

        files = shipped_tests(fork, series)
        self.assertTrue(files, f"patch 0003 of {series} adds no test file")

        runs = run_each_breakage(fork, series, breakages, files)

        (said, failed), *broken = runs
        with self.subTest(breakage="none, the fix as patched"):
            self.assertRegex(said, r"\nran [1-9]", said[-6000:])
            self.assertEqual(failed, [], said[-6000:])
        for breakage, (said, failed) in zip(breakages, broken, strict=True):
            with self.subTest(breakage=breakage.name):
                self.assertRegex(said, r"\nran [1-9]", said[-6000:])
                caught = [test for raised, test in failed if raised == "AssertionError"]
                print(f"{series}: {breakage.name}: {len(caught)} fail on an assertion")
                for test in caught:
                    print(f"    {test}")
                self.assertTrue(
                    caught,
                    f"no shipped test fails on an assertion when "
                    f"{breakage.name}; failed: {failed or 'none'}\n{said[-6000:]}",
                )


if __name__ == "__main__":
    unittest.main()

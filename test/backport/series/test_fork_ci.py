"""The fork CI jobs (fork_ci_checks.py) of the v0.5.14 to v0.5.16 series, and
the linters' versions.
"""

import unittest
from importlib import metadata

from fork_ci_checks import (
    LINTER_PINS,
    V0_5_15_RATCHETS,
    V0_5_16_RATCHETS,
    SeriesForkChecks,
)


class TestTheForksLinters(unittest.TestCase):
    def test_the_linters_are_the_forks_pinned_versions(self):
        for name, version in LINTER_PINS.items():
            with self.subTest(linter=name):
                self.assertEqual(metadata.version(name), version)


class TestTheV0_5_16Series(SeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.16"
    PINNED_RATCHETS = V0_5_16_RATCHETS


class TestTheV0_5_15Post1Series(SeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.15.post1"
    PINNED_RATCHETS = V0_5_15_RATCHETS


class TestTheV0_5_14Series(SeriesForkChecks, unittest.TestCase):
    # No ratchet test at the v0.5.14 cut.
    RELEASE = "v0.5.14"


if __name__ == "__main__":
    unittest.main()

"""The fork CI jobs (fork_ci_checks.py) of the series for v0.5.6 to
v0.5.13.post1, each on the release it is made from. No ratchet test pins a
count at these cuts, nor at the release after each (docs/fork-ci-v0.5.6-v0.5.13.md):
the counts upstream's later ratchets keep may change.
"""

import unittest

from fork_ci_checks import SeriesForkChecks


class OlderSeriesForkChecks(SeriesForkChecks):
    NO_COUNT_GROWS = False


class TestTheV0_5_13Post1Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.13.post1"


class TestTheV0_5_12Post1Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.12.post1"


class TestTheV0_5_11Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.11"


class TestTheV0_5_10Post1Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.10.post1"


class TestTheV0_5_9Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.9"


class TestTheV0_5_8Post1Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.8.post1"


class TestTheV0_5_7Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.7"


class TestTheV0_5_6Post2Series(OlderSeriesForkChecks, unittest.TestCase):
    RELEASE = "v0.5.6.post2"


if __name__ == "__main__":
    unittest.main()

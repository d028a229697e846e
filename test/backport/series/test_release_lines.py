"""The releases v0.5.14 to v0.5.16, each in a fork made from its wheel, with its
line's series (the checks are release_line_checks.py's).
"""

import unittest

from release_line_checks import RegressionAtTheRelease, ReleaseLineTests


class TestV0_5_16(ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.16"


class TestV0_5_15Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.15.post1"


class TestV0_5_15(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.15"


class TestV0_5_14(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.14"


if __name__ == "__main__":
    unittest.main()

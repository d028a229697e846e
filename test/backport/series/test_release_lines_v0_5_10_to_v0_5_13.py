"""The releases v0.5.10 to v0.5.13.post1, each in a fork made from its wheel,
with its line's series (the checks are release_line_checks.py's).
"""

import unittest

from release_line_checks import RegressionAtTheRelease, ReleaseLineTests


class TestV0_5_13Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.13.post1"


class TestV0_5_13(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.13"


class TestV0_5_12Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.12.post1"


class TestV0_5_12(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.12"


class TestV0_5_11(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.11"


class TestV0_5_10Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.10.post1"


class TestV0_5_10(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.10"


if __name__ == "__main__":
    unittest.main()

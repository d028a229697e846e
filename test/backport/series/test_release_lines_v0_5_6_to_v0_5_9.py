"""The releases v0.5.6 to v0.5.9, each in a fork made from its wheel, with its
line's series (the checks are release_line_checks.py's).
"""

import unittest

from release_line_checks import RegressionAtTheRelease, ReleaseLineTests


class TestV0_5_9(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.9"


class TestV0_5_8Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.8.post1"


class TestV0_5_8(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.8"


class TestV0_5_7(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.7"


class TestV0_5_6Post2(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.6.post2"


class TestV0_5_6Post1(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.6.post1"


class TestV0_5_6(RegressionAtTheRelease, ReleaseLineTests, unittest.TestCase):
    RELEASE = "v0.5.6"


if __name__ == "__main__":
    unittest.main()

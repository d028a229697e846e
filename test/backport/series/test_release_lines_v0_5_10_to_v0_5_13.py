"""The releases v0.5.10 to v0.5.13.post1, each in a fork made from its wheel,
with its line's series (the checks are release_line_checks.py's), and the
v0.5.10.post1 series on a fork of upstream's main from before v0.5.10.
"""

import os
import shutil
import tempfile
import unittest

from release_forks import clone, git, python3, release_env
from release_line_checks import RegressionAtTheRelease, ReleaseLineTests

# Imports each file it is given, as the runner's collection does, without
# running its tests.
IMPORT_EACH = """
import runpy, sys
for path in sys.argv[1:]:
    runpy.run_path(path, run_name="imported")
    print("imported", path)
"""


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


class TestTheV0_5_10Post1SeriesOnMainBeforeV0_5_10(unittest.TestCase):
    """The apply tool serves a fork of upstream's main from between v0.5.9 and
    v0.5.10 with the v0.5.10.post1 series. Its sglang.test.test_utils has no
    maybe_stub_sgl_kernel (v0.5.10 added it), and its jobs that import
    sglang.srt have sgl_kernel installed, as v0.5.9's GPU job does."""

    def test_the_shipped_files_import_without_the_stub_helper(self):
        tmp = tempfile.mkdtemp(prefix="main-before-v0.5.10-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        checkout = clone("v0.5.10.post1", "series", os.path.join(tmp, "c"))
        test_utils = os.path.join(checkout, "python/sglang/test/test_utils.py")
        with open(test_utils, encoding="utf-8") as file:
            text = file.read()
        older = text.replace("def maybe_stub_sgl_kernel(", "def _later_helper(")
        self.assertNotEqual(older, text)
        with open(test_utils, "w", encoding="utf-8") as file:
            file.write(older)
        added = git(checkout, "diff", "--name-only", "v0.5.10.post1", "HEAD", "--")
        shipped = [path for path in added.split() if path.startswith("test/")]
        # The shipped test file and the ratchet's check.
        self.assertEqual(len(shipped), 2, shipped)

        said, returncode = python3(
            ["-c", IMPORT_EACH, *shipped],
            cwd=checkout,
            env=release_env("v0.5.9", os.path.join(checkout, "python")),
            timeout=600,
        )

        self.assertEqual(returncode, 0, said[-4000:])
        self.assertEqual(said.count("imported "), 2, said[-4000:])


if __name__ == "__main__":
    unittest.main()

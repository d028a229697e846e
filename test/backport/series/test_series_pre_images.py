"""Every SGLang file a series changes is changed by one patch, from the
release's own copy.

`git am -3` falls back to a 3-way merge only where it finds the blob a patch's
`index OLD..NEW` line names as the file's pre-image. A fork whose file drifted
has the release's blob (in its history, or from the wheel the apply tool
reads) but never one that an earlier patch of the same series writes: were
two patches to change one file, the second would stop with "Repository lacks
necessary blobs to fall back on 3-way merge" on every such fork.
"""

import re
import subprocess
import unittest
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# Where scripts/dev/setup.sh unpacked each line's release: its sglang/.
UNPACKED = ROOT / ".build" / "releases"
PRISTINE = ROOT / ".build" / "pristine"
DIFF = re.compile(
    r"^diff --git a/(python/sglang/\S+) b/\S+\n(?:.*\n)*?index (\w+)\.\.", re.M
)


def released_copy(line, path):
    """The release's copy of a fork's path python/sglang/..."""
    package = PRISTINE if line == "v0.5.16" else UNPACKED / line
    return package / path[len("python/") :]


class TestSeriesPreImages(unittest.TestCase):
    def test_each_sglang_file_is_changed_by_one_patch_from_the_releases_blob(self):
        lines = sorted(path.name for path in (ROOT / "patches").glob("v*"))
        self.assertEqual(len(lines), 11)
        for line in lines:
            with self.subTest(line=line):
                changes = []
                for patch in sorted((ROOT / "patches" / line).glob("*.patch")):
                    changes += DIFF.findall(patch.read_text(encoding="utf-8"))
                paths = Counter(path for path, _ in changes)
                self.assertEqual([p for p, n in paths.items() if n > 1], [])
                for path, blob in changes:
                    copy = released_copy(line, path)
                    released = subprocess.run(
                        ["git", "hash-object", "--no-filters", str(copy)],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout.strip()
                    self.assertEqual(released, blob, path)


if __name__ == "__main__":
    unittest.main()

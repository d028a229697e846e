"""`scripts/dev/patches.sh check` covers every release line's series.

Each test copies this repository's files (as git lists them, committed or not)
into a repository of its own, with this checkout's ``.build`` beside them, and
runs the copy's ``patches.sh`` there: the series as they are pass, and with
a one-line edit to one patch of each series, the check fails and names every
series. The edits are of the kinds a hand edit makes, one kind per series in
turn: a line a patch adds, a line it removes, a context line, and the index
line of a file.
"""

import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def lines():
    """Every release line, newest first, as patches.sh lists them."""
    run = subprocess.run(
        ["bash", "scripts/dev/patches.sh", "lines"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout.split()


def first_line_index(lines, start):
    """The index of the first of lines that starts with start: in a hunk, or
    for an index line, in a file's header."""
    in_hunk = False
    for number, line in enumerate(lines):
        if line.startswith("@@ "):
            in_hunk = True
        elif line.startswith("diff --git "):
            in_hunk = False
        elif line.startswith(start) and in_hunk != (start == "index "):
            return number
    raise AssertionError(f"no line starting with {start!r}")


# One edit per kind: which patch of the series, the line it changes (the first
# of its kind), and what it becomes.
EDITS = {
    "an added line": ("0003", "+", lambda line: line[:-1] + "  # edited\n"),
    "a removed line": ("0002", "-", lambda line: line[:-1] + "  # edited\n"),
    "a context line": ("0002", " ", lambda line: " #" + line[1:]),
    "an index line": ("0001", "index ", lambda line: line.replace("..", "..0", 1)),
}


class TestPatchesCheck(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="patches-check-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.lines = lines()

    def copy_of_this_repository(self):
        copy = Path(tempfile.mkdtemp(dir=self.tmp))
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        for name in filter(None, listed):
            path = os.fsdecode(name)
            if os.path.isfile(ROOT / path):
                (copy / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / path, copy / path)
        (copy / ".build").symlink_to(ROOT / ".build")
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@invalid"]
        subprocess.run(git + ["init", "-q"], cwd=copy, check=True)
        subprocess.run(git + ["add", "-A"], cwd=copy, check=True)
        return copy

    def check(self, copy):
        return subprocess.run(
            ["bash", "scripts/dev/patches.sh", "check"],
            cwd=copy,
            capture_output=True,
            text=True,
        )

    def test_every_series_as_committed_passes(self):
        run = self.check(self.copy_of_this_repository())

        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for line in self.lines:
            self.assertIn(f"patches/{line}/ is what refresh writes", run.stdout)

    def test_a_one_line_edit_to_each_series_fails_the_check_naming_each(self):
        copy = self.copy_of_this_repository()
        kinds = list(EDITS)
        for number, line in enumerate(self.lines):
            patch_number, start, change = EDITS[kinds[number % len(kinds)]]
            [patch] = (copy / "patches" / line).glob(f"{patch_number}-*.patch")
            text = patch.read_text(encoding="utf-8").splitlines(True)
            at = first_line_index(text, start)
            text[at] = change(text[at])
            patch.write_text("".join(text), encoding="utf-8")

        run = self.check(copy)

        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertEqual(len(self.lines), 11)
        self.assertIn(f"not what refresh writes: {' '.join(self.lines)}\n", run.stderr)


if __name__ == "__main__":
    unittest.main()

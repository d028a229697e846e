r"""scripts/fork/apply_to_fork.py on forks that commented the lines the fix deletes.

Upstream commits taken after a release add comments inside the blocks the
series deletes or rewrites; `git am -3` then stops on a conflict whose fork side
is the release's code with comments. The tool resolves such a conflict the way
the README's plain-git recipe does (the series' side), shows what it dropped,
and refuses any other conflict as before.

One fork per release line, made once from the files of the release's wheel
that the series changes (``fork_with_cases``), with a branch per case::

    R  "sglang VERSION"                                    <- main
    |\
    | C  comment lines inside the draft load format block  <- comments
    |    of Scheduler.maybe_init_draft_worker, the
    |    context_length write of EAGLEWorkerV2.__init__ and
    |    the hot-token-map write of init_token_map; a helper
    |    and a comment far from the series' hunks
    |\
    | K  a comment inside the draft load format block,     <- comment-and-code
    |    and a code change to the write the series deletes
    |    there; a comment alone inside the context_length
    |    write's block
     \
      O  a comment above the draft load format block,      <- comment-outside
         outside the lines the series deletes

Each test clones the fork at its case's branch; ``by_hand`` is the plain-git
way: `git am -3`, then the README's `sed` recipe on each conflicting file.
"""

import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from wheel_forks import (
    ENV,
    TOOL,
    commit_everything,
    git,
    make_scratch,
    release_repository,
    series,
    snapshot,
)

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=60, suite="base-a-test-cpu")

# The release lines whose series these tests apply: the lines from v0.5.14,
# and two of the older ones with the same three blocks (v0.5.6.x writes the
# load format on __init__'s server_args instead).
LINES = ("v0.5.16", "v0.5.15.post1", "v0.5.14", "v0.5.13.post1", "v0.5.9")
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
EAGLE = "python/sglang/srt/speculative/eagle_worker_v2.py"

# The lines each block starts below, in every release.
DRAFT_LOAD_FORMAT = "if self.server_args.speculative_draft_load_format is not None:"
CONTEXT_LENGTH = "# Override the context length of the draft model to be the same"
HOT_TOKEN_MAP = "load_token_map(self.server_args.speculative_token_map)"
# The comment an upstream commit after v0.5.16 added above the draft load
# format write.
UPSTREAM_COMMENT = [
    "# Write the draft load_format onto server_args (not just the bag):",
    "# the draft worker is built from a copy of self.server_args and",
    "# build_load_config reads server_args.load_format, so a bag-only",
    "# override would be ignored and the draft would load in the target's",
    "# format.",
]
CONTEXT_COMMENT = "# fork: the draft reads the target's KV cache with this length."
HOT_TOKEN_COMMENTS = [
    "# fork: the draft's vocabulary is cut to the hot tokens,",
    "# fork: which its model config reads",
]
# The fork's lines far from the series' hunks, which every merge keeps.
FORK_HELPER = '\n\ndef fork_local_helper():\n    return "fork"\n'
FORK_NOTE = "# fork: the end of eagle_worker_v2.py\n"
# The fork's change to the draft load format write's value line.
OWN_VALUE = ("speculative_draft_load_format", "speculative_draft_load_format or FORK")
OUTSIDE_COMMENT = "# fork: the draft may load in another format than the target."

# The README's plain-git recipe for a conflict whose fork side is comments
# only: keep the series' side of each conflict.
RECIPE = "sed -i -e '/^<<<<<<< /,/^=======$/d' -e '/^>>>>>>> /d'"


def setUpModule() -> None:
    """Makes the scratch folder."""
    global TMP
    TMP = make_scratch("comment-conflicts-", LINES)


def tearDownModule() -> None:
    """Removes the scratch folder."""
    shutil.rmtree(TMP, ignore_errors=True)


def insert(fork: Path, path: str, anchor: str, lines: list[str], offset: int) -> None:
    """Inserts lines offset lines below the one line of path that holds anchor
    (0: above it), indented as the line they go above."""
    text = (fork / path).read_text().splitlines(True)
    [number] = [n for n, line in enumerate(text) if anchor in line]
    at = number + offset
    indentation = re.match(r"[ \t]*", text[at])[0]
    text[at:at] = [f"{indentation}{line}".rstrip() + "\n" for line in lines]
    (fork / path).write_text("".join(text))


def append(fork: Path, path: str, text: str) -> None:
    """Adds text at the end of path."""
    with open(fork / path, "a") as file:
        file.write(text)


def add_the_comments(fork: Path) -> None:
    """Case C: comment lines inside each block the series deletes, and fork lines
    far from the series' hunks."""
    insert(fork, SCHEDULER, DRAFT_LOAD_FORMAT, UPSTREAM_COMMENT, 1)
    insert(fork, EAGLE, CONTEXT_LENGTH, [CONTEXT_COMMENT], 1)
    # Above the hot-token-map write with a blank line, and inside its
    # parentheses (below its first line).
    insert(fork, EAGLE, HOT_TOKEN_MAP, [HOT_TOKEN_COMMENTS[0], ""], 1)
    insert(fork, EAGLE, HOT_TOKEN_MAP, [HOT_TOKEN_COMMENTS[1]], 4)
    append(fork, SCHEDULER, FORK_HELPER)
    append(fork, EAGLE, FORK_NOTE)


def add_a_code_line(fork: Path) -> None:
    """Case K: a comment inside the draft load format block and a change to the
    value line of the write the series deletes there (a line both change), and
    a comment alone inside the context_length write's block."""
    text = (fork / SCHEDULER).read_text().splitlines(True)
    [block] = [n for n, line in enumerate(text) if DRAFT_LOAD_FORMAT in line]
    value = next(n for n in range(block + 1, len(text)) if OWN_VALUE[0] in text[n])
    text[value] = text[value].replace(*OWN_VALUE)
    (fork / SCHEDULER).write_text("".join(text))
    insert(fork, SCHEDULER, DRAFT_LOAD_FORMAT, [UPSTREAM_COMMENT[0]], 1)
    insert(fork, EAGLE, CONTEXT_LENGTH, [CONTEXT_COMMENT], 1)


def add_a_comment_outside(fork: Path) -> None:
    """Case O: a comment above the draft load format block, which the series
    keeps."""
    insert(fork, SCHEDULER, DRAFT_LOAD_FORMAT, [OUTSIDE_COMMENT], 0)


def fork_with_cases(release: str) -> Path:
    """The release's repository (commit R) with a branch for each case, made once."""
    fork = TMP / f"fork-{release}"
    if fork.exists():
        return fork
    release_repository(fork, release)
    cases = {
        "comments": add_the_comments,
        "comment-and-code": add_a_code_line,
        "comment-outside": add_a_comment_outside,
    }
    for branch, edit in cases.items():
        git(fork, "switch", "-q", "-c", branch, "main")
        edit(fork)
        commit_everything(fork, f"fork: {branch}")
    git(fork, "switch", "-q", "main")
    return fork


class CommentConflictCase(CustomTestCase):
    """Clones the forks and runs the tool on them."""

    def clone(self, release: str, branch: str) -> Path:
        """A clone of the release's fork at branch, removed after the test."""
        folder = Path(tempfile.mkdtemp(dir=TMP, prefix=f"{branch}-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        clone = folder / "fork"
        source = fork_with_cases(release)
        git(TMP, "clone", "-q", "--shared", "-b", branch, str(source), str(clone))
        git(clone, "config", "user.name", "Fork Maintainer")
        git(clone, "config", "user.email", "fork@example.invalid")
        return clone

    def run_tool(self, fork: Path, *flags: str) -> subprocess.CompletedProcess:
        """Runs the tool on fork and returns the run."""
        command = [sys.executable, str(TOOL), *flags, str(fork)]
        return subprocess.run(command, env=ENV, capture_output=True, text=True)

    def assert_applied(self, run: subprocess.CompletedProcess, release: str) -> None:
        """Asserts the run applied the whole series."""
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        count = len(series(release))
        self.assertIn(f"apply: applied {count} of the {count} patches", run.stdout)

    def assert_reverted_to(self, fork: Path, release: str, tree: str) -> None:
        """Asserts --revert takes the series out, leaving the fork's tree."""
        run = self.run_tool(fork, "--revert")
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        reverted = f"apply: reverted {len(series(release))} commit(s), newest first"
        self.assertIn(reverted, run.stdout)
        self.assertEqual(git(fork, "rev-parse", "HEAD^{tree}"), tree)
        self.assertEqual(git(fork, "status", "--porcelain", "-uall"), "")

    def by_hand(self, fork: Path, release: str) -> list[str]:
        """Applies the series with `git am -3` and the README's recipe for each
        conflicting file; returns the files it resolved."""
        patches = [str(patch) for patch in series(release)]
        resolved = []
        am = subprocess.run(
            ["git", "am", "-3", *patches], cwd=fork, env=ENV, capture_output=True
        )
        while am.returncode != 0:
            files = git(fork, "diff", "--name-only", "--diff-filter=U").split()
            self.assertTrue(files, am.stdout + am.stderr)
            for path in files:
                subprocess.run(f"{RECIPE} {path}", shell=True, cwd=fork, check=True)
            git(fork, "add", *files)
            resolved += files
            am = subprocess.run(
                ["git", "am", "--continue"], cwd=fork, env=ENV, capture_output=True
            )
        return resolved


class TestCommentConflicts(CommentConflictCase):
    def test_comments_inside_the_blocks_the_series_deletes_are_resolved_and_shown(
        self,
    ) -> None:
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "comments")
                plain_git = self.clone(release, "comments")
                start = git(fork, "rev-parse", "HEAD")
                tree = git(fork, "rev-parse", "HEAD^{tree}")
                # git am -3 alone stops in both files; the recipe resolves them.
                self.assertEqual(self.by_hand(plain_git, release), [SCHEDULER, EAGLE])
                run = self.run_tool(fork)
                self.assert_applied(run, release)
                # The same commits as the plain-git way: the patches' messages and
                # trailers, and the same trees.
                log = ["log", "--format=%an %ae %B%x00%T", f"{start}.."]
                self.assertEqual(git(fork, *log), git(plain_git, *log))
                patch = series(release)[1].name
                self.assertIn(
                    f"merged 3-way with your fork's changes: {patch}", run.stdout
                )
                self.assert_resolutions_shown(fork, run.stdout, patch)
                # The fork's other lines stay; its comments in the blocks are gone.
                self.assertTrue((fork / SCHEDULER).read_text().endswith(FORK_HELPER))
                self.assertTrue((fork / EAGLE).read_text().endswith(FORK_NOTE))
                files = (fork / SCHEDULER).read_text() + (fork / EAGLE).read_text()
                for comment in (
                    *UPSTREAM_COMMENT,
                    CONTEXT_COMMENT,
                    *HOT_TOKEN_COMMENTS,
                ):
                    self.assertNotIn(comment, files)
                self.assert_reverted_to(fork, release, tree)
                self.assertIn(UPSTREAM_COMMENT[0], (fork / SCHEDULER).read_text())

    def assert_resolutions_shown(self, fork: Path, said: str, patch: str) -> None:
        """Asserts the tool named each file and line it resolved, with the fork's
        lines it dropped, and a command that shows the commit's change there."""
        resolved = re.findall(
            rf"^apply: {re.escape(patch)}: resolved the conflict in (\S+) at line"
            r" (\d+), .*\(review it: `(.*)`\):\n((?:    .*\n)+)",
            said,
            re.M,
        )
        shown = []
        for path, _, _, lines in resolved:
            shown.append((path, [line.strip() for line in lines.splitlines()]))
        expected = [
            (SCHEDULER, UPSTREAM_COMMENT),
            (EAGLE, HOT_TOKEN_COMMENTS),
            (EAGLE, [CONTEXT_COMMENT]),
        ]
        self.assertEqual(shown, expected)
        # In the draft load format block, the line after the deleted write.
        path, line, review, _ = resolved[0]
        self.assertIn(
            "logger.info(", (fork / path).read_text().splitlines()[int(line) - 1]
        )
        commit = git(fork, "rev-parse", "--short=12", "HEAD~2")  # patch 0002's
        self.assertIn(f"&& git show {commit} -- {SCHEDULER}", review)
        diff = subprocess.run(
            ["bash", "-c", review], env=ENV, capture_output=True, text=True
        ).stdout
        for comment in UPSTREAM_COMMENT:
            self.assertIn(f"\n-            {comment}\n", diff)

    def test_a_code_change_beside_the_comment_is_refused(self) -> None:
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "comment-and-code")
                before = snapshot(fork)
                run = self.run_tool(fork)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                # All or nothing: the conflict in comments only is named, and
                # left as it was.
                conflicts = f"{SCHEDULER} (changed in your fork too, at your lines "
                comments = f"{EAGLE} (changed in your fork too, only in comments: take"
                self.assertIn(conflicts, run.stderr)
                self.assertIn(comments, run.stderr)
                self.assertIn("nothing was changed", run.stderr)
                self.assertNotIn("resolved", run.stdout)
                self.assertEqual(snapshot(fork), before)
                run = self.run_tool(fork, "--revert")
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertIn("apply: nothing to revert: ", run.stdout)
                self.assertEqual(snapshot(fork), before)

    def test_a_comment_outside_the_conflict_merges_3way_as_before(self) -> None:
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "comment-outside")
                tree = git(fork, "rev-parse", "HEAD^{tree}")
                run = self.run_tool(fork)
                self.assert_applied(run, release)
                patch = series(release)[1].name
                self.assertIn(
                    f"merged 3-way with your fork's changes: {patch}", run.stdout
                )
                self.assertNotIn("resolved", run.stdout)
                self.assertIn(OUTSIDE_COMMENT, (fork / SCHEDULER).read_text())
                self.assert_reverted_to(fork, release, tree)


if __name__ == "__main__":
    unittest.main()

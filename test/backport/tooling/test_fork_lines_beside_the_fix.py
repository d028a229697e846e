r"""The older lines' series on forks that drifted: git am -3 merges, and the
apply tool keeps the fork's lines beside the fix.

Most forks are upstream's main between two releases plus their own commits,
so every file a series changes has drifted there. One fork per release family
(v0.5.6.x, v0.5.9 to v0.5.12.post1, v0.5.13.x, v0.5.14), made once from the
files of the release's wheel that the series changes (``fork_with_cases``)::

    R  "sglang VERSION"
    |
    D  a comment line near the top of server_args.py        <- main
    |\
    | A  (a) lines above the context_length write that     <- beside
    | |      the series deletes, in EAGLEWorkerV2
    | B  (b) a line after the draft worker's construction,
    | |      which the series moves under the scoped publish
    | D  (d) the three keyword arguments after
    |        server_args= in draft_worker_kwargs, changed
    |\
    | C  (c) the scheduler builds its draft from its own    <- own-copy
    |        copy.deepcopy of the config
    |\
    | S  code in place of the blank line after the          <- same-line
    |    context_length write, which the series deletes
    |\
    | K  (e) six lines of the fork's right after the        <- after-deleted
    |        context_length write the series deletes, before
    |        the draft worker's construction it keeps
     \
      I  a line of the fork's between the comment and the   <- among-deleted
         context_length write, both of which the series
         deletes

Branch ``no-history`` is ``beside`` as one commit with no parent: a fork
whose history lacks the release's files, as one made from a tarball. Branch
``older-runner`` is ``main`` with a test/run_suite.py whose only CPU suite is
``stage-a-cpu-only``, as upstream's main had it in March 2026, before the
release of each line's suite.
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

# One line of each family.
LINES = ("v0.5.14", "v0.5.13.post1", "v0.5.9", "v0.5.6.post2")
# The line of real forks that kept the fork's lines after the write.
AFTER_DELETED_LINES = ("v0.5.12.post1",)
SERVER_ARGS = "python/sglang/srt/server_args.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
EAGLE = "python/sglang/srt/speculative/eagle_worker_v2.py"

# The line each case edits beside, in every one of these releases.
CONTEXT_LENGTH = "# Override the context length of the draft model to be the same"
KWARGS = "draft_worker_kwargs = dict("
DRAFT_WORKER = re.compile(r"self\.draft_worker = (DraftWorkerClass|self\.spec_)")

DRIFT = "# fork: this file is our fork's"
ADAPTIVE = ["if self.fork_adaptive:", "    self.fork_adaptive.attach(self)"]
TRACER = "self.draft_worker.fork_tracer = self.fork_tracer"
SAME_LINE = "self.fork_context_length = None"
FORKS_OWN_LINES = [
    "# fork: the draft reads the target's KV cache with this length.",
    "if self.fork_kv_offload:",
    "    server_args.fork_kv_offload_budget = (",
    "        self.fork_kv_offload_budget",
    "    )",
    "self.fork_note_context_length(server_args)",
]
AMONG = "self.fork_note_context_length(server_args)"
OWN_COPY = "draft_server_args = copy.deepcopy("
# The runner's suites, as upstream's test/run_suite.py lists them.
RUNNER = "test/run_suite.py"
OLDER_RUNNER = """PER_COMMIT_SUITES = {
    HWBackend.CPU: [CPU_SUITES],
    HWBackend.CUDA: ["stage-a-test-1"],
}
"""


def setUpModule() -> None:
    """Makes the scratch folder."""
    global TMP
    TMP = make_scratch("fork-lines-", LINES + AFTER_DELETED_LINES)


def tearDownModule() -> None:
    """Removes the scratch folder."""
    shutil.rmtree(TMP, ignore_errors=True)


def lines_of(fork: Path, path: str) -> list[str]:
    """The file's lines, each with its line end."""
    return (fork / path).read_text().splitlines(True)


def write_lines(fork: Path, path: str, lines: list[str]) -> None:
    """Writes the file's lines."""
    (fork / path).write_text("".join(lines))


def line_holding(lines: list[str], text: str, start: int = 0) -> int:
    """The number (from 0) of the first line from start that holds text."""
    return next(n for n in range(start, len(lines)) if text in lines[n])


def indented(like: str, new_lines: list[str]) -> list[str]:
    """new_lines, indented as the line like."""
    indentation = re.match(r"[ \t]*", like)[0]
    return [f"{indentation}{line}\n" for line in new_lines]


def drift_server_args(fork: Path) -> None:
    """D: a comment line of the fork's near the top of server_args.py."""
    lines = lines_of(fork, SERVER_ARGS)
    lines.insert(line_holding(lines, "import "), DRIFT + "\n")
    write_lines(fork, SERVER_ARGS, lines)


def add_lines_above_the_deleted_write(fork: Path) -> None:
    """(a): the fork's code just above the context_length write the series deletes."""
    lines = lines_of(fork, EAGLE)
    at = line_holding(lines, CONTEXT_LENGTH)
    lines[at:at] = indented(lines[at], ADAPTIVE)
    write_lines(fork, EAGLE, lines)


def add_a_line_after_the_draft_worker(fork: Path) -> None:
    """(b): the fork's line just after the draft worker's construction."""
    lines = lines_of(fork, SCHEDULER)
    start = next(n for n, line in enumerate(lines) if DRAFT_WORKER.search(line))
    end = start
    depth = lines[start].count("(") - lines[start].count(")")
    while depth > 0:
        end += 1
        depth += lines[end].count("(") - lines[end].count(")")
    lines[end + 1 : end + 1] = indented(lines[start], [TRACER])
    write_lines(fork, SCHEDULER, lines)


def change_the_arguments_after_server_args(fork: Path) -> None:
    """(d): the three keyword arguments after server_args= in draft_worker_kwargs
    read the fork's own attributes."""
    lines = lines_of(fork, SCHEDULER)
    at = line_holding(lines, "server_args=", line_holding(lines, KWARGS)) + 1
    for number in range(at, at + 3):
        key = lines[number].split("=")[0].strip()
        lines[number] = indented(lines[number], [f"{key}=self.fork_{key},"])[0]
    write_lines(fork, SCHEDULER, lines)


def build_the_draft_from_a_copy(fork: Path) -> None:
    """(c): the scheduler hands its draft its own copy of the config."""
    lines = lines_of(fork, SCHEDULER)
    at = line_holding(lines, KWARGS)
    argument = line_holding(lines, "server_args=", at)
    config = lines[argument].split("=")[1].strip().rstrip(",")
    lines[argument] = indented(lines[argument], ["server_args=draft_server_args,"])[0]
    lines[at:at] = indented(lines[at], [f"{OWN_COPY}{config})"])
    write_lines(fork, SCHEDULER, lines)


def replace_the_blank_after_the_write(fork: Path) -> None:
    """S: the fork's code in place of the blank line after the context_length
    write, a line the series deletes."""
    lines = lines_of(fork, EAGLE)
    at = line_holding(lines, CONTEXT_LENGTH) + 2
    assert lines[at].strip() == "", lines[at - 2 : at + 1]
    lines[at] = indented(lines[at - 1], [SAME_LINE])[0]
    write_lines(fork, EAGLE, lines)


def keep_lines_after_the_deleted_write(fork: Path) -> None:
    """(e): the fork's lines right after the context_length write."""
    lines = lines_of(fork, EAGLE)
    at = line_holding(lines, CONTEXT_LENGTH) + 2
    lines[at:at] = indented(lines[at - 1], FORKS_OWN_LINES)
    write_lines(fork, EAGLE, lines)


def add_a_line_among_the_deleted_lines(fork: Path) -> None:
    """I: the fork's line between the comment and the write."""
    lines = lines_of(fork, EAGLE)
    at = line_holding(lines, CONTEXT_LENGTH) + 1
    lines[at:at] = indented(lines[at], [AMONG])
    write_lines(fork, EAGLE, lines)


def fork_with_cases(release: str) -> Path:
    """The release's repository with a branch for each case, made once."""
    fork = TMP / f"fork-{release}"
    if fork.exists():
        return fork
    release_repository(fork, release)
    drift_server_args(fork)
    commit_everything(fork, "fork: a comment in server_args.py")
    cases = {
        "beside": [
            add_lines_above_the_deleted_write,
            add_a_line_after_the_draft_worker,
            change_the_arguments_after_server_args,
        ],
        "own-copy": [build_the_draft_from_a_copy],
        "same-line": [replace_the_blank_after_the_write],
        "after-deleted": [keep_lines_after_the_deleted_write],
        "among-deleted": [add_a_line_among_the_deleted_lines],
    }
    for branch, edits in cases.items():
        git(fork, "switch", "-q", "-c", branch, "main")
        for edit in edits:
            edit(fork)
            commit_everything(fork, f"fork: {edit.__doc__.split(':')[0]}")
    git(fork, "switch", "-q", "-c", "older-runner", "main")
    (fork / "test").mkdir()
    (fork / RUNNER).write_text(OLDER_RUNNER.replace("CPU_SUITES", '"stage-a-cpu-only"'))
    commit_everything(fork, "fork: the runner of March 2026")
    git(fork, "switch", "-q", "--orphan", "no-history")
    git(fork, "checkout", "beside", "--", ".")
    commit_everything(fork, "fork: from a tarball")
    git(fork, "switch", "-q", "main")
    return fork


def patch_message(patch: Path) -> str:
    """The commit message `git am` makes of patch, as git mailinfo reads it."""
    with tempfile.TemporaryDirectory() as folder:
        with open(patch) as mail:
            info = subprocess.run(
                ["git", "mailinfo", f"{folder}/message", f"{folder}/diff"],
                stdin=mail,
                env=ENV,
                capture_output=True,
                text=True,
            )
        subject = re.search(r"^Subject: (.*)$", info.stdout, re.M)[1]
        return f"{subject}\n\n{Path(folder, 'message').read_text()}".strip()


def applied_tree(fork: Path, start: str, patches: list[Path]) -> str:
    """The tree `git apply` of the patches onto start makes, in an index of
    its own."""
    with tempfile.TemporaryDirectory() as folder:
        env = dict(ENV, GIT_INDEX_FILE=f"{folder}/index")
        commands = [["read-tree", start], ["apply", "--cached", *map(str, patches)]]
        for command in commands + [["write-tree"]]:
            run = subprocess.run(
                ["git", *command], cwd=fork, env=env, capture_output=True, text=True
            )
            assert run.returncode == 0, run.stderr
        return run.stdout.strip()


class ForkLinesCase(CustomTestCase):
    """Clones the forks and runs git and the tool on them."""

    def clone(self, release: str, branch: str) -> Path:
        """A clone of the release's fork at branch alone (no other branch's
        objects), removed after the test."""
        folder = Path(tempfile.mkdtemp(dir=TMP, prefix=f"{branch}-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        clone = folder / "fork"
        source = fork_with_cases(release)
        url = f"file://{source}"
        git(TMP, "clone", "-q", "--single-branch", "-b", branch, url, str(clone))
        git(clone, "config", "user.name", "Fork Maintainer")
        git(clone, "config", "user.email", "fork@example.invalid")
        return clone

    def run_tool(self, fork: Path) -> subprocess.CompletedProcess:
        """Runs the tool on fork and returns the run."""
        command = [sys.executable, str(TOOL), str(fork)]
        return subprocess.run(command, env=ENV, capture_output=True, text=True)

    def git_am(self, fork: Path, release: str) -> subprocess.CompletedProcess:
        """Runs plain `git am -3` of the series on fork and returns the run."""
        patches = [str(patch) for patch in series(release)]
        return subprocess.run(
            ["git", "am", "-3", *patches],
            cwd=fork,
            env=ENV,
            capture_output=True,
            text=True,
        )

    def assert_refused_unchanged(
        self, fork: Path, run: subprocess.CompletedProcess, before: dict
    ) -> None:
        """Asserts the tool refused and left the fork as it was."""
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("nothing was changed", run.stderr)
        self.assertEqual(snapshot(fork), before)


class TestGitAmReachesItsMerge(ForkLinesCase):
    def test_git_am_merges_3way_on_a_drifted_fork_with_the_release_history(self):
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "beside")
                am = self.git_am(fork, release)
                said = am.stdout + am.stderr
                # git finds every file's base and merges 3-way, and stops only
                # where the fork changed lines beside the fix.
                self.assertNotIn("lacks necessary blobs", said)
                self.assertNotIn("invalid object", said)
                self.assertIn("Falling back to patching base and 3-way merge", said)
                self.assertIn(f"CONFLICT (content): Merge conflict in {EAGLE}", said)
                self.assertEqual(
                    git(fork, "diff", "--name-only", "--diff-filter=U").split(),
                    sorted([SCHEDULER, EAGLE]),
                )


class TestLinesBesideTheFix(ForkLinesCase):
    def test_the_tool_keeps_the_forks_lines_beside_the_fix_and_shows_them(self):
        for release in LINES:
            for branch in ("beside", "no-history"):
                with self.subTest(release=release, branch=branch):
                    fork = self.clone(release, branch)
                    start = git(fork, "rev-parse", "HEAD")
                    run = self.run_tool(fork)
                    self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                    count = len(series(release))
                    applied = f"apply: applied {count} of the {count} patches"
                    self.assertIn(applied, run.stdout)
                    if branch == "no-history":
                        self.assertIn(f"apply: gave git {release}'s", run.stdout)
                    self.assert_merged(fork, release, start, run.stdout)

    def assert_merged(self, fork: Path, release: str, start: str, said: str) -> None:
        """Asserts each file holds the fork's lines and the series' where they
        stand, and the tool showed where it merged them line by line."""
        eagle = (fork / EAGLE).read_text()
        scheduler = (fork / SCHEDULER).read_text()
        # (a): the fork's lines stand where they were; the write is gone.
        adaptive = "".join(indented("        ", ADAPTIVE))
        self.assertIn(adaptive, eagle)
        self.assertNotIn(CONTEXT_LENGTH, eagle.split(adaptive)[1][:300])
        # (b): the fork's line follows the draft worker built under the publish.
        built = re.search(
            r"\n( +)with [a-z_]+\(?[\w.]*\)?:\n(?:\1    .*\n)+", scheduler
        )
        self.assertIsNotNone(built, scheduler)
        after = scheduler[built.end() :]
        self.assertTrue(after.lstrip(" ").startswith(TRACER), after[:200])
        # (d): the fork's arguments and the series' draft copy, side by side.
        kwargs = scheduler[scheduler.index(KWARGS) :][:400]
        self.assertIn("server_args=self.draft_server_args,", kwargs)
        self.assertEqual(len(re.findall(r"=self\.fork_\w+,", kwargs)), 3, kwargs)
        self.assertIn(DRIFT, (fork / SERVER_ARGS).read_text())
        # The tool said where, and which of the fork's lines it kept.
        shown = re.findall(
            r"^apply: (\S+): resolved the conflict in (\S+) at line \d+, where your"
            r" fork and the series changed different lines: took each line from"
            r" the side that changed it and kept these of your fork's"
            r" \(review it: `.*`\):\n((?:    .*\n)+)",
            said,
            re.M,
        )
        kept = {}
        for _, path, lines in shown:
            kept[path] = kept.get(path, "") + lines
        self.assertEqual(sorted(kept), sorted([SCHEDULER, EAGLE]), said)
        self.assertIn(ADAPTIVE[0], kept[EAGLE])
        self.assertIn(TRACER, kept[SCHEDULER])
        self.assertEqual(kept[SCHEDULER].count("=self.fork_"), 3)
        # One commit per patch, with the patches' subjects.
        subjects = git(fork, "log", "--reverse", "--format=%s", f"{start}..")
        self.assertEqual(len(subjects.splitlines()), len(series(release)))


class TestRealDisagreementsAreRefused(ForkLinesCase):
    def test_a_fork_that_copies_the_config_is_told_where(self):
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "own-copy")
                before = snapshot(fork)
                run = self.run_tool(fork)
                self.assert_refused_unchanged(fork, run, before)
                copy_line = line_holding(lines_of(fork, SCHEDULER), OWN_COPY)
                number = copy_line + 1
                # Where each release builds the draft.
                function = "maybe_init_draft_worker"
                if release == "v0.5.6.post2":
                    function = "__init__"
                file = re.escape(f"{SCHEDULER} (changed in your fork too, at your")
                copy = re.escape(
                    "your fork already builds its draft from its own copy of the"
                    f" config, in {function}() at line {number}: `copy.deepcopy("
                )
                keep = re.escape(
                    "`, where the series makes one with draft_server_args_copy():"
                    " keep one)"
                )
                copies = rf"{file} lines [\d, and-]+; {copy}[\w.]+\){keep}"
                self.assertRegex(run.stderr, copies)

    def test_code_in_place_of_a_line_the_fix_deletes_is_refused_with_its_lines(
        self,
    ):
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "same-line")
                before = snapshot(fork)
                run = self.run_tool(fork)
                self.assert_refused_unchanged(fork, run, before)
                number = line_holding(lines_of(fork, EAGLE), SAME_LINE) + 1
                conflict = re.search(
                    rf"{EAGLE} \(changed in your fork too, at your lines"
                    r" ([\d, and-]+)\)",
                    run.stderr,
                )
                self.assertIsNotNone(conflict, run.stderr)
                ranges = re.findall(r"(\d+)(?:-(\d+))?", conflict[1])
                self.assertTrue(
                    any(
                        int(first) <= number <= int(last or first)
                        for first, last in ranges
                    ),
                    (number, conflict[1]),
                )
                self.assertIn("to do it by hand: ", run.stderr)


class TestLinesAfterADeletedBlock(ForkLinesCase):
    def test_the_forks_lines_right_after_the_deleted_write_are_kept_and_shown(self):
        for release in AFTER_DELETED_LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "after-deleted")
                run = self.run_tool(fork)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                count = len(series(release))
                applied = f"apply: applied {count} of the {count} patches"
                self.assertIn(applied, run.stdout)
                # The write and its comment are gone; the fork's lines stand
                # where they stood, before the draft worker's construction.
                eagle = (fork / EAGLE).read_text()
                self.assertNotIn(CONTEXT_LENGTH, eagle)
                own = "".join(indented("        ", FORKS_OWN_LINES))
                self.assertIn(f"{own}        self._draft_worker = ", eagle)
                shown = re.search(
                    rf"^apply: \S+: resolved the conflict in {EAGLE} at line \d+,"
                    r" where your fork and the series changed different lines: took"
                    r" each line from the side that changed it and kept these of your"
                    r" fork's \(review it: `.*`\):\n((?:    .*\n)+)",
                    run.stdout,
                    re.M,
                )
                self.assertIsNotNone(shown, run.stdout)
                lines = [line[4:] for line in shown[1].splitlines()]
                self.assertEqual(lines, FORKS_OWN_LINES)

    def test_a_forks_line_among_the_deleted_lines_is_refused_with_its_lines(self):
        for release in AFTER_DELETED_LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "among-deleted")
                before = snapshot(fork)
                run = self.run_tool(fork)
                self.assert_refused_unchanged(fork, run, before)
                number = line_holding(lines_of(fork, EAGLE), AMONG) + 1
                lines = re.search(
                    rf"{EAGLE} \(changed in your fork too, at your lines (\d+)-(\d+)\)",
                    run.stderr,
                )
                self.assertIsNotNone(lines, run.stderr)
                self.assertLessEqual(int(lines[1]), number)
                self.assertLessEqual(number, int(lines[2]))


class TestTheRunnersSuite(ForkLinesCase):
    def test_a_runner_without_the_series_suite_gets_its_own_in_the_commits(self):
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "older-runner")
                run = self.run_tool(fork)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                said = re.search(
                    rf"^apply: your fork's {RUNNER} has no CPU suite '([\w-]+)', which"
                    r" the shipped tests register to: the commits that add them"
                    r" register them to 'stage-a-cpu-only', its per-commit CPU suite,"
                    r" in this line of each:\n((?:    .*\n)+)",
                    run.stdout,
                    re.M,
                )
                self.assertIsNotNone(said, run.stdout)
                shown = re.findall(r"    (\S+):(\d+): (.*)", said[2])
                count = len(series(release))
                added = git(fork, "diff", "--name-only", f"HEAD~{count}", "--", "test")
                self.assertEqual([path for path, _, _ in shown], added.split())
                for path, number, line in shown:
                    text = lines_of(fork, path)[int(number) - 1]
                    self.assertEqual(text.strip(), line)
                    self.assertIn('suite="stage-a-cpu-only"', line)
                    # In the commit that adds the file.
                    commit = git(
                        fork, "log", "--format=%H", "--diff-filter=A", "--", path
                    )
                    self.assertIn(line, git(fork, "show", f"{commit}:{path}"))
                # The commits git am -3 makes, less the suite: the patches'
                # messages, and their trees but for the one line of each file.
                commits = git(fork, "rev-list", "--reverse", f"HEAD~{count}..").split()
                for commit, patch in zip(commits, series(release), strict=True):
                    message = git(fork, "log", "-1", "--format=%B", commit)
                    self.assertEqual(message, patch_message(patch))
                expected = applied_tree(fork, f"HEAD~{count}", series(release))
                changed = git(fork, "diff", "--numstat", expected, "HEAD")
                numstat = [f"1\t1\t{path}" for path, _, _ in shown]
                self.assertEqual(changed.splitlines(), numstat)

    def test_a_runner_with_the_series_suite_is_not_mentioned(self):
        for release in LINES:
            with self.subTest(release=release):
                fork = self.clone(release, "older-runner")
                suites = '"stage-a-cpu-only", "default", "stage-a-test-cpu",'
                suites += ' "base-a-test-cpu"'
                (fork / RUNNER).write_text(OLDER_RUNNER.replace("CPU_SUITES", suites))
                commit_everything(fork, "fork: the runner of every cut")
                run = self.run_tool(fork)
                self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
                self.assertNotIn("has no CPU suite", run.stdout)


if __name__ == "__main__":
    unittest.main()

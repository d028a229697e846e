r"""The apply tool takes the line whose release has the fork's machinery.

Most forks are upstream's main between two releases plus commits of their
own: no file is as a release has it, and their code mixes lines. Each test
makes such a fork from the files of a release's wheel that its series changes
(``wheel_forks.release_repository``), changed as the real forks of the apply
tool's issue were, and runs the tool on a clone::

    R  "sglang VERSION"
    |
    M  "fork: main"   a comment line on top of each file (no blob is a
                      release's), no _version.py (upstream's git has none),
                      and the case's change

The cases:

- a: main of mid-2026 with a runtime_context.py, whose config is still
  published through server_args.py's module global (v0.5.14's machinery),
  and two files as v0.5.15.post1 has them;
- b: main of May 2026: v0.5.12.post1's workers with their v1 and v2 adaptive
  switches, a scheduler that reads its ranks off v0.5.13's self.ps, and a
  runner with v0.5.13's suites;
- c: main of April 2026: v0.5.11's workers (DFLASH, the v1 adaptive
  switches) and a runner with stage-a-test-cpu;
- h: v0.5.13.post1's files plus a function of the fork's that reads v0.5.14's
  cuda_graph_bs_decode: the v0.5.14 series does not apply, its neighbour does.
"""

import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from wheel_forks import (
    ENV,
    ROOT,
    TOOL,
    commit_everything,
    git,
    make_scratch,
    release_repository,
    series,
    snapshot,
    unpacked,
)

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=40, suite="base-a-test-cpu")

SRT = "python/sglang/srt/"
SCHEDULER = SRT + "managers/scheduler.py"
EAGLE_V2 = SRT + "speculative/eagle_worker_v2.py"
VERSION_FILE = "python/sglang/_version.py"
RUNNER = "test/run_suite.py"
DRIFT = "# fork: main of 2026\n"
RELEASES = ("v0.5.11", "v0.5.12.post1", "v0.5.13.post1", "v0.5.14", "v0.5.15.post1")


def setUpModule() -> None:
    """Makes the scratch folder."""
    global TMP
    TMP = make_scratch("line-choice-", RELEASES)


def tearDownModule() -> None:
    """Removes the scratch folder."""
    shutil.rmtree(TMP, ignore_errors=True)


def the_tool():
    """The apply tool as a module, for its table of machinery."""
    spec = importlib.util.spec_from_file_location("apply_to_fork", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def every_release() -> list[str]:
    """Every release whose package the set-up unpacked, v0.5.16 with them."""
    releases = [path.name for path in (ROOT / ".build" / "releases").iterdir()]
    return releases + ["v0.5.16"]


def changed_by(release: str) -> list[str]:
    """The files under python/ the release's series changes."""
    paths = []
    for patch in series(release):
        paths += re.findall(r"^diff --git a/(python/\S+) b/", patch.read_text(), re.M)
    return sorted(set(paths))


def write_runner(fork: Path, *suites: str) -> None:
    """A test/run_suite.py whose per-commit CPU suites are suites."""
    listed = ", ".join(repr(suite) for suite in suites)
    runner = f"PER_COMMIT_SUITES = {{\n    HWBackend.CPU: [{listed}],\n}}\n"
    (fork / "test").mkdir(exist_ok=True)
    (fork / RUNNER).write_text(runner)


def edit(fork: Path, path: str, old: str, new: str) -> None:
    """Replaces old with new in the fork's file, where old must be."""
    text = (fork / path).read_text()
    assert old in text, (path, old)
    (fork / path).write_text(text.replace(old, new))


def main_of(release: str, name: str, change) -> Path:
    """The release's repository, and a commit on it as upstream's main has
    the files (a comment line on top of each, no _version.py) with the case's
    change."""
    fork = TMP / name
    release_repository(fork, release)
    for path in changed_by(release):
        if (fork / path).is_file():
            (fork / path).write_text(DRIFT + (fork / path).read_text())
    (fork / VERSION_FILE).unlink()
    change(fork)
    commit_everything(fork, "fork: main")
    return fork


def main_of_mid_2026(fork: Path) -> None:
    """Case a: two workers as v0.5.15.post1 has them."""
    for name in ("standalone_worker_v2.py", "multi_layer_eagle_worker_v2.py"):
        source = unpacked("v0.5.15.post1") / "sglang" / "srt" / "speculative" / name
        shutil.copy(source, fork / SRT / "speculative" / name)


def main_of_may_2026(fork: Path) -> None:
    """Case b: the draft's ranks from self.ps, and v0.5.13's runner."""
    text = (fork / SCHEDULER).read_text()
    start = text.index("draft_worker_kwargs = dict(")
    end = text.index(")", start)
    kwargs = re.sub(r"=self\.(gpu_id|\w+_rank),", r"=self.ps.\1,", text[start:end])
    (fork / SCHEDULER).write_text(text[:start] + kwargs + text[end:])
    write_runner(fork, "base-a-test-cpu", "base-b-test-cpu")


def main_of_april_2026(fork: Path) -> None:
    """Case c: v0.5.11's files, and the runner of April 2026."""
    write_runner(fork, "stage-a-test-cpu")


def v0_5_14_code_of_the_forks_own(fork: Path) -> None:
    """Case h: a function of the fork's that reads v0.5.14's field."""
    function = "def fork_decode_batch_sizes(server_args):\n"
    function += "    return server_args.cuda_graph_bs_decode\n"
    with open(fork / EAGLE_V2, "a") as file:
        file.write(f"\n\n{function}")


class LineChoiceCase(CustomTestCase):
    """Clones the forks and runs the tool on them."""

    def clone(self, source: Path) -> Path:
        """A clone of source, removed after the test."""
        folder = Path(tempfile.mkdtemp(dir=TMP, prefix=f"{source.name}-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        clone = folder / "fork"
        git(TMP, "clone", "-q", str(source), str(clone))
        git(clone, "config", "user.name", "Fork Maintainer")
        git(clone, "config", "user.email", "fork@example.invalid")
        return clone

    def run_tool(self, fork: Path, *flags: str) -> subprocess.CompletedProcess:
        """Runs the tool on fork and returns the run."""
        command = [sys.executable, str(TOOL), *flags, str(fork)]
        return subprocess.run(command, env=ENV, capture_output=True, text=True)

    def assert_applied(self, run, fork: Path, release: str) -> None:
        """Asserts the tool applied the release's series: a commit a patch, each
        with the series' Applies-To trailer."""
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        count = len(series(release))
        self.assertIn(f"apply: applied {count} of the {count} patches", run.stdout)
        trailer = re.search(
            r"^Applies-To: (.*)$", series(release)[-1].read_text(), re.M
        )
        applies_to = "%(trailers:key=Applies-To,valueonly)"
        log = git(fork, "log", f"--format={applies_to}", f"HEAD~{count}..")
        self.assertEqual(log.split("\n\n"), [trailer[1]] * count)


class TestTheMachineryNamesTheLine(LineChoiceCase):
    def test_each_piece_of_machinery_is_in_exactly_the_releases_it_names(self):
        tool = the_tool()
        for release in every_release():
            for machinery in tool.MACHINERY:
                with self.subTest(release=release, what=machinery.what):
                    path = unpacked(release) / machinery.path[len("python/") :]
                    there = path.is_file() and machinery.code in path.read_text()
                    self.assertEqual(there, machinery.in_release(release))

    def test_main_that_publishes_through_the_module_global_takes_v0_5_14(self):
        # Two of the seven files the v0.5.15.post1 series changes are as that
        # release has them, none as v0.5.14 has them: blobs do not decide.
        fork = self.clone(main_of("v0.5.14", "mid-2026", main_of_mid_2026))
        plain_git = self.clone(fork)
        run = self.run_tool(fork)
        self.assert_applied(run, fork, "v0.5.14")
        said = run.stdout.splitlines()[0]
        self.assertIn(f"{fork} is on the v0.5.14 line: its code has v0.5.14's", said)
        self.assertIn("(the config published in server_args.py's module global", said)
        self.assertIn("; 0 of 7 files the v0.5.14 series changes are", said)
        # The commits plain `git am -3` makes.
        git(plain_git, "am", "-3", *map(str, series("v0.5.14")))
        self.assertEqual(git(fork, "write-tree"), git(plain_git, "write-tree"))

    def test_main_with_v0_5_13s_ranks_and_v2_adaptive_switches_takes_v0_5_12_post1(
        self,
    ):
        # v0.5.11's series would leave the v2 workers' adaptive switches on the
        # draft's copy alone: it is not tried.
        fork = self.clone(main_of("v0.5.12.post1", "may-2026", main_of_may_2026))
        before = snapshot(fork)
        checked = self.run_tool(fork, "--check")
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertEqual(snapshot(fork), before)
        would = (
            f"would resolve the conflict in {SCHEDULER} at line \\d+, where your fork"
        )
        would += " and the series changed different lines: would take each line from"
        would += " the side that changed it and keep these of your fork's:\n    "
        self.assertRegex(checked.stdout, would)
        run = self.run_tool(fork)
        self.assert_applied(run, fork, "v0.5.12.post1")
        said = run.stdout.splitlines()[0]
        self.assertEqual(checked.stdout.splitlines()[0], said)
        line = f"{fork} is closest to the v0.5.12/v0.5.12.post1 line: its code has"
        self.assertIn(line, said)
        self.assertIn("the v1 EAGLEWorker's adaptive switches, EAGLEWorkerV2's", said)
        self.assertIn("but differs from it: has the scheduler's self.ps (from", said)
        self.assertNotIn("v0.5.11", run.stdout + checked.stdout)
        # The fork's ranks beside the draft's copy: merged line by line.
        kept = "took each line from the side that changed it and kept these"
        self.assertIn(f"resolved the conflict in {SCHEDULER} at line", run.stdout)
        self.assertIn(kept, run.stdout)
        self.assertIn("    gpu_id=self.ps.gpu_id,\n", run.stdout)
        kwargs = (fork / SCHEDULER).read_text().split("draft_worker_kwargs = dict(")[1]
        self.assertIn("server_args=self.draft_server_args,", kwargs[:400])
        self.assertEqual(kwargs[:400].count("=self.ps."), 6)

    def test_an_april_2026_fork_with_v1_adaptive_switches_takes_v0_5_11(self):
        fork = self.clone(main_of("v0.5.11", "april-2026", main_of_april_2026))
        run = self.run_tool(fork)
        self.assert_applied(run, fork, "v0.5.11")
        said = run.stdout.splitlines()[0]
        self.assertIn(f"{fork} is on the v0.5.11 line: its code has v0.5.11's", said)
        self.assertIn("Scheduler.maybe_init_draft_worker(), the v1 EAGLEWorker's", said)

    def test_where_the_lines_series_conflicts_a_neighbouring_line_is_taken(self):
        fork = main_of("v0.5.13.post1", "v0.5.14-code", v0_5_14_code_of_the_forks_own)
        fork = self.clone(fork)
        run = self.run_tool(fork)
        self.assert_applied(run, fork, "v0.5.13.post1")
        self.assertIn(f"{fork} is on the v0.5.14 line: ", run.stdout.splitlines()[0])
        why = re.search(
            r"^apply: the v0\.5\.14 series conflicts in (.*); the v0\.5\.13\.post1"
            r" series, of a neighbouring line with as much of the fork's machinery,"
            r" applies$",
            run.stdout,
            re.M,
        )
        self.assertIsNotNone(why, run.stdout)
        self.assertIn(EAGLE_V2, why[1])
        self.assertIn("fork_decode_batch_sizes", (fork / EAGLE_V2).read_text())


class TestMachineryAloneNamesEachReleasesLine(LineChoiceCase):
    def test_a_fork_of_each_release_with_no_file_as_released_is_on_its_line(self):
        # The tool's own comparison, on each release's whole package with no
        # blob to go by: what a fork of it drifted in every file shows.
        tool = the_tool()
        every = tool.load_every_series()

        class Package(tool.Fork):
            def text(self, path, rev=""):
                file = self.top / path[len("python/") :]
                return file.read_text() if file.is_file() else ""

            def output(self, command, *args, input=None):
                return ""

        for release in every_release():
            with self.subTest(release=release):
                package = Package(unpacked(release), "main", "HEAD")
                first = tool.compare_lines(package, every)[0]
                self.assertIn(release, first.series.releases)
                self.assertEqual(first.differences, [])


if __name__ == "__main__":
    unittest.main()

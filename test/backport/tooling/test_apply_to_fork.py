r"""scripts/fork/apply_to_fork.py on real git repositories.

There is a test for each row of the apply tool's message table, and tests for
the way to v0.5.17. Every refusal must leave the fork as
it was: HEAD, branch, index, every file (untracked ones too), stash and
worktrees (``snapshot``).

The repositories, oldest commit first. The release, made once for the module
from .build/pristine (``release_repository``)::

    A  "sglang 0.5.16"                                   <- main, tag v0.5.16
       python/sglang/: the files the series changes, __init__.py, version.py,
       _version.py and srt/model_executor/model_runner.py (with full=True: the
       whole package)

A fork is a clone of it, plus the commits a test makes (``fork_of_the_release``);
the series comes by the tool or by ``git am``::

    A --- (the test's own commits) --- P1 P2 P3 P4       <- main

An imported fork has no upstream history (``imported_fork``): its one commit
holds the release's files with server_args.py and multi_layer_eagle_worker_v2.py
edited, so git lacks v0.5.16's copy of those two, the bases of a 3-way merge::

    I  "fork: imported"                                  <- main

A fork caught in a git operation (``fork_with_two_branches``)::

    A --- M  "main", version.py "# main"                 <- main
     \
      O  "other", version.py "# other"                   <- other

The way to v0.5.17 (``fork_on_the_way_to_v0_5_17``), F0 and F1 being the fork's
own commits::

    A --- F0 --- P1 P2 P3 P4 --- F1                      <- main
     \
      U  "sglang 0.5.17", the wheel's python/sglang/     <- v0.5.17

The older revision of the series is this repository's patches/ at OLD_SERIES,
Backport-Revision 2.

The other release lines (``TestReleaseLines``): a release repository made the
same way from .build/releases/vVERSION (``fork_of``), with the files every
series changes, and forks cloned from it::

    R  "sglang VERSION"                                  <- main, tag vVERSION

A fresh clone of this repository (``fresh_clone``) is a copy of its scripts/
and patches/, without .build/: what a fork maintainer has. pip runs with no
configuration and the package index refused (``PIP_NO_INDEX``); a test that
lets pip download a wheel points it at .build/wheels (``WHEEL_INDEX``).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path
from typing import Optional

from wheel_forks import ENV, ROOT, TOOL, git, make_scratch, snapshot, unpacked

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=100, suite="base-a-test-cpu")

SERIES = sorted((ROOT / "patches" / "v0.5.16").glob("*.patch"))
# The v0.5.15 line's series (v0.5.15 and v0.5.15.post1), and every series.
LINE_SERIES = sorted((ROOT / "patches" / "v0.5.15.post1").glob("*.patch"))
EVERY_SERIES = sorted((ROOT / "patches").glob("v*/*.patch"))
PRISTINE = ROOT / ".build" / "pristine"
RELEASES = ROOT / ".build" / "releases"
WHEELS = ROOT / ".build" / "wheels"
# pip's settings where the package index serves the wheels setup.sh downloaded.
WHEEL_INDEX = {"PIP_FIND_LINKS": str(WHEELS)}
UPSTREAM_REPO = "https://github.com/sgl-project/sglang"
OLD_SERIES = "1db19c3"  # a commit of this repository with Backport-Revision 2

SERVER_ARGS = "python/sglang/srt/server_args.py"
RUNTIME_CONTEXT = "python/sglang/srt/runtime_context.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
EAGLE = "python/sglang/srt/speculative/eagle_worker_v2.py"
STANDALONE = "python/sglang/srt/speculative/standalone_worker_v2.py"
MULTI_LAYER = "python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py"
DRAFT_WORKER_COMMON = "python/sglang/srt/speculative/draft_worker_common.py"
FROZEN_KV_MTP = "python/sglang/srt/speculative/frozen_kv_mtp_worker_v2.py"
VERSION = "python/sglang/version.py"
VERSION_FILE = "python/sglang/_version.py"
OLD_VERSION_FILE = "python/sglang/version.py"
INIT = "python/sglang/__init__.py"

# Where a patched fork's merge of v0.5.17 conflicts.
V0_5_17_CONFLICTS = [SCHEDULER, EAGLE, DRAFT_WORKER_COMMON, FROZEN_KV_MTP]
# Upstream's own fix: the file under python/sglang/srt/, and the function.
UPSTREAM_FIXES = {
    "speculative/draft_worker_common.py": "draft_server_args_copy",
    "model_executor/model_runner.py": "_resolve_draft_load_format",
}
# The fork's own commits on the way to v0.5.17: the file each adds.
FORKS_OWN_FILES = {
    "FORK_NOTES.md": "our notes\n",
    "python/sglang/fork_local.py": "X = 1\n",
}
# git hooks of the fork, for the tests of what git refuses.
REFUSING_HOOK = "#!/bin/sh\necho 'fork policy: no' >&2\nexit 1\n"
BRANCH_UPDATE_REFUSING_HOOK = """#!/bin/sh
[ "$1" = prepared ] || exit 0
grep -q refs/heads/ || exit 0
echo no >&2
exit 1
"""


def setUpModule() -> None:
    """Makes the scratch folder and the release repository."""
    global TMP, RELEASE
    TMP = make_scratch("apply-to-fork-", ["v0.5.16"])
    RELEASE = release_repository(TMP / "release", files_the_tests_need())


def tearDownModule() -> None:
    """Removes the scratch folder."""
    shutil.rmtree(TMP, ignore_errors=True)


def commit_everything(repo: Path, message: str) -> None:
    """Commits every change in repo, new files too."""
    git(repo, "add", "-A")
    identity = ["-c", "user.name=Fork", "-c", "user.email=fork@example.invalid"]
    git(repo, *identity, "commit", "-q", "--allow-empty", "-m", message)


def write(path: Path, text: str, mode: Optional[int] = None) -> None:
    """Writes text to path, making its folders, and sets its mode if given."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


def files_the_tests_need() -> set[str]:
    """The files under python/sglang/ the series change, those the tests read, and
    the wheel's _version.py."""
    files = {"__init__.py", "version.py", "srt/model_executor/model_runner.py"}
    files.add("_version.py")
    for patch in EVERY_SERIES:
        diff = r"^diff --git a/python/sglang/(\S+) b/"
        files |= set(re.findall(diff, patch.read_text(), re.M))
    return files


def release_repository(
    path: Path,
    files: Optional[set[str]] = None,
    unpacked: Path = PRISTINE,
    tag: str = "v0.5.16",
) -> Path:
    """Commit A: the release's files (all of them without files), tagged v0.5.16;
    or commit R, another release's, from its unpacked package."""
    package = path / "python" / "sglang"
    release = unpacked / "sglang"
    if files is None:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(release, package, ignore=ignore)
    for name in sorted(files or ()):
        if (release / name).is_file():
            (package / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(release / name, package / name)
    git(path, "init", "-q", "-b", "main")
    commit_everything(path, f"sglang {tag[1:]}")
    git(path, "tag", tag)
    return path


def files_as_in(release: str, series: str) -> list[str]:
    """The files under python/ the series (its folder's name) changes that are in
    release as in the release the series was made on."""
    patches = sorted((ROOT / "patches" / series).glob("*.patch"))
    same = []
    for path in files_changed_by(patches):
        ours, theirs = [unpacked(r) / path[len("python/") :] for r in (release, series)]
        if ours.read_bytes() == theirs.read_bytes():
            same.append(path)
    return same


def files_changed_by(patches: list[Path]) -> list[str]:
    """The files under python/ the patches change (not those they create)."""
    pattern = r"^diff --git a/(python/\S+) b/\S+\n(?!new file mode)"
    changed = []
    for patch in patches:
        for path in re.findall(pattern, patch.read_text(), re.M):
            if path not in changed:
                changed.append(path)
    return changed


def files_created_by(patches: list[Path]) -> list[str]:
    """The files the patches create, in order."""
    pattern = r"^diff --git a/\S+ b/(\S+)\nnew file mode"
    created = []
    for patch in patches:
        created += re.findall(pattern, patch.read_text(), re.M)
    return created


def backport_revision(patches: list[Path]) -> str:
    """The Backport-Revision trailer of the first patch."""
    trailer = r"^Backport-Revision: (\S+)$"
    return re.findall(trailer, patches[0].read_text(), re.M)[0]


REVISION = backport_revision(SERIES)


def first_hunk(path: str, series: list[Path] = SERIES) -> tuple[int, list[str]]:
    """The 0-based line of the release's path where the series' first hunk there
    starts, and that hunk's leading context lines."""
    for patch in series:
        header = rf"^diff --git a/{re.escape(path)} (?s:.*?)^@@ -(\d+).*\n((?: .*\n)*)"
        hunk = re.search(header, patch.read_text(), re.M)
        if hunk is not None:
            return int(hunk[1]) - 1, hunk[2].splitlines()
    raise AssertionError(f"the series does not change {path}")


def add_note_to_a_changed_line(fork: Path, path: str, note: str) -> None:
    """Adds a comment to the first line the series changes in path: a conflict in
    comments only."""
    start, context = first_hunk(path)
    lines = (fork / path).read_text().splitlines(True)
    changed = start + len(context)
    lines[changed] = lines[changed].rstrip("\n") + f"  {note}\n"
    (fork / path).write_text("".join(lines))


def add_note_inside_the_context(
    fork: Path, path: str, note: str, series: list[Path] = SERIES
) -> None:
    """Adds a comment line inside the leading context of the series' first hunk in
    path: `git apply` fails there, and a 3-way merge takes it."""
    start, _ = first_hunk(path, series)
    lines = (fork / path).read_text().splitlines(True)
    indentation = re.match(r"[ \t]*", lines[start + 1])[0]
    lines.insert(start + 1, f"{indentation}{note}\n")
    (fork / path).write_text("".join(lines))


def older_series() -> list[Path]:
    """Backport-Revision 2 of the series, read from this repository's history."""
    listing = git(ROOT, "ls-tree", "--name-only", OLD_SERIES, "patches/", check=False)
    if not listing:
        raise unittest.SkipTest(f"needs this repository's history ({OLD_SERIES})")
    folder = Path(tempfile.mkdtemp(dir=TMP, prefix="older-series-"))
    for name in listing.splitlines():
        if name.endswith(".patch"):
            text = git(ROOT, "show", f"{OLD_SERIES}:{name}") + "\n"
            (folder / Path(name).name).write_text(text)
    return sorted(folder.glob("*.patch"))


def am(fork: Path, patches: list[Path], how: str = "am -3") -> None:
    """Applies patches in fork with `git am -3`, or with the git command given."""
    git(fork, *how.split(), *[str(patch) for patch in patches])


def commands_in(text: str) -> list[str]:
    """The commands a message prints: in backticks, or on an indented line."""
    commands = re.findall(r"`([^`]+)`", text)
    for line in text.splitlines():
        if line.startswith("    "):
            commands.append(line.strip())
    return commands


class ForkCase(CustomTestCase):
    """Builds forks and runs the tool on them."""

    def scratch_folder(self) -> Path:
        """A new folder under the module's scratch folder, removed after the test."""
        folder = Path(tempfile.mkdtemp(dir=TMP, prefix=f"{self._testMethodName}-"))
        self.addCleanup(shutil.rmtree, folder, ignore_errors=True)
        return folder

    def fork_of_the_release(
        self, name: str = "fork", full: bool = False, source: Optional[Path] = None
    ) -> Path:
        """A clone of the release (of the whole package with full, or of source),
        with a committer of its own."""
        if source is None:
            source = RELEASE
        if full:
            source = TMP / "full-release"
            if not source.exists():
                release_repository(source)
        fork = self.scratch_folder() / name
        fork.parent.mkdir(parents=True, exist_ok=True)
        git(TMP, "clone", "-q", "--shared", str(source), str(fork))
        git(fork, "config", "user.name", "Fork Maintainer")
        git(fork, "config", "user.email", "fork@example.invalid")
        return fork

    def fork_of(self, release: str) -> Path:
        """A clone of another release's repository (commit R), made once."""
        source = TMP / f"release-{release}"
        if not source.exists():
            unpacked = RELEASES / release
            if not (unpacked / "sglang").is_dir():
                self.fail(f"{unpacked} is missing; run scripts/dev/setup.sh")
            release_repository(source, files_the_tests_need(), unpacked, release)
        return self.fork_of_the_release(source=source)

    def imported_fork(self, without: tuple[str, ...] = ()) -> Path:
        """Commit I: the release's files, two of them edited, with no history
        before; without: files it does not have at all."""
        fork = self.fork_of_the_release()
        shutil.rmtree(fork / ".git")
        git(fork, "init", "-q", "-b", "main")
        git(fork, "config", "user.name", "Fork Maintainer")
        git(fork, "config", "user.email", "fork@example.invalid")
        for path in (SERVER_ARGS, MULTI_LAYER):
            add_note_inside_the_context(fork, path, "# fork: imported")
        for path in without:
            (fork / path).unlink()
        commit_everything(fork, "fork: imported")
        return fork

    def fork_with_two_branches(self) -> Path:
        """Commits M on main and O on other, both changing version.py."""
        fork = self.fork_of_the_release()
        git(fork, "switch", "-q", "-c", "other")
        for branch in ("other", "main"):
            git(fork, "switch", "-q", branch)
            write(fork / VERSION, f"# {branch}\n")
            commit_everything(fork, branch)
        return fork

    def copy_of_this_project(self, patches: list[Path] = SERIES) -> Path:
        """This project's tool with other patches as the v0.5.16 series; returns
        the tool's path in the copy."""
        root = self.scratch_folder() / "project"
        tool = root / "scripts" / "fork" / TOOL.name
        write(tool, TOOL.read_text())
        (root / "patches" / "v0.5.16").mkdir(parents=True)
        for patch in patches:
            write(root / "patches" / "v0.5.16" / patch.name, patch.read_text())
        return tool

    def fresh_clone(self) -> Path:
        """This project's scripts/ and patches/, without .build/; returns the
        tool's path in it."""
        root = self.scratch_folder() / "clone"
        ignore = shutil.ignore_patterns("__pycache__")
        for folder in ("scripts", "patches"):
            shutil.copytree(ROOT / folder, root / folder, ignore=ignore)
        return root / TOOL.relative_to(ROOT)

    def run_tool(
        self,
        fork: Path,
        *flags: str,
        tool: Path = TOOL,
        env: Optional[dict[str, str]] = None,
    ) -> subprocess.CompletedProcess:
        """Runs the tool on fork and returns the run."""
        command = [sys.executable, str(tool), *flags, str(fork)]
        run_env = dict(ENV)
        run_env.update(env or {})
        return subprocess.run(command, env=run_env, capture_output=True, text=True)

    def assert_refused(
        self,
        fork: Path,
        *needles: str,
        flags: tuple[str, ...] = (),
        tool: Path = TOOL,
        env: Optional[dict[str, str]] = None,
    ) -> subprocess.CompletedProcess:
        """Asserts the tool refuses, saying each needle, and changes nothing."""
        before = snapshot(fork)
        run = self.run_tool(fork, *flags, tool=tool, env=env)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertTrue(run.stderr.startswith("apply: error: "), run.stderr)
        for needle in needles:
            self.assertIn(needle, run.stderr)
        self.assertEqual(snapshot(fork), before)
        return run

    def assert_nothing_to_do(
        self, fork: Path, *needles: str, flags: tuple[str, ...] = ()
    ) -> None:
        """Asserts the tool says there is nothing to do, saying each needle, and
        changes nothing."""
        before = snapshot(fork)
        run = self.run_tool(fork, *flags)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for needle in ("; nothing to do", *needles):
            self.assertIn(needle, run.stdout)
        self.assertEqual(snapshot(fork), before)

    def assert_done(
        self,
        run: subprocess.CompletedProcess,
        fork: Path,
        said: str = f"applied {len(SERIES)} of the",
    ) -> None:
        """Asserts the run succeeded, said so, and left a clean fork with no trial."""
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"apply: {said}", run.stdout)
        self.assertEqual(git(fork, "status", "--porcelain", "-uno"), "")
        self.assertEqual(len(git(fork, "worktree", "list").splitlines()), 1)

    def run_printed_command(
        self, text: str, start: str, env: Optional[dict[str, str]] = None
    ) -> subprocess.CompletedProcess:
        """Runs the first command text prints that starts with start."""
        for command in commands_in(text):
            if command.startswith(start):
                return subprocess.run(
                    ["bash", "-c", command],
                    env=env or ENV,
                    capture_output=True,
                    text=True,
                )
        self.fail(f"no command starting {start!r} in:\n{text}")


class TestApplying(ForkCase):
    def test_it_makes_the_commits_git_am_makes_on_the_forks_branch(self) -> None:
        fork = self.fork_of_the_release(full=True)
        by_hand = self.fork_of_the_release(full=True)
        git(fork, "switch", "-q", "-c", "my-fork")
        start = git(fork, "rev-parse", "HEAD")
        run = self.run_tool(fork)
        self.assert_done(run, fork)
        self.assertEqual(git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(git(fork, "rev-parse", "ORIG_HEAD"), start)
        self.assertIn(f"git reset --hard {start[:12]}", run.stdout)
        # git made the move, and its reflog names the tool.
        moved = git(fork, "reflog", "-1", "--format=%gs", "my-fork")
        self.assertEqual(moved, "apply_to_fork.py: Fast-forward")
        am(by_hand, SERIES)
        for args in (["log", "--format=%an %ae %B", f"{start}.."], ["write-tree"]):
            self.assertEqual(git(fork, *args), git(by_hand, *args))

    def test_the_printed_command_runs_the_shipped_tests_on_the_forks_sglang(
        self,
    ) -> None:
        fork = self.fork_of_the_release(full=True)
        run = self.run_tool(fork)
        self.assert_done(run, fork)
        for path in files_created_by(SERIES):
            shipped = path.startswith("test/registered/") and "/test_" in path
            self.assertEqual(shipped, path in run.stdout, path)
        env = {}
        for name, value in ENV.items():
            if not name.startswith("PYTEST_"):
                env[name] = value
        env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        prefix = f"cd {fork} && PYTHONPATH=python python3"
        tests = self.run_printed_command(run.stdout, f"{prefix} -m pytest", env)
        self.assertRegex(tests.stdout, r"\d+ passed", tests.stdout[-3000:])
        # The same command, asked where sglang comes from: the fork's own tree.
        where = "-c 'import sglang; print(sglang.__file__)' #"
        asked = run.stdout.replace("-m pytest", where)
        imported = self.run_printed_command(asked, f"{prefix} -c", env)
        self.assertEqual(imported.stdout.strip(), str(fork / INIT))

    def test_a_fork_that_drifted_near_the_patches_gets_them_merged_3way(self) -> None:
        for present in (0, 1, len(SERIES) - 1):  # patches the fork has already
            with self.subTest(present=present):
                fork = self.fork_of_the_release()
                add_note_inside_the_context(fork, SCHEDULER, "# fork: a local note")
                commit_everything(fork, "fork: a note near the backport")
                if present:
                    am(fork, SERIES[:present])
                # --check says what applying does, and changes nothing.
                before = snapshot(fork)
                checked = self.run_tool(fork, "--check")
                self.assertEqual(checked.returncode, 0, checked.stderr)
                self.assertEqual(snapshot(fork), before)
                run = self.run_tool(fork)
                rest = len(SERIES) - present
                self.assert_done(run, fork, f"applied {rest} of the {len(SERIES)}")
                said = run.stdout.splitlines()[0]
                self.assertEqual(checked.stdout.splitlines()[0], said)
                count = f"{rest} of the {len(SERIES)} patches"
                would = f"would apply {count} to branch main of {fork}; nothing was"
                self.assertIn(f"apply: {would} changed (--check)\n", checked.stdout)
                would = (
                    f"would be merged 3-way with your fork's changes: {SERIES[1].name}"
                )
                self.assertEqual(would in checked.stdout, present < 2)
                subjects = git(fork, "log", "--format=%s", f"HEAD~{rest}..")
                for subject in subjects.splitlines():
                    self.assertIn(subject, run.stdout)
                # The note is in patch 0002's context: the tool merged it 3-way
                # unless git am -3 above did.
                merged = f"merged 3-way with your fork's changes: {SERIES[1].name}"
                self.assertEqual(merged in run.stdout, present < 2)
                self.assertIn("# fork: a local note", (fork / SCHEDULER).read_text())
                self.assert_nothing_to_do(
                    fork, "every patch", "; merged with your changes: "
                )

    def test_merge_bases_the_forks_history_lacks_come_from_the_release(self) -> None:
        fork = self.imported_fork()
        by_hand = self.imported_fork()
        # git am -3 alone cannot merge: the fork's history lacks the bases.
        patches = [str(patch) for patch in SERIES]
        plain_am = subprocess.run(
            ["git", "am", "-3", *patches],
            cwd=by_hand,
            env=ENV,
            capture_output=True,
            text=True,
        )
        self.assertRegex(plain_am.stderr, "lacking or useless|lacks necessary blobs")
        run = self.run_tool(fork)
        self.assert_done(run, fork)
        # This repository's set-up downloaded the wheel: no pip run.
        self.assertNotIn("downloading", run.stdout)
        gave = "gave git v0.5.16's 2 file(s) to merge 3-way (objects only), from "
        self.assertIn(f"{gave}.build/wheels/sglang-0.5.16-", run.stdout)
        self.assertIn("# fork: imported", (fork / SERVER_ARGS).read_text())

    def test_on_a_fresh_clone_pip_downloads_the_wheel_for_the_merge_bases_once(
        self,
    ) -> None:
        tool = self.fresh_clone()
        fork = self.imported_fork()
        run = self.run_tool(fork, tool=tool, env=WHEEL_INDEX)
        self.assert_done(run, fork)
        lacks = "the fork's history lacks v0.5.16's copy of 2 file(s); downloading"
        self.assertIn(f"apply: {lacks} the sglang 0.5.16 wheel with pip\n", run.stdout)
        gave = "gave git v0.5.16's 2 file(s) to merge 3-way (objects only), from "
        self.assertIn(f"{gave}.build/wheels/sglang-0.5.16-", run.stdout)
        self.assertIn("# fork: imported", (fork / SERVER_ARGS).read_text())
        # The wheel stays in the clone's .build/wheels/: with the index refused, a
        # second fork takes it from there.
        wheels = [path.name for path in (tool.parents[2] / ".build/wheels").iterdir()]
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0], r"^sglang-0\.5\.16-.*\.whl$")
        second = self.imported_fork()
        run = self.run_tool(second, tool=tool)
        self.assert_done(run, second)
        self.assertNotIn("downloading", run.stdout)
        self.assertIn(gave, run.stdout)

    def test_with_the_package_index_refused_the_git_fetch_way_is_named(self) -> None:
        tool = self.fresh_clone()
        fork = self.imported_fork()
        fetch = f"cd {fork} && git fetch {UPSTREAM_REPO} v0.5.16"
        run = self.assert_refused(
            fork,
            f"the history of {fork} lacks v0.5.16's copy of {SERVER_ARGS}, ",
            "which git needs to merge 3-way, and pip could not download sglang==0.5.16",
            f"; get them with git (`{fetch}`) and run this again; nothing was changed",
            "\n    ERROR: ",
            tool=tool,
        )
        # The printed way works: upstream's tag (here the release repository, which
        # holds the release's files) gives git the bases, and nothing is downloaded.
        local = self.run_printed_command(
            run.stderr.replace(UPSTREAM_REPO, str(RELEASE)), f"cd {fork} && git fetch"
        )
        self.assertEqual(local.returncode, 0, local.stderr)
        run = self.run_tool(fork, tool=tool)
        self.assert_done(run, fork)
        self.assertNotIn("downloading", run.stdout)
        self.assertNotIn("gave git", run.stdout)

    def test_without_pip_the_git_fetch_way_is_named(self) -> None:
        tool = self.fresh_clone()
        fork = self.imported_fork()
        no_pip = self.scratch_folder() / "no-pip"
        venv = [sys.executable, "-m", "venv", "--without-pip", str(no_pip)]
        subprocess.run(venv, check=True, capture_output=True)
        python = no_pip / "bin" / "python"
        before = snapshot(fork)
        command = [str(python), str(tool), str(fork)]
        run = subprocess.run(command, env=ENV, capture_output=True, text=True)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn("pip could not download sglang==0.5.16", run.stderr)
        self.assertIn(f"git fetch {UPSTREAM_REPO} v0.5.16", run.stderr)
        self.assertIn("No module named pip", run.stderr)
        self.assertEqual(snapshot(fork), before)

    def test_a_base_the_wheel_lacks_too_is_named_with_the_git_fetch_way(
        self,
    ) -> None:
        fork = self.imported_fork()
        # The fork's wheel cache: this repository's v0.5.16 wheel without
        # server_args.py.
        tool = self.fresh_clone()
        cache = tool.parents[2] / ".build" / "wheels"
        wheel = sorted(WHEELS.glob("sglang-0.5.16-*.whl"))[0]
        cache.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as source:
            with zipfile.ZipFile(cache / wheel.name, "w") as copy:
                for name in ("sglang/srt/speculative/multi_layer_eagle_worker_v2.py",):
                    copy.writestr(name, source.read(name))
        fetch = f"`cd {fork} && git fetch {UPSTREAM_REPO} v0.5.16`"
        lacking = (
            f"lacks v0.5.16's copy of {SERVER_ARGS}, which git needs to merge 3-way"
        )
        wheel = (
            f"and .build/wheels/{wheel.name} lacks it too; get them with git ({fetch})"
        )
        self.assert_refused(fork, lacking, wheel, tool=tool)

    def test_a_second_run_has_nothing_to_do(self) -> None:
        fork = self.fork_of_the_release()
        # The fork's own release tag must not count: the tool reads the code.
        write(fork / VERSION, '__version__ = "1.0.0"\n')
        commit_everything(fork, "release 1.0.0 of our fork")
        git(fork, "tag", "v1.0.0")
        self.assert_done(self.run_tool(fork), fork)
        self.assert_nothing_to_do(
            fork, "already patched", "has every patch of this backport"
        )

    def test_the_fix_edited_after_applying_is_already_patched(self) -> None:
        fork = self.fork_of_the_release()
        self.assert_done(self.run_tool(fork), fork)
        text = (fork / SERVER_ARGS).read_text()
        helper = r"def draft_server_args_copy\(.*\n\s+\"\"\"(.*)\n"
        docstring = re.search(helper, text)[1]
        write(fork / SERVER_ARGS, text.replace(docstring, "Our own revision."))
        commit_everything(fork, "fork: our own revision of the backport")
        self.assert_nothing_to_do(fork, "already patched", "in another revision than")

    def test_an_older_revision_squashed_without_trailers_is_already_patched(
        self,
    ) -> None:
        fork = self.fork_of_the_release()
        am(fork, older_series(), how="apply --index")
        commit_everything(fork, "fork: the draft ServerArgs fix, squashed")
        self.assert_nothing_to_do(fork, "already patched", "in another revision than")

    def test_upstreams_fix_is_recognised_from_its_code(self) -> None:
        for path, function in UPSTREAM_FIXES.items():
            with self.subTest(path=path):
                fork = self.fork_of_the_release()
                source = fork / "python/sglang/srt" / path
                code = f"\n\ndef {function}(*args):\n    pass\n"
                write(source, source.read_text() + code)
                commit_everything(fork, "upstream: its own fix")
                self.assert_nothing_to_do(
                    fork, "already fixed upstream", f"{function}() in {path}"
                )

    def test_an_older_revision_is_told_to_revert_then_apply(self) -> None:
        fork = self.fork_of_the_release()
        fresh = self.fork_of_the_release()
        older = older_series()
        old_revision = backport_revision(older)
        self.assertNotEqual(old_revision, REVISION)
        am(fork, older, how="am")
        run = self.assert_refused(
            fork,
            f"has Backport-Revision {old_revision} of this backport",
            f"patches/v0.5.16/ Revision {REVISION}; revert it",
        )
        reverted = self.run_printed_command(run.stderr, "python3 ")
        self.assertEqual(reverted.returncode, 0, reverted.stdout + reverted.stderr)
        self.assert_done(self.run_tool(fork), fork)
        self.assert_done(self.run_tool(fresh), fresh)
        tree = git(fork, "rev-parse", "HEAD^{tree}")
        self.assertEqual(tree, git(fresh, "rev-parse", "HEAD^{tree}"))

    def test_part_of_the_fix_is_refused_with_what_it_has_and_lacks(self) -> None:
        fork = self.fork_of_the_release()
        fix = next(p for p in SERIES if "def draft_server_args_copy(" in p.read_text())
        git(fork, "apply", f"--include={SERVER_ARGS}", str(fix))
        commit_everything(fork, "fork: take draft_server_args_copy only")
        run = self.assert_refused(
            fork,
            "part of this backport: it has draft_server_args_copy()",
            f"it lacks scoped_server_args(), {SERIES[0].name}",
            "draft writes in scheduler.py, eagle_worker_v2.py",
        )
        found = self.run_printed_command(run.stderr, "cd ")
        self.assertIn(git(fork, "rev-parse", "--short", "HEAD"), found.stdout)

    def test_every_conflict_of_every_patch_is_named_at_once(self) -> None:
        fork = self.fork_of_the_release()
        for path in (RUNTIME_CONTEXT, SCHEDULER, EAGLE):
            add_note_to_a_changed_line(fork, path, "# fork: our own change")
        first_new_file = files_created_by(SERIES)[0]
        write(fork / first_new_file, "upstream's own\n")
        (fork / STANDALONE).unlink()
        commit_everything(fork, "fork: change lines the backport changes")
        # All or nothing: the conflicts in comments only, which the tool resolves
        # where nothing else stops the series, are named as well.
        comments = "(changed in your fork too, only in comments: take the series' side)"
        needles = [
            "not even with a 3-way",
            f"{SERIES[0].name}: {RUNTIME_CONTEXT} {comments}",
            f"{SCHEDULER} {comments}",
            f"{EAGLE} {comments}",
            f"{STANDALONE} (not in your fork: deleted, moved or never there)",
            f"{first_new_file} (your fork already has a file there)",
        ]
        # --check names the same, with exit 1.
        checked = self.assert_refused(fork, *needles, flags=("--check",))
        run = self.assert_refused(fork, *needles)
        self.assertEqual(run.stderr, checked.stderr)
        self.assertEqual(run.stderr.count("\n"), 1, "one line")
        by_hand = self.run_printed_command(run.stderr, "cd ")
        self.assertIn("git am --continue", by_hand.stdout)

    def test_a_file_the_fork_never_had_is_named(self) -> None:
        fork = self.imported_fork(without=(MULTI_LAYER,))
        self.assert_refused(
            fork, f"{MULTI_LAYER} (not in your fork: deleted, moved or "
        )

    def test_a_hook_that_refuses_in_the_trial_changes_nothing(self) -> None:
        fork = self.fork_of_the_release()
        write(fork / "notes.txt", "untracked notes\n")
        write(fork / ".git/hooks/pre-applypatch", REFUSING_HOOK, 0o755)
        self.assert_refused(
            fork, "git am -3 failed in a trial run", "\n    fork policy: no"
        )

    def test_a_step_before_the_trial_that_git_refuses_changes_nothing(self) -> None:
        fork = self.fork_of_the_release()
        # git keeps the trial's worktree under .git/worktrees/: a file there
        # makes `git worktree add` fail.
        write(fork / ".git/worktrees", "not a folder\n")
        self.assert_refused(
            fork,
            "worktree add --detach --no-checkout failed in",
            "; nothing was changed:\n    ",
            "Not a directory",
        )

    def test_a_commit_made_while_it_runs_is_not_overwritten(self) -> None:
        fork = self.fork_of_the_release()
        start = git(fork, "rev-parse", "HEAD")
        # The trial runs the fork's hooks; this one commits on the fork's branch
        # after each patch the trial applies.
        meanwhile = f"""#!/bin/sh
unset GIT_DIR GIT_INDEX_FILE GIT_WORK_TREE
git -C {shlex.quote(str(fork))} commit -q --allow-empty -m 'fork: made meanwhile'
"""
        write(fork / ".git/hooks/post-applypatch", meanwhile, 0o755)
        run = self.run_tool(fork)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertIn(
            f"HEAD of {fork} moved while this ran; run this again", run.stderr
        )
        subjects = git(fork, "log", "--format=%s", f"{start}..").splitlines()
        self.assertTrue(subjects)
        self.assertEqual(set(subjects), {"fork: made meanwhile"})
        self.assertEqual(git(fork, "diff", start, "HEAD"), "")
        self.assertEqual(git(fork, "status", "--porcelain", "-uno"), "")
        self.assertEqual(len(git(fork, "worktree", "list").splitlines()), 1)

    def test_a_fast_forward_git_refuses_leaves_the_fork_as_it_was(self) -> None:
        hook = ".git/hooks/reference-transaction"
        # git merge moves the files, then fails to move the branch: put back.
        restored = "failed; it was restored as it was; nothing was changed; "
        refused = "git refused to move"
        untracked = "untracked working tree files would be overwritten by merge"
        cases = [
            ((), hook, BRANCH_UPDATE_REFUSING_HOOK, restored, "aborted by hook"),
            (("--revert",), hook, BRANCH_UPDATE_REFUSING_HOOK, restored, "hook"),
            # An untracked file where the series adds one.
            ((), files_created_by(SERIES)[-1], "mine\n", refused, untracked),
            # A file where the series needs a folder.
            ((), "test", "a file where a folder goes\n", refused, untracked),
        ]
        for flags, path, text, how, git_said in cases:
            with self.subTest(flags=flags, path=path):
                fork = self.fork_of_the_release()
                if flags:
                    am(fork, SERIES)
                write(fork / "notes.txt", "untracked notes\n")
                write(fork / path, text, 0o755)
                self.assert_refused(
                    fork, how, "git merge --ff-only:\n    ", git_said, flags=flags
                )

    def test_patches_that_are_not_this_backports_series_are_refused(self) -> None:
        other = self.scratch_folder()
        git(other, "init", "-q")
        write(other / "README.md", "another project\n")
        commit_everything(other, "docs: an unrelated change")
        format_patch = ["format-patch", "-1", "--root", "-o", str(other)]
        unrelated = Path(git(other, *format_patch))
        notes = other / "0001-notes.patch"
        write(notes, "just some notes\n")
        cases = [
            ([unrelated], "are not this backport's"),
            ([*SERIES, notes], "is not a patch from git"),
            ([], "holds no *.patch file"),
        ]
        for patches, needle in cases:
            with self.subTest(needle=needle):
                tool = self.copy_of_this_project(patches)
                fork = self.fork_of_the_release()
                self.assert_refused(fork, needle, "checkout -- patches", tool=tool)


class TestTheFork(ForkCase):
    def test_a_path_that_is_not_a_forks_work_tree_is_refused(self) -> None:
        scratch = self.scratch_folder()
        (scratch / "plain" / "python" / "sglang").mkdir(parents=True)
        git(scratch, "init", "-q", "other")
        commit_everything(scratch / "other", "init")
        git(scratch, "clone", "-q", "--bare", str(RELEASE), "bare.git")
        cases = [
            ("plain", "is not in a git work tree; pass"),
            ("other", "has no python/sglang/"),
            ("bare.git", "(a bare repository or a .git directory)"),
        ]
        for name, needle in cases:
            with self.subTest(needle=needle):
                run = self.run_tool(scratch / name)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                self.assertTrue(run.stderr.startswith("apply: error: "), run.stderr)
                self.assertIn(needle, run.stderr)
        self.assertEqual(os.listdir(scratch / "plain"), ["python"])

    def test_a_git_operation_in_progress_is_refused_with_its_way_out(self) -> None:
        cases = [
            ("rebase", "rebase other", "rebase --abort"),
            # The apply backend keeps its state in rebase-apply/, as git am does.
            ("rebase", "rebase --apply other", "rebase --abort"),
            ("am", "am .git/0001-other.patch", "am --abort"),
            ("merge", "merge other", "merge --abort"),
            ("cherry-pick", "cherry-pick other", "cherry-pick --abort"),
            ("revert", "revert --no-edit other", "revert --abort"),
            ("bisect", "bisect start", "bisect reset"),
        ]
        for operation, start, way_out in cases:
            with self.subTest(start=start):
                fork = self.fork_with_two_branches()
                git(fork, "format-patch", "-q", "-1", "other", "-o", ".git")
                git(fork, *start.split(), check=False)
                run = self.assert_refused(fork, f"a git {operation} is in progress")
                ended = self.run_printed_command(
                    run.stderr, f"cd {fork} && git {way_out}"
                )
                self.assertEqual(ended.returncode, 0, ended.stderr)
                self.assertEqual(git(fork, "symbolic-ref", "--short", "HEAD"), "main")

    def test_a_detached_head_is_refused_and_the_printed_switch_works(self) -> None:
        # A path with spaces: the printed command must quote it.
        fork = self.fork_of_the_release(name="my forks/sglang fork")
        git(fork, "switch", "-q", "--detach")
        run = self.assert_refused(fork, "is detached;")
        switch = f"cd {shlex.quote(str(fork))} && git switch -c"
        switched = self.run_printed_command(run.stderr, switch)
        self.assertEqual(switched.returncode, 0, switched.stderr)
        self.assert_done(self.run_tool(fork), fork)

    def test_printed_commands_quote_a_path_with_spaces(self) -> None:
        fork = self.fork_of_the_release(name="my forks/sglang fork")
        run = self.run_tool(fork)
        self.assert_done(run, fork)
        undo = re.findall(r"`(cd '[^`]+)`", run.stdout)[0]
        self.assertEqual(shlex.split(undo)[1], str(fork))

    def test_a_branch_with_no_commit_yet_is_refused(self) -> None:
        fork = self.fork_of_the_release()
        git(fork, "checkout", "-q", "--orphan", "empty")
        self.assert_refused(fork, "the branch empty of", "has no commit yet")

    def test_tracked_changes_are_refused(self) -> None:
        fork = self.fork_of_the_release()
        write(fork / SCHEDULER, (fork / SCHEDULER).read_text() + "# work in progress\n")
        for flags in ((), ("--revert",)):
            with self.subTest(flags=flags):
                self.assert_refused(
                    fork, "uncommitted changes", SCHEDULER, "git stash", flags=flags
                )

    def test_uncommitted_changes_name_ten_files_at_most(self) -> None:
        fork = self.fork_of_the_release()
        tracked = git(fork, "ls-files").splitlines()
        self.assertGreater(len(tracked), 10)
        for path in tracked:
            write(fork / path, (fork / path).read_text() + "# work in progress\n")
        run = self.assert_refused(fork, "uncommitted changes")
        listed = re.search(r"uncommitted changes \((.*)\); commit", run.stderr)[1]
        self.assertTrue(listed.endswith(" ..."), listed)
        self.assertEqual(len(listed[: -len(" ...")].split(", ")), 10, listed)

    def test_without_git_on_path_the_error_is_one_line(self) -> None:
        run = self.run_tool(RELEASE, env={"PATH": str(TMP / "no-bin")})
        error = "apply: error: git is not on PATH; install git and run this again\n"
        self.assertEqual(run.returncode, 1)
        self.assertEqual(run.stderr, error)


class TestReverting(ForkCase):
    def fork_on_the_way_to_v0_5_17(self) -> Path:
        """The whole package with a v0.5.17 branch (commit U), the fork's own
        commits F0 and F1, and the series between them, applied by the tool."""
        wheels = sorted(WHEELS.glob("sglang-0.5.17-*"))
        self.assertTrue(wheels, f"no sglang 0.5.17 wheel in {WHEELS}; run setup.sh")
        fork = self.fork_of_the_release(full=True)
        git(fork, "switch", "-q", "-c", "v0.5.17")
        shutil.rmtree(fork / "python" / "sglang")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if re.match(r"sglang/.*[^/]$", n)]
            wheel.extractall(fork / "python", names)
        commit_everything(fork, "sglang 0.5.17")
        git(fork, "switch", "-q", "main")
        for number, path in enumerate(FORKS_OWN_FILES):
            write(fork / path, FORKS_OWN_FILES[path])
            commit_everything(fork, f"fork: our own commit {number}")
            if number == 0:  # the series goes between F0 and F1
                self.assert_done(self.run_tool(fork), fork)
        return fork

    def test_without_the_revert_a_v0_5_17_merge_conflicts_in_four_files(self) -> None:
        # Why --revert exists.
        fork = self.fork_on_the_way_to_v0_5_17()
        git(fork, "merge", "--no-edit", "v0.5.17", check=False)
        conflicts = git(fork, "diff", "--name-only", "--diff-filter=U")
        self.assertEqual(sorted(conflicts.split()), sorted(V0_5_17_CONFLICTS))

    def test_after_the_revert_v0_5_17_merges_cleanly_and_has_upstreams_fix(
        self,
    ) -> None:
        fork = self.fork_on_the_way_to_v0_5_17()
        run = self.run_tool(fork, "--revert")
        self.assert_done(run, fork, f"reverted {len(SERIES)} commit(s), newest first")
        git(fork, "merge", "--no-edit", "v0.5.17")
        self.assertEqual(git(fork, "status", "--porcelain", "-uall"), "")
        files = {path: (fork / path).read_text() for path in FORKS_OWN_FILES}
        self.assertEqual(files, FORKS_OWN_FILES)
        own = git(fork, "log", "--format=%s", "--grep=^fork: our own")
        self.assertEqual(len(own.splitlines()), 2)
        fix = "draft_server_args_copy() in speculative/draft_worker_common.py"
        self.assert_nothing_to_do(fork, "already fixed upstream", fix)

    def test_a_fork_without_the_backports_commits_has_nothing_to_revert(self) -> None:
        never_patched = self.fork_of_the_release()
        reverted_by_hand = self.fork_of_the_release()
        am(reverted_by_hand, SERIES)
        git(reverted_by_hand, "revert", "--no-edit", f"HEAD~{len(SERIES)}..HEAD")
        cases = [("never patched", never_patched), ("reverted", reverted_by_hand)]
        for name, fork in cases:
            with self.subTest(fork=name):
                self.assert_nothing_to_do(
                    fork, "nothing to revert: ", flags=("--revert",)
                )

    def test_a_fix_without_its_trailers_is_left_for_a_revert_by_hand(self) -> None:
        squashed = self.fork_of_the_release()
        am(squashed, SERIES, how="apply --index")
        commit_everything(squashed, "fork: the draft ServerArgs fix, squashed")
        # Patch 0001 as its commit, the rest by hand: once 0001 is reverted, the
        # helper is left, and none of the draft writes is back.
        mixed = self.fork_of_the_release()
        am(mixed, SERIES[:1])
        am(mixed, SERIES[1:], how="apply --index")
        commit_everything(mixed, "fork: the rest of it, by hand")
        cases = [
            ("squashed", squashed, "scoped_server_args()) in none of its commits with"),
            (
                "mixed",
                mixed,
                "(draft_server_args_copy(), no draft write in scheduler.py",
            ),
        ]
        for name, fork, needle in cases:
            with self.subTest(fork=name):
                run = self.assert_refused(
                    fork, needle, "squashed, or applied by hand", flags=("--revert",)
                )
                found = self.run_printed_command(run.stderr, "cd ")
                self.assertIn("fork: ", found.stdout)

    def test_a_revert_that_conflicts_names_the_files_and_the_forks_commits(
        self,
    ) -> None:
        fork = self.fork_of_the_release()
        am(fork, SERIES)
        text = (fork / SERVER_ARGS).read_text()
        write(fork / SERVER_ARGS, text.replace("args_copy(", "args_copy_v2("))
        commit_everything(fork, "fork: rename the helper")
        mine = git(fork, "log", "-1", "--format=%h fork: rename the helper")
        why = f"{SERVER_ARGS} (changed in your fork too; changed since by {mine}"
        run = self.assert_refused(fork, "does not revert in", why, flags=("--revert",))
        # The fork's lines of the conflict, where its commit renamed the helper.
        lines = re.search(rf"{re.escape(why)}, at your lines (\d+)", run.stderr)
        self.assertIsNotNone(lines, run.stderr)
        renamed = (fork / SERVER_ARGS).read_text().splitlines()
        self.assertIn("args_copy_v2(", "".join(renamed[int(lines[1]) - 1 :][:20]))
        by_hand = self.run_printed_command(run.stderr, "cd ")
        self.assertIn("git revert --continue", by_hand.stdout + by_hand.stderr)


class TestReleaseLines(ForkCase):
    """The line is read from the fork's code, the machinery of each line's
    release: each series serves its own."""

    def line_said(self, fork: Path, release: str, series: str, same: int) -> str:
        """A pattern of what the tool says of a fork on release whose files are,
        but for those of the series' release that release lacks, as released:
        the line, the machinery of the series' release it found in the fork's
        code, and how many of the fork's files are the release's blobs."""
        patches = sorted((ROOT / "patches" / series).glob("*.patch"))
        changed = len(files_changed_by(patches))
        on = f"apply: {fork} is on the {release} line: its code has {series}'s"
        found = f"; {same} of {changed} files the {series} series changes are"
        found += f" {series}'s as released"
        return f"{re.escape(on)} machinery \\([^;]+\\){re.escape(found)}"

    def test_on_a_fresh_clone_forks_of_each_wheel_take_their_series_by_name(
        self,
    ) -> None:
        # No .build/: the tool has the patches alone, and no package index.
        tool = self.fresh_clone()
        line = {"v0.5.15": "v0.5.15.post1", "v0.5.15.post1": "v0.5.15.post1"}
        for release in ("v0.5.14", "v0.5.15", "v0.5.15.post1", "v0.5.16"):
            with self.subTest(release=release):
                series = line.get(release, release)
                patches = sorted((ROOT / "patches" / series).glob("*.patch"))
                fork = self.fork_of_the_release()
                if release != "v0.5.16":
                    fork = self.fork_of(release)
                by_hand = self.fork_of_the_release(source=fork)
                run = self.run_tool(fork, tool=tool)
                self.assert_done(run, fork, f"applied {len(patches)} of the")
                same = len(files_as_in(release, series))
                said = self.line_said(fork, release, series, same)
                if series == "v0.5.15.post1":
                    says = f"{VERSION_FILE} says {release[1:]}"
                    serves = f"{says} (the series serves {' and '.join(line)})"
                    said += re.escape(f", and {serves}")
                self.assertRegex(run.stdout.splitlines()[0], f"^{said}$")
                am(by_hand, patches)
                self.assertEqual(git(fork, "write-tree"), git(by_hand, "write-tree"))

    def test_a_v0_5_15_fork_without_its_version_file_is_named_by_its_line(
        self,
    ) -> None:
        # A fork of upstream's git has no _version.py: which of the line's two
        # releases it is, its files cannot tell.
        fork = self.fork_of("v0.5.15")
        (fork / VERSION_FILE).unlink()
        commit_everything(fork, "fork: no _version.py, as in upstream's git")
        run = self.run_tool(fork)
        self.assert_done(run, fork, f"applied {len(LINE_SERIES)} of the")
        same = len(files_as_in("v0.5.15", "v0.5.15.post1"))
        said = self.line_said(fork, "v0.5.15/v0.5.15.post1", "v0.5.15.post1", same)
        self.assertRegex(run.stdout.splitlines()[0], f"^{said}$")

    def test_a_v0_5_16_fork_takes_the_v0_5_16_series_and_is_named_so(self) -> None:
        fork = self.fork_of_the_release()
        run = self.run_tool(fork)
        self.assert_done(run, fork)
        changed = len(files_changed_by(SERIES))
        said = self.line_said(fork, "v0.5.16", "v0.5.16", changed)
        self.assertRegex(run.stdout.splitlines()[0], f"^{said}$")

    def test_a_v0_5_15_post1_fork_takes_its_series_and_is_named_so(self) -> None:
        fork = self.fork_of("v0.5.15.post1")
        by_hand = self.fork_of("v0.5.15.post1")
        start = git(fork, "rev-parse", "HEAD")
        run = self.run_tool(fork)
        self.assert_done(run, fork, f"applied {len(LINE_SERIES)} of the")
        changed = len(files_changed_by(LINE_SERIES))
        said = self.line_said(fork, "v0.5.15.post1", "v0.5.15.post1", changed)
        says = f", and {VERSION_FILE} says 0.5.15.post1"
        self.assertRegex(run.stdout, said + re.escape(says))
        am(by_hand, LINE_SERIES)
        for args in (["log", "--format=%an %ae %B", f"{start}.."], ["write-tree"]):
            self.assertEqual(git(fork, *args), git(by_hand, *args))
        self.assert_nothing_to_do(fork, "already patched", "every patch of this")

    def test_a_v0_5_15_fork_takes_the_same_series_and_is_named_v0_5_15(self) -> None:
        fork = self.fork_of("v0.5.15")
        run = self.run_tool(fork)
        self.assert_done(run, fork, f"applied {len(LINE_SERIES)} of the")
        same = files_as_in("v0.5.15", "v0.5.15.post1")
        said = self.line_said(fork, "v0.5.15", "v0.5.15.post1", len(same))
        self.assertRegex(
            run.stdout, said + re.escape(f", and {VERSION_FILE} says 0.5.15 (")
        )
        # The series' merge bases are v0.5.15.post1's, which a v0.5.15 fork lacks
        # where the two releases differ; git needs none of them: every patch
        # applies as it is.
        self.assertLess(len(same), len(files_changed_by(LINE_SERIES)))
        self.assertNotIn("gave git", run.stdout)
        self.assertNotIn("merged 3-way", run.stdout)
        subjects = git(fork, "log", "--format=%s", f"HEAD~{len(LINE_SERIES)}..")
        for patch in LINE_SERIES:
            subject = re.search(
                r"^Subject: \[PATCH[^\]]*\] (.*)$", patch.read_text(), re.M
            )
            self.assertIn(subject[1], subjects)
        self.assertIn("def draft_server_args_copy(", (fork / SERVER_ARGS).read_text())
        self.assert_nothing_to_do(fork, "already patched")

    def test_a_drifted_v0_5_15_post1_fork_is_still_sent_to_its_line(self) -> None:
        fork = self.fork_of("v0.5.15.post1")
        note = "# fork: a local note"
        add_note_inside_the_context(fork, SCHEDULER, note, LINE_SERIES)
        commit_everything(fork, "fork: a note near the backport")
        run = self.run_tool(fork)
        self.assert_done(run, fork, f"applied {len(LINE_SERIES)} of the")
        changed = len(files_changed_by(LINE_SERIES))
        said = self.line_said(fork, "v0.5.15.post1", "v0.5.15.post1", changed - 1)
        self.assertRegex(run.stdout.splitlines()[0], said)
        merged = f"merged 3-way with your fork's changes: {LINE_SERIES[1].name}"
        self.assertIn(merged, run.stdout)
        self.assertIn(note, (fork / SCHEDULER).read_text())

    def test_a_fork_drifted_in_every_file_is_sent_to_its_line_by_its_code(
        self,
    ) -> None:
        fork = self.fork_of("v0.5.15.post1")
        for path in files_changed_by(LINE_SERIES):
            add_note_inside_the_context(fork, path, "# fork: ours", LINE_SERIES)
        commit_everything(fork, "fork: a note near every hunk")
        run = self.run_tool(fork)
        self.assert_done(run, fork, f"applied {len(LINE_SERIES)} of the")
        # No file is a release's blob: the machinery alone names the line.
        said = self.line_said(fork, "v0.5.15.post1", "v0.5.15.post1", 0)
        self.assertRegex(run.stdout.splitlines()[0], said)
        self.assertEqual((fork / SCHEDULER).read_text().count("# fork: ours"), 1)

    def test_revert_takes_the_v0_5_15_post1_series_out(self) -> None:
        fork = self.fork_of("v0.5.15.post1")
        tree = git(fork, "rev-parse", "HEAD^{tree}")
        self.assert_done(self.run_tool(fork), fork, f"applied {len(LINE_SERIES)} of")
        before = snapshot(fork)
        checked = self.run_tool(fork, "--check", "--revert")
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        would = f"would revert {len(LINE_SERIES)} commit(s), newest first; nothing"
        self.assertIn(f"apply: {would} was changed (--check)", checked.stdout)
        self.assertEqual(snapshot(fork), before)
        run = self.run_tool(fork, "--revert")
        reverted = f"reverted {len(LINE_SERIES)} commit(s), newest first"
        self.assert_done(run, fork, reverted)
        self.assertEqual(git(fork, "rev-parse", "HEAD^{tree}"), tree)
        self.assert_nothing_to_do(fork, "nothing to revert: ", flags=("--revert",))

    def test_the_fix_of_the_v0_5_15_line_in_part_is_refused(self) -> None:
        # Patch 0001 as its commit, the rest by hand: a revert leaves the helper,
        # and none of the line's draft writes comes back.
        mixed = self.fork_of("v0.5.15.post1")
        am(mixed, LINE_SERIES[:1])
        am(mixed, LINE_SERIES[1:], how="apply --index")
        commit_everything(mixed, "fork: the rest of it, by hand")
        left = "(draft_server_args_copy(), no draft write in scheduler.py"
        self.assert_refused(mixed, left, flags=("--revert",))
        # The helper alone: part of this backport, the line's draft writes there.
        helper_only = self.fork_of("v0.5.15.post1")
        fix = next(
            p for p in LINE_SERIES if "def draft_server_args_copy(" in p.read_text()
        )
        git(helper_only, "apply", f"--include={SERVER_ARGS}", str(fix))
        commit_everything(helper_only, "fork: take draft_server_args_copy only")
        self.assert_refused(
            helper_only,
            "part of this backport: it has draft_server_args_copy()",
            f"it lacks scoped_server_args(), {LINE_SERIES[0].name}",
            "draft writes in scheduler.py, eagle_worker_v2.py,"
            " frozen_kv_mtp_worker_v2.py, multi_layer_eagle_worker_v2.py,"
            " standalone_worker_v2.py;",
        )

    def test_a_fork_on_v0_5_5_is_told_its_release_and_that_none_is_served(
        self,
    ) -> None:
        # Upstream's git up to v0.5.6.post2 says its version in version.py.
        fork = self.fork_of_the_release()
        (fork / VERSION_FILE).unlink()
        (fork / OLD_VERSION_FILE).write_text('__version__ = "0.5.5.post3"\n')
        commit_everything(fork, "fork: as on v0.5.5.post3")
        self.assert_refused(
            fork,
            f"{fork} is closest to v0.5.5.post3 ({OLD_VERSION_FILE} says 0.5.5.post3):",
            "no series serves it, the oldest release served is v0.5.6;",
            "v0.5.6 and v0.5.6.post1 and v0.5.6.post2 (patches/v0.5.6.post2/)",
            "v0.5.16 (patches/v0.5.16/)",
        )


if __name__ == "__main__":
    unittest.main()

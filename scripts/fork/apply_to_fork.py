#!/usr/bin/env python3
"""Apply this backport's series to an SGLang fork, or revert it.

    python3 scripts/fork/apply_to_fork.py FORK            # apply
    python3 scripts/fork/apply_to_fork.py --revert FORK   # take it out

There is a series per release line: the *.patch files of each
patches/vVERSION/ folder; each patch's Applies-To trailer names the releases
its series serves. The tool picks the fork's line from the patches themselves,
as b4 finds a series' base: the `index OLD..NEW` lines of each series name the
blobs of the release's files and of what the series writes, and the tool
compares them with the blobs of the fork's files at HEAD. Within a line that
serves two releases, the fork's python/sglang/_version.py (which a wheel has)
names the release. Where no file is as a release or a series has it, a trial
merge of each series decides: the fewest conflicting files, then the most of
the lines its hunks keep or delete found in the fork's files. A fork whose
version file names a release older than every series serves (v0.5.5 and
older; python/sglang/version.py says it up to v0.5.6.post2, in upstream's git
too) is refused, naming that release.

Applying makes one commit per patch, as `git am -3 SERIES/*.patch` does. It
reads the fork's code first: a fork that has the fix (this backport's, in any
revision, or upstream's own) is left alone, and one that has part of it, or
this backport's commits of another Backport-Revision, is refused. Where git
needs the release's copy of a file that the fork's history lacks (the base of
a 3-way merge), the tool takes it from the release's wheel, which pip
downloads once into .build/wheels/, and writes only those blobs into the
fork's object store. Without pip or the package index it refuses, naming the
plain-git way: fetching upstream's release tag into the fork. Where git am -3
stops on a conflict whose fork side is the release's code with other comments
and blank lines (the same Python tokens once those are left out), the tool
takes the series' side, as the README's plain-git recipe does, and says which
lines of the fork it dropped. A conflict where the fork and the series changed
different lines (the fork's code next to lines the series deletes or moves,
its change to the line next to one the series changes) is merged line by line,
as kdiff3 and meld do, and shown with the fork's lines it kept. Any other
conflict is refused, naming the fork's lines of each conflict and, where the
fork already copies the config there, the function and line. After applying,
it names the suites of a fork's runner that lacks the shipped tests' suite.

Reverting makes a `git revert` of each commit with this backport's
Backport-Of trailer, newest first: the way to v0.5.17.

Both run git in a temporary worktree of HEAD first, name every conflict at
once, and only then fast-forward the fork's branch to the trial's commits with
`git merge --ff-only`. A refusal changes nothing.

Exit status: 0 done, or nothing to do; 1 refused, nothing changed; 2 usage
error; 3 a write failed and the fork could not be put back as it was.
Messages start with "apply:"; an error is one line on stderr, "apply: error:".
"""

import argparse
import ast
import contextlib
import difflib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import tokenize
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

StrPath = Union[str, Path]

TOOL = Path(__file__).resolve()
ROOT = TOOL.parents[2]  # this repository

# The series: the *.patch files of each patches/vVERSION/ folder.
SERIES_FOLDER = ROOT / "patches"
# The series that must be there: the line of the newest release with the bug.
NEWEST_SERIES = "v0.5.16"
# The releases' wheels, which pip downloads here once: where the merge bases a
# fork's history lacks come from. scripts/dev/setup.sh fills it too.
WHEEL_CACHE = ROOT / ".build" / "wheels"
# The file of a wheel's package that says its version (git has none).
VERSION_FILE = "python/sglang/_version.py"
# The file that says it up to v0.5.6.post2, in upstream's git as in the
# wheels; later releases' reads VERSION_FILE.
OLD_VERSION_FILE = "python/sglang/version.py"

UPSTREAM_REPO = "https://github.com/sgl-project/sglang"
BACKPORT_OF = "https://github.com/sgl-project/sglang/pull/33335"
TRAILER = f"`Backport-Of: {BACKPORT_OF}`"

NOTHING_CHANGED = "nothing was changed"

# Why a file is in conflict, by the stages git left of it: 1 the merge base,
# 2 the fork's HEAD, 3 the patch (or the revert).
CONFLICT_REASONS = {
    "123": "changed in your fork too",
    "23": "your fork already has a file there",
    "12": "deleted by the change, changed in your fork",
    "13": "deleted or moved in your fork",
}

# What git leaves in the repository's folder while an operation waits for the
# user. `git am` and `git rebase --apply` both keep rebase-apply/, and only
# `git am` writes rebase-apply/applying, so that is looked for first.
OPERATIONS_IN_PROGRESS = {
    "rebase-merge": "rebase",
    "rebase-apply/applying": "am",
    "rebase-apply": "rebase",
    "MERGE_HEAD": "merge",
    "BISECT_LOG": "bisect",
    "CHERRY_PICK_HEAD": "cherry-pick",
    "REVERT_HEAD": "revert",
}

# Variables that would send git to another repository than the fork named.
GIT_LOCATION_VARIABLES = {
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_NAMESPACE",
}
# Every git command runs with these: messages in English (the tool reads some),
# no prompt, no lock taken only to refresh the index, no editor, and the
# tool's name in the reflog ("apply_to_fork.py: Fast-forward").
GIT_SETTINGS = {
    "LC_ALL": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_EDITOR": ":",
    "GIT_REFLOG_ACTION": "apply_to_fork.py",
}
# A trial leaves only objects behind: no gc, no rerere cache, and no hooks
# when it resumes past a conflict.
CHORES_OFF = "-c gc.auto=0 -c maintenance.auto=false -c rerere.enabled=false"
HOOKS_OFF = f"-c core.hooksPath={os.devnull}"

# The length of git merge-file's conflict markers here, which no line of
# SGLang's files is.
MARKER_SIZE = 32

# What git am says when a file's merge base is not in the object store.
GIT_LACKS_A_BASE = re.compile("lacking or useless|lacks necessary blobs")
SHIPPED_TEST = re.compile(r"^test/registered/unit/(?:.*/)?test_[^/]*\.py$")


class Refused(Exception):
    """The tool stops; the fork is as it was."""

    exit_code = 1


class NotRestored(Refused):
    """A write into the fork failed, and the fork could not be put back."""

    exit_code = 3


@dataclass(frozen=True)
class Marker:
    """A piece of code whose presence in one of the fork's files tells something."""

    path: str  # the file, from the top of the fork
    code: str  # the text looked for in it
    label: str  # how messages name it


# This backport's own code: the helper of patch 0002 and the scope of 0001, in
# v0.5.16's files; a series' are in the files under python/ it adds them to.
OUR_FIX = (
    Marker(
        "python/sglang/srt/server_args.py",
        "def draft_server_args_copy(",
        "draft_server_args_copy()",
    ),
    Marker(
        "python/sglang/srt/runtime_context.py",
        "def scoped_server_args(",
        "scoped_server_args()",
    ),
)
# The five places where v0.5.16's draft writes onto the target's ServerArgs.
DRAFT_WRITES_V0_5_16 = (
    Marker(
        "python/sglang/srt/managers/scheduler.py",
        "scheduler.draft_load_format",
        "scheduler.py",
    ),
    Marker(
        "python/sglang/srt/speculative/eagle_worker_v2.py",
        "match_target_context",
        "eagle_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/standalone_worker_v2.py",
        "match_target_context",
        "standalone_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
        "match_target_context",
        "multi_layer_eagle_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/frozen_kv_mtp_worker_v2.py",
        "match_target_context",
        "frozen_kv_mtp_worker_v2.py",
    ),
)
# The same on the lines before v0.5.16, bare assignments: the v2 workers' on
# v0.5.14 to v0.5.15.post1, the v1 workers' too on older lines.
TARGET_CONTEXT = (
    "server_args.context_length = target_worker.model_runner.model_config.context_len"
)
DRAFT_WRITES_BEFORE_V0_5_16 = (
    Marker(
        "python/sglang/srt/managers/scheduler.py",
        "self.server_args.load_format = (",
        "scheduler.py",
    ),
    Marker(
        "python/sglang/srt/speculative/eagle_worker_v2.py",
        TARGET_CONTEXT,
        "eagle_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/standalone_worker_v2.py",
        TARGET_CONTEXT,
        "standalone_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py",
        TARGET_CONTEXT,
        "multi_layer_eagle_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/speculative/frozen_kv_mtp_worker_v2.py",
        TARGET_CONTEXT,
        "frozen_kv_mtp_worker_v2.py",
    ),
    Marker(
        "python/sglang/srt/managers/scheduler.py",
        "server_args.load_format = server_args.speculative_draft_load_format",
        "scheduler.py",
    ),
    Marker(
        "python/sglang/srt/speculative/eagle_worker.py",
        TARGET_CONTEXT,
        "eagle_worker.py",
    ),
    Marker(
        "python/sglang/srt/speculative/standalone_worker.py",
        TARGET_CONTEXT,
        "standalone_worker.py",
    ),
    Marker(
        "python/sglang/srt/speculative/multi_layer_eagle_worker.py",
        TARGET_CONTEXT,
        "multi_layer_eagle_worker.py",
    ),
    Marker(
        "python/sglang/srt/speculative/frozen_kv_mtp_worker.py",
        TARGET_CONTEXT,
        "frozen_kv_mtp_worker.py",
    ),
)
# Each line's draft writes; a series' are those its patches delete.
DRAFT_WRITE_FORMS = (DRAFT_WRITES_V0_5_16, DRAFT_WRITES_BEFORE_V0_5_16)
ALL_DRAFT_WRITES = DRAFT_WRITES_V0_5_16 + DRAFT_WRITES_BEFORE_V0_5_16
# Upstream's own fix: v0.5.17's, and that of later releases.
UPSTREAM_FIX = (
    Marker(
        "python/sglang/srt/speculative/draft_worker_common.py",
        "def draft_server_args_copy(",
        "draft_server_args_copy() in speculative/draft_worker_common.py",
    ),
    Marker(
        "python/sglang/srt/model_executor/model_runner.py",
        "def _resolve_draft_load_format(",
        "_resolve_draft_load_format() in model_executor/model_runner.py",
    ),
)


# Messages


def quote(path: StrPath) -> str:
    """Returns path as one shell word, so that a printed command can be pasted."""
    return shlex.quote(str(path))


def say(message: str) -> None:
    """Prints one of the tool's messages on standard output."""
    print(f"apply: {message}", flush=True)


def indent(text: str) -> str:
    """Returns the lines of text, each indented by four spaces."""
    lines = text.strip().splitlines()
    return "\n".join(f"    {line}" for line in lines)


def indented_below(text: str) -> str:
    """Returns git's words to end a message with: on new lines, indented."""
    if not text.strip():
        return ""
    return "\n" + indent(text)


def names_of(patches: list["Patch"]) -> str:
    """Returns the file names of patches, comma-separated."""
    return ", ".join(patch.name for patch in patches)


def files_and_reasons(reasons: dict[str, str]) -> str:
    """Returns "FILE (WHY), FILE (WHY)" for the files in conflict."""
    return ", ".join(f"{path} ({why})" for path, why in reasons.items())


def first_ten(paths: list[str]) -> str:
    """Returns the first ten paths, comma-separated, with " ..." if there are more."""
    listed = ", ".join(paths[:10])
    if len(paths) > 10:
        listed += " ..."
    return listed


def damaged(problem: str, folder: Path) -> Refused:
    """Returns the refusal of a damaged series folder, saying how to restore it."""
    restore = f"git -C {quote(ROOT)} checkout -- {quote(folder.relative_to(ROOT))}"
    return Refused(f"{problem}; restore it (`{restore}`)")


# git


def git_environment() -> dict[str, str]:
    """Returns the environment git runs in: this one, pointing nowhere else."""
    env = {}
    for name, value in os.environ.items():
        if name not in GIT_LOCATION_VARIABLES:
            env[name] = value
    env.update(GIT_SETTINGS)
    return env


def git(
    cwd: StrPath, command: str, *args: StrPath, input: Optional[str] = None
) -> subprocess.CompletedProcess:
    """Runs `git -C cwd COMMAND ARGS...`, COMMAND split at spaces; returns the run."""
    argv = ["git", "-C", str(cwd), *command.split()]
    argv += [str(arg) for arg in args]
    try:
        # errors="replace": the files git shows need not be UTF-8.
        return subprocess.run(
            argv,
            env=git_environment(),
            input=input,
            capture_output=True,
            text=True,
            errors="replace",
        )
    except FileNotFoundError:
        raise Refused("git is not on PATH; install git and run this again") from None


def git_output(
    cwd: StrPath, command: str, *args: StrPath, input: Optional[str] = None
) -> str:
    """Returns the stripped output of a git command; refuses if the command fails."""
    run = git(cwd, command, *args, input=input)
    if run.returncode != 0:
        failed = f"git {command} failed in {quote(cwd)}; {NOTHING_CHANGED}:"
        raise Refused(failed + indented_below(run.stderr))
    return run.stdout.strip()


# The series


@dataclass
class FileDiff:
    """What one `diff --git` section of a patch does to one file."""

    old_path: str
    new_path: str
    is_new: bool
    is_rename: bool
    base_blob: str  # the blob the patch changes ("" without an index line)
    result_blob: str  # the blob it writes ("" without an index line)
    added_lines: set[str]  # the lines it adds that hold a word, stripped
    removed_lines: set[str]  # the lines it deletes that hold a word, stripped
    kept_lines: set[str]  # its context lines that hold a word, stripped


@dataclass
class Patch:
    """One file of the series, as git format-patch wrote it."""

    path: Path
    revision: Optional[str]  # its Backport-Revision trailer
    applies_to: list[str]  # the releases of its Applies-To trailer
    diffs: list[FileDiff]

    @property
    def name(self) -> str:
        """Returns the patch's file name."""
        return self.path.name

    @property
    def changed(self) -> list[str]:
        """Returns the files the patch changes or deletes (not those it creates)."""
        return [diff.old_path for diff in self.diffs if not diff.is_new]

    @property
    def created(self) -> list[str]:
        """Returns the files the patch creates: new files and new names."""
        return [diff.new_path for diff in self.diffs if diff.is_new or diff.is_rename]

    @property
    def bases(self) -> dict[str, str]:
        """Returns each file the patch changes and the blob it changes."""
        bases = {}
        for diff in self.diffs:
            if diff.base_blob and not diff.is_new:
                bases[diff.old_path] = diff.base_blob
        return bases

    @property
    def results(self) -> set[str]:
        """Returns the blobs the patch writes."""
        return {diff.result_blob for diff in self.diffs if diff.result_blob}

    @property
    def added_lines(self) -> set[tuple[str, str]]:
        """Returns (file, line) for each line the patch adds that holds a word."""
        lines = set()
        for diff in self.diffs:
            for line in diff.added_lines:
                lines.add((diff.new_path, line))
        return lines

    def adds(self, marker: Marker) -> bool:
        """Returns whether the patch adds a line holding marker's code to its file."""
        for path, line in self.added_lines:
            if path == marker.path and marker.code in line:
                return True
        return False

    def deletes(self, marker: Marker) -> bool:
        """Returns whether the patch deletes a line holding marker's code."""
        for diff in self.diffs:
            if diff.old_path != marker.path:
                continue
            for line in diff.removed_lines:
                if marker.code in line:
                    return True
        return False


@dataclass
class Series:
    """The patches of one release line, in the order they apply."""

    folder: Path
    patches: list[Patch]
    our_fix: tuple[Marker, ...]  # this backport's code, in the files it adds it to
    draft_writes: tuple[Marker, ...]  # the line's draft writes, which it deletes

    @property
    def revision(self) -> Optional[str]:
        """Returns the series' Backport-Revision (that of its last patch)."""
        return self.patches[-1].revision

    @property
    def releases(self) -> list[str]:
        """Returns the releases the series serves (its last patch's Applies-To)."""
        return self.patches[-1].applies_to

    @property
    def name(self) -> str:
        """Returns the release the series was made on: the last it applies to."""
        return self.releases[-1]

    @property
    def label(self) -> str:
        """Returns the series' folder as messages name it, e.g. patches/v0.5.16/."""
        folder = self.folder
        with contextlib.suppress(ValueError):
            folder = self.folder.relative_to(ROOT)
        return quote(f"{folder}/")

    @property
    def changed(self) -> list[str]:
        """Returns the fork's files under python/ that the series changes."""
        paths = []
        for patch in self.patches:
            for path in patch.changed:
                if path.startswith("python/") and path not in paths:
                    paths.append(path)
        return paths

    def first_diffs(self) -> dict[str, FileDiff]:
        """Returns the first diff of each file under python/ the series changes:
        the one whose index line names the release's own blob."""
        diffs = {}
        for patch in self.patches:
            for diff in patch.diffs:
                path = diff.old_path
                if path.startswith("python/") and not diff.is_new:
                    diffs.setdefault(path, diff)
        return diffs

    def released_blobs(self) -> dict[str, str]:
        """Returns each file under python/ the series changes, and the blob of
        the release's copy, as the series' index lines name it."""
        blobs = {}
        for path, diff in self.first_diffs().items():
            if diff.base_blob:
                blobs[path] = diff.base_blob
        return blobs

    def released_lines(self) -> set[tuple[str, str]]:
        """Returns (file, line) for each line of the release's files that the
        series' hunks keep or delete and that holds a word."""
        lines = set()
        for path, diff in self.first_diffs().items():
            for line in diff.kept_lines | diff.removed_lines:
                lines.add((path, line))
        return lines

    def writes(self, path: str) -> set[str]:
        """Returns the blobs the series' patches write to path."""
        blobs = set()
        for patch in self.patches:
            for diff in patch.diffs:
                if diff.new_path == path and diff.result_blob:
                    blobs.add(diff.result_blob)
        return blobs

    def shipped_tests(self) -> list[str]:
        """Returns the test files the series adds to the fork, shell-quoted."""
        tests = []
        for patch in self.patches:
            for path in patch.created:
                if SHIPPED_TEST.match(path):
                    tests.append(quote(path))
        return sorted(tests)


def read_file_diff(section: str, patch_path: Path) -> FileDiff:
    """Returns what one `diff --git` section does; refuses one git did not write."""
    paths = re.match(r"diff --git a/(\S+) b/(\S+)", section)
    if paths is None:
        problem = f"{quote(patch_path)} is not a patch from git format-patch"
        raise damaged(problem, patch_path.parent)
    header, _, hunks = section.partition("\n@@")
    blobs = re.search(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", header, re.M)
    added_lines = set()
    removed_lines = set()
    kept_lines = set()
    for line in hunks.splitlines()[1:]:  # after the first hunk's header
        if line.startswith("@@") or not re.search(r"\w", line[1:]):
            continue
        if line.startswith("+"):
            added_lines.add(line[1:].strip())
        elif line.startswith("-"):
            removed_lines.add(line[1:].strip())
        elif line.startswith(" "):
            kept_lines.add(line[1:].strip())
    return FileDiff(
        old_path=paths[1],
        new_path=paths[2],
        is_new="\nnew file mode" in header,
        is_rename="\nrename from" in header,
        base_blob=blobs[1] if blobs else "",
        result_blob=blobs[2] if blobs else "",
        added_lines=added_lines,
        removed_lines=removed_lines,
        kept_lines=kept_lines,
    )


def read_patch(path: Path) -> Patch:
    """Returns the patch in path; refuses a file git format-patch did not write."""
    text = path.read_text(encoding="utf-8", errors="replace")
    parts = re.split(r"^(?=diff --git )", text, flags=re.M)
    message = parts[0]
    sections = parts[1:]
    if not text.startswith("From ") or "\nSubject: " not in message or not sections:
        problem = f"{quote(path)} is not a patch from git format-patch"
        raise damaged(problem, path.parent)
    revision = re.search(r"^Backport-Revision: *(\S+)$", message, re.M)
    applies_to = re.search(r"^Applies-To: *(.+)$", message, re.M)
    releases = []
    if applies_to:
        releases = [name.strip() for name in applies_to[1].split(",") if name.strip()]
    diffs = [read_file_diff(section, path) for section in sections]
    return Patch(
        path=path,
        revision=revision[1] if revision else None,
        applies_to=releases,
        diffs=diffs,
    )


def draft_writes_deleted_by(patches: list[Patch]) -> tuple[Marker, ...]:
    """Returns the line's draft writes: those of every line's that the patches
    delete (a line's release lacks the others' files or forms)."""
    deleted = []
    for marker in ALL_DRAFT_WRITES:
        if marker not in deleted and any(p.deletes(marker) for p in patches):
            deleted.append(marker)
    return tuple(deleted)


def our_fix_added_by(patches: list[Patch]) -> tuple[Marker, ...]:
    """Returns this backport's code where the patches add it under python/."""
    markers = []
    for marker in OUR_FIX:
        path = marker.path
        for patch in patches:
            for added_path, line in sorted(patch.added_lines):
                if added_path.startswith("python/") and marker.code in line:
                    path = added_path
        markers.append(Marker(path, marker.code, marker.label))
    return tuple(markers)


def load_series(folder: Path) -> Series:
    """Returns the series of folder's *.patch files in name order; refuses a bad one."""
    patches = [read_patch(path) for path in sorted(folder.glob("*.patch"))]
    if not patches:
        raise damaged(f"{quote(folder)} holds no *.patch file", folder)
    helper = OUR_FIX[0]
    if not any(patch.adds(helper) for patch in patches):
        why = f"none adds {helper.label} to {helper.path}"
        problem = f"the patches in {quote(folder)} are not this backport's ({why})"
        raise damaged(problem, folder)
    if not patches[-1].applies_to:
        problem = f"{quote(patches[-1].path)} has no Applies-To trailer"
        raise damaged(problem, folder)
    return Series(
        folder=folder,
        patches=patches,
        our_fix=our_fix_added_by(patches),
        draft_writes=draft_writes_deleted_by(patches),
    )


def version_key(release: str) -> tuple[int, ...]:
    """Returns a release's numbers, to sort by: v0.5.15.post1 is (0, 5, 15, 1)."""
    return tuple(int(number) for number in re.findall(r"\d+", release))


def series_key(series: Series) -> tuple[int, ...]:
    """Returns the sort key of a series: that of the first release it serves."""
    return version_key(series.releases[0])


def load_every_series() -> list[Series]:
    """Returns the series of each patches/v*/, oldest line first; that of
    patches/v0.5.16/ (NEWEST_SERIES) must be there."""
    every = [load_series(SERIES_FOLDER / NEWEST_SERIES)]
    for folder in sorted(SERIES_FOLDER.glob("v*")):
        if folder.name == NEWEST_SERIES:
            continue
        if folder.is_dir() and any(folder.glob("*.patch")):
            every.append(load_series(folder))
    return sorted(every, key=series_key)


# The fork


@dataclass
class Fork:
    """The fork's checkout: where it is, and the branch and commit it is on."""

    top: Path
    git_dir: Path
    branch: str  # the full name, refs/heads/NAME; "" when HEAD is detached
    head: str  # the commit at HEAD; "" on a branch with no commit yet

    @property
    def quoted(self) -> str:
        """Returns the fork's top folder as a shell word."""
        return quote(self.top)

    @property
    def cd(self) -> str:
        """Returns the start of a printed command, which enters the fork."""
        return f"cd {self.quoted} &&"

    @property
    def branch_name(self) -> str:
        """Returns the branch's short name."""
        return self.branch[len("refs/heads/") :]

    def undo(self) -> str:
        """Returns the printed command that puts the branch back on today's HEAD."""
        return f"`{self.cd} git reset --hard {self.head[:12]}`"

    def git(
        self, command: str, *args: StrPath, input: Optional[str] = None
    ) -> subprocess.CompletedProcess:
        """Runs a git command in the fork and returns the run."""
        return git(self.top, command, *args, input=input)

    def output(self, command: str, *args: StrPath, input: Optional[str] = None) -> str:
        """Returns the stripped output of a git command in the fork, or refuses."""
        return git_output(self.top, command, *args, input=input)


def not_a_work_tree_message(path: str, probe: subprocess.CompletedProcess) -> str:
    """Returns the refusal of a path that is not in a git work tree."""
    message = f"{quote(path)} is not in a git work tree"
    if probe.stdout:
        message += " (a bare repository or a .git directory)"
    message += "; pass your fork"
    if probe.returncode != 0:
        message += f"; git said:{indented_below(probe.stderr)}"
    return message


def find_fork(path: str) -> Fork:
    """Returns the git work tree at path; refuses one without python/sglang/."""
    probe = git(path, "rev-parse --is-inside-work-tree --absolute-git-dir")
    if not probe.stdout.startswith("true\n"):
        raise Refused(not_a_work_tree_message(path, probe))
    top = Path(git_output(path, "rev-parse --show-toplevel"))
    if not (top / "python" / "sglang").is_dir():
        raise Refused(f"{quote(top)} has no python/sglang/; pass the top of your fork")
    return Fork(
        top=top,
        git_dir=Path(probe.stdout.splitlines()[1]),
        branch=git(top, "symbolic-ref -q HEAD").stdout.strip(),
        head=git(top, "rev-parse -q --verify HEAD^{commit}").stdout.strip(),
    )


def refuse_an_operation_in_progress(fork: Fork) -> None:
    """Refuses a fork in the middle of a git operation (rebase, am, merge, ...)."""
    for name, operation in OPERATIONS_IN_PROGRESS.items():
        if not (fork.git_dir / name).exists():
            continue
        way_out = f"{operation} --abort"
        if operation == "bisect":
            way_out = "bisect reset"
        stop = f"finish it, or end it (`{fork.cd} git {way_out}`)"
        raise Refused(f"a git {operation} is in progress in {fork.quoted}; {stop}")


def refuse_a_head_without_branch_or_commit(fork: Fork) -> None:
    """Refuses a detached HEAD, and a branch with no commit yet."""
    switch = f"switch to your fork's branch (`{fork.cd} git switch <branch>`)"
    switch += f" or make one (`{fork.cd} git switch -c sglang-draft-isolation`)"
    if not fork.head:
        where = f"the branch {fork.branch_name} of {fork.quoted} has no commit yet"
        raise Refused(f"{where}; {switch}")
    if not fork.branch:
        raise Refused(f"HEAD of {fork.quoted} is detached; {switch}")


def refuse_tracked_changes(fork: Fork) -> None:
    """Refuses a fork with changes to tracked files that are not committed."""
    status = fork.git("status --porcelain -uno").stdout
    changed = [line[3:] for line in status.splitlines()]
    if changed:
        stash = f"commit or stash them (`{fork.cd} git stash`)"
        listed = first_ten(changed)
        raise Refused(f"{fork.quoted} has uncommitted changes ({listed}); {stash}")


def open_fork(path: str) -> Fork:
    """Returns the fork at path if the tool may change it; refuses it otherwise."""
    fork = find_fork(path)
    refuse_an_operation_in_progress(fork)
    refuse_a_head_without_branch_or_commit(fork)
    refuse_tracked_changes(fork)
    return fork


def file_texts(fork: Fork, rev: str, paths: list[str]) -> dict[str, str]:
    """Returns each file's text at rev; "" for a file rev does not have."""
    texts = {}
    for path in paths:
        if path not in texts:
            texts[path] = fork.git("show", f"{rev}:{path}").stdout
    return texts


def found(markers: tuple[Marker, ...], texts: dict[str, str]) -> list[str]:
    """Returns the labels of the markers whose code is in their file's text."""
    return [marker.label for marker in markers if marker.code in texts[marker.path]]


# This backport's commits


@dataclass
class BackportCommit:
    """A commit of this backport at the fork's HEAD."""

    sha: str
    revision: Optional[str]  # its Backport-Revision trailer


def reverts_at_head(fork: Fork) -> dict[str, list[str]]:
    """Returns each commit that commits at HEAD say they revert, and those commits."""
    grep = "--grep=This reverts commit "
    log = fork.git("log -z -F --format=%H%x01%B", grep, fork.head).stdout
    reverts = {}
    for record in log.split("\0"):
        if not record:
            continue
        sha, body = record.split("\x01", 1)
        for target in re.findall(r"This reverts commit ([0-9a-f]{40})", body):
            reverts.setdefault(target, []).append(sha)
    return reverts


def is_undone(sha: str, reverts: dict[str, list[str]]) -> bool:
    """Returns whether a revert of the commit is at HEAD and is not undone itself."""
    for revert in reverts.get(sha, []):
        if not is_undone(revert, reverts):
            return True
    return False


def trailer_values(values: str) -> list[str]:
    """Returns the values of one trailer, which backport_commits separates by \x02."""
    return [value.strip() for value in values.split("\x02") if value.strip()]


def backport_commits(fork: Fork) -> list[BackportCommit]:
    """Returns the backport's commits at HEAD that are not reverted, newest first."""
    # One record per commit, ended by NUL (-z); its fields are separated by
    # \x01, and the values of one trailer by \x02.
    trailer = "%(trailers:key=Backport-{},valueonly,separator=%x02)"
    fields = f"%H%x01{trailer.format('Of')}%x01{trailer.format('Revision')}"
    grep = f"--grep=^Backport-Of: {BACKPORT_OF}$"
    log = fork.git("log -z", f"--format={fields}", grep, fork.head).stdout
    reverts = reverts_at_head(fork)
    commits = []
    for record in log.split("\0"):
        if not record:
            continue
        sha, backport_of, revision = record.split("\x01")
        if BACKPORT_OF not in trailer_values(backport_of):
            continue
        if is_undone(sha, reverts):
            continue
        revisions = trailer_values(revision)
        commits.append(BackportCommit(sha, revisions[0] if revisions else None))
    return commits


def other_revisions(fork: Fork, series: Series) -> set[str]:
    """Returns the other Backport-Revisions of the backport's commits at HEAD."""
    revisions = set()
    for commit in backport_commits(fork):
        if commit.revision is not None and commit.revision != series.revision:
            revisions.add(commit.revision)
    return revisions


# Deciding what to apply


@dataclass
class Survey:
    """What the code at the fork's HEAD holds of the series and of the fix."""

    texts: dict[str, str]  # the files read, and their text at HEAD
    applied: list[Patch] = field(default_factory=list)  # in, line for line
    merged: list[Patch] = field(default_factory=list)  # in, with the fork's changes
    missing: list[Patch] = field(default_factory=list)
    our_fix: list[str] = field(default_factory=list)
    draft_writes: list[str] = field(default_factory=list)

    def everything_applied(self) -> bool:
        """Returns whether every patch of the series is in line for line."""
        return not self.merged and not self.missing


def reverse_applies(fork: Fork, patch: Patch) -> bool:
    """Returns whether the patch is in the fork line for line (it reverse-applies)."""
    return fork.git("apply --check -R", patch.path).returncode == 0


def survey_fork(fork: Fork, series: Series) -> Survey:
    """Returns what the fork's HEAD holds of the series and of the fix."""
    markers = UPSTREAM_FIX + series.our_fix + series.draft_writes
    paths = [marker.path for marker in markers]
    for patch in series.patches:
        for path, _ in patch.added_lines:
            paths.append(path)
    texts = file_texts(fork, fork.head, paths)
    lines_there = set()
    for path, text in texts.items():
        for line in text.splitlines():
            lines_there.add((path, line.strip()))
    survey = Survey(
        texts=texts,
        our_fix=found(series.our_fix, texts),
        draft_writes=found(series.draft_writes, texts),
    )
    for patch in series.patches:
        if reverse_applies(fork, patch):
            survey.applied.append(patch)
        elif patch.added_lines <= lines_there:
            # Merged 3-way: every line it adds (that holds a word) is there.
            survey.merged.append(patch)
        else:
            survey.missing.append(patch)
    return survey


def has_another_revisions_fix(series: Series, survey: Survey) -> bool:
    """Returns whether the fork has this backport's fix, though not line for line."""
    # A fork with the fix that lacks only patches outside python/ (the tests,
    # the ratchet) has this revision's fix: those patches are applied.
    has_our_code = len(survey.our_fix) == len(series.our_fix)
    lacks_sglang_changes = False
    for patch in survey.missing:
        for path in patch.changed:
            if path.startswith("python/"):
                lacks_sglang_changes = True
    return has_our_code and not survey.draft_writes and lacks_sglang_changes


def part_of_the_fix(series: Series, survey: Survey) -> Optional[Marker]:
    """Returns this backport's code the fork has that a missing patch adds, if any."""
    for marker in series.our_fix:
        if marker.code not in survey.texts[marker.path]:
            continue
        for patch in survey.missing:
            if patch.adds(marker):
                return marker
    return None


def upstream_fix_message(fork: Fork, upstream_fix: list[str]) -> str:
    """Returns the message for a fork that has upstream's own fix."""
    why = "upstream's own fix (sgl-project/sglang#33335, released in v0.5.17)"
    has = f"{fork.quoted} has {upstream_fix[0]}, {why}"
    return f"already fixed upstream: {has}; nothing to do"


def other_revision_message(fork: Fork, series: Series, others: set[str]) -> str:
    """Returns the refusal of a fork with the backport's commits of another revision."""
    older = f"Backport-Revision {', '.join(sorted(others))} of this backport"
    again = f"revert it (`python3 {quote(TOOL)} --revert {fork.quoted}`), then apply"
    has = f"{fork.quoted} has {older}, {series.label} Revision {series.revision}"
    return f"{has}; {again}; {NOTHING_CHANGED}"


def every_patch_message(fork: Fork, series: Series, survey: Survey) -> str:
    """Returns the message for a fork that has every patch of the series."""
    patches = names_of(series.patches)
    if survey.merged:
        patches += f"; merged with your changes: {names_of(survey.merged)}"
    every = f"every patch of this backport ({patches})"
    return f"already patched: {fork.quoted} has {every}; nothing to do"


def another_revision_message(fork: Fork, series: Series, survey: Survey) -> str:
    """Returns the message for a fork that has the fix, not line for line."""
    ours = " and ".join(survey.our_fix)
    fix = f"this backport's fix ({ours}, none of the draft writes)"
    where = f"in another revision than {quote(series.folder)}"
    return f"already patched: {fork.quoted} has {fix} {where}; nothing to do"


def part_of_the_fix_message(
    fork: Fork, series: Series, survey: Survey, marker: Marker
) -> str:
    """Returns the refusal of a fork that has part of this backport."""
    lacks = [m.label for m in series.our_fix if m.code not in survey.texts[m.path]]
    lacks.append(names_of(survey.missing))
    has = f"it has {', '.join(survey.our_fix)}; it lacks {', '.join(lacks)}"
    message = f"{fork.quoted} has part of this backport: {has}"
    if survey.draft_writes:
        message += (
            f"; it still has the draft writes in {', '.join(survey.draft_writes)}"
        )
    find = f"`{fork.cd} git log {quote('-S' + marker.code)} -- {marker.path}`"
    return f"{message}; revert it (find its commits: {find}); {NOTHING_CHANGED}"


def patches_to_apply(fork: Fork, series: Series) -> list[Patch]:
    """Returns the patches the fork lacks; [] once it said why it needs none."""
    survey = survey_fork(fork, series)
    others = other_revisions(fork, series)
    if series.revision and others and not survey.everything_applied():
        raise Refused(other_revision_message(fork, series, others))
    if not survey.missing:
        say(every_patch_message(fork, series, survey))
        return []
    if has_another_revisions_fix(series, survey):
        say(another_revision_message(fork, series, survey))
        return []
    marker = part_of_the_fix(series, survey)
    if marker is not None:
        raise Refused(part_of_the_fix_message(fork, series, survey, marker))
    return survey.missing


def missing_merge_bases(fork: Fork, patches: list[Patch]) -> dict[str, str]:
    """Returns each blob the patches change that the fork lacks, and its file."""
    # A blob that one of the patches writes is there once the patch before it applied.
    written = set()
    for patch in patches:
        written |= patch.results
    wanted = {}
    for patch in patches:
        for path, blob in patch.bases.items():
            if blob not in written:
                wanted[blob] = path
    names = "".join(f"{blob}\n" for blob in wanted)
    check = fork.git("cat-file --batch-check", input=names)
    missing = {}
    for blob in re.findall(r"^(\S+) missing$", check.stdout, re.M):
        missing[blob] = wanted[blob]
    return missing


# The merge bases a fork's history lacks: the release's wheel


def fetch_command(fork: Fork, release: str) -> str:
    """Returns the printed plain-git way to the release's files: its tag's objects."""
    return f"`{fork.cd} git fetch {UPSTREAM_REPO} {release}`"


def cached_wheel(release: str) -> Optional[Path]:
    """Returns the release's wheel in the cache, if pip (or the set-up) put it there."""
    # v0.5.15 must not find v0.5.15.post1's: the name goes on with "-".
    wheels = sorted(WHEEL_CACHE.glob(f"sglang-{release[1:]}-*.whl"))
    if not wheels:
        return None
    return wheels[0]


def pip_download(release: str) -> subprocess.CompletedProcess:
    """Runs pip, with the Python running this, to download the release's wheel.

    No dependencies (only sglang's own files are read), a wheel only (an sdist
    would be built), whatever Python the wheel asks for (none of it is run).
    """
    argv = [sys.executable, "-m", "pip", "download", "--no-deps"]
    argv += ["--only-binary=:all:", "--ignore-requires-python"]
    argv += ["--disable-pip-version-check", "--quiet"]
    argv += ["--dest", str(WHEEL_CACHE), f"sglang=={release[1:]}"]
    return subprocess.run(argv, capture_output=True, text=True, errors="replace")


def pip_failed_message(
    fork: Fork, release: str, missing: dict[str, str], said: str
) -> str:
    """Returns the refusal of a wheel pip could not download, with the git way."""
    files = ", ".join(sorted(set(missing.values())))
    lacks = f"the history of {fork.quoted} lacks {release}'s copy of {files}"
    pip = f"pip could not download sglang=={release[1:]} into {quote(WHEEL_CACHE)}"
    fetch = f"get them with git ({fetch_command(fork, release)}) and run this again"
    message = f"{lacks}, which git needs to merge 3-way, and {pip}; {fetch}"
    return f"{message}; {NOTHING_CHANGED}; pip said:{indented_below(said)}"


def release_wheel(fork: Fork, release: str, missing: dict[str, str]) -> Path:
    """Returns the release's wheel: the cached one, or one pip downloads now;
    refuses, with the plain-git way, where pip cannot."""
    wheel = cached_wheel(release)
    if wheel is not None:
        return wheel
    count = len(set(missing.values()))
    lacks = f"the fork's history lacks {release}'s copy of {count} file(s)"
    say(f"{lacks}; downloading the sglang {release[1:]} wheel with pip")
    run = pip_download(release)
    wheel = cached_wheel(release)
    if run.returncode != 0 or wheel is None:
        said = run.stderr.strip() or run.stdout.strip() or "(nothing)"
        raise Refused(pip_failed_message(fork, release, missing, said))
    return wheel


def unpack_merge_bases(
    wheel: Path, missing: dict[str, str], folder: Path
) -> dict[str, Path]:
    """Unpacks the wheel's copy of each missing file into folder; returns them."""
    copies = {}
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = set(archive.namelist())
            for blob, path in missing.items():
                member = path[len("python/") :]
                if path.startswith("python/sglang/") and member in names:
                    copies[blob] = Path(archive.extract(member, folder / blob))
    except (OSError, zipfile.BadZipFile) as error:
        remove = f"remove it (`rm {quote(wheel)}`) and run this again"
        raise Refused(f"{quote(wheel)} is not a wheel ({error}); {remove}") from None
    return copies


def write_merge_bases(fork: Fork, copies: dict[str, Path]) -> set[str]:
    """Writes each copy whose blob is the one a patch names into the fork's
    object store (objects only); returns the blobs it wrote."""
    if not copies:
        return set()
    ids = fork.output("hash-object --no-filters --", *copies.values()).split()
    written = set()
    for number, blob in enumerate(copies):
        if ids[number].startswith(blob):
            written.add(blob)
    if written:
        right = sorted(copies[blob] for blob in written)
        fork.output("hash-object --no-filters -w --", *right)
    return written


def supply_merge_bases(
    fork: Fork, series: Series, missing: dict[str, str]
) -> list[str]:
    """Gives the fork the series' merge bases it lacks, from the release's wheel;
    returns the files still lacking one."""
    # The series' index lines name the blobs of the release it was made on.
    release = series.name
    wheel = release_wheel(fork, release, missing)
    with tempfile.TemporaryDirectory(prefix="sglang-backport-bases-") as folder:
        copies = unpack_merge_bases(wheel, missing, Path(folder))
        written = write_merge_bases(fork, copies)
    if written:
        given = f"gave git {release}'s {len(written)} file(s) to merge 3-way"
        where = quote(wheel.relative_to(ROOT))
        say(f"{given} (objects only), from {where}")
    lacking = {path for blob, path in missing.items() if blob not in written}
    return sorted(lacking)


# The trial


@dataclass
class Resolution:
    """One conflict the tool resolved, and the fork's lines it dropped or kept."""

    line: int  # where the resolved lines start in the file the commit writes
    in_comments: bool  # the fork's side differed only in comments: the series' taken
    forks_lines: list[str]  # in comments: the fork's lines dropped; else: those kept


@dataclass
class Resolved:
    """A conflicting file whose every conflict the tool resolves."""

    text: str  # the file as the tool resolves it
    resolutions: list[Resolution]


@dataclass
class Stop:
    """A step of the trial where git stopped."""

    step: str  # the number of the patch git am was at, or the commit being reverted
    files: dict[str, str]  # each file in conflict, and why
    resolved_files: dict[str, Resolved] = field(default_factory=dict)  # of the files
    # Of the files the tool does not resolve: where each conflict is in the
    # fork's copy, and, applying, a copy of the config the fork makes there.
    details: dict[str, str] = field(default_factory=dict)

    @property
    def resolved(self) -> bool:
        """Returns whether the tool resolves every file in conflict (and there is
        one)."""
        return bool(self.files) and self.resolved_files.keys() == self.files.keys()


@dataclass
class Trial:
    """What git did in the trial worktree."""

    head: str  # the commit it ended on
    output: str  # git's standard output, every step
    stops: list[Stop]

    @property
    def conflicts(self) -> list[Stop]:
        """Returns the stops the tool did not resolve."""
        return [stop for stop in self.stops if not stop.resolved]


def conflict_reason(fork: Fork, path: str, stages: str) -> str:
    """Returns, in words, why a file with these unmerged stages is in conflict."""
    if stages == "13" and not fork.git("rev-list -1", fork.head, "--", path).stdout:
        return f"your fork has no {path}"
    return CONFLICT_REASONS.get(stages, "conflict")


def conflicting_files(fork: Fork, tree: Path) -> dict[str, str]:
    """Returns each file git left unmerged in the trial's worktree, and why."""
    # ls-files -u: "MODE BLOB STAGE\tPATH" per stage of each unmerged file.
    stages = {}
    for entry in git(tree, "ls-files -u -z").stdout.split("\0"):
        if not entry:
            continue
        info, path = entry.split("\t", 1)
        stages[path] = stages.get(path, "") + info.split()[2]
    reasons = {}
    for path, stage in stages.items():
        reasons[path] = conflict_reason(fork, path, stage)
    return reasons


def current_step(tree: Path) -> Optional[str]:
    """Returns the patch number git am stopped at, or the commit git revert did."""
    git_dir = Path(git_output(tree, "rev-parse --absolute-git-dir"))
    for mark in (git_dir / "rebase-apply" / "next", git_dir / "REVERT_HEAD"):
        if mark.is_file():
            return mark.read_text().strip()
    return None


def add_sparse_worktree(fork: Fork, tree: Path, paths: list[str]) -> None:
    """Adds a worktree of HEAD at tree with only paths checked out, the rest skipped."""
    fork.output(f"{HOOKS_OFF} worktree add --detach --no-checkout", tree, fork.head)
    git_output(tree, "read-tree HEAD")
    tracked = set(git_output(tree, "ls-files -z").split("\0")) - {""}
    skipped = "".join(f"{path}\0" for path in sorted(tracked - set(paths)))
    git_output(tree, "update-index --skip-worktree -z --stdin", input=skipped)
    git_output(tree, "checkout-index -f --", *sorted(tracked & set(paths)))


def trial_stop(
    fork: Fork, tree: Path, command: str, run: subprocess.CompletedProcess
) -> Stop:
    """Returns where and why git stopped; refuses a stop for another reason."""
    said = run.stdout + run.stderr
    files = conflicting_files(fork, tree)
    step = current_step(tree)
    lacks_a_base = GIT_LACKS_A_BASE.search(said) is not None
    if step is None or not (files or lacks_a_base):
        failed = (
            f"git {command} failed in a trial run (a hook or a setting of the fork?)"
        )
        raise Refused(f"{failed}; {NOTHING_CHANGED}; git said:{indented_below(said)}")
    return Stop(step=step, files=files)


def resume(tree: Path, verb: str, stop: Stop) -> subprocess.CompletedProcess:
    """Takes git past a stop: commits the conflicting files as they are, or skips it."""
    if stop.resolved:
        # Resolved as a maintainer would resolve it: the fork's hooks run.
        git(tree, "add --", *stop.files)
        return git(tree, f"{CHORES_OFF} {verb} --continue")
    if stop.files:
        git(tree, "add -A --", *stop.files)
        return git(tree, f"{CHORES_OFF} {HOOKS_OFF} {verb} --continue")
    return git(tree, f"{CHORES_OFF} {HOOKS_OFF} {verb} --skip")


def run_in_worktree(fork: Fork, tree: Path, command: str, args: list[str]) -> Trial:
    """Runs `git COMMAND ARGS` in tree, past every conflict; returns what it did."""
    verb = command.split()[0]
    stops = []
    output = ""
    run = git(tree, f"{CHORES_OFF} {command}", *args)
    while run.returncode != 0:
        stop = trial_stop(fork, tree, command, run)
        if verb == "am":
            stop.resolved_files = resolved_conflicts(tree, stop)
        if stop.resolved:
            write_resolutions(tree, stop)
        else:
            stop.details = conflict_details(tree, stop, verb)
        stops.append(stop)
        output += run.stdout
        run = resume(tree, verb, stop)
        if verb == "am" and stop.files:
            run.stdout = without_the_stopped_patch(run.stdout)
    output += run.stdout
    return Trial(head=git_output(tree, "rev-parse HEAD"), output=output, stops=stops)


def run_trial(fork: Fork, paths: list[str], command: str, args: list[str]) -> Trial:
    """Runs `git COMMAND ARGS` on HEAD in a temporary worktree; returns what it did."""
    folder = Path(tempfile.mkdtemp(prefix="sglang-backport-trial-"))
    tree = folder / "fork"
    try:
        add_sparse_worktree(fork, tree, paths)
        return run_in_worktree(fork, tree, command, args)
    finally:
        fork.git("worktree remove --force --force", tree)
        shutil.rmtree(folder, ignore_errors=True)


def without_the_stopped_patch(output: str) -> str:
    """Returns what git am --continue printed, less its first line: the
    "Applying: SUBJECT" of the patch that stopped, which git am printed before."""
    if output.startswith("Applying: "):
        return output.partition("\n")[2]
    return output


def by_hand(fork: Fork, command: str, args: list[str]) -> str:
    """Returns the end of a conflict message: the commands to do it by hand."""
    verb = command.split()[0]
    words = " ".join(quote(arg) for arg in args)
    hand = f"`{fork.cd} git {command} {words}`, fix the files, git add them"
    hand += f", git {verb} --continue (or --abort)"
    return f"; {NOTHING_CHANGED}; to do it by hand: {hand}"


def apply_trial(fork: Fork, patches: list[Patch]) -> Trial:
    """Runs `git am -3` of the patches in a trial worktree; returns what it did."""
    paths = []
    for patch in patches:
        paths += patch.changed + patch.created
    return run_trial(fork, paths, "am -3", [str(patch.path) for patch in patches])


def lacked_a_merge_base(trial: Trial) -> bool:
    """Returns whether git am stopped in the trial for a merge base it lacks."""
    return any(not stop.files for stop in trial.stops)


def trial_with_merge_bases(
    fork: Fork, series: Series, patches: list[Patch]
) -> tuple[Trial, list[str]]:
    """Runs the trial; where git stopped for a merge base the fork's history
    lacks, gives the fork the bases and runs it again. Returns the trial and the
    files still lacking a base."""
    trial = apply_trial(fork, patches)
    missing = missing_merge_bases(fork, patches)
    if not missing or not lacked_a_merge_base(trial):
        return trial, []
    lacking = supply_merge_bases(fork, series, missing)
    return apply_trial(fork, patches), lacking


# Conflicts the tool resolves


@dataclass
class Conflict:
    """One conflict of a 3-way merge: each side's lines."""

    ours: list[str] = field(default_factory=list)  # the fork's
    base: list[str] = field(default_factory=list)  # the release's
    theirs: list[str] = field(default_factory=list)  # the series'


def code_tokens(text: str) -> Optional[list[tuple[int, str]]]:
    """Returns text's Python tokens without comments and blank lines: the code
    the interpreter reads. None where text is not Python that tokenize reads."""
    tokens = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type not in (tokenize.COMMENT, tokenize.NL):
                tokens.append((token.type, token.string))
    except (tokenize.TokenError, SyntaxError):
        return None
    return tokens


def read_merge(merged: str) -> list[Union[str, Conflict]]:
    """Returns the merged lines and the conflicts of git merge-file --diff3's
    output; a marker counts only where it can come next."""
    markers = {
        None: "<" * MARKER_SIZE + " ours",
        "ours": "|" * MARKER_SIZE + " base",
        "base": "=" * MARKER_SIZE,
        "theirs": ">" * MARKER_SIZE + " theirs",
    }
    following = {None: "ours", "ours": "base", "base": "theirs", "theirs": None}
    pieces = []
    side = None
    for line in merged.splitlines(True):
        if line.rstrip("\n") == markers[side]:
            side = following[side]
            if side == "ours":
                pieces.append(Conflict())
        elif side is None:
            pieces.append(line)
        else:
            getattr(pieces[-1], side).append(line)
    return pieces


def joined(pieces: list[Union[str, Conflict]], side: str) -> str:
    """Returns the file with one side of each conflict: ours, base or theirs."""
    lines = []
    for piece in pieces:
        if isinstance(piece, Conflict):
            lines += getattr(piece, side)
        else:
            lines.append(piece)
    return "".join(lines)


def merge_with_base(tree: Path, path: str) -> Optional[list[Union[str, Conflict]]]:
    """Returns the 3-way merge of git's stages of path, with the release's side of
    each conflict (git merge-file --diff3); None where it has no conflict, or a
    stage is not UTF-8 text with Unix line ends."""
    with tempfile.TemporaryDirectory(prefix="sglang-backport-merge-") as folder:
        copies = []
        for stage in (2, 1, 3):  # the fork's, the release's, the series'
            run = git(tree, "show", f":{stage}:{path}")
            if run.returncode != 0 or "\ufffd" in run.stdout or "\r" in run.stdout:
                return None
            copies.append(Path(folder) / str(stage))
            copies[-1].write_text(run.stdout, encoding="utf-8")
        merge = f"merge-file -p --diff3 --marker-size={MARKER_SIZE}"
        labels = "-L ours -L base -L theirs"
        run = git(tree, f"{merge} {labels}", *copies)
    if not 0 < run.returncode < 128:  # the number of conflicts, or an error
        return None
    return read_merge(run.stdout)


def series_side(text: str) -> str:
    """Returns a file git left in conflict with the series' side of each
    conflict, as the README's recipe does:
    `sed -e '/^<<<<<<< /,/^=======$/d' -e '/^>>>>>>> /d'`."""
    kept = []
    in_forks_side = False
    for line in text.splitlines(True):
        if in_forks_side:
            in_forks_side = line.rstrip("\n") != "======="
        elif line.startswith("<<<<<<< "):
            in_forks_side = True
        elif not line.startswith(">>>>>>> "):
            kept.append(line)
    return "".join(kept)


def forks_own_lines(conflict: Conflict) -> list[str]:
    """Returns the lines of the fork's side that the release's side lacks."""
    lines = []
    for change in changes(conflict.base, conflict.ours):
        lines += change.lines
    return lines


def comment_resolution(tree: Path, path: str) -> Optional[Resolved]:
    """Returns the series' side of a conflicting Python file where the fork's
    side of every conflict is the release's code with other comments and blank
    lines; None for any other conflict."""
    if not path.endswith(".py"):
        return None
    pieces = merge_with_base(tree, path)
    if pieces is None:
        return None
    forks = code_tokens(joined(pieces, "ours"))
    if forks is None or forks != code_tokens(joined(pieces, "base")):
        return None
    # The file git am left: the recipe must give what the merge above gives.
    try:
        with open(tree / path, encoding="utf-8", newline="") as file:
            left = file.read()
    except (OSError, UnicodeDecodeError):
        return None
    text = joined(pieces, "theirs")
    if series_side(left) != text:
        return None
    resolutions = []
    line = 1
    for piece in pieces:
        if isinstance(piece, Conflict):
            resolutions.append(Resolution(line, True, forks_own_lines(piece)))
            line += len(piece.theirs)
        else:
            line += 1
    return Resolved(text, resolutions)


@dataclass
class Change:
    """What one side of a conflict puts in place of the release's lines
    start to end (none: it adds lines before the release's line start)."""

    start: int
    end: int
    lines: list[str]


def changes(base: list[str], side: list[str]) -> list[Change]:
    """Returns what side changes of base, line by line."""
    matcher = difflib.SequenceMatcher(None, base, side, False)
    found = []
    for tag, start, end, side_start, side_end in matcher.get_opcodes():
        if tag != "equal":
            found.append(Change(start, end, side[side_start:side_end]))
    return found


def clash(forks: Change, series: Change) -> bool:
    """Returns whether two changes touch the same release line, or add lines
    inside the other's (both count as inside: a line both sides change, lines
    one side adds among those the other changes or deletes), or both add lines
    at the same place."""
    overlap = forks.start < series.end and series.start < forks.end
    same_place = forks.start == forks.end == series.start == series.end
    return overlap or same_place


def merged_line_by_line(conflict: Conflict) -> Optional[list[str]]:
    """Returns the conflict merged line by line, as kdiff3 and meld do: each
    release line as the side that changed it has it, each side's added lines
    where they stand. None where two changes clash."""
    forks = changes(conflict.base, conflict.ours)
    series = changes(conflict.base, conflict.theirs)
    for one in forks:
        for other in series:
            if clash(one, other):
                return None
    added = {}
    replaced = {}
    for change in forks + series:
        if change.start == change.end:
            added[change.start] = change.lines
        else:
            replaced[change.start] = change
    lines = []
    at = 0
    while True:
        lines += added.get(at, [])
        if at == len(conflict.base):
            return lines
        if at in replaced:
            lines += replaced[at].lines
            at = replaced[at].end
        else:
            lines.append(conflict.base[at])
            at += 1


def parses(text: str) -> bool:
    """Returns whether text is Python that the interpreter reads."""
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def line_resolution(tree: Path, path: str) -> Optional[Resolved]:
    """Returns the file with every conflict merged line by line, where the fork
    and the series changed different lines; None where they changed the same
    ones, or a Python file would not parse."""
    pieces = merge_with_base(tree, path)
    if pieces is None:
        return None
    lines = []
    resolutions = []
    for piece in pieces:
        if isinstance(piece, Conflict):
            merged = merged_line_by_line(piece)
            if merged is None:
                return None
            resolutions.append(
                Resolution(len(lines) + 1, False, forks_own_lines(piece))
            )
            lines += merged
        else:
            lines.append(piece)
    text = "".join(lines)
    if path.endswith(".py") and not parses(text):
        return None
    return Resolved(text, resolutions)


def resolved_conflicts(tree: Path, stop: Stop) -> dict[str, Resolved]:
    """Returns the stop's files the tool resolves: conflicts in comments only
    (the series' side), or where each line was changed by one side only (line
    by line)."""
    resolved = {}
    for path, why in stop.files.items():
        if why != CONFLICT_REASONS["123"]:
            continue
        resolution = comment_resolution(tree, path) or line_resolution(tree, path)
        if resolution is not None:
            resolved[path] = resolution
    return resolved


def write_resolutions(tree: Path, stop: Stop) -> None:
    """Writes each file of the stop as the tool resolves it."""
    for path, resolved in stop.resolved_files.items():
        with open(tree / path, "w", encoding="utf-8", newline="") as file:
            file.write(resolved.text)


def resolution_message(
    fork: Fork, patch: Patch, commit: str, path: str, resolution: Resolution
) -> str:
    """Returns what the tool says of a conflict it resolved: where, why, the
    fork's lines it dropped or kept, and the command that shows the commit there."""
    where = f"{patch.name}: resolved the conflict in {path} at line {resolution.line}"
    review = f"review it: `{fork.cd} git show {commit} -- {quote(path)}`"
    if resolution.in_comments:
        why = "your fork's lines differ from the release's only in comments"
        why += " and blank lines"
        message = f"{where}, where {why}: took the series' lines and dropped"
    else:
        why = "your fork and the series changed different lines"
        took = "took each line from the side that changed it and kept"
        message = f"{where}, where {why}: {took}"
    shown = [line for line in resolution.forks_lines if line.strip()]
    if not shown:
        blank = len(resolution.forks_lines)
        return f"{message} {blank} blank line(s) of your fork's ({review})"
    lines = textwrap.dedent("".join(shown)).splitlines()
    listed = "\n".join(f"    {line}" for line in lines)
    return f"{message} these of your fork's ({review}):\n{listed}"


def how_it_resolves(resolved: Resolved) -> str:
    """Returns, for a refusal, how the tool resolves a file it does not apply."""
    if all(resolution.in_comments for resolution in resolved.resolutions):
        return "only in comments: take the series' side"
    return "each line changed by one side: take each from the side that changed it"


def show_resolutions(fork: Fork, patches: list[Patch], trial: Trial) -> None:
    """Says which conflicts the tool resolved, once the fork has the commits."""
    commits = fork.output("rev-list --reverse", f"{fork.head}..{trial.head}").split()
    for stop in trial.stops:
        patch = patches[int(stop.step) - 1]
        commit = commits[int(stop.step) - 1][:12]
        for path, resolved in stop.resolved_files.items():
            for resolution in resolved.resolutions:
                say(resolution_message(fork, patch, commit, path, resolution))


# Conflicts the tool names


def line_ranges(numbers: list[tuple[int, int]]) -> str:
    """Returns "12-14, 30 and 41" for the ranges (first, last)."""
    ranges = []
    for first, last in numbers:
        ranges.append(str(first) if first >= last else f"{first}-{last}")
    if len(ranges) == 1:
        return ranges[0]
    return ", ".join(ranges[:-1]) + " and " + ranges[-1]


def forks_conflict_lines(
    pieces: list[Union[str, Conflict]], forks: str
) -> list[tuple[int, int]]:
    """Returns the first and last line of the fork's side of each conflict in
    forks, the fork's copy of the file (an empty side: the line it is above)."""
    # The merge with the fork's side of each conflict differs from the fork's
    # copy only where the series' changes merged cleanly.
    merged = []
    starts = []
    for piece in pieces:
        if isinstance(piece, Conflict):
            starts.append((len(merged), len(piece.ours)))
            merged += piece.ours
        else:
            merged.append(piece)
    matcher = difflib.SequenceMatcher(None, merged, forks.splitlines(True), False)
    ranges = []
    for start, length in starts:
        for tag, first, last, fork_first, _ in matcher.get_opcodes():
            if first <= start < last or start == first == last:
                line = fork_first + 1
                if tag == "equal":
                    line += start - first
                ranges.append((line, line + length - 1))
                break
    return ranges


def copies_of_the_config(text: str, ranges: list[tuple[int, int]]) -> list[str]:
    """Returns "FUNCTION() at line N: CODE" for each copy of a ServerArgs
    (copy.deepcopy or copy.copy of something named server_args) that the fork
    makes in a function holding a conflict."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    copies = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        holds_a_conflict = False
        for first, last in ranges:
            if function.lineno <= last and first <= function.end_lineno:
                holds_a_conflict = True
        if not holds_a_conflict:
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and is_a_config_copy(node, text):
                code = ast.get_source_segment(text, node) or ""
                code = " ".join(code.split())
                copies.append(f"{function.name}() at line {node.lineno}: `{code}`")
    return copies


def is_a_config_copy(call: ast.Call, text: str) -> bool:
    """Returns whether call copies something named server_args."""
    name = getattr(call.func, "attr", getattr(call.func, "id", ""))
    if name not in ("deepcopy", "copy") or not call.args:
        return False
    argument = ast.get_source_segment(text, call.args[0]) or ""
    return "server_args" in argument


def conflict_detail(tree: Path, path: str, verb: str) -> str:
    """Returns where the fork's copy of path conflicts, and, for git am, any
    copy of the config it already makes there; "" where git's stages do not
    say."""
    pieces = merge_with_base(tree, path)
    if pieces is None:
        return ""
    forks = git(tree, "show", f":2:{path}").stdout
    ranges = forks_conflict_lines(pieces, forks)
    detail = f"at your lines {line_ranges(ranges)}"
    copies = []
    if verb == "am":
        copies = copies_of_the_config(forks, ranges)
    if copies:
        own = "your fork already builds its draft from its own copy of the config"
        where = "; ".join(copies)
        series = "where the series makes one with draft_server_args_copy(): keep one"
        detail += f"; {own}, in {where}, {series}"
    return detail


def conflict_details(tree: Path, stop: Stop, verb: str) -> dict[str, str]:
    """Returns, for each file of the stop that the tool does not resolve and
    that both sides changed, where it conflicts and what the fork does there."""
    details = {}
    for path, why in stop.files.items():
        if why == CONFLICT_REASONS["123"] and path not in stop.resolved_files:
            detail = conflict_detail(tree, path, verb)
            if detail:
                details[path] = detail
    return details


# Moving the fork


def snapshot(fork: Fork) -> list[str]:
    """Returns what git shows of HEAD, the index and the work tree."""
    views = []
    for view in ("rev-parse HEAD", "ls-files -s -z", "status --porcelain -z -uall"):
        views.append(fork.git(view).stdout)
    return views


def put_back(fork: Fork, index: Path, saved_index: Optional[bytes]) -> None:
    """Puts the files and the index back as at HEAD, which git did not move."""
    # git merge moves the index and the work tree before the branch; where it
    # could not move the branch, they go back, and the files it added with them.
    fork.git("read-tree --reset -u HEAD")
    if saved_index is not None:
        index.write_bytes(saved_index)


def list_new_commits(fork: Fork, done: str) -> None:
    """Says what was done on the branch, and prints the commits it made."""
    say(f"{done} branch {fork.branch_name} of {fork.quoted} (undo: {fork.undo()}):")
    log = fork.git("log --reverse --format=%h%x20%s", f"{fork.head}..")
    print(indent(log.stdout))


def fast_forward(fork: Fork, new_head: str, done: str) -> None:
    """Fast-forwards the fork to new_head with git merge --ff-only; refuses, with
    the fork as it was, where git does not."""
    if fork.git("rev-parse HEAD").stdout.strip() != fork.head:
        raise Refused(f"HEAD of {fork.quoted} moved while this ran; run this again")
    before = snapshot(fork)
    index = fork.top / fork.output("rev-parse --git-path index")
    saved_index = None
    if index.exists():
        saved_index = index.read_bytes()
    run = fork.git("merge --ff-only --no-stat", new_head)
    if fork.git("rev-parse HEAD").stdout.strip() == new_head:
        list_new_commits(fork, done)
        return
    said = f"git merge --ff-only:{indented_below(run.stdout + run.stderr)}"
    if snapshot(fork) == before:
        refused = f"git refused to move {fork.quoted} to the trial's commits"
        raise Refused(f"{refused}; {NOTHING_CHANGED}; {said}")
    put_back(fork, index, saved_index)
    failed = f"writing into {fork.quoted} failed"
    if snapshot(fork) != before:
        get_back = f"get back: {fork.undo()}"
        raise NotRestored(f"{failed}, and it could not be restored; {get_back}; {said}")
    raise Refused(f"{failed}; it was restored as it was; {NOTHING_CHANGED}; {said}")


# The fork's release line


@dataclass
class Line:
    """How the fork's files compare with the blobs one series' index lines name."""

    series: Series
    paths: list[str]  # the files compared: those under python/ the series changes
    as_released: int = 0  # how many are the release's own
    as_patched: int = 0  # how many are as the series writes them

    @property
    def matches(self) -> int:
        """Returns how many of the files are the release's or the series'."""
        return self.as_released + self.as_patched

    @property
    def rank(self) -> tuple[int, int]:
        """Returns what orders the lines: the files that match, then those released."""
        return (self.matches, self.as_released)


def line_name(series: Series) -> str:
    """Returns the releases a series serves, as a line's name: v0.5.15/v0.5.15.post1."""
    return "/".join(series.releases)


def lines_with_a_series(every: list[Series]) -> str:
    """Returns the lines this backport has series for, and their folders."""
    lines = []
    for series in every:
        lines.append(f"{' and '.join(series.releases)} ({series.label})")
    return f"this backport has series for {', '.join(lines)}"


def blobs_at_head(fork: Fork, paths: list[str]) -> dict[str, str]:
    """Returns the blob of each of the paths at HEAD that HEAD has."""
    listing = fork.output("ls-tree -r -z", fork.head, "--", *paths)
    blobs = {}
    for entry in listing.split("\0"):
        if entry:
            info, path = entry.split("\t", 1)
            blobs[path] = info.split()[2]
    return blobs


def compare_with_series(series: Series, head: dict[str, str]) -> Line:
    """Returns how the fork's blobs at HEAD compare with those the series' index
    lines name: the release's, and those the series writes."""
    released = series.released_blobs()
    line = Line(series=series, paths=list(released))
    for path, blob in released.items():
        there = head.get(path, "")
        if not there:
            continue
        if there.startswith(blob):
            line.as_released += 1
        elif any(there.startswith(written) for written in series.writes(path)):
            line.as_patched += 1
    return line


def closest_line(fork: Fork, every: list[Series]) -> Optional[Line]:
    """Returns the line whose series' blobs the fork's files most are; None where
    none of its files is one of them."""
    every_path = []
    for series in every:
        every_path += [path for path in series.changed if path not in every_path]
    head = blobs_at_head(fork, every_path)
    best = None
    for series in every:
        line = compare_with_series(series, head)
        if best is None or line.rank > best.rank:
            best = line
    if best is None or best.matches == 0:
        return None
    return best


def version_and_file(fork: Fork) -> tuple[Optional[str], str]:
    """Returns the release the fork's version file names, e.g. v0.5.15, and the
    file: python/sglang/_version.py (a wheel has it from v0.5.7; upstream's git
    does not), else python/sglang/version.py (which holds the version itself up
    to v0.5.6.post2, in upstream's git too). None where neither names one."""
    for path in (VERSION_FILE, OLD_VERSION_FILE):
        text = fork.git("show", f"{fork.head}:{path}").stdout
        version = re.search(r"^__version__\b.*=\s*['\"]([^'\"]+)['\"]", text, re.M)
        if version is not None:
            return f"v{version[1]}", path
    return None, VERSION_FILE


def version_of(fork: Fork) -> Optional[str]:
    """Returns the release the fork's version file names, e.g. v0.5.15, if any."""
    return version_and_file(fork)[0]


def release_of(fork: Fork, series: Series, every_file_matches: bool) -> str:
    """Returns the fork's release, or its line where the files cannot tell which
    of the series' releases it is and _version.py does not say."""
    version = version_of(fork)
    if version in series.releases:
        return version
    if every_file_matches or len(series.releases) == 1:
        return series.name
    return line_name(series)


def version_said(fork: Fork, series: Series) -> str:
    """Returns what the message adds where _version.py names one of the releases
    of a series that serves more than one: what it says, and those releases."""
    version, path = version_and_file(fork)
    if len(series.releases) == 1 or version not in series.releases:
        return ""
    serves = " and ".join(series.releases)
    return f", and {path} says {version[1:]} (the series serves {serves})"


def line_message(fork: Fork, line: Line) -> str:
    """Returns the message naming the fork's line and the blobs that tell it."""
    series = line.series
    release = release_of(fork, series, line.matches == len(line.paths))
    of = f"of {len(line.paths)} files the {series.name} series changes"
    found = f"{line.as_released} {of} are {series.name}'s as released"
    if line.as_patched:
        found += f", {line.as_patched} as the series writes them"
    if not line.as_released:
        found = f"{line.as_patched} {of} are as the series writes them"
    by = "by the blobs its patches' index lines name"
    on = f"{fork.quoted} is on the {release} line"
    return f"{on}: {found} ({by}){version_said(fork, series)}"


def conflicts_in_a_trial(fork: Fork, series: Series) -> int:
    """Returns how many files conflict when the series' missing patches are tried,
    each lacking merge base counting as one."""
    missing = survey_fork(fork, series).missing
    if not missing:
        return 0
    conflicts = 0
    for stop in apply_trial(fork, missing).conflicts:
        conflicts += max(len(stop.files), 1)  # no files: a merge base is lacking
    return conflicts


def released_lines_there(fork: Fork, series: Series) -> tuple[int, int]:
    """Returns how many of the lines the series' hunks keep or delete the fork's
    files have, and how many there are."""
    wanted = series.released_lines()
    texts = file_texts(fork, fork.head, series.changed)
    there = set()
    for path, text in texts.items():
        for line in text.splitlines():
            there.add((path, line.strip()))
    return len(wanted & there), len(wanted)


def chosen_by_trial(fork: Fork, every: list[Series]) -> Series:
    """Returns the series that conflicts least in a trial, of those the fork has
    the most of the lines their hunks keep or delete."""
    chosen = None
    for series in every:
        conflicts = conflicts_in_a_trial(fork, series)
        there, lines = released_lines_there(fork, series)
        rank = (conflicts, -there / max(lines, 1))
        if chosen is None or rank < chosen[0]:
            chosen = (rank, series, there, lines)
    (conflicts, _), series, there, lines = chosen
    how = f"the {series.name} series applies"
    if conflicts:
        how = f"the {series.name} series conflicts in the fewest files, {conflicts}"
    how += f"; the fork's files have {there} of the {lines} lines its hunks keep"
    how += " or delete"
    release = release_of(fork, series, every_file_matches=False)
    on = f"{fork.quoted} is closest to the {release} line"
    none = "none of the files the series change is as a release or a series has it"
    by = "by the blobs their index lines name"
    say(f"{on}: {none} ({by}); chosen by a trial merge ({how})")
    return series


def refuse_a_line_before_the_series(fork: Fork, every: list[Series]) -> None:
    """Refuses a fork whose version file names a release older than every
    series serves (v0.5.5 and older)."""
    version, path = version_and_file(fork)
    oldest = every[0].releases[0]
    if version is None or version_key(version) >= version_key(oldest):
        return
    on = f"{fork.quoted} is closest to {version} ({path} says {version[1:]})"
    why = f"no series serves it, the oldest release served is {oldest}"
    raise Refused(f"{on}: {why}; {lines_with_a_series(every)}; {NOTHING_CHANGED}")


def has_upstreams_fix_alone(fork: Fork, every: list[Series]) -> bool:
    """Says so and returns True where the fork has upstream's fix and no series."""
    texts = file_texts(fork, fork.head, [marker.path for marker in UPSTREAM_FIX])
    upstream_fix = found(UPSTREAM_FIX, texts)
    if not upstream_fix:
        return False
    for series in every:
        if survey_fork(fork, series).everything_applied():
            return False
    say(upstream_fix_message(fork, upstream_fix))
    return True


def choose_series(fork: Fork, every: list[Series]) -> Series:
    """Returns the series of the fork's line, having said which and why."""
    refuse_a_line_before_the_series(fork, every)
    line = closest_line(fork, every)
    if line is None:
        return chosen_by_trial(fork, every)
    say(line_message(fork, line))
    return line.series


# Where the shipped tests run

# The runner of upstream's CI, and the test files it runs.
RUNNER = "test/run_suite.py"


def runners_cpu_suites(text: str) -> Optional[list[str]]:
    """Returns the CPU suites of a runner's PER_COMMIT_SUITES (the suites its CI
    runs on every commit); None where the runner does not say them so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        targets = getattr(node, "targets", [])
        named = [getattr(target, "id", "") for target in targets]
        if "PER_COMMIT_SUITES" not in named or not isinstance(node.value, ast.Dict):
            continue
        for number, key in enumerate(node.value.keys):
            value = node.value.values[number]
            if getattr(key, "attr", "") == "CPU" and isinstance(value, ast.List):
                return [
                    item.value for item in value.elts if isinstance(item, ast.Constant)
                ]
    return None


def registration(text: str) -> Optional[tuple[int, str]]:
    """Returns the line of a test file's register_cpu_ci(...) call and its suite."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        call = getattr(node, "value", None)
        if not isinstance(call, ast.Call):
            continue
        if getattr(call.func, "id", "") != "register_cpu_ci":
            continue
        suite = None
        if len(call.args) > 1:
            suite = call.args[1]
        for keyword in call.keywords:
            if keyword.arg == "suite":
                suite = keyword.value
        if isinstance(suite, ast.Constant):
            return call.lineno, suite.value
    return None


def unknown_suite_message(
    fork: Fork, suites: list[str], lines: dict[str, tuple[int, str]]
) -> str:
    """Returns what the tool says of shipped tests on a suite the runner lacks."""
    named = sorted({suite for _, suite in lines.values()})
    lacks = f"your fork's {RUNNER} has no CPU suite {' or '.join(map(repr, named))}"
    unrun = "which the shipped tests register to, so its CI would not run them"
    has = ", ".join(repr(name) for name in suites) or "none"
    change = "to run them, change the suite in this line of each shipped file"
    message = f"{lacks}, {unrun}; its CPU suites: {has}; {change}:"
    texts = file_texts(fork, "HEAD", sorted(lines))
    for path, (number, _) in sorted(lines.items()):
        line = texts[path].splitlines()[number - 1].strip()
        message += f"\n    {path}:{number}: {line}"
    return message


def say_where_the_tests_run(fork: Fork, series: Series) -> None:
    """Says so where the fork's runner lacks the suite the shipped tests
    register to: the fork predates the release whose suite the series uses."""
    tests = []
    for patch in series.patches:
        tests += [path for path in patch.created if SHIPPED_TEST.match(path)]
    texts = file_texts(fork, "HEAD", [RUNNER, *tests])
    suites = runners_cpu_suites(texts.get(RUNNER, ""))
    if suites is None:
        return
    lines = {}
    for path in tests:
        found_line = registration(texts.get(path, ""))
        if found_line is not None and found_line[1] not in suites:
            lines[path] = found_line
    if lines:
        say(unknown_suite_message(fork, suites, lines))


# Applying


def bases_git_lacks(fork: Fork, patch: Patch) -> list[str]:
    """Returns the files whose copy the patch was made on is not in the fork's
    object store (every file the patch changes, where git has them all)."""
    names = "".join(f"{blob}\n" for blob in patch.bases.values())
    check = fork.output("cat-file --batch-check", input=names).splitlines()
    lacking = []
    for number, path in enumerate(patch.bases):
        if check[number].endswith(" missing"):
            lacking.append(path)
    return lacking or list(patch.bases)


def apply_conflicts_message(
    fork: Fork, series: Series, patches: list[Patch], lacking: list[str], trial: Trial
) -> str:
    """Returns the refusal of a series that does not apply, naming every conflict."""
    message = f"the series does not apply to {fork.quoted}, not even with a 3-way merge"
    no_base = f"no {series.name} base"
    if lacking:
        message += f" (for {no_base}: {fetch_command(fork, series.name)})"
    for stop in trial.stops:
        patch = patches[int(stop.step) - 1]
        reasons = {}
        for path, why in stop.files.items():
            reasons[path] = why
            if path in stop.details:
                reasons[path] += f", {stop.details[path]}"
            elif path in stop.resolved_files:
                reasons[path] += f", {how_it_resolves(stop.resolved_files[path])}"
        if not reasons:  # git am stopped for a merge base the fork lacks
            for path in bases_git_lacks(fork, patch):
                reasons[path] = "git lacks the copy of it this patch was made on"
                if path in lacking:
                    reasons[path] = no_base
        message += f"; {patch.name}: {files_and_reasons(reasons)}"
    return message + by_hand(fork, "am -3", [str(patch.path) for patch in patches])


def patches_merged_3way(patches: list[Patch], output: str) -> list[Patch]:
    """Returns the patches git am merged 3-way, from what it printed."""
    # git am prints "Applying: SUBJECT" for each patch, then, for one it merges
    # 3-way, "Falling back to patching base and 3-way merge...".
    steps = output.split("Applying: ")[1:]
    merged = []
    for number, patch in enumerate(patches):
        if number < len(steps) and "3-way merge" in steps[number]:
            merged.append(patch)
    return merged


def apply(fork_path: str) -> int:
    """Applies the patches the fork lacks, in a trial first; returns the exit status."""
    every = load_every_series()
    fork = open_fork(fork_path)
    if has_upstreams_fix_alone(fork, every):
        return 0
    series = choose_series(fork, every)
    patches = patches_to_apply(fork, series)
    if not patches:
        return 0
    trial, lacking = trial_with_merge_bases(fork, series, patches)
    if trial.conflicts:
        raise Refused(apply_conflicts_message(fork, series, patches, lacking, trial))
    count = f"{len(patches)} of the {len(series.patches)} patches"
    fast_forward(fork, trial.head, f"applied {count} to")
    merged = patches_merged_3way(patches, trial.output)
    if merged:
        review = f"`{fork.cd} git log -p {fork.head[:12]}..`"
        merged_patches = f"merged 3-way with your fork's changes: {names_of(merged)}"
        say(f"{merged_patches}; review them ({review})")
    show_resolutions(fork, patches, trial)
    say_where_the_tests_run(fork, series)
    say("run the shipped tests on the fork's own tree, in its Python environment:")
    tests = " ".join(series.shipped_tests())
    print(f"    {fork.cd} PYTHONPATH=python python3 -m pytest {tests}")
    return 0


# Reverting


def changed_since(fork: Fork, sha: str, path: str, backport: list[str]) -> str:
    """Returns "SHA SUBJECT, ..." of the fork's commits since sha that changed path."""
    log = fork.git("log --format=%H%x20%h%x20%s", f"{sha}..HEAD", "--", path)
    commits = []
    for line in log.stdout.splitlines():
        full_sha, commit = line.split(" ", 1)
        if full_sha not in backport:
            commits.append(commit)
    return ", ".join(commits) or "a merge"


def revert_conflicts_message(fork: Fork, commits: list[str], trial: Trial) -> str:
    """Returns the refusal of a revert that conflicts, naming the commits in the way."""
    message = f"this backport does not revert in {fork.quoted}, not even 3-way"
    for stop in trial.stops:
        reasons = {}
        for path, why in stop.files.items():
            since = changed_since(fork, stop.step, path, commits)
            reasons[path] = f"{why}; changed since by {since}"
            if path in stop.details:
                reasons[path] += f", {stop.details[path]}"
        message += f"; reverting {stop.step[:12]}: {files_and_reasons(reasons)}"
    return message + by_hand(fork, "revert --no-edit", commits)


def draft_writes_of_the_line(texts: dict[str, str]) -> tuple[Marker, ...]:
    """Returns the draft writes of the fork's line: the form its files hold most of."""
    best = DRAFT_WRITE_FORMS[0]
    most = -1
    for form in DRAFT_WRITE_FORMS:
        there = len(found(form, texts))
        if there > most:
            best = form
            most = there
    return best


def files_without_a_draft_write(texts: dict[str, str]) -> list[str]:
    """Returns the files of the line's draft writes that the fork has and that
    hold none of them (a file one of the line's releases lacks is left out)."""
    files = []
    for marker in draft_writes_of_the_line(texts):
        if not texts[marker.path] or marker.label in files:
            continue
        writes = [m for m in ALL_DRAFT_WRITES if m.path == marker.path]
        if not any(m.code in texts[m.path] for m in writes):
            files.append(marker.label)
    return files


def fix_left(
    fork: Fork, rev: str, commits: list[str], every: list[Series]
) -> list[str]:
    """Returns what rev still has of the fix once the commits are reverted."""
    fixes = list(OUR_FIX)  # each line's: the code is the same, the file may not be
    for series in every:
        fixes += series.our_fix
    paths = [marker.path for marker in fixes]
    for form in DRAFT_WRITE_FORMS:
        paths += [marker.path for marker in form]
    texts = file_texts(fork, rev, paths)
    left = []
    for label in found(tuple(fixes), texts):
        if label not in left:
            left.append(label)
    if commits:  # reverting them brings every draft write back
        for label in files_without_a_draft_write(texts):
            left.append(f"no draft write in {label}")
    return left


def fix_left_message(fork: Fork, left: list[str], commits: list[str]) -> str:
    """Returns the refusal of a fix that came (also) in commits without the trailer."""
    where = "in none"
    if commits:
        where = f"after reverting {len(commits)}"
    fix = f"this backport's fix ({', '.join(left)}) {where} of its commits"
    helper = OUR_FIX[0]
    find = f"`{fork.cd} git log {quote('-S' + helper.code)} -- {helper.path}`"
    hand = f"squashed, or applied by hand; revert it by hand (find it: {find})"
    return (
        f"{fork.quoted} has {fix} with the trailer {TRAILER}: {hand}; {NOTHING_CHANGED}"
    )


def files_changed_by(fork: Fork, commits: list[str]) -> list[str]:
    """Returns the files the commits change."""
    names = fork.output("show -z --name-only --format=", *commits).split("\0")
    return [name for name in names if name]


def revert(fork_path: str) -> int:
    """Reverts this backport's commits, in a trial first; returns the exit status."""
    every = load_every_series()
    fork = open_fork(fork_path)
    commits = [commit.sha for commit in backport_commits(fork)]
    new_head = fork.head
    if commits:
        paths = files_changed_by(fork, commits)
        trial = run_trial(fork, paths, "revert --no-edit", commits)
        if trial.stops:
            raise Refused(revert_conflicts_message(fork, commits, trial))
        new_head = trial.head
    left = fix_left(fork, new_head, commits, every)
    if left:
        raise Refused(fix_left_message(fork, left, commits))
    if not commits:
        why = f"no commit of this backport ({TRAILER}) that is not reverted"
        say(f"nothing to revert: {fork.quoted} has {why}; nothing to do")
        return 0
    done = f"reverted {len(commits)} commit(s), newest first, on"
    fast_forward(fork, new_head, done)
    say(f"now merge v0.5.17, or apply again (`python3 {quote(TOOL)} {fork.quoted}`)")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    """Runs the tool on the command line's fork; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fork", help="the fork's git work tree (it has python/sglang/)")
    parser.add_argument(
        "--revert",
        action="store_true",
        help="revert this backport's commits (its Backport-Of trailer) instead",
    )
    args = parser.parse_args(argv)
    try:
        if args.revert:
            return revert(args.fork)
        return apply(args.fork)
    except Refused as refusal:
        print(f"apply: error: {refusal}", file=sys.stderr)
        return refusal.exit_code


if __name__ == "__main__":
    sys.exit(main())

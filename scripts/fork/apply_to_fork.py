#!/usr/bin/env python3
"""Apply this backport's series to an SGLang fork, or revert it.

    python3 scripts/fork/apply_to_fork.py FORK             # apply
    python3 scripts/fork/apply_to_fork.py --check FORK     # say what it would do
    python3 scripts/fork/apply_to_fork.py --revert FORK    # take it out

Each patches/vVERSION/ folder holds the series of one release line (its
patches' Applies-To trailer names the releases it serves), written for that
line's machinery: where the config is published, where the draft is built,
the workers and their adaptive switches. The tool reads that machinery in the
fork's code (MACHINERY) and takes the line whose release has it, the closest
and newest where a fork mixes lines; the blobs the series' index lines name
only break a tie, and the fork's version file only names the release within a
line. Where that series does not apply, it tries the neighbouring lines with
as much of the fork's machinery, and refuses only where none applies, naming
the first one's conflicts.

Applying makes one commit per patch, as `git am -3` does, in a temporary
worktree of HEAD; then `git merge --ff-only` moves the branch: all or
nothing. Where the fork's side of a conflict is the release's code with other
comments, the tool takes the series' side; where the fork and the series
changed different lines, it merges them line by line; it shows the fork's
lines it dropped or kept. It refuses any other conflict, naming each file,
the fork's lines, and any copy of the config the fork makes there. A merge
base the fork's history lacks comes from the release's wheel, which pip
downloads once into .build/wheels/. Where the fork's test/run_suite.py lacks
the suite the shipped tests register to, the commits that add them register
them to its own per-commit CPU suite.

--revert reverts each commit with this backport's Backport-Of trailer, newest
first. --check runs the same trial and says what it would do.

Exit status: 0 done, nothing to do, or (--check) it would be done; 1 refused,
nothing changed; 2 usage error; 3 a write failed and the fork could not be
put back. Messages start with "apply:"; an error is one line on stderr.
"""

import argparse
import ast
import dataclasses
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
from functools import cached_property
from pathlib import Path
from typing import Optional, Union

TOOL = Path(__file__).resolve()
ROOT = TOOL.parents[2]  # this repository
SERIES_FOLDER = ROOT / "patches"
WHEEL_CACHE = ROOT / ".build" / "wheels"  # the wheels pip downloads, once
UPSTREAM_REPO = "https://github.com/sgl-project/sglang"
BACKPORT_OF = "https://github.com/sgl-project/sglang/pull/33335"
TRAILER = f"`Backport-Of: {BACKPORT_OF}`"
NOTHING_CHANGED = "nothing was changed"

SRT = "python/sglang/srt/"
SERVER_ARGS = SRT + "server_args.py"
RUNTIME_CONTEXT = SRT + "runtime_context.py"
SCHEDULER = SRT + "managers/scheduler.py"
EAGLE = SRT + "speculative/eagle_worker.py"
EAGLE_V2 = SRT + "speculative/eagle_worker_v2.py"
# What says a fork's release: a wheel's _version.py (from v0.5.7; upstream's
# git has none), else version.py (up to v0.5.6.post2, in git too).
VERSION_FILES = ("python/sglang/_version.py", "python/sglang/version.py")
RUNNER = "test/run_suite.py"  # upstream's CI runner
SHIPPED_TEST = re.compile(r"^test/registered/.*\.py$")

# This backport's helper and scope, and upstream's own fix (v0.5.17 on).
OUR_FIX = {
    "def draft_server_args_copy(": "draft_server_args_copy()",
    "def scoped_server_args(": "scoped_server_args()",
}
UPSTREAM_FIX = {
    SRT + "speculative/draft_worker_common.py": "def draft_server_args_copy(",
    SRT + "model_executor/model_runner.py": "def _resolve_draft_load_format(",
}
# A draft write: a line a series deletes that writes onto a ServerArgs, the
# load format or the context length (on that line or on the two after it).
DRAFT_WRITE = re.compile(r"^-.*server_args\.(\w+ = |override\()")
DRAFT_FIELD = re.compile(r"load_format|context_length")


@dataclass(frozen=True)
class Machinery:
    """A piece of SGLang whose presence in a fork's code tells which releases
    the code is from."""

    what: str
    path: str
    code: str  # the text looked for in the file
    first: str  # the first release with it
    last: Optional[str] = None  # the last one; None: v0.5.16 has it too

    def in_release(self, release: str) -> bool:
        """Returns whether the release has it."""
        last = version_key(self.last or release)
        return version_key(self.first) <= version_key(release) <= last


# What the series change: a fork that has one needs a series whose release has
# it.
HANDLED = (
    Machinery(
        "the config published in server_args.py's module global",
        SERVER_ARGS,
        "\n_global_server_args",
        "v0.5.6",
        "v0.5.14",
    ),
    Machinery(
        "the config published in the runtime context",
        RUNTIME_CONTEXT,
        "self._server_args",
        "v0.5.15",
    ),
    Machinery("ServerArgs.override()", SERVER_ARGS, "def override(", "v0.5.16"),
    Machinery(
        "Scheduler.init_model_worker()", SCHEDULER, "def init_model_worker(", "v0.5.7"
    ),
    Machinery(
        "Scheduler.maybe_init_draft_worker()",
        SCHEDULER,
        "def maybe_init_draft_worker(",
        "v0.5.8",
    ),
    Machinery(
        "the v1 EAGLEWorker's adaptive switches",
        EAGLE,
        "def apply_runtime_state(",
        "v0.5.11",
        "v0.5.12.post1",
    ),
    Machinery(
        "EAGLEWorkerV2's adaptive switches",
        EAGLE_V2,
        "def apply_runtime_state(",
        "v0.5.12",
    ),
)
# What tells the release too.
MACHINERY = HANDLED + (
    Machinery(
        "the v1 EAGLEWorker", EAGLE, "class EAGLEWorker(", "v0.5.6", "v0.5.12.post1"
    ),
    Machinery("the draft's attn_cp_rank", SCHEDULER, "attn_cp_rank=", "v0.5.9"),
    Machinery(
        "the draft's memory_pool_config", EAGLE_V2, "memory_pool_config", "v0.5.10"
    ),
    Machinery("DFLASH drafts", SCHEDULER, "is_dflash", "v0.5.11"),
    Machinery("the scheduler's self.ps", SCHEDULER, "self.ps.", "v0.5.13"),
    Machinery("cuda_graph_bs_decode", EAGLE_V2, "cuda_graph_bs_decode", "v0.5.14"),
)

# Variables that would send git to another repository than the fork named.
GIT_LOCATION_VARIABLES = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_NAMESPACE",
)
# Every git command runs with these: messages in English (the tool reads git
# status's way out of an operation in progress), no prompt, no lock taken
# only to refresh the index, no editor, and the tool's name in the reflog.
GIT_SETTINGS = {
    "LC_ALL": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_EDITOR": ":",
    "GIT_REFLOG_ACTION": "apply_to_fork.py",
}
# A trial leaves only objects behind: no gc, no rerere cache, and no hooks
# where it goes on past a conflict it does not resolve.
CHORES_OFF = "-c gc.auto=0 -c maintenance.auto=false -c rerere.enabled=false"
HOOKS_OFF = f"-c core.hooksPath={os.devnull}"
MARKER_SIZE = 32  # of git merge-file's conflict markers: no SGLang line is one
# How git status names each kind of unmerged file ("us": the fork's HEAD).
UNMERGED = {
    "UU": "changed in your fork too",
    "AA": "your fork already has a file there",
    "DU": "not in your fork: deleted, moved or never there",
    "UD": "deleted by the change, changed in your fork",
}


class Refused(Exception):
    """The tool stops; the fork is as it was."""

    exit_code = 1


class NotRestored(Refused):
    """A write into the fork failed, and the fork could not be put back."""

    exit_code = 3


def quote(path) -> str:
    """Returns path as one shell word, so that a printed command can be pasted."""
    return shlex.quote(str(path))


def say(message: str) -> None:
    """Prints one of the tool's messages on standard output."""
    print(f"apply: {message}", flush=True)


def indented(text: str) -> str:
    """Returns each line of text on a new line, indented by four spaces."""
    return "".join(f"\n    {line}" for line in text.strip().splitlines())


def version_key(release: str) -> tuple[int, ...]:
    """Returns a release's numbers, to sort by: v0.5.15.post1 is (0, 5, 15, 1)."""
    return tuple(int(number) for number in re.findall(r"\d+", release))


def git(cwd, command: str, *args, input: Optional[str] = None):
    """Runs `git -C cwd COMMAND ARGS...`, COMMAND split at spaces; returns the run."""
    env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARIABLES}
    env.update(GIT_SETTINGS)
    argv = ["git", "-C", str(cwd), *command.split(), *map(str, args)]
    try:
        # errors="replace": the files git shows need not be UTF-8.
        return subprocess.run(
            argv, env=env, input=input, capture_output=True, text=True, errors="replace"
        )
    except FileNotFoundError:
        raise Refused("git is not on PATH; install git and run this again") from None


def git_output(cwd, command: str, *args, input: Optional[str] = None) -> str:
    """Returns the stripped output of a git command; refuses if the command fails."""
    run = git(cwd, command, *args, input=input)
    if run.returncode != 0:
        failed = f"git {command} failed in {quote(cwd)}; {NOTHING_CHANGED}:"
        raise Refused(failed + indented(run.stderr))
    return run.stdout.strip()


def holds(text: str, code: str) -> bool:
    """Returns whether text holds code's lines one after another (stripped)."""
    lines = "\n".join(line.strip() for line in text.splitlines())
    return f"\n{code}\n" in f"\n{lines}\n"


# The series


@dataclass
class FileDiff:
    """What one `diff --git` section of a patch does to one file."""

    old_path: str
    new_path: str
    is_new: bool
    base_blob: str  # the blob the patch changes ("" without an index line)
    result_blob: str  # the blob it writes
    lines: list[str]  # its hunks' lines, each with its " ", "+" or "-"

    def lines_of(self, sign: str) -> list[str]:
        """Returns the lines the diff adds ("+") or deletes ("-")."""
        return [line[1:] for line in self.lines if line[:1] == sign]


@dataclass
class Patch:
    """One file of a series, as git format-patch wrote it."""

    path: Path
    revision: Optional[str]  # its Backport-Revision trailer
    applies_to: list[str]  # the releases of its Applies-To trailer
    diffs: list[FileDiff]

    @property
    def name(self) -> str:
        """Returns the patch's file name."""
        return self.path.name

    @property
    def paths(self) -> list[str]:
        """Returns the files the patch changes or creates."""
        return [d.old_path for d in self.diffs] + [d.new_path for d in self.diffs]


def damaged(problem: str, folder: Path) -> Refused:
    """Returns the refusal of a damaged series folder, saying how to restore it."""
    restore = f"git -C {quote(ROOT)} checkout -- {quote(folder.relative_to(ROOT))}"
    return Refused(f"{problem}; restore it (`{restore}`)")


def read_patch(path: Path) -> Patch:
    """Returns the patch in path; refuses a file git format-patch did not write."""
    text = path.read_text(encoding="utf-8", errors="replace")
    message, *sections = re.split(r"^(?=diff --git )", text, flags=re.M)
    if not text.startswith("From ") or "\nSubject: " not in message or not sections:
        problem = f"{quote(path)} is not a patch from git format-patch"
        raise damaged(problem, path.parent)
    diffs = []
    for section in sections:
        paths = re.match(r"diff --git a/(\S+) b/(\S+)", section)
        header, _, hunks = section.partition("\n@@")
        blobs = re.search(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", header, re.M)
        lines = [line for line in hunks.splitlines()[1:] if line[:1] in " +-"]
        new = "\nnew file mode" in header
        blobs = blobs.groups() if blobs else ("", "")
        diffs.append(FileDiff(paths[1], paths[2], new, *blobs, lines))
    revision = re.search(r"^Backport-Revision: *(\S+)$", message, re.M)
    applies_to = re.search(r"^Applies-To: *(.+)$", message, re.M)
    releases = re.findall(r"[^,\s]+", applies_to[1]) if applies_to else []
    return Patch(path, revision[1] if revision else None, releases, diffs)


@dataclass
class Series:
    """The patches of one release line, in the order they apply."""

    folder: Path  # patches/vVERSION/
    patches: list[Patch]

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
        """Returns the release the series was made on: the last it serves."""
        return self.releases[-1]

    @property
    def label(self) -> str:
        """Returns the series' folder as messages name it: patches/vVERSION/."""
        return quote(f"{self.folder.relative_to(ROOT)}/")

    @property
    def diffs(self) -> list[FileDiff]:
        """Returns the diffs of every patch, in order."""
        return [diff for patch in self.patches for diff in patch.diffs]

    @cached_property
    def released(self) -> dict[str, str]:
        """Returns each file under python/ the series changes and the blob of the
        release's copy: the first one its index lines name."""
        blobs = {}
        for diff in self.diffs:
            if diff.old_path.startswith("python/") and not diff.is_new:
                blobs.setdefault(diff.old_path, diff.base_blob)
        return blobs

    @cached_property
    def our_fix(self) -> dict[str, str]:
        """Returns each piece of OUR_FIX the series adds, and its file."""
        return {
            code: diff.new_path
            for diff in self.diffs
            for code in OUR_FIX
            if diff.new_path.startswith("python/") and code in "".join(diff.lines)
        }

    @cached_property
    def draft_writes(self) -> list[tuple[str, str]]:
        """Returns (file, code) for each draft write the series deletes: the
        deleted line that writes and up to two deleted lines after it."""
        writes = []
        for diff in self.diffs:
            for number, line in enumerate(diff.lines):
                code = []
                for after in diff.lines[number : number + 3]:
                    if after[:1] != "-" or not after[1:].strip():
                        break
                    code.append(after[1:].strip())
                if DRAFT_WRITE.search(line) and DRAFT_FIELD.search(" ".join(code)):
                    writes.append((diff.old_path, "\n".join(code)))
        return writes

    @cached_property
    def shipped_tests(self) -> dict[str, list[str]]:
        """Returns each test file the series adds, and its lines."""
        return {
            diff.new_path: diff.lines_of("+")
            for diff in self.diffs
            if diff.is_new and SHIPPED_TEST.match(diff.new_path)
        }

    @cached_property
    def suite(self) -> Optional[str]:
        """Returns the CPU suite the shipped tests register to."""
        for lines in self.shipped_tests.values():
            for line in lines:
                registered = re.match(r'register_cpu_ci\(.*suite="([^"]+)"', line)
                if registered:
                    return registered[1]
        return None


def load_every_series() -> list[Series]:
    """Returns the series of each patches/v*/ folder, oldest line first."""
    every = []
    for folder in sorted(SERIES_FOLDER.glob("v*")):
        series = Series(folder, [read_patch(p) for p in sorted(folder.glob("*.patch"))])
        if not series.patches:
            raise damaged(f"{quote(folder)} holds no *.patch file", folder)
        if "def draft_server_args_copy(" not in series.our_fix:
            why = "none adds draft_server_args_copy()"
            problem = f"the patches in {quote(folder)} are not this backport's ({why})"
            raise damaged(problem, folder)
        if not series.releases:
            problem = f"{quote(series.patches[-1].path)} has no Applies-To trailer"
            raise damaged(problem, folder)
        every.append(series)
    if not every:
        raise damaged(f"{quote(SERIES_FOLDER)} holds no series", SERIES_FOLDER)
    return sorted(every, key=lambda series: version_key(series.releases[0]))


# The fork


@dataclass
class Fork:
    """The fork's checkout: where it is, its branch and the commit it is on."""

    top: Path
    branch: str  # the branch's short name
    head: str
    texts: dict[tuple[str, str], str] = field(default_factory=dict)  # files read

    @property
    def quoted(self) -> str:
        """Returns the fork's top folder as a shell word."""
        return quote(self.top)

    @property
    def cd(self) -> str:
        """Returns the start of a printed command, which enters the fork."""
        return f"cd {self.quoted} &&"

    def git(self, command: str, *args, input: Optional[str] = None):
        """Runs a git command in the fork and returns the run."""
        return git(self.top, command, *args, input=input)

    def output(self, command: str, *args, input: Optional[str] = None) -> str:
        """Returns the stripped output of a git command in the fork, or refuses."""
        return git_output(self.top, command, *args, input=input)

    def text(self, path: str, rev: str = "") -> str:
        """Returns the file at rev (HEAD), read once; "" where rev has none."""
        rev = rev or self.head
        if (rev, path) not in self.texts:
            self.texts[rev, path] = self.git("show", f"{rev}:{path}").stdout
        return self.texts[rev, path]


def open_fork(path: str) -> Fork:
    """Returns the fork at path if the tool may change it; refuses it otherwise."""
    probe = git(path, "rev-parse --is-inside-work-tree")
    if probe.stdout.strip() != "true":
        where = " (a bare repository or a .git directory)" if probe.stdout else ""
        said = f"; git said:{indented(probe.stderr)}" if probe.returncode else ""
        problem = f"{quote(path)} is not in a git work tree{where}"
        raise Refused(f"{problem}; pass your fork{said}")
    top = Path(git_output(path, "rev-parse --show-toplevel"))
    if not (top / "python" / "sglang").is_dir():
        raise Refused(f"{quote(top)} has no python/sglang/; pass the top of your fork")
    branch = git(top, "symbolic-ref -q --short HEAD").stdout.strip()
    fork = Fork(top, branch, git(top, "rev-parse -q --verify HEAD").stdout.strip())
    # git status names an operation in progress (rebase, am, merge,
    # cherry-pick, revert, bisect) and its way out.
    status = fork.git("-c advice.statusHints=true status -uno").stdout
    way_out = re.search(r'\(use "(git ([\w-]+) (--abort|reset))"', status)
    if way_out:
        end = f"finish it, or end it (`{fork.cd} {way_out[1]}`)"
        raise Refused(f"a git {way_out[2]} is in progress in {fork.quoted}; {end}")
    switch = f"switch to your fork's branch (`{fork.cd} git switch <branch>`)"
    switch += f" or make one (`{fork.cd} git switch -c sglang-draft-isolation`)"
    if not fork.head:
        where = f"the branch {branch} of {fork.quoted} has no commit yet"
        raise Refused(f"{where}; {switch}")
    if not branch:
        raise Refused(f"HEAD of {fork.quoted} is detached; {switch}")
    status = fork.git("status --porcelain -uno").stdout
    changed = [line[3:] for line in status.splitlines()]
    if changed:
        listed = ", ".join(changed[:10]) + (" ..." if len(changed) > 10 else "")
        stash = f"commit or stash them (`{fork.cd} git stash`)"
        raise Refused(f"{fork.quoted} has uncommitted changes ({listed}); {stash}")
    return fork


def version_of(fork: Fork) -> tuple[Optional[str], str]:
    """Returns the release the fork's version file names (None if neither
    names one), e.g. v0.5.15, and the file."""
    for path in VERSION_FILES:
        number = r"^__version__\b.*=\s*['\"]([^'\"]+)['\"]"
        found = re.search(number, fork.text(path), re.M)
        if found:
            return f"v{found[1]}", path
    return None, VERSION_FILES[0]


@dataclass
class BackportCommit:
    """A commit of this backport at the fork's HEAD."""

    sha: str
    revision: Optional[str]  # its Backport-Revision trailer
    applies_to: str  # its Applies-To trailer


def backport_commits(fork: Fork) -> list[BackportCommit]:
    """Returns the commits at HEAD with this backport's Backport-Of trailer that
    no revert at HEAD undid, newest first."""
    trailers = "%(trailers:key={},valueonly,separator=%x20)"
    keys = ("Backport-Of", "Backport-Revision", "Applies-To")
    fields = "%x01".join(["%H", "%B", *map(trailers.format, keys)])
    grep = [f"--grep=^Backport-Of: {BACKPORT_OF}$", "--grep=This reverts commit "]
    log = fork.git("log -z", f"--format={fields}", *grep, fork.head).stdout
    reverts = {}  # each commit a revert names, and the reverts
    ours = []
    for record in filter(None, log.split("\0")):
        sha, body, backport_of, revision, applies_to = record.split("\x01")
        for reverted in re.findall(r"This reverts commit ([0-9a-f]{40})", body):
            reverts.setdefault(reverted, []).append(sha)
        if BACKPORT_OF in backport_of.split():
            ours.append(BackportCommit(sha, revision.strip() or None, applies_to))

    def undone(sha: str) -> bool:
        return any(not undone(revert) for revert in reverts.get(sha, []))

    return [commit for commit in ours if not undone(commit.sha)]


# The fork's line


def runners_cpu_suites(text: str) -> Optional[list[str]]:
    """Returns the CPU suites of a runner's PER_COMMIT_SUITES (those its CI runs
    on every commit); None where the runner does not list them so."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        names = [getattr(target, "id", "") for target in getattr(node, "targets", [])]
        if "PER_COMMIT_SUITES" in names and isinstance(node.value, ast.Dict):
            for number, key in enumerate(node.value.keys):
                value = node.value.values[number]
                if getattr(key, "attr", "") == "CPU" and isinstance(value, ast.List):
                    return [v.value for v in value.elts if isinstance(v, ast.Constant)]
    return None


@dataclass
class Line:
    """How the fork's code compares with the release a series is written for."""

    series: Series
    unhandled: list[str] = field(default_factory=list)  # of HANDLED, the fork's
    differences: list[str] = field(default_factory=list)  # all they differ in
    as_released: int = 0  # the fork's files the series changes, as released


def compare_lines(fork: Fork, every: list[Series]) -> list[Line]:
    """Returns the fork's code compared with each line, closest first."""
    has = {m: m.code in fork.text(m.path) for m in MACHINERY}
    suites = runners_cpu_suites(fork.text(RUNNER))
    paths = sorted({path for series in every for path in series.released})
    blobs = {}
    for entry in fork.output("ls-tree -r", fork.head, "--", *paths).splitlines():
        blobs[entry.split("\t")[1]] = entry.split()[2]
    lines = []
    for series in every:
        line = Line(series)
        for machinery in MACHINERY:
            there = machinery.in_release(series.releases[0])
            if has[machinery] and not there:
                since = f"{machinery.first} to {machinery.last}"
                since = since if machinery.last else f"from {machinery.first}"
                line.differences.append(f"has {machinery.what} ({since})")
                if machinery in HANDLED:
                    line.unhandled.append(machinery.what)
            elif there and not has[machinery]:
                line.differences.append(f"lacks {machinery.what}")
        if suites is not None and series.suite not in suites:
            line.differences.append(f"its runner lacks the suite {series.suite!r}")
        for path, blob in series.released.items():
            line.as_released += blobs.get(path, "-").startswith(blob)
        lines.append(line)
    # The fewest of HANDLED unhandled, the fewest differences, the most files as
    # released, the newest.
    return sorted(
        lines,
        key=lambda line: (
            (len(line.unhandled), len(line.differences), -line.as_released),
            [-number for number in version_key(line.series.name)],
        ),
    )


def choose_lines(fork: Fork, every: list[Series], version: tuple) -> list[Series]:
    """Says which line the fork is on, and why; returns the series to try: the
    line's, then the neighbouring lines' with as much of the fork's machinery."""
    first, *others = compare_lines(fork, every)
    series = first.series
    neighbours = [
        line.series
        for line in others
        if abs(every.index(line.series) - every.index(series)) == 1
        and len(line.unhandled) == len(first.unhandled)
    ]
    release, path = version
    if release not in series.releases:
        release = series.name
        if len(series.releases) > 1 and first.as_released < len(series.released):
            release = "/".join(series.releases)
    handled = [m.what for m in HANDLED if m.code in fork.text(m.path)]
    on = "closest to" if first.differences else "on"
    said = f"{fork.quoted} is {on} the {release} line: its code has"
    said += f" {series.name}'s machinery ({', '.join(handled) or 'none of it'})"
    if first.differences:
        said += f", but differs from it: {', '.join(first.differences)}"
    files = f"{len(series.released)} files the {series.name} series changes"
    said += f"; {first.as_released} of {files} are {series.name}'s as released"
    if len(series.releases) > 1 and version[0] in series.releases:
        serves = " and ".join(series.releases)
        said += f", and {path} says {version[0][1:]} (the series serves {serves})"
    say(said)
    return [series, *neighbours]


# What the fork has of the fix


def patches_to_apply(fork: Fork, series: Series, commits: list) -> list[Patch]:
    """Returns the patches of the series the fork lacks; [] once it said that
    it needs none; refuses a fork with part of the fix or another revision."""
    merged, missing = [], []
    for patch in series.patches:
        if fork.git("apply --check --cached -R", patch.path).returncode == 0:
            continue  # the patch is in the fork line for line
        there = True  # merged 3-way: every line it adds that holds a word is there
        for diff in patch.diffs:
            lines = {line.strip() for line in fork.text(diff.new_path).splitlines()}
            added = {line.strip() for line in diff.lines_of("+")}
            there &= {line for line in added if re.search(r"\w", line)} <= lines
        (merged if there else missing).append(patch)
    others = sorted({c.revision for c in commits if c.revision != series.revision})
    if others and series.revision and (merged or missing):
        older = f"Backport-Revision {', '.join(others)} of this backport"
        has = f"{fork.quoted} has {older}, {series.label} Revision {series.revision}"
        again = f"revert it (`python3 {quote(TOOL)} --revert {fork.quoted}`)"
        raise Refused(f"{has}; {again}, then apply; {NOTHING_CHANGED}")
    names = ", ".join(patch.name for patch in series.patches)
    if not missing:
        if merged:
            names += f"; merged with your changes: {', '.join(p.name for p in merged)}"
        every = f"every patch of this backport ({names})"
        say(f"already patched: {fork.quoted} has {every}; nothing to do")
        return []
    ours = [
        label
        for code, label in OUR_FIX.items()
        if code in series.our_fix and code in fork.text(series.our_fix[code])
    ]
    writes = []
    for path, code in series.draft_writes:
        if holds(fork.text(path), code) and Path(path).name not in writes:
            writes.append(Path(path).name)
    sglang = [p for patch in missing for p in patch.paths if p.startswith("python/")]
    if len(ours) == len(series.our_fix) and not writes and sglang:
        fix = f"this backport's fix ({' and '.join(ours)}, none of the draft writes)"
        where = f"in another revision than {series.label}"
        say(f"already patched: {fork.quoted} has {fix} {where}; nothing to do")
        return []
    added = "".join("".join(d.lines_of("+")) for patch in missing for d in patch.diffs)
    if any(label in ours and code in added for code, label in OUR_FIX.items()):
        lacks = [OUR_FIX[c] for c in series.our_fix if OUR_FIX[c] not in ours]
        lacks += [patch.name for patch in missing]
        message = f"{fork.quoted} has part of this backport: it has {', '.join(ours)}"
        message += f"; it lacks {', '.join(lacks)}"
        if writes:
            message += f"; it still has the draft writes in {', '.join(writes)}"
        code = "def draft_server_args_copy("
        find = f"`{fork.cd} git log {quote('-S' + code)} -- {series.our_fix[code]}`"
        raise Refused(
            f"{message}; revert it (find its commits: {find}); {NOTHING_CHANGED}"
        )
    return missing


# The merge bases a fork's history lacks: the release's wheel


def missing_bases(fork: Fork, patches: list[Patch]) -> dict[str, str]:
    """Returns each blob the patches change that the fork's object store lacks
    (and that none of them writes), and its file."""
    written = {diff.result_blob for patch in patches for diff in patch.diffs}
    wanted = {}
    for patch in patches:
        for diff in patch.diffs:
            if not diff.is_new and diff.base_blob not in written:
                wanted[diff.base_blob] = diff.old_path
    names = "".join(f"{blob}\n" for blob in wanted)
    check = fork.git("cat-file --batch-check", input=names).stdout
    return {blob: wanted[blob] for blob in re.findall(r"^(\S+) missing$", check, re.M)}


def supply_bases(fork: Fork, series: Series, patches: list[Patch]) -> None:
    """Writes the release's copy of each file whose merge base the fork lacks,
    from the release's wheel, into the fork's object store (objects only);
    refuses, naming the git way, where pip cannot download it or it lacks one."""
    missing = missing_bases(fork, patches)
    release = series.name  # the series' index lines name its blobs

    def lacks(blobs) -> str:
        files = ", ".join(sorted({missing[blob] for blob in blobs}))
        history = f"the history of {fork.quoted} lacks {release}'s copy of {files}"
        return f"{history}, which git needs to merge 3-way, and"

    fetch = f"get them with git (`{fork.cd} git fetch {UPSTREAM_REPO} {release}`)"
    fetch += f" and run this again; {NOTHING_CHANGED}"
    wheels = f"sglang-{release[1:]}-*.whl"  # "-": v0.5.15 is not v0.5.15.post1
    if not list(WHEEL_CACHE.glob(wheels)):
        files = f"{release}'s copy of {len(set(missing.values()))} file(s)"
        wheel = f"the sglang {release[1:]} wheel with pip"
        say(f"the fork's history lacks {files}; downloading {wheel}")
        # No dependencies, a wheel only, for any Python: none of it runs.
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
        pip += ["--only-binary=:all:", "--ignore-requires-python", "--dest"]
        pip += [str(WHEEL_CACHE), f"sglang=={release[1:]}"]
        run = subprocess.run(pip, capture_output=True, text=True, errors="replace")
        if run.returncode != 0 or not list(WHEEL_CACHE.glob(wheels)):
            pip = f"pip could not download sglang=={release[1:]} into {WHEEL_CACHE}"
            said = indented(run.stderr.strip() or run.stdout.strip() or "(nothing)")
            raise Refused(f"{lacks(missing)} {pip}; {fetch}; pip said:{said}")
    wheel = sorted(WHEEL_CACHE.glob(wheels))[0]
    with tempfile.TemporaryDirectory(prefix="sglang-backport-bases-") as folder:
        try:
            with zipfile.ZipFile(wheel) as archive:
                names = set(archive.namelist())
                copies = [
                    archive.extract(path[len("python/") :], f"{folder}/{blob}")
                    for blob, path in missing.items()
                    if path[len("python/") :] in names
                ]
        except (OSError, zipfile.BadZipFile) as error:
            remove = f"remove it (`rm {quote(wheel)}`) and run this again"
            raise Refused(
                f"{quote(wheel)} is not a wheel ({error}); {remove}"
            ) from None
        if copies:  # a copy whose blob no patch names is a spare object
            fork.output("hash-object --no-filters -w --", *copies)
    lacking = missing_bases(fork, patches)
    given = len(set(missing.values())) - len(set(lacking.values()))
    where = quote(wheel.relative_to(ROOT))
    if given:
        gave = f"gave git {release}'s {given} file(s) to merge 3-way (objects only)"
        say(f"{gave}, from {where}")
    if lacking:
        raise Refused(f"{lacks(lacking)} {where} lacks it too; {fetch}")


# Conflicts the tool resolves


@dataclass(frozen=True)
class How:
    """A way the tool resolves a conflict, in words."""

    why: str  # where it applies
    done: str  # what it did
    would: str  # what it would do (--check)
    short: str  # what it would do, inside a refusal


COMMENTS = How(
    "your fork's lines differ from the release's only in comments and blank lines",
    "took the series' lines and dropped",
    "would take the series' lines and drop",
    "only in comments: take the series' side",
)
LINES = How(
    "your fork and the series changed different lines",
    "took each line from the side that changed it and kept",
    "would take each line from the side that changed it and keep",
    "each line changed by one side: take each from the side that changed it",
)


@dataclass
class Resolution:
    """A conflict the tool resolves: where, how, and the fork's own lines."""

    path: str
    line: int  # where the resolved lines start in the file the commit writes
    how: How
    forks_lines: list[str]  # the fork's lines in the conflict that the release lacks


@dataclass
class Conflict:
    """One conflict of a 3-way merge: each side's lines."""

    ours: list[str] = field(default_factory=list)  # the fork's
    base: list[str] = field(default_factory=list)  # the release's
    theirs: list[str] = field(default_factory=list)  # the series'


Pieces = list[Union[str, Conflict]]  # a merge: its lines and its conflicts


def merge_stages(tree: Path, path: str) -> Optional[Pieces]:
    """Returns `git merge-file --diff3` of git's three stages of path; None
    where a stage is missing or not UTF-8 text with Unix line ends."""
    with tempfile.TemporaryDirectory(prefix="sglang-backport-merge-") as folder:
        copies = []
        for stage in (2, 1, 3):  # the fork's, the release's, the series'
            run = git(tree, "show", f":{stage}:{path}")
            if run.returncode != 0 or "\ufffd" in run.stdout or "\r" in run.stdout:
                return None
            copies.append(Path(folder, str(stage)))
            copies[-1].write_text(run.stdout, encoding="utf-8")
        merge = f"merge-file -p --diff3 --marker-size={MARKER_SIZE}"
        run = git(tree, f"{merge} -L ours -L base -L theirs", *copies)
    if not 0 < run.returncode < 128:  # the number of conflicts, or an error
        return None
    # Each marker, and the side after it; a marker counts where it comes next.
    markers = {"<" * MARKER_SIZE + " ours": "ours", "|" * MARKER_SIZE + " base": "base"}
    markers.update({"=" * MARKER_SIZE: "theirs", ">" * MARKER_SIZE + " theirs": None})
    order = [None, "ours", "base", "theirs", None]
    pieces = []
    side = None
    for line in run.stdout.splitlines(True):
        marker = markers.get(line.rstrip("\n"), "")
        if marker != "" and order[order.index(side) + 1] == marker:
            side = marker
            pieces += [Conflict()] if side == "ours" else []
        elif side is None:
            pieces.append(line)
        else:
            getattr(pieces[-1], side).append(line)
    return pieces


def only_comments(pieces: Pieces) -> bool:
    """Returns whether the fork's side of each conflict is the release's code
    with other comments and blank lines: the same Python tokens in the file."""
    conflicts = [piece for piece in pieces if isinstance(piece, Conflict)]
    for conflict in conflicts:  # quick first: the same text less spaces, comments
        ours, base = (
            re.sub(r"\s", "", "".join(line.split("#")[0] for line in side))
            for side in (conflict.ours, conflict.base)
        )
        if ours != base:
            return False
    tokens = []
    for side in ("ours", "base"):
        lines = [getattr(p, side) if isinstance(p, Conflict) else [p] for p in pieces]
        text = io.StringIO("".join(line for piece in lines for line in piece))
        skip = (tokenize.COMMENT, tokenize.NL)
        try:
            found = tokenize.generate_tokens(text.readline)
            tokens.append([(t.type, t.string) for t in found if t.type not in skip])
        except (tokenize.TokenError, SyntaxError):
            return False
    return tokens[0] == tokens[1]


@dataclass
class Change:
    """What one side puts in place of the release's lines start to end (none:
    it adds lines before the release's line start)."""

    start: int
    end: int
    lines: list[str]


def changes(base: list[str], side: list[str]) -> list[Change]:
    """Returns what side changes of base, line by line."""
    matcher = difflib.SequenceMatcher(None, base, side, False)
    return [
        Change(start, end, side[side_start:side_end])
        for tag, start, end, side_start, side_end in matcher.get_opcodes()
        if tag != "equal"
    ]


def split_deletions(one: list[Change], other: list[Change], base: list[str]):
    """Returns one side's changes with each block of lines it deletes split
    where the other side adds lines inside it that only blank lines part from
    the block's start or end: lines added before or after the block."""
    split = []
    for change in one:
        for added in other:
            at = added.start
            blank = [not line.strip() for line in base[change.start : change.end]]
            edge = all(blank[: at - change.start]) or all(blank[at - change.start :])
            inside = change.start < at < change.end and added.end == at
            if inside and edge and not change.lines:
                split.append(Change(change.start, at, []))
                change = Change(at, change.end, [])
        split.append(change)
    return split


def merged_line_by_line(conflict: Conflict) -> Optional[list[str]]:
    """Returns the conflict merged line by line, as kdiff3 and meld do: each
    release line as the side that changed it has it, each side's added lines
    where they stand; None where both sides change or add at one place."""
    forks = changes(conflict.base, conflict.ours)
    series = changes(conflict.base, conflict.theirs)
    forks = split_deletions(forks, series, conflict.base)
    series = split_deletions(series, forks, conflict.base)
    for one in forks:
        for other in series:
            overlap = one.start < other.end and other.start < one.end
            if overlap or one.start == one.end == other.start == other.end:
                return None
    added = {c.start: c.lines for c in forks + series if c.start == c.end}
    replaced = {c.start: c for c in forks + series if c.start != c.end}
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


def resolve(path: str, pieces: Pieces) -> Optional[tuple[str, list[Resolution]]]:
    """Returns the file with every conflict resolved, and the resolutions: the
    series' side where the conflicts are only in comments, else each merged
    line by line; None where one cannot be, or a Python file would not parse."""
    how = COMMENTS if path.endswith(".py") and only_comments(pieces) else LINES
    lines = []
    resolutions = []
    for piece in pieces:
        if not isinstance(piece, Conflict):
            lines.append(piece)
            continue
        merged = piece.theirs if how is COMMENTS else merged_line_by_line(piece)
        if merged is None:
            return None
        forks = [
            line for change in changes(piece.base, piece.ours) for line in change.lines
        ]
        resolutions.append(Resolution(path, len(lines) + 1, how, forks))
        lines += merged
    try:
        if how is LINES and path.endswith(".py"):
            ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        return None
    return "".join(lines), resolutions


# Conflicts the tool names


def forks_lines(pieces: Pieces, forks: str) -> str:
    """Returns "at your lines 12-14 and 30": the fork's side of each conflict in
    forks, the fork's copy of the file (an empty side: the line below it)."""
    # The merge with the fork's side of each conflict differs from the fork's
    # copy only where the other side's changes merged cleanly.
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
                line = fork_first + 1 + (start - first if tag == "equal" else 0)
                ranges.append(
                    f"{line}-{line + length - 1}" if length > 1 else f"{line}"
                )
                break
    if len(ranges) > 1:
        ranges[-2:] = [f"{ranges[-2]} and {ranges[-1]}"]
    return f"at your lines {', '.join(ranges)}" if ranges else ""


def copies_of_the_config(text: str, at: str) -> list[str]:
    """Returns "FUNCTION() at line N: `CODE`" for each copy (copy.deepcopy or
    copy.copy) of something named server_args that the fork makes in a
    function holding one of the lines at names."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    numbers = [int(number) for number in re.findall(r"\d+", at)]
    copies = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any(function.lineno <= n <= function.end_lineno for n in numbers):
            continue
        for call in ast.walk(function):
            callee = getattr(call, "func", None)
            name = getattr(callee, "attr", None) or getattr(callee, "id", "")
            if not isinstance(call, ast.Call) or name not in ("deepcopy", "copy"):
                continue
            if call.args and "server_args" in ast.get_source_segment(
                text, call.args[0]
            ):
                code = " ".join(ast.get_source_segment(text, call).split())
                copies.append(f"{function.name}() at line {call.lineno}: `{code}`")
    return copies


# The trial


@dataclass
class Step:
    """One patch applied, or one commit reverted, in the trial."""

    name: str  # how messages name it: the patch's file, or "reverting SHA"
    command: str  # the git command: am -3, or revert --no-edit
    argument: str  # what the git command takes: a patch file, or a commit
    patch: Optional[Patch] = None
    merged: bool = False  # the patch did not apply as it is: git merged it 3-way
    resolutions: list[Resolution] = field(default_factory=list)
    conflicts: dict[str, str] = field(default_factory=dict)  # the others, and why
    commit: str = ""  # the trial's commit


@dataclass
class Trial:
    """What git did in the trial worktree."""

    head: str
    steps: list[Step]
    lacks_a_base: bool = False  # git am stopped for a merge base the fork lacks

    @property
    def conflicts(self) -> list[Step]:
        """Returns the steps with conflicts the tool does not resolve."""
        return [step for step in self.steps if step.conflicts]


def resolve_or_name(fork: Fork, tree: Path, step: Step, name: bool) -> None:
    """Resolves each file git left in conflict, or records the conflict (and,
    with name, the fork's lines of it and its copies of the config there)."""
    status = git(tree, "status --porcelain -z -uno").stdout.split("\0")
    unmerged = {e[3:]: e[:2] for e in status if "U" in e[:2] or e[:2] in ("AA", "DD")}
    for path, code in unmerged.items():
        pieces = merge_stages(tree, path) if code == "UU" else None
        resolved = resolve(path, pieces) if pieces and step.patch else None
        if resolved:
            with open(tree / path, "w", encoding="utf-8", newline="") as file:
                file.write(resolved[0])
            step.resolutions += resolved[1]
            continue
        step.conflicts[path] = UNMERGED.get(code, f"git status {code}")
        at = forks_lines(pieces, fork.text(path)) if pieces and name else ""
        step.conflicts[path] += f", {at}" * bool(at)
        copies = copies_of_the_config(fork.text(path), at) if step.patch and at else []
        if copies:
            own = "your fork already builds its draft from its own copy of the config"
            keep = "where the series makes one with draft_server_args_copy(): keep one"
            step.conflicts[path] += f"; {own}, in {'; '.join(copies)}, {keep}"
    git(tree, "add -A --", *unmerged)


def run_trial(fork: Fork, paths: list[str], steps: list[Step], name: bool) -> Trial:
    """Runs each step's git command from HEAD, in a temporary worktree with only
    paths checked out, past every conflict; returns what git did."""
    folder = tempfile.mkdtemp(prefix="sglang-backport-trial-")
    tree = Path(folder, "fork")
    try:
        fork.output(f"{HOOKS_OFF} worktree add --detach --no-checkout", tree, fork.head)
        git_output(tree, "read-tree HEAD")
        tracked = set(git_output(tree, "ls-files -z").split("\0")) - {""}
        skipped = "".join(f"{path}\0" for path in sorted(tracked - set(paths)))
        git_output(tree, "update-index --skip-worktree -z --stdin", input=skipped)
        git_output(tree, "checkout-index -f --", *sorted(tracked & set(paths)))
        for step in steps:
            if step.patch:
                as_it_is = git(tree, "apply --check --cached", step.argument)
                step.merged = as_it_is.returncode != 0
            verb = step.command.split()[0]
            run = git(tree, f"{CHORES_OFF} {step.command}", step.argument)
            if run.returncode != 0 and not git(tree, "ls-files -u").stdout:
                if step.patch and missing_bases(fork, [step.patch]):
                    git(tree, "am --abort")
                    return Trial(fork.head, steps, lacks_a_base=True)
                failed = f"git {step.command} failed in a trial run"
                failed += f" (a hook or a setting of the fork?); {NOTHING_CHANGED}"
                raise Refused(f"{failed}; git said:{indented(run.stdout + run.stderr)}")
            if run.returncode != 0:
                resolve_or_name(fork, tree, step, name)
                # Resolved, the fork's hooks run; else it goes on to name the rest.
                chores = (
                    CHORES_OFF if not step.conflicts else f"{CHORES_OFF} {HOOKS_OFF}"
                )
                run = git(tree, f"{chores} {verb} --continue")
                if run.returncode != 0 and step.conflicts:  # nothing left of it
                    run = git(tree, f"{chores} {verb} --skip")
            if run.returncode != 0:
                failed = (
                    f"git {verb} --continue failed in a trial run; {NOTHING_CHANGED}"
                )
                raise Refused(f"{failed}; git said:{indented(run.stdout + run.stderr)}")
            step.commit = git_output(tree, "rev-parse HEAD")
        return Trial(git_output(tree, "rev-parse HEAD"), steps)
    finally:
        fork.git("worktree remove --force --force", tree)
        shutil.rmtree(folder, ignore_errors=True)


def apply_trial(fork: Fork, series: Series, patches: list[Patch], name: bool) -> Trial:
    """Runs `git am -3` of each patch in a trial; where git stopped for a merge
    base the fork's history lacks, gives the fork the bases and runs it again."""
    paths = [path for patch in patches for path in patch.paths]
    steps = [Step(p.name, "am -3", str(p.path), p) for p in patches]
    trial = run_trial(fork, paths, steps, name)
    if trial.lacks_a_base:
        supply_bases(fork, series, patches)
        steps = [Step(p.name, "am -3", str(p.path), p) for p in patches]
        trial = run_trial(fork, paths, steps, name)
    return trial


def edits_to(paths: list[str], series: Series) -> list[tuple]:
    """Returns the lines each patch of the series deletes and adds in paths."""
    return [
        (diff.old_path, diff.lines_of("-"), diff.lines_of("+"))
        for diff in series.diffs
        if diff.old_path in paths or diff.new_path in paths
    ]


def conflicts_message(fork: Fork, trial: Trial, hand: str) -> str:
    """Returns "; STEP: FILE (WHY), ..." for each step with a conflict, and the
    end of the refusal: the commands to do it by hand."""
    named = ""
    for step in trial.steps:
        # All or nothing: the conflicts it would resolve are named too.
        files = {r.path: f"{UNMERGED['UU']}, {r.how.short}" for r in step.resolutions}
        files.update(step.conflicts)
        if files:
            named += f"; {step.name}: "
            named += ", ".join(f"{path} ({why})" for path, why in files.items())
    verb = hand.split()[0]
    hand = f"`{fork.cd} git {hand}`, fix the files, git add them, git {verb} --continue"
    return f"{named}; {NOTHING_CHANGED}; to do it by hand: {hand} (or --abort)"


# Moving the fork


def snapshot(fork: Fork) -> list[str]:
    """Returns what git shows of HEAD, the index and the work tree."""
    views = ("rev-parse HEAD", "ls-files -s -z", "status --porcelain -z -uall")
    return [fork.git(view).stdout for view in views]


def fast_forward(fork: Fork, new_head: str, done: str) -> None:
    """Fast-forwards the fork's branch to new_head with git merge --ff-only;
    refuses, with the fork as it was, where git does not."""
    if fork.git("rev-parse HEAD").stdout.strip() != fork.head:
        raise Refused(f"HEAD of {fork.quoted} moved while this ran; run this again")
    before = snapshot(fork)
    index = fork.top / fork.output("rev-parse --git-path index")
    saved_index = index.read_bytes() if index.exists() else None
    run = fork.git("merge --ff-only --no-stat", new_head)
    if fork.git("rev-parse HEAD").stdout.strip() == new_head:
        undo = f"`{fork.cd} git reset --hard {fork.head[:12]}`"
        say(f"{done} branch {fork.branch} of {fork.quoted} (undo: {undo}):")
        log = fork.git("log --reverse --format=%h%x20%s", f"{fork.head}..").stdout
        print(indented(log)[1:])
        return
    said = f"git merge --ff-only:{indented(run.stdout + run.stderr)}"
    if snapshot(fork) == before:
        refused = f"git refused to move {fork.quoted} to the trial's commits"
        raise Refused(f"{refused}; {NOTHING_CHANGED}; {said}")
    # git moved the index and the files, then could not move the branch: they
    # go back, and the files it added with them.
    fork.git("read-tree --reset -u HEAD")
    if saved_index is not None:
        index.write_bytes(saved_index)
    failed = f"writing into {fork.quoted} failed"
    if snapshot(fork) != before:
        back = f"get back: `{fork.cd} git reset --hard {fork.head[:12]}`"
        raise NotRestored(f"{failed}, and it could not be restored; {back}; {said}")
    raise Refused(f"{failed}; it was restored as it was; {NOTHING_CHANGED}; {said}")


# Applying


def registered_to_the_runner(fork: Fork, series: Series, folder: Path, check: bool):
    """Returns the series with its shipped tests registered to the fork's own
    per-commit CPU suite where the fork's runner lacks theirs (copies of its
    patches in folder), and what to say of it ("" where nothing changed)."""
    suites = runners_cpu_suites(fork.text(RUNNER))
    if not suites or series.suite is None or series.suite in suites:
        return series, ""
    own = next((suite for suite in suites if "cpu" in suite), suites[0])
    registration = rf'^(\+register_cpu_ci\(.*suite=)"{re.escape(series.suite)}"'
    folder.mkdir()
    patches = []
    for patch in series.patches:
        text = patch.path.read_text(encoding="utf-8")
        registered = re.sub(registration, rf'\1"{own}"', text, flags=re.M)
        if registered != text:
            Path(folder, patch.name).write_text(registered, encoding="utf-8")
            patch = read_patch(Path(folder, patch.name))
        patches.append(patch)
    said = f"your fork's {RUNNER} has no CPU suite {series.suite!r}, which the"
    said += " shipped tests register to: the commits that add them"
    said += f" {'would register' if check else 'register'} them to {own!r}, its"
    said += " per-commit CPU suite, in this line of each:"
    series = dataclasses.replace(series, patches=patches)
    for path, lines in series.shipped_tests.items():
        for number, line in enumerate(lines, 1):
            if line.startswith("register_cpu_ci(") and f'"{own}"' in line:
                said += f"\n    {path}:{number}: {line.strip()}"
    return series, said


def apply(fork_path: str, check: bool) -> int:
    """Applies the patches the fork lacks, in a trial first; returns the exit status."""
    every = load_every_series()
    fork = open_fork(fork_path)
    for path, code in UPSTREAM_FIX.items():
        if code in fork.text(path):
            fix = f"{code[4:-1]}() in {path[len(SRT):]}, upstream's own fix"
            fix += " (sgl-project/sglang#33335, released in v0.5.17)"
            say(f"already fixed upstream: {fork.quoted} has {fix}; nothing to do")
            return 0
    version = version_of(fork)
    oldest = every[0].releases[0]
    if version[0] and version_key(version[0]) < version_key(oldest):
        on = f"{fork.quoted} is closest to {version[0]}"
        on += f" ({version[1]} says {version[0][1:]})"
        why = f"no series serves it, the oldest release served is {oldest}"
        lines = ", ".join(f"{' and '.join(s.releases)} ({s.label})" for s in every)
        has = f"this backport has series for {lines}"
        raise Refused(f"{on}: {why}; {has}; {NOTHING_CHANGED}")
    first, *neighbours = choose_lines(fork, every, version)
    with tempfile.TemporaryDirectory(prefix="sglang-backport-") as folder:
        suited = [
            registered_to_the_runner(fork, line, Path(folder, line.name), check)
            for line in (first, *neighbours)
        ]
        series, registered = suited[0]
        patches = patches_to_apply(fork, series, backport_commits(fork))
        if not patches:
            return 0
        trial = apply_trial(fork, series, patches, name=True)
        files = [path for step in trial.conflicts for path in step.conflicts]
        tried = []
        for other, said in suited[1:] if trial.conflicts else []:
            # One that changes those files as this one does conflicts there too.
            if edits_to(files, other) == edits_to(files, series):
                continue
            tried.append(other.name)
            other_trial = apply_trial(fork, other, other.patches, name=False)
            if not other_trial.conflicts:
                why = f"the {series.name} series conflicts in {', '.join(files)}; the"
                why += f" {other.name} series, of a neighbouring line with as much of"
                say(f"{why} the fork's machinery, applies")
                series, trial, registered = other, other_trial, said
                patches = other.patches
                break
        if trial.conflicts:
            refused = f"the {series.name} series does not apply to {fork.quoted}"
            refused += ", not even with a 3-way merge"
            if tried:
                tried = " and ".join(tried)
                refused += f" (nor do the neighbouring lines' series, {tried})"
            hand = " ".join(quote(series.folder / patch.name) for patch in patches)
            raise Refused(refused + conflicts_message(fork, trial, f"am -3 {hand}"))
        count = f"{len(patches)} of the {len(series.patches)} patches"
        if check:
            would = f"would apply {count} to branch {fork.branch} of {fork.quoted}"
            say(f"{would}; {NOTHING_CHANGED} (--check)")
        else:
            fast_forward(fork, trial.head, f"applied {count} to")
        say_what_was_done(fork, series, trial, check)
    if registered:
        say(registered)
    if not check:
        say("run the shipped tests on the fork's own tree, in its Python environment:")
        tests = " ".join(quote(path) for path in series.shipped_tests)
        print(f"    {fork.cd} PYTHONPATH=python python3 -m pytest {tests}")
    return 0


def say_what_was_done(fork: Fork, series: Series, trial: Trial, check: bool) -> None:
    """Says which commits git merged 3-way, and each conflict resolved."""
    merged = ", ".join(step.name for step in trial.steps if step.merged)
    if merged and check:
        say(f"would be merged 3-way with your fork's changes: {merged}")
    elif merged:
        review = f"review them (`{fork.cd} git log -p {fork.head[:12]}..`)"
        say(f"merged 3-way with your fork's changes: {merged}; {review}")
    for step in trial.steps:
        for resolution in step.resolutions:
            how, path = resolution.how, resolution.path
            where = f"the conflict in {path} at line {resolution.line}"
            said = f"{step.name}: resolved {where}, where {how.why}: {how.done}"
            review = f"`{fork.cd} git show {step.commit[:12]} -- {quote(path)}`"
            review = f" (review it: {review})"
            if check:
                said = f"{step.name}: would resolve {where}, where {how.why}"
                said += f": {how.would}"
                review = ""
            shown = "".join(line for line in resolution.forks_lines if line.strip())
            if shown:
                shown = indented(textwrap.dedent(shown))
                say(f"{said} these of your fork's{review}:{shown}")
            else:
                blank = len(resolution.forks_lines)
                say(f"{said} {blank} blank line(s) of your fork's{review}")


# Reverting


def fix_left(fork: Fork, rev: str, series: Optional[Series]) -> list[str]:
    """Returns what rev has of this backport's fix: its helper and its scope,
    and, for the series' line, each file where none of the draft writes is."""
    ours = fork.text(SERVER_ARGS, rev) + fork.text(RUNTIME_CONTEXT, rev)
    left = [label for code, label in OUR_FIX.items() if code in ours]
    for path, _ in series.draft_writes if series else []:
        writes = [code for where, code in series.draft_writes if where == path]
        text = fork.text(path, rev)
        if text and not any(holds(text, code) for code in writes):
            left.append(f"no draft write in {Path(path).name}")
    return list(dict.fromkeys(left))


def revert(fork_path: str, check: bool) -> int:
    """Reverts this backport's commits, in a trial first; returns the exit status."""
    every = load_every_series()
    fork = open_fork(fork_path)
    commits = backport_commits(fork)
    shas = [commit.sha for commit in commits]
    new_head = fork.head
    if commits:
        paths = fork.output("show -z --name-only --format=", *shas).split("\0")
        steps = [Step(f"reverting {sha[:12]}", "revert --no-edit", sha) for sha in shas]
        trial = run_trial(fork, paths, steps, name=True)
        for step in trial.conflicts:
            for path, why in step.conflicts.items():
                log = f"log --format=%H%x20%h%x20%s {step.argument}.. --"
                log = fork.git(log, path).stdout.splitlines()
                since = [line[41:] for line in log if line[:40] not in shas]
                why, _, at = why.partition(", at your lines")
                why += f"; changed since by {', '.join(since) or 'a merge'}"
                step.conflicts[path] = why + f", at your lines{at}" * bool(at)
        if trial.conflicts:
            refused = f"this backport does not revert in {fork.quoted}, not even 3-way"
            hand = f"revert --no-edit {' '.join(shas)}"
            raise Refused(refused + conflicts_message(fork, trial, hand))
        new_head = trial.head
    applies_to = commits[0].applies_to.split(",")[0].strip() if commits else None
    series = next((s for s in every if applies_to in s.releases), None)
    left = fix_left(fork, new_head, series)
    if left:
        where = f"after reverting {len(commits)}" if commits else "in none"
        fix = f"this backport's fix ({', '.join(left)}) {where} of its commits"
        find = f"{fork.cd} git log {quote('-Sdef draft_server_args_copy(')}"
        hand = f"revert it by hand (find it: `{find} -- {SERVER_ARGS}`)"
        fix += f" with the trailer {TRAILER}: squashed, or applied by hand; {hand}"
        raise Refused(f"{fork.quoted} has {fix}; {NOTHING_CHANGED}")
    count = f"{len(commits)} commit(s), newest first"
    if not commits:
        why = f"no commit of this backport ({TRAILER}) that is not reverted"
        say(f"nothing to revert: {fork.quoted} has {why}; nothing to do")
    elif check:
        say(f"would revert {count}; {NOTHING_CHANGED} (--check)")
    else:
        fast_forward(fork, new_head, f"reverted {count}, on")
        again = f"`python3 {quote(TOOL)} {fork.quoted}`"
        say(f"now merge v0.5.17, or apply again ({again})")
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
    parser.add_argument(
        "--check",
        action="store_true",
        help="say which line it finds and what it would do; change nothing",
    )
    args = parser.parse_args(argv)
    try:
        return (revert if args.revert else apply)(args.fork, args.check)
    except Refused as refusal:
        print(f"apply: error: {refusal}", file=sys.stderr)
        return refusal.exit_code


if __name__ == "__main__":
    sys.exit(main())

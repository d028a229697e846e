r"""The apply tool on forks no one chose: drifted forks of every release line,
made at random, each answered without a traceback, and a refusal changes nothing.

Real forks are upstream's main between two releases plus their own commits,
so the files a series changes drift in ways no hand-picked test lists. For
each release line with a series (patches/vX/), FORKS_PER_LINE forks are made
from the release's files (``release_repository``: the files the series
changes and the version files) and drifted around the hunks of the series'
patches that change those files (0001 and 0002)::

    R  "sglang VERSION"                     <- tag vVERSION
    |
    D1 "fork: DRIFT" ... Dn                 <- main       (even forks)

    I  "fork: our tree, imported"           <- main       (odd forks)

The odd forks are squashed imports: one commit with the drifted files and no
history, so git lacks the release's copy of each file and the tool takes the
merge bases from the release's wheel in .build/wheels (the package index is
refused: ``PIP_NO_INDEX``). On every other line, the fourth fork has the
fork's header atop each file, so that no file is as a release has it and the
tool chooses the line by trial merges: with the release's history, as
upstream's main after the release is (the merge bases there for the trials),
on every fourth line, and an import on the lines between::

    R -- D1 ... Dn -- H "fork: our header atop every file"   <- main

The drifts (``DRIFTS``), each at a hunk chosen at random: comment and code
lines added above, below and inside the lines the hunk changes; a line changed
in the hunk or next to it; the lines the hunk changes deleted; a file cut short
above them (a conflict whose fork side is empty, at the end of the file); a
file deleted or moved; a name in the hunk renamed through its file, a block
reindented under a new ``if``, an import line edited, a file as the next
release has it (upstream's main drifting). A fork has one to four of them;
each line deals its forks' drifts from a deck of all of them, shuffled. A
drift that would leave a file that does not parse is drawn again.

On every fork the tool must answer: exit 0 or 1, something said, no
traceback. Exit 1 leaves HEAD, refs, the index and every file as they were,
and names each file where plain ``git am -3`` of the series it tried stops
(the series whose patches its `git am -3` to do by hand names; where it names
none, at least a file under python/). Exit 0 adds commits: the series of the
fork's line or a neighbouring line's (by their Applies-To trailer), Python
files that parse without conflict markers, every code line the fork added
still there, a clean work tree, and a second run that does nothing.

Where the tool's ``--help`` lists ``--check``, ``--check`` runs first on every
other fork (half the cost, every kind of fork on some line): it answers as
above, changes nothing, and exits as the run then does. Where it does not,
``test_check_agrees_with_the_run_on_half_the_generated_forks`` is skipped and
says so.

A case is replayed alone by its seed, which each failure prints:
``GENERATED_FORKS_SEED=S GENERATED_FORKS_CASE=vX:N python3 THIS_FILE``;
``GENERATED_FORKS_KEEP=1`` keeps the forks and prints where they are. The
drifts a seed makes depend on this file's DRIFTS and FORKS_PER_LINE too.
"""

import ast
import builtins
import difflib
import functools
import keyword
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

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

register_cpu_ci(est_time=70, suite="base-a-test-cpu")

# Every release line with a series, oldest first.
LINES = sorted(
    (folder.name for folder in (ROOT / "patches").glob("v*") if folder.is_dir()),
    key=lambda name: [int(part) for part in re.findall(r"\d+", name)],
)
FORKS_PER_LINE = 4
SEED = os.environ.get("GENERATED_FORKS_SEED", "47")
ONLY = os.environ.get("GENERATED_FORKS_CASE")  # "vX:N": that fork alone
KEEP = os.environ.get("GENERATED_FORKS_KEEP") == "1"
# The releases whose files are unpacked, oldest first: a file "as the next
# release has it" comes from here.
RELEASES = sorted(
    [path.name for path in (ROOT / ".build" / "releases").glob("v*")] + ["v0.5.16"],
    key=lambda name: [int(part) for part in re.findall(r"\d+", name)],
)
CONFLICT_MARKER = re.compile(r"^(<{7}|={7}|>{7})( |$)", re.M)
HEADER = "# Copyright 2026 the fork's authors; imported from our monorepo."
TOOL_TIMEOUT = 300

# Drift and case machinery


@dataclass
class Hunk:
    """A hunk of a series' patch that changes a file the fork has."""

    path: str
    old: list[str]  # the release's lines it keeps or deletes, in order
    first: int  # the gaps (0: before old[0]) between which it changes lines
    last: int


def read_hunks(patch: Path) -> list[Hunk]:
    """The hunks of patch that change an existing file."""
    hunks = []
    lines = patch.read_text().splitlines()
    path = None
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if line.startswith("--- "):
            path = line[len("--- a/") :] if line.startswith("--- a/") else None
        header = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
        if header is None:
            continue
        old_count = int(header[2] or 1)
        new_count = int(header[3] or 1)
        old, changed = [], []
        while old_count or new_count:
            tag, text = lines[number][:1], lines[number][1:]
            number += 1
            if tag == "\\":
                continue
            if tag in (" ", "-"):
                old_count -= 1
                if tag == "-":
                    changed += [len(old), len(old) + 1]
                old.append(text)
            if tag in (" ", "+"):
                new_count -= 1
                if tag == "+":
                    changed.append(len(old))
        if path is not None and old:
            hunks.append(Hunk(path, old, min(changed), max(changed)))
    return hunks


def line_hunks(line: str) -> list[Hunk]:
    """The hunks of the line's series that change a file the fork has."""
    hunks = []
    for patch in series(line):
        hunks += read_hunks(patch)
    return hunks


def parses(path: str, text: str) -> bool:
    """Whether text is Python that parses, for a Python file."""
    if not path.endswith(".py"):
        return True
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def indentation(line: str) -> str:
    """The line's leading white space."""
    return line[: len(line) - len(line.lstrip())]


@dataclass
class Drifting:
    """A fork's files while drifts are made: what each drift did, and the code
    each added, which a fork that got the series must still have."""

    line: str
    files: dict[str, str]
    hunks: list[Hunk]
    rng: random.Random
    count: int = 0
    probes: dict[str, list[str]] = field(default_factory=dict)

    def lines(self, path: str) -> list[str]:
        """The file's lines, without line ends."""
        return self.files[path].split("\n")

    def new_name(self, stem: str) -> str:
        """A name no file of the fork has: fork_STEM_N."""
        self.count += 1
        return f"fork_{stem}_{self.count}"

    def pick_hunk(self) -> Optional[tuple[Hunk, list[Optional[int]]]]:
        """A hunk the fork still has, at random, with where each of its old
        lines is in the fork's file."""
        hunks = [hunk for hunk in self.hunks if hunk.path in self.files]
        self.rng.shuffle(hunks)
        for hunk in hunks:
            where = locate(hunk.old, self.lines(hunk.path))
            if where is not None:
                return hunk, where
        return None


def locate(old: list[str], lines: list[str]) -> Optional[list[Optional[int]]]:
    """The line number in lines of each line of old (None where it is gone),
    around one of its longest lines; None where too little of it is left."""
    for longest in sorted(set(old), key=len, reverse=True)[:5]:
        if not longest.strip() or longest not in lines:
            continue
        low = max(0, lines.index(longest) - len(old) - 10)
        window = lines[low : lines.index(longest) + len(old) + 10]
        matcher = difflib.SequenceMatcher(None, old, window, autojunk=False)
        where: list[Optional[int]] = [None] * len(old)
        for block in matcher.get_matching_blocks():
            for offset in range(block.size):
                where[block.a + offset] = low + block.b + offset
        if sum(number is not None for number in where) * 2 >= len(old):
            return where
    return None


def at_gap(where: list[Optional[int]], gap: int) -> int:
    """The line number in the file where a line put at the hunk's gap goes."""
    for number in range(gap - 1, -1, -1):
        if where[number] is not None:
            return where[number] + 1
    return next(number for number in where if number is not None)


def insert(fork: Drifting, path: str, at: int, line: str) -> bool:
    """Inserts line before line number at, indented as the line below or above
    it; returns whether the file still parses (and is changed)."""
    lines = fork.lines(path)
    around = [lines[at] if at < len(lines) else "", lines[at - 1] if at else ""]
    for neighbour in around:
        if not neighbour.strip():
            continue
        changed = lines[:at] + [indentation(neighbour) + line] + lines[at:]
        text = "\n".join(changed)
        if parses(path, text):
            fork.files[path] = text
            return True
    return False


def pick_position(fork: Drifting, where: str) -> Optional[tuple[Hunk, int]]:
    """A hunk and a line number above, below or inside the lines it changes."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, found = picked
    first = at_gap(found, hunk.first)
    last = at_gap(found, hunk.last)
    if where == "above":
        return hunk, max(0, first - fork.rng.randint(0, 4))
    if where == "below":
        end = len(fork.lines(hunk.path))
        return hunk, min(end, last + fork.rng.randint(0, 4))
    if last - first < 2:
        return hunk, first  # where the hunk adds its lines
    return hunk, fork.rng.randint(first + 1, last - 1)


def add_comment(where: str) -> Callable[[Drifting], Optional[str]]:
    """A drift: a comment line of the fork's above, below or inside a hunk."""

    def drift(fork: Drifting) -> Optional[str]:
        picked = pick_position(fork, where)
        if picked is None:
            return None
        hunk, at = picked
        note = f"# fork: note {fork.new_name('note')}"
        if not insert(fork, hunk.path, at, note):
            return None
        return f"a comment line {where} a hunk, at {hunk.path}:{at + 1}"

    drift.__name__ = f"comment_{where}"
    return drift


def add_code(where: str) -> Callable[[Drifting], Optional[str]]:
    """A drift: a code line of the fork's above, below or inside a hunk (a
    statement, or an argument inside a call)."""

    def drift(fork: Drifting) -> Optional[str]:
        picked = pick_position(fork, where)
        if picked is None:
            return None
        hunk, at = picked
        name = fork.new_name("probe")
        for code in (f"{name} = None", f"{name}=None,"):
            if insert(fork, hunk.path, at, code):
                fork.probes.setdefault(hunk.path, []).append(name)
                return f"a code line {where} a hunk, at {hunk.path}:{at + 1}: {code}"
        return None

    drift.__name__ = f"code_{where}"
    return drift


def change_line(fork: Drifting, path: str, number: int) -> Optional[str]:
    """Changes the line: a name on it renamed (code), or reworded (a comment)."""
    lines = fork.lines(path)
    line = lines[number]
    if not line.strip():
        return None
    if line.lstrip().startswith("#"):
        lines[number] = line + " (fork)"
        fork.files[path] = "\n".join(lines)
        return f"{path}:{number + 1} reworded"
    names = [
        match
        for match in re.finditer(r"\b[A-Za-z_]\w*\b", line)
        if not keyword.iskeyword(match[0]) and match[0] != "self"
    ]
    fork.rng.shuffle(names)
    for match in names:
        new = f"{match[0]}_{fork.new_name('edit')}"
        lines[number] = line[: match.start()] + new + line[match.end() :]
        text = "\n".join(lines)
        if parses(path, text):
            fork.files[path] = text
            fork.probes.setdefault(path, []).append(new)
            return f"{path}:{number + 1} changed: {match[0]} -> {new}"
    return None


def change_in_hunk(fork: Drifting) -> Optional[str]:
    """A drift: a line of a hunk (one it keeps or one it deletes) changed."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    numbers = [number for number in where if number is not None]
    said = change_line(fork, hunk.path, fork.rng.choice(numbers))
    return said and f"a line in a hunk: {said}"


def change_next_to_hunk(fork: Drifting) -> Optional[str]:
    """A drift: a line just above or below a hunk changed."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    numbers = [number for number in where if number is not None]
    number = min(numbers) - fork.rng.randint(1, 3)
    if fork.rng.random() < 0.5:
        number = max(numbers) + fork.rng.randint(1, 3)
    if not 0 <= number < len(fork.lines(hunk.path)):
        return None
    said = change_line(fork, hunk.path, number)
    return said and f"a line next to a hunk: {said}"


def delete_changed_lines(fork: Drifting) -> Optional[str]:
    """A drift: the lines a hunk changes deleted in the fork, with up to two
    of their neighbours (so the fork's side of a conflict can be empty)."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    start = max(0, hunk.first - fork.rng.randint(0, 2))
    end = min(len(where), max(hunk.last, hunk.first + 1) + fork.rng.randint(0, 2))
    numbers = {where[gap] for gap in range(start, end)} - {None}
    if not numbers:
        return None
    lines = fork.lines(hunk.path)
    text = "\n".join(line for n, line in enumerate(lines) if n not in numbers)
    if not parses(hunk.path, text):
        return None
    fork.files[hunk.path] = text
    shown = f"{min(numbers) + 1}-{max(numbers) + 1}"
    return f"the lines a hunk changes deleted: {hunk.path}:{shown}"


def cut_file_short(fork: Drifting) -> Optional[str]:
    """A drift: a file cut short just above the lines a hunk changes, as a
    module reduced to its head (the fork's side of a conflict there is empty,
    at the end of the file)."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    lines = fork.lines(hunk.path)
    at = at_gap(where, hunk.first)
    for cut in range(at, max(0, at - 40), -1):
        text = "\n".join(lines[:cut]) + "\n"
        if parses(hunk.path, text):
            fork.files[hunk.path] = text
            return f"{hunk.path} cut short after line {cut}, of {len(lines)}"
    return None


def changed_files(fork: Drifting) -> list[str]:
    """The fork's files that the series changes."""
    return sorted({hunk.path for hunk in fork.hunks} & set(fork.files))


def delete_file(fork: Drifting) -> Optional[str]:
    """A drift: a file the series changes deleted."""
    files = changed_files(fork)
    if len(files) < 2:
        return None
    path = fork.rng.choice(files)
    del fork.files[path]
    return f"{path} deleted"


def move_file(fork: Drifting) -> Optional[str]:
    """A drift: a file the series changes moved (git mv), in its folder or
    into a new one."""
    files = changed_files(fork)
    if not files:
        return None
    path = fork.rng.choice(files)
    folder, name = path.rsplit("/", 1)
    new = fork.rng.choice([f"{folder}/fork_{name}", f"{folder}/legacy/{name}"])
    fork.files[new] = fork.files.pop(path)
    for hunk in fork.hunks:
        if hunk.path == path:
            hunk.path = new
    if path in fork.probes:
        fork.probes[new] = fork.probes.pop(path)
    return f"{path} moved to {new}"


def rename_neighbour(fork: Drifting) -> Optional[str]:
    """A drift: a name used in a hunk's lines renamed through its file, as
    upstream renames a variable or helper."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    lines = fork.lines(hunk.path)
    text = " ".join(lines[number] for number in where if number is not None)
    names = sorted(
        {
            name
            for name in re.findall(r"(?<![\w.'\"])[a-z_][a-z0-9_]{3,}\b", text)
            if not keyword.iskeyword(name)
            and not name.startswith("__")
            and name not in dir(builtins)
            and name != "self"
        }
    )
    if not names:
        return None
    name = fork.rng.choice(names)
    new = f"{name}_{fork.new_name('renamed')}"
    renamed = re.sub(rf"\b{name}\b", new, fork.files[hunk.path])
    if not parses(hunk.path, renamed):
        return None
    fork.files[hunk.path] = renamed
    fork.probes.setdefault(hunk.path, []).append(new)
    return f"{name} renamed {new} through {hunk.path}"


def reindent_block(fork: Drifting) -> Optional[str]:
    """A drift: statements around a hunk moved under a new `if` (reindented)."""
    picked = fork.pick_hunk()
    if picked is None:
        return None
    hunk, where = picked
    numbers = [number for number in where if number is not None]
    lines = fork.lines(hunk.path)
    name = fork.new_name("flag")
    for _ in range(8):
        start = fork.rng.randint(min(numbers), max(numbers))
        end = fork.rng.randint(start, max(numbers)) + 1
        indent = indentation(lines[start])
        if not lines[start].strip() or not indent:
            continue
        block = [f"    {line}" if line.strip() else line for line in lines[start:end]]
        changed = lines[:start] + [f"{indent}if {name}:"] + block + lines[end:]
        text = "\n".join(changed)
        if parses(hunk.path, text):
            fork.files[hunk.path] = text
            fork.probes.setdefault(hunk.path, []).append(name)
            shown = f"{start + 1}-{end}"
            return f"{hunk.path}:{shown} reindented under `if {name}:`"
    return None


def edit_import(fork: Drifting) -> Optional[str]:
    """A drift: an import line of a file the series changes edited to import
    one more name."""
    files = changed_files(fork)
    if not files:
        return None
    path = fork.rng.choice(files)
    lines = fork.lines(path)
    imports = [
        number
        for number, line in enumerate(lines)
        if re.match(r"\s*(from \S+ )?import \S", line)
        and not line.rstrip().endswith("\\")
    ]
    if not imports:
        return None
    number = fork.rng.choice(imports)
    name = fork.new_name("helper")
    line = lines[number]
    if line.rstrip().endswith("("):
        lines.insert(number + 1, f"{indentation(line)}    {name},")
    else:
        code, hash_sign, comment = line.partition("  #")
        lines[number] = f"{code.rstrip()}, {name}" + hash_sign + comment
    text = "\n".join(lines)
    if not parses(path, text):
        return None
    fork.files[path] = text
    fork.probes.setdefault(path, []).append(name)
    return f"{path}:{number + 1}, an import, also imports {name}"


def next_releases_file(fork: Drifting) -> Optional[str]:
    """A drift: a file the series changes as the next release has it (the one
    before, for the newest), as on upstream's main after the release."""
    files = changed_files(fork)
    if not files:
        return None
    path = fork.rng.choice(files)
    release = RELEASES[RELEASES.index(fork.line) + 1 :] or RELEASES[-2:-1]
    release = release[0]
    source = unpacked(release) / path[len("python/") :]
    if not source.is_file() or source.read_text() == fork.files[path]:
        return None
    fork.files[path] = source.read_text()
    return f"{path} as {release} has it"


DRIFTS = [
    add_comment("above"),
    add_comment("below"),
    add_comment("inside"),
    add_code("above"),
    add_code("below"),
    add_code("inside"),
    change_in_hunk,
    change_next_to_hunk,
    delete_changed_lines,
    cut_file_short,
    delete_file,
    move_file,
    rename_neighbour,
    reindent_block,
    edit_import,
    next_releases_file,
]


@dataclass
class Case:
    """One generated fork of a line: how it was made."""

    line: str
    number: int
    drifts: list[str] = field(default_factory=list)  # what each drift did
    probes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def history(self) -> bool:
        """Whether the fork's history has the release's commit: the even forks,
        and the fourth of every fourth line (upstream's main after it)."""
        return self.number % 2 == 0 or self.no_file_as_released == "main"

    @property
    def no_file_as_released(self) -> str:
        """Where no file is as a release has it (the fork's header in each):
        "main" (with the release's history) for the fourth fork of every
        fourth line, "import" for that of the lines between those; "" for the
        others, as the tool's trial merges of every series cost the most."""
        if self.number != 3 or LINES.index(self.line) % 2:
            return ""
        return "main" if LINES.index(self.line) % 4 == 0 else "import"

    @property
    def checked(self) -> bool:
        """Whether --check runs on the fork too: every other one."""
        return (LINES.index(self.line) + self.number) % 2 == 0

    def __str__(self) -> str:
        """The case, its drifts, and how to replay it alone."""
        kind = "with the release's history"
        if not self.history:
            kind = "a squashed import, no history"
        if self.no_file_as_released:
            kind += ", no file as a release has it"
        replay = (
            f"GENERATED_FORKS_SEED={SEED} GENERATED_FORKS_CASE={self.line}:"
            f"{self.number} python3 {Path(__file__).relative_to(ROOT)}"
        )
        drifts = "".join(f"\n    - {drift}" for drift in self.drifts)
        return f"{self.line} fork {self.number}, {kind} (replay: {replay});{drifts}"


def dealt_drifts(line: str, number: int) -> list[Callable]:
    """The drifts of the line's fork number: each line deals its forks one to
    four drifts from a deck of every drift, shuffled by the seed."""
    rng = random.Random(f"{SEED}:{line}")
    deck = DRIFTS * 2
    rng.shuffle(deck)
    counts = [rng.randint(1, 4) for _ in range(FORKS_PER_LINE)]
    start = sum(counts[:number])
    return deck[start : start + counts[number]]


# The forks


@functools.lru_cache(maxsize=None)
def release_fork(line: str) -> Path:
    """The release's repository, made once: its files in one commit, tagged."""
    fork = TMP / f"release-{line}"
    release_repository(fork, line)
    git(fork, "tag", line)
    return fork


def tracked_files(fork: Path) -> dict[str, str]:
    """The text of each file at HEAD."""
    names = git(fork, "ls-files", "-z").split("\0")
    return {name: (fork / name).read_text() for name in names if name}


def write_files(fork: Path, files: dict[str, str]) -> None:
    """Makes the work tree's files those (and only those) of files."""
    for name in git(fork, "ls-files", "-z").split("\0"):
        if name and name not in files:
            (fork / name).unlink()
    for name, text in files.items():
        (fork / name).parent.mkdir(parents=True, exist_ok=True)
        (fork / name).write_text(text)


def identify(fork: Path) -> None:
    """Gives the fork's git a committer, as a maintainer's has."""
    git(fork, "config", "user.name", "Fork Maintainer")
    git(fork, "config", "user.email", "fork@example.invalid")


def make_fork(case: Case) -> Path:
    """Makes the case's fork: the release with its drifts, as commits after
    the release's or as one imported commit."""
    base = release_fork(case.line)
    # No line's name in the path: a refusal that names the line names it.
    folder = TMP / f"fork-{LINES.index(case.line)}-{case.number}"
    fork = Drifting(
        line=case.line,
        files=tracked_files(base),
        hunks=line_hunks(case.line),
        rng=random.Random(f"{SEED}:{case.line}:{case.number}"),
    )
    if case.history:
        git(TMP, "clone", "-q", str(base), str(folder))
    else:
        git(TMP, "init", "-q", "-b", "main", str(folder))
    identify(folder)
    for drift in dealt_drifts(case.line, case.number):
        said = None
        for _ in range(10):
            said = drift(fork)
            if said:
                break
            drift = fork.rng.choice(DRIFTS)
        if said is None:
            continue
        case.drifts.append(said)
        if case.history:
            write_files(folder, fork.files)
            commit_everything(folder, f"fork: {said[:60]}")
    if case.no_file_as_released:
        for path in changed_files(fork):
            fork.files[path] = f"{HEADER}\n{fork.files[path]}"
        case.drifts.append("the fork's header line atop every file the series changes")
        if case.history:
            write_files(folder, fork.files)
            commit_everything(folder, "fork: our header atop every file")
    for path, names in fork.probes.items():
        text = fork.files.get(path, "")
        case.probes[path] = [name for name in names if has_name(text, name)]
    if not case.history:
        write_files(folder, fork.files)
        commit_everything(folder, "fork: our tree, imported")
    return folder


def has_name(text: str, name: str) -> bool:
    """Whether text uses the name."""
    return re.search(rf"\b{name}\b", text) is not None


def run_tool(fork: Path, *options: str) -> subprocess.CompletedProcess:
    """Runs the tool on fork."""
    command = [sys.executable, str(TOOL), *options, str(fork)]
    try:
        return subprocess.run(
            command, env=ENV, capture_output=True, text=True, timeout=TOOL_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        said = f"(did not finish in {TOOL_TIMEOUT} s)"
        return subprocess.CompletedProcess(command, -1, "", said)


def state(fork: Path) -> dict:
    """What a refusal must not change: HEAD, refs, the index's entries and
    bytes, the status and every file (``snapshot``)."""
    seen = snapshot(fork)
    seen["refs"] = git(fork, "for-each-ref")
    seen["entries"] = git(fork, "ls-files", "-s")
    return seen


def changed_parts(before: dict, after: dict) -> list[str]:
    """The parts of the state that differ."""
    return [part for part in before if before[part] != after.get(part)]


def git_am_stops(line: str, fork: Path) -> set[str]:
    """The files plain `git am -3` of the line's series stops on, in a scratch
    clone given the release's blobs (as the tool gives them from the wheel),
    going on past each stop."""
    scratch = Path(tempfile.mkdtemp(dir=TMP, prefix="am-"))
    clone = scratch / "fork"
    git(TMP, "clone", "-q", str(fork), str(clone))
    identify(clone)
    release = unpacked(line)
    bases = [
        str(release / path[len("python/") :])
        for path in {hunk.path for hunk in line_hunks(line)}
        if (release / path[len("python/") :]).is_file()
    ]
    git(clone, "hash-object", "-w", "--", *bases)
    patches = [str(patch) for patch in series(line)]
    stops = set()
    run = subprocess.run(
        ["git", "am", "-3", *patches], cwd=clone, env=ENV, capture_output=True
    )
    for _ in patches:
        if run.returncode == 0:
            break
        said = run.stdout.decode(errors="replace") + run.stderr.decode(errors="replace")
        unmerged = git(clone, "diff", "--name-only", "--diff-filter=U").split()
        stops |= set(unmerged)
        stops |= set(re.findall(r"error: (?:patch failed: )?([^\s:]+):", said))
        if unmerged:
            git(clone, "add", "-A", "--", *unmerged)
            continue_ = ["git", "-c", "core.editor=:", "am", "--continue"]
        else:
            continue_ = ["git", "am", "--skip"]
        run = subprocess.run(continue_, cwd=clone, env=ENV, capture_output=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return {path for path in stops if "/" in path}


def python_files_changed(fork: Path, start: str) -> list[str]:
    """The Python files the commits after start change, that HEAD has."""
    names = git(fork, "diff", "--name-only", "--diff-filter=AMR", start, "HEAD")
    return [name for name in names.split() if name.endswith(".py")]


@dataclass
class Outcome:
    """What the tool did on one generated fork, and what was wrong with it."""

    case: Case
    run: subprocess.CompletedProcess
    problems: list[str]
    check: Optional[subprocess.CompletedProcess] = None
    check_problems: list[str] = field(default_factory=list)


def answer_problems(run: subprocess.CompletedProcess, name: str) -> list[str]:
    """What is wrong with a run as an answer: its status, a traceback, silence."""
    said = run.stdout + run.stderr
    problems = []
    if run.returncode not in (0, 1):
        problems.append(f"{name} exited {run.returncode}, not 0 or 1")
    if "Traceback" in said:
        problems.append(f"{name} ended in a traceback")
    if not said.strip():
        problems.append(f"{name} said nothing")
    return problems


def try_case(case: Case) -> Outcome:
    """Makes the case's fork, runs the tool on it (--check first, on every
    other fork, where the tool has it) and says what went wrong."""
    fork = make_fork(case)
    before = state(fork)
    start = git(fork, "rev-parse", "HEAD")
    check = None
    check_problems = []
    if case.checked and tool_has_check():
        check = run_tool(fork, "--check")
        check_problems = answer_problems(check, "--check")
        changed = changed_parts(before, state(fork))
        if changed:
            check_problems.append(f"--check changed the fork: {', '.join(changed)}")
            before = state(fork)
    run = run_tool(fork)
    problems = answer_problems(run, "the run")
    after = state(fork)
    if run.returncode != 0:
        changed = changed_parts(before, after)
        if changed:
            problems.append(f"the refusal changed the fork: {', '.join(changed)}")
    if run.returncode == 1 and not problems:
        problems += refusal_problems(case, fork, run.stdout + run.stderr)
    if run.returncode == 0 and after["HEAD"] == before["HEAD"]:
        problems.append("the run exited 0 and made no commit on a fork without the fix")
    elif run.returncode == 0:
        problems += applied_problems(case, fork, start)
    if check is not None and check.returncode != run.returncode:
        check_problems.append(
            f"--check exited {check.returncode}, the run {run.returncode}"
        )
    if not KEEP:
        shutil.rmtree(fork)
    return Outcome(case, run, problems, check, check_problems)


def names_path(said: str, path: str) -> bool:
    """Whether said names the path (not a longer one that ends with it)."""
    return re.search(rf"(?<![\w/.-]){re.escape(path)}(?![\w/.-])", said) is not None


def refusal_problems(case: Case, fork: Path, said: str) -> list[str]:
    """What is wrong with a refusal: a file that plain git am -3 stops on that
    it does not name. The series is the one whose patches the refusal names
    (in its `git am -3` to do by hand); where it names none or several, the
    refusal must name some file under python/."""
    named = {line for line in LINES if f"patches/{line}/" in said}
    if len(named) != 1:
        if "python/" not in said:
            return ["the refusal names no file under python/"]
        return []
    line = named.pop()
    missing = sorted(
        path for path in git_am_stops(line, fork) if not names_path(said, path)
    )
    if missing:
        return [f"the refusal does not name where git am -3 of {line} stops: {missing}"]
    return []


def applied_problems(case: Case, fork: Path, start: str) -> list[str]:
    """What is wrong with a fork the tool applied the series to."""
    problems = []
    for name in python_files_changed(fork, start):
        text = (fork / name).read_text()
        if not parses(name, text):
            problems.append(f"{name} does not parse after the run")
        if CONFLICT_MARKER.search(text):
            problems.append(f"{name} holds conflict markers after the run")
    for path, names in case.probes.items():
        text = (fork / path).read_text() if (fork / path).is_file() else ""
        lost = [name for name in names if not has_name(text, name)]
        if lost:
            problems.append(f"the fork's code in {path} is gone: {', '.join(lost)}")
    if git(fork, "status", "--porcelain"):
        problems.append("the work tree is not clean after the run")
    applied = applied_line(fork, start)
    if applied is None or abs(LINES.index(applied) - LINES.index(case.line)) > 1:
        got = f"the {applied} series" if applied else "commits of no one series"
        problems.append(
            f"the fork of {case.line} got {got}, not its line's or a neighbouring"
            " line's"
        )
    head = git(fork, "rev-parse", "HEAD")
    again = run_tool(fork)
    problems += answer_problems(again, "the second run")
    if again.returncode != 0 or git(fork, "rev-parse", "HEAD") != head:
        said = (again.stdout + again.stderr)[-1500:]
        problems.append(
            f"a second run did something (exit {again.returncode}):\n{said}"
        )
    return problems


def applied_line(fork: Path, start: str) -> Optional[str]:
    """The line whose series the commits after start are: the one whose
    patches' Applies-To trailer they carry."""
    release = r"v\d[\w.]*"
    trailer = "%(trailers:key=Applies-To,valueonly)"
    log = git(fork, "log", f"--format={trailer}", f"{start}..")
    for line in LINES:
        said = re.search(r"^Applies-To: (.*)$", series(line)[0].read_text(), re.M)
        if set(re.findall(release, said[1])) == set(re.findall(release, log)):
            return line
    return None


@functools.lru_cache(maxsize=None)
def tool_has_check() -> bool:
    """Whether the tool's --help lists --check."""
    run = subprocess.run(
        [sys.executable, str(TOOL), "--help"], env=ENV, capture_output=True, text=True
    )
    return "--check" in run.stdout


def cases() -> list[Case]:
    """Every generated fork: FORKS_PER_LINE of each line, or the one named."""
    every = [Case(line, number) for line in LINES for number in range(FORKS_PER_LINE)]
    if ONLY:
        every = [case for case in every if f"{case.line}:{case.number}" == ONLY]
        if not every:
            raise ValueError(f"GENERATED_FORKS_CASE={ONLY} names no case")
    return every


@functools.lru_cache(maxsize=None)
def outcomes() -> tuple[Outcome, ...]:
    """The tool's outcome on every generated fork, found once for the module."""
    return tuple(try_case(case) for case in cases())


def setUpModule() -> None:
    """Makes the scratch folder."""
    global TMP
    TMP = make_scratch("generated-forks-", LINES)


def tearDownModule() -> None:
    """Removes the scratch folder, or says where it is."""
    if KEEP:
        print(f"the generated forks are in {TMP}", file=sys.stderr)
    else:
        shutil.rmtree(TMP, ignore_errors=True)


def report(
    outcome: Outcome, problems: list[str], run: subprocess.CompletedProcess
) -> str:
    """The failure message: the problems, the case and what the tool said."""
    said = (run.stdout + run.stderr)[-3000:]
    listed = "".join(f"\n  {problem}" for problem in problems)
    return f"{listed}\n{outcome.case}\nthe tool said (exit {run.returncode}):\n{said}"


class TestGeneratedForks(CustomTestCase):
    def test_every_generated_fork_is_applied_or_refused_unchanged(self):
        for outcome in outcomes():
            case = outcome.case
            with self.subTest(line=case.line, fork=case.number, seed=SEED):
                if outcome.problems:
                    self.fail(report(outcome, outcome.problems, outcome.run))

    def test_check_agrees_with_the_run_on_half_the_generated_forks(self):
        if not tool_has_check():
            self.skipTest("the tool's --help lists no --check yet")
        for outcome in outcomes():
            case = outcome.case
            if not case.checked:
                continue
            with self.subTest(line=case.line, fork=case.number, seed=SEED):
                if outcome.check_problems:
                    self.fail(report(outcome, outcome.check_problems, outcome.check))


if __name__ == "__main__":
    unittest.main()

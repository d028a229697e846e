#!/usr/bin/env python3
"""Apply this backport's patch series to an SGLang v0.5.16 fork, or change nothing.

    python3 scripts/fork/apply_to_fork.py FORK

FORK is a git work tree with SGLang's layout (``python/sglang/``), on the
branch that should get the commits. The series is ``patches/*.patch`` of this
repository, in file-name order; each patch becomes one commit, made by
``git am -3`` (``git am -3 patches/*.patch`` in the fork does the same without
these checks). Plain git underneath:

1. The fork: a work tree with ``python/sglang/`` on a branch with a commit, no
   git operation in progress.
2. What the fork already has, decided from its code, never from tags or
   version strings. Every patch present (it reverse-applies): nothing to do.
   Upstream's own fix (v0.5.17's ``draft_server_args_copy`` in
   ``speculative/draft_worker_common.py``, or the per-runner
   ``_resolve_draft_load_format`` of later releases): nothing to do. A patch
   merged 3-way counts as present when every line it adds is in its file.
   This backport's fix in another revision (its helper, its publishing scope
   and none of the five draft writes left): nothing to do. Part of the fix that a
   missing patch adds, beside what is still missing: refused, with the list.
   Otherwise the patches already present (say an earlier, shorter series)
   are skipped and the rest applied.
3. The work tree: no tracked change; nothing untracked where the series
   writes; every directory written to writable, no immutable file replaced.
4. Where the fork's history lacks sglang v0.5.16's version of a file the
   series changes, the release's copy in ``.build/pristine`` is written into
   the fork's object store (``git hash-object -w``: no ref, index or file
   changes), so that a 3-way merge has its base.
5. ``git am -3`` of the series in a temporary worktree of the fork's HEAD,
   with the fork's own config and hooks. On a conflict it carries on to name
   every conflicting file of every patch, and refuses.
6. The fork's branch is fast-forwarded to those commits (``git read-tree -m
   -u`` and ``git update-ref``). Should that fail, HEAD, index and work tree
   are restored as they were.

Exit status: 0 applied, or nothing to do; 1 refused or failed, with nothing
changed; 2 usage; 3 failed and not fully restored (the message says how to
get back). Errors are one line on stderr starting ``apply: error:`` (a
failed trial ``git am`` adds git's own output below it).
Standard library only; needs git.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "patches"
PRISTINE = ROOT / ".build" / "pristine"  # holds the released package as sglang/
SETUP = ROOT / "scripts" / "dev" / "setup.sh"
UPSTREAM_REPO = "https://github.com/sgl-project/sglang"

SERVER_ARGS = "python/sglang/srt/server_args.py"
# (file, code, what it is): this backport's own code.
OURS = (
    (SERVER_ARGS, "def draft_server_args_copy(", "draft_server_args_copy()"),
    (
        "python/sglang/srt/runtime_context.py",
        "def scoped_server_args(",
        "RuntimeContext.scoped_server_args()",
    ),
)
# (file, code, what it is): v0.5.16's writes of draft values onto the target's
# config, which the fix removes.
WORKERS = ("eagle", "standalone", "multi_layer_eagle", "frozen_kv_mtp")
BUG_SITES = (
    (
        "python/sglang/srt/managers/scheduler.py",
        "scheduler.draft_load_format",
        "the draft load-format write in scheduler.py",
    ),
) + tuple(
    (
        f"python/sglang/srt/speculative/{worker}_worker_v2.py",
        "spec_worker.match_target_context_length",
        f"the context-length write in {worker}_worker_v2.py",
    )
    for worker in WORKERS
)
# (file, code, what it is): upstream's own fix.
UPSTREAM = (
    (
        "python/sglang/srt/speculative/draft_worker_common.py",
        "def draft_server_args_copy(",
        "v0.5.17's draft_server_args_copy() in speculative/draft_worker_common.py",
    ),
    (
        "python/sglang/srt/model_executor/model_runner.py",
        "def _resolve_draft_load_format(",
        "the per-runner draft config of later releases "
        "(ModelRunner._resolve_draft_load_format)",
    ),
)
IN_PROGRESS = (  # (git path, what, the commands that end it)
    ("rebase-merge", "a rebase", ("rebase --continue", "rebase --abort")),
    ("rebase-apply/applying", "a git am", ("am --continue", "am --abort")),
    ("rebase-apply", "a rebase", ("rebase --continue", "rebase --abort")),
    ("MERGE_HEAD", "a merge", ("commit", "merge --abort")),
    (
        "CHERRY_PICK_HEAD",
        "a cherry-pick",
        ("cherry-pick --continue", "cherry-pick --abort"),
    ),
    ("REVERT_HEAD", "a revert", ("revert --continue", "revert --abort")),
    (
        "sequencer",
        "a cherry-pick or revert",
        ("cherry-pick --continue", "cherry-pick --quit"),
    ),
    ("BISECT_LOG", "a bisect", (None, "bisect reset")),
)
# Variables that point git at another repository, index or object store.
GIT_LOCATION_VARS = (
    "GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR "
    "GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_PREFIX GIT_IMPLICIT_WORK_TREE GIT_NAMESPACE"
).split()
HOOKS_OFF = ("-c", f"core.hooksPath={os.devnull}")
# No background gc, no rr-cache records: the trial run leaves only objects.
CHORES_OFF = [
    arg
    for setting in ("gc.auto=0", "maintenance.auto=false", "rerere.enabled=false")
    for arg in ("-c", setting)
]
FS_IOC_GETFLAGS = 0x80086601  # Linux; the inode flags that chattr sets
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20
TEST_FILE = re.compile(r"^test/registered/unit/(?:.*/)?test_[^/]*\.py$")


class Refused(Exception):
    """Nothing was changed; the message says why and what to do."""


class NotRestored(Exception):
    """A write failed and the fork could not be put back as it was."""


def q(path) -> str:
    return shlex.quote(str(path))


def say(msg: str) -> None:
    print(f"apply: {msg}", flush=True)


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (errors or lines or [""])[0]


def git(cwd, *args: str, env: Optional[dict] = None, input: Optional[str] = None):
    full_env = {k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARS}
    full_env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    full_env.update(env or {})
    try:
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=full_env,
            input=input,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    except FileNotFoundError:
        raise Refused("git is not on PATH; install git and run this again") from None


def out(cwd, *args: str, **kwargs) -> str:
    proc = git(cwd, *args, **kwargs)
    if proc.returncode != 0:
        raise Refused(
            f"git {' '.join(args)} failed in {q(cwd)}: {first_line(proc.stderr)}"
        )
    return proc.stdout.strip()


# ---------------------------------------------------------------- the series


class Patch(NamedTuple):
    path: Path
    subject: str
    created: tuple  # paths the patch adds
    changed: tuple  # paths it modifies or deletes
    preimages: dict  # path -> abbreviated blob id it applies to
    postimages: tuple  # abbreviated blob ids it produces
    added: dict  # path -> the lines it adds, joined

    @property
    def name(self) -> str:
        return self.path.name


def parse_patch(path: Path) -> Patch:
    text = path.read_text(encoding="utf-8", errors="replace")
    subject = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    if not text.startswith("From ") or not subject or "\ndiff --git " not in text:
        raise Refused(
            f"{q(path)} is not a patch from git format-patch; restore patches/ "
            f"(`git -C {q(ROOT)} checkout -- patches`), then run this again"
        )
    subject = re.sub(
        r"^\[PATCH[^\]]*\]\s*", "", re.sub(r"\s*\n[ \t]+", " ", subject[1])
    )
    created, changed, pre, post, added = [], [], {}, [], {}
    for section in re.split(r"^(?=diff --git )", text, flags=re.M)[1:]:
        names = re.match(r"diff --git a/(\S+) b/(\S+)", section)
        head, _, body = section.partition("\n@@")
        old, new = names.groups() if names else (None, None)
        if "\nnew file mode" in head:
            created.append(new)
        elif "\nrename from" in head:
            changed.append(old)
            created.append(new)
        else:
            changed.append(old)
        ids = re.search(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", head, re.M)
        if ids:
            if "\nnew file mode" not in head:
                pre[old] = ids[1]
            post.append(ids[2])
        plus = [line[1:] for line in body.splitlines() if line.startswith("+")]
        added[new] = added.get(new, "") + "\n".join(plus)
    return Patch(path, subject, tuple(created), tuple(changed), pre, tuple(post), added)


def load_series() -> list:
    patches = sorted(PATCHES.glob("*.patch"))
    if not patches:
        raise Refused(
            f"{q(PATCHES)} holds no *.patch file; restore it "
            f"(`git -C {q(ROOT)} checkout -- patches`), then run this again"
        )
    series = [parse_patch(p) for p in patches]
    if not any(OURS[0][1] in p.added.get(SERVER_ARGS, "") for p in series):
        raise Refused(
            f"the patches in {q(PATCHES)} are not this backport's series (none adds "
            f"draft_server_args_copy() to {SERVER_ARGS}); restore them "
            f"(`git -C {q(ROOT)} checkout -- patches`), then run this again"
        )
    return series


# ------------------------------------------------------------------ the fork


class Fork(NamedTuple):
    top: Path
    git_dir: Path
    head: str
    branch: str  # refs/heads/...

    @property
    def cd(self) -> str:
        return f"cd {q(self.top)} &&"


def locate_fork(arg: str) -> Fork:
    path = Path(arg).expanduser()
    if not path.is_dir():
        what = "is not a directory" if path.exists() else "does not exist"
        raise Refused(
            f"{q(arg)} {what}; pass the directory of your SGLang fork's checkout"
        )
    probe = git(path, "rev-parse", "--is-inside-work-tree", "--absolute-git-dir")
    if probe.returncode != 0:
        owner = re.search(r"dubious ownership in repository at '(.*)'", probe.stderr)
        if owner:
            raise Refused(
                f"git refuses to work in {q(owner[1])}: it belongs to another user "
                "(git's safe.directory check); if you trust it, run `git config "
                f"--global --add safe.directory {q(owner[1])}`, then run this again"
            )
        raise Refused(
            f"{q(path)} is not in a git work tree; pass the checkout of your "
            "SGLang fork (`git clone <your fork's URL>` makes one)"
        )
    inside, git_dir = probe.stdout.split("\n", 1)
    if inside != "true":
        raise Refused(
            f"{q(path)} is not in a git work tree (a bare repository or a .git "
            "directory); pass a checkout of your SGLang fork (`git clone "
            f"{q(path.resolve())} sglang-fork` makes one)"
        )
    git_dir = Path(git_dir.strip())
    top = Path(out(path, "rev-parse", "--show-toplevel"))
    if not (top / "python" / "sglang").is_dir():
        raise Refused(
            f"{q(top)} has no python/sglang/; pass the top of a checkout of your "
            "SGLang fork (SGLang's repository layout)"
        )
    cd = f"cd {q(top)} &&"
    for name, what, (go_on, stop) in IN_PROGRESS:
        if (git_dir / name).exists():
            finish = f"finish it (`{cd} git {go_on}`) or " if go_on else ""
            raise Refused(
                f"{what} is in progress in {q(top)}; {finish}end it "
                f"(`{cd} git {stop}`), then run this again"
            )
    if (git_dir / "index.lock").exists():
        raise Refused(
            f"another git command is running in {q(top)} ({q(git_dir / 'index.lock')} "
            f"exists); wait for it, or if none is running `rm -f "
            f"{q(git_dir / 'index.lock')}`, then run this again"
        )
    branch = git(top, "symbolic-ref", "-q", "HEAD").stdout.strip()
    head = git(top, "rev-parse", "-q", "--verify", "HEAD^{commit}").stdout.strip()
    if not head:
        raise Refused(
            f"the branch {branch.removeprefix('refs/heads/')} of {q(top)} has no "
            f"commit yet; check out your fork's branch (`{cd} git switch "
            "<branch>`), then run this again"
        )
    if not branch:
        raise Refused(
            f"HEAD of {q(top)} is detached at {head[:12]}; switch to the branch "
            f"that should get the commits (`{cd} git switch <branch>`) or make one "
            f"here (`{cd} git switch -c sglang-draft-isolation`), then run this again"
        )
    return Fork(top, git_dir, head, branch)


def head_files(fork: Fork, paths) -> dict:
    """path -> the file's text at HEAD, or None."""
    paths = list(dict.fromkeys(paths))
    proc = subprocess.run(
        ["git", "cat-file", "--batch"],
        cwd=fork.top,
        stdout=subprocess.PIPE,
        input="".join(f"HEAD:{p}\n" for p in paths).encode(),
        env={k: v for k, v in os.environ.items() if k not in GIT_LOCATION_VARS},
    )
    if proc.returncode != 0:
        raise Refused(f"git cat-file --batch failed in {q(fork.top)}")
    data, pos, texts = proc.stdout, 0, {}
    for path in paths:
        end = data.index(b"\n", pos)
        header = data[pos:end].split()
        pos = end + 1
        if header[-1] == b"missing":
            texts[path] = None
            continue
        size = int(header[2])
        blob = data[pos : pos + size]
        texts[path] = blob.decode("utf-8", "replace") if header[1] == b"blob" else None
        pos += size + 1
    return texts


@contextlib.contextmanager
def scratch_index(fork: Fork):
    """An environment whose index is a throwaway copy of HEAD's tree."""
    with tempfile.TemporaryDirectory(prefix="sglang-backport-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        out(fork.top, "read-tree", fork.head, env=env)
        yield env


def merged_in(patch: Patch, texts: dict) -> bool:
    """Every line the patch adds (one with a letter or digit) is a line of its
    file at HEAD: the patch is in, merged with the fork's own changes."""
    for path, added in patch.added.items():
        wanted = {line.strip() for line in added.splitlines() if re.search(r"\w", line)}
        lines = {line.strip() for line in (texts.get(path) or "").splitlines()}
        if wanted - lines:
            return False
    return True


def missing_patches(fork: Fork, series: list) -> list:
    """The patches of the series that are not in the fork, or refuse."""
    with scratch_index(fork) as env:
        exact = [
            git(
                fork.top, "apply", "--cached", "--check", "-R", str(p.path), env=env
            ).returncode
            == 0
            for p in series
        ]
    files = [f for f, _, _ in UPSTREAM + OURS + BUG_SITES]
    texts = head_files(fork, files + [f for p in series for f in p.added])
    merged = [not e and merged_in(p, texts) for p, e in zip(series, exact)]
    missing = [p for p, e, m in zip(series, exact, merged) if not (e or m)]
    if not missing:
        names = ", ".join(p.name for p, m in zip(series, merged) if m)
        say(
            f"already patched: {q(fork.top)} has every patch of this backport "
            f"({', '.join(p.name for p in series)}"
            + (f"; merged with your changes: {names}" if names else "")
            + "); nothing to do"
        )
        return []
    has = lambda f, code: code in (texts[f] or "")  # noqa: E731
    upstream = [what for f, code, what in UPSTREAM if has(f, code)]
    if upstream:
        say(
            f"already fixed upstream: {q(fork.top)} has {upstream[0]}, upstream's "
            "own fix (sgl-project/sglang#33335, released in v0.5.17); this "
            "backport is for v0.5.16; nothing to do"
        )
        return []
    ours = [what for f, code, what in OURS if has(f, code)]
    bugs = [what for f, code, what in BUG_SITES if has(f, code)]
    sglang_missing = any(f.startswith("python/") for p in missing for f in p.changed)
    if len(ours) == len(OURS) and not bugs and sglang_missing:
        say(
            f"already patched: {q(fork.top)} has this backport's fix "
            f"({' and '.join(ours)}, none of the draft writes onto the target's "
            f"config) in another revision than {q(PATCHES)}; nothing to do"
        )
        return []
    # Part of the fix that a missing patch would add is there already.
    stray = [
        (f, code)
        for f, code, _ in OURS
        if has(f, code) and any(code in p.added.get(f, "") for p in missing)
    ]
    if stray:
        lacks = [what for f, code, what in OURS if not has(f, code)]
        lacks += [p.name for p in missing]
        path, code = stray[0]
        raise Refused(
            f"{q(fork.top)} has part of this backport, not all of it: it has "
            f"{', '.join(ours)}; it lacks {', '.join(lacks)}"
            + (f"; and it still has {', '.join(bugs)}" if bugs else "")
            + "; revert the part that is there (find its commits with `"
            f"{fork.cd} git log --oneline {q('-S' + code)} -- {path}`), then run "
            "this again; nothing was changed"
        )
    if len(missing) < len(series):
        names = ", ".join(p.name for p in series if p not in missing)
        say(f"{q(fork.top)} already has {names}; applying the rest")
    return missing


# ------------------------------------------------------------- the work tree


def inode_flags(path: Path) -> int:
    try:
        import array
        import fcntl

        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        try:
            buf = array.array("l", [0])
            fcntl.ioctl(fd, FS_IOC_GETFLAGS, buf, True)
            return buf[0]
        finally:
            os.close(fd)
    except (ImportError, OSError, ValueError):
        return 0


def check_work_tree(fork: Fork, patches: list) -> None:
    tracked = git(fork.top, "status", "--porcelain=v1", "-uno").stdout.splitlines()
    if tracked:
        files = ", ".join(line[3:] for line in tracked[:10])
        more = f" and {len(tracked) - 10} more" if len(tracked) > 10 else ""
        raise Refused(
            f"{q(fork.top)} has uncommitted changes ({files}{more}); commit them or "
            f"stash them (`{fork.cd} git stash`), then run this again"
        )
    if git(fork.top, "var", "GIT_COMMITTER_IDENT").returncode != 0:
        raise Refused(
            f"git has no identity to commit with in {q(fork.top)}; set one (`{fork.cd} "
            'git config user.name "Your Name" && git config user.email you@example.com`)'
            ", then run this again"
        )
    created = list(dict.fromkeys(c for p in patches for c in p.created))
    changed = [c for p in patches for c in p.changed if c not in created]
    in_the_way, dirs = [], {fork.git_dir}
    for path in created:
        parts = Path(path).parts
        for depth in range(1, len(parts) + 1):
            here = fork.top.joinpath(*parts[:depth])
            if here.is_dir() and not here.is_symlink() and depth < len(parts):
                continue
            rel = "/".join(parts[:depth])
            if os.path.lexists(here) and rel not in in_the_way:
                # A tracked one is a conflict, which the trial run names.
                if not git(fork.top, "ls-files", "-z", "--", rel).stdout:
                    in_the_way.append(rel)
            dirs.add(here.parent)
            break
    if in_the_way:
        raise Refused(
            f"untracked files in {q(fork.top)} are where the series writes: "
            f"{', '.join(in_the_way)}; move them out of the way (`{fork.cd} mv "
            f"{q(in_the_way[0])} {q(in_the_way[0] + '.mine')}`), then run this again"
        )
    problems = []
    for path in changed:
        if (fork.top / path).is_file():
            dirs.add((fork.top / path).parent)
            if inode_flags(fork.top / path) & (FS_IMMUTABLE_FL | FS_APPEND_FL):
                problems.append((path, "an immutable file", "chattr -i"))
    for here in sorted(dirs):
        rel = os.path.relpath(here, fork.top)
        if not os.access(here, os.W_OK | os.X_OK):
            problems.append((rel, "a read-only directory", "chmod u+w"))
        elif inode_flags(here) & (FS_IMMUTABLE_FL | FS_APPEND_FL):
            problems.append((rel, "an immutable directory", "chattr -i"))
    if problems:
        fix = " && ".join(f"{how} {q(path)}" for path, _, how in problems)
        raise Refused(
            f"git cannot write where the series writes in {q(fork.top)}: "
            f"{', '.join(f'{path} ({what})' for path, what, _ in problems)}; allow "
            f"it (`{fork.cd} {fix}`), then run this again"
        )


def supply_bases(fork: Fork, patches: list) -> tuple:
    """Write sglang v0.5.16's blobs that the series applies to and the fork
    lacks into its object store. Returns (supplied, still missing) paths."""
    produced = {b for p in patches for b in p.postimages}
    wanted = {
        b: f for p in patches for f, b in p.preimages.items() if b not in produced
    }
    if not wanted:
        return [], []
    check = git(fork.top, "cat-file", "--batch-check", input="\n".join(wanted) + "\n")
    absent = [
        wanted[line.split()[0]]
        for line in check.stdout.splitlines()
        if line.endswith(" missing")
    ]
    supplied, lacking = [], []
    for path in absent:
        release = PRISTINE / path.removeprefix("python/")
        want = next(b for b, f in wanted.items() if f == path)
        ours = path.startswith("python/sglang/") and release.is_file()
        if ours and out(
            fork.top, "hash-object", "--no-filters", str(release)
        ).startswith(want):
            out(fork.top, "hash-object", "-w", "--no-filters", str(release))
            supplied.append(path)
        else:
            lacking.append(path)
    return supplied, lacking


# ----------------------------------------------------------------- the trial


@contextlib.contextmanager
def temporary_worktree(fork: Fork, paths):
    """A worktree of HEAD in a temporary directory, with only ``paths``
    checked out: git am reads and writes no other file."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-backport-trial-"))
    tree = tmp / "fork"
    add_args = ["worktree", "add", "--detach", "--no-checkout", str(tree), fork.head]
    add = git(fork.top, *HOOKS_OFF, *add_args)
    try:
        if add.returncode != 0:
            raise Refused(
                f"could not make a temporary worktree of {q(fork.top)} for the trial "
                f"run ({first_line(add.stderr)}); nothing was changed"
            )
        out(tree, "read-tree", "HEAD")
        tracked = git(tree, "ls-files", "-z", "--", *paths).stdout.split("\0")
        out(tree, "checkout-index", "-f", "--", *filter(None, tracked))
        yield tree
    finally:
        git(fork.top, "worktree", "remove", "--force", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)


def unmerged(tree: Path) -> dict:
    stages = {}
    for entry in git(tree, "ls-files", "-u", "-z").stdout.split("\0"):
        if "\t" in entry:
            info, path = entry.split("\t", 1)
            stages.setdefault(path, set()).add(info.split()[2])
    kinds = {
        frozenset("123"): "changed in your fork too",
        frozenset("23"): "your fork already has a file there",
        frozenset("13"): "deleted or moved in your fork",
        frozenset("12"): "the series deletes it, your fork changed it",
    }
    return {p: kinds.get(frozenset(s), "conflict") for p, s in stages.items()}


def trial_run(fork: Fork, patches: list, lacking: list) -> tuple:
    """``git am -3`` of the patches on a temporary worktree of HEAD.

    Returns (the resulting commit, names of patches merged 3-way), or refuses
    naming every conflicting file of every patch."""
    touched = dict.fromkeys(f for p in patches for f in p.changed + p.created)
    with temporary_worktree(fork, touched) as tree:
        am = git(tree, *CHORES_OFF, "am", "-3", *(str(p.path) for p in patches))
        if am.returncode == 0:
            merged = [
                p.name
                for p, log in zip(patches, am.stdout.split("Applying: ")[1:])
                if "3-way merge" in log
            ]
            return out(tree, "rev-parse", "HEAD"), merged
        conflicts, no_base, other = [], [], None
        rebase_apply = (
            Path(out(tree, "rev-parse", "--absolute-git-dir")) / "rebase-apply"
        )
        for _ in patches:
            output = am.stdout + am.stderr
            if not (rebase_apply / "next").is_file():
                other = (patches[0], output)
                break
            failed = patches[int((rebase_apply / "next").read_text()) - 1]
            files = unmerged(tree)
            if files:
                conflicts.append((failed, files))
                git(tree, "add", "-A")
                step = "--continue"
            elif "lacking or useless" in output or "lacks necessary blobs" in output:
                no_base.append((failed, [f for f in failed.preimages if f in lacking]))
                step = "--skip"
            else:
                other = (failed, output)
                break
            am = git(tree, *CHORES_OFF, *HOOKS_OFF, "am", step)
            if am.returncode == 0:
                break
    nothing = "; nothing was changed"
    if other:
        listing = "\n".join(f"    {line}" for line in other[1].strip().splitlines())
        raise Refused(
            f"git am -3 failed on {other[0].name} in a trial run on a temporary "
            f"worktree of {q(fork.top)} (a hook or a git setting of the fork?)"
            f"{nothing}; git said:\n{listing}"
        )
    reasons = []
    if conflicts:
        listing = "; ".join(
            f"{p.name}: " + ", ".join(f"{f} ({why})" for f, why in files.items())
            for p, files in conflicts
        )
        hand = " ".join(q(p.path) for p in patches)
        reasons.append(
            f"the series does not apply to {q(fork.top)}, not even with a 3-way "
            f"merge: {listing}{nothing}; to merge it by hand: `{fork.cd} git am -3 "
            f"{hand}`, fix the files, git add them, git am --continue (git am "
            "--abort gives up)"
        )
    if no_base:
        files = ", ".join(dict.fromkeys(f for _, fs in no_base for f in fs))
        where = (
            f"run `bash {q(SETUP)} --pristine-only` (it unpacks the release into "
            f"{q(PRISTINE)})"
            if not (PRISTINE / "sglang").is_dir()
            else f"fetch them (`{fork.cd} git fetch {UPSTREAM_REPO} v0.5.16`)"
        )
        reasons.append(
            f"a 3-way merge of {', '.join(p.name for p, _ in no_base)} needs sglang "
            f"v0.5.16's version of {files or 'the files it changes'}, which the "
            f"history of {q(fork.top)} lacks{nothing}; {where}, then run this again"
        )
    raise Refused("; and ".join(reasons))


# ------------------------------------------------------------------ the real run


class Snapshot(NamedTuple):
    head: str
    branch: str
    index: str
    status: str
    stash: str


def snapshot(fork: Fork) -> Snapshot:
    return Snapshot(
        git(fork.top, "rev-parse", "-q", "--verify", "HEAD").stdout.strip(),
        git(fork.top, "symbolic-ref", "-q", "HEAD").stdout.strip(),
        git(fork.top, "ls-files", "-s", "-z").stdout,
        git(fork.top, "status", "--porcelain=v1", "-z", "-uall").stdout,
        git(fork.top, "rev-parse", "-q", "--verify", "refs/stash").stdout.strip(),
    )


def fast_forward(fork: Fork, new_head: str, patches: list) -> None:
    """Move the fork's branch, index and work tree to new_head, or restore."""
    before = snapshot(fork)
    if before.head != fork.head or before.branch != fork.branch:
        raise Refused(f"HEAD of {q(fork.top)} moved while this ran; run this again")
    index = Path(out(fork.top, "rev-parse", "--git-path", "index"))
    index = index if index.is_absolute() else fork.top / index
    saved_index = index.read_bytes() if index.exists() else None
    new_paths = {}  # created path and its parents -> existed before
    for path in (c for p in patches for c in p.created):
        for parent in [Path(path), *Path(path).parents][:-1]:
            new_paths.setdefault(parent, os.path.lexists(fork.top / parent))
    message = (
        f"apply_to_fork.py: {len(patches)} patch(es) of the draft ServerArgs backport"
    )
    git(fork.top, "update-index", "-q", "--refresh")
    for args in (
        ("read-tree", "-m", "-u", fork.head, new_head),
        ("update-ref", "-m", message, fork.branch, new_head, fork.head),
    ):
        step = git(fork.top, *args)
        if step.returncode != 0:
            break
    else:
        git(fork.top, "update-ref", "ORIG_HEAD", fork.head)
        return
    # Restore: the branch, then the tracked files, then what the series added.
    if git(fork.top, "rev-parse", fork.branch).stdout.strip() != fork.head:
        git(fork.top, "update-ref", fork.branch, fork.head)
    git(fork.top, "read-tree", "--reset", "-u", fork.head)
    for path in sorted(new_paths, key=lambda p: len(p.parts), reverse=True):
        here = fork.top / path
        if not new_paths[path] and os.path.lexists(here):
            with contextlib.suppress(OSError):
                if here.is_dir() and not here.is_symlink():
                    here.rmdir()
                else:
                    here.unlink()
    if saved_index is not None:
        index.write_bytes(saved_index)
    after = snapshot(fork)
    failure = (
        f"writing the result into {q(fork.top)} failed "
        f"(git {args[0]}: {first_line(step.stderr)})"
    )
    if after != before:
        differ = [name for name, a, b in zip(Snapshot._fields, before, after) if a != b]
        raise NotRestored(
            f"{failure}, and it could not be restored as it was ({', '.join(differ)} "
            f"differ); get back with `{fork.cd} git reset --hard {fork.head[:12]}`, "
            "then remove the files of the series that git status lists as untracked"
        )
    raise Refused(
        f"{failure}; it was restored as it was (HEAD {fork.head[:12]}, index and work "
        "tree); nothing was changed; fix what git names, then run this again"
    )


def apply(fork_arg: str) -> int:
    series = load_series()
    fork = locate_fork(fork_arg)
    patches = missing_patches(fork, series)
    if not patches:
        return 0
    check_work_tree(fork, patches)
    supplied, lacking = supply_bases(fork, patches)
    if supplied:
        say(
            f"gave git sglang v0.5.16's version of {len(supplied)} file(s) the fork's "
            "history lacks, for a 3-way merge (objects only: no ref, index or file "
            "changed)"
        )
    new_head, merged = trial_run(fork, patches, lacking)
    fast_forward(fork, new_head, patches)
    log = ["log", "--reverse", "--format=%h %s", f"{fork.head}..HEAD"]
    commits = git(fork.top, *log).stdout.strip()
    branch = fork.branch.removeprefix("refs/heads/")
    say(
        f"applied {len(patches)} patch(es) to branch {branch} of {q(fork.top)}, "
        f"one commit each (undo: `{fork.cd} git reset --hard {fork.head[:12]}`):"
    )
    for line in commits.splitlines():
        print(f"    {line}")
    if merged:
        say(
            f"merged 3-way with your fork's changes: {', '.join(merged)}; review "
            f"them (`{fork.cd} git log -p {fork.head[:12]}..`)"
        )
    tests = sorted(c for p in series for c in p.created if TEST_FILE.match(c))
    if tests:
        say(
            "run the shipped tests against the fork's own tree, in its Python "
            "environment:"
        )
        print(
            f"    {fork.cd} PYTHONPATH=python python3 -m pytest "
            + " ".join(q(t) for t in tests)
        )
    return 0


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply this backport's patches/ to an SGLang v0.5.16 fork, one "
        "commit per patch, or change nothing."
    )
    parser.add_argument("fork", help="the fork's git work tree (it has python/sglang/)")
    args = parser.parse_args(argv)
    try:
        return apply(args.fork)
    except Refused as exc:
        print(f"apply: error: {exc}", file=sys.stderr)
        return 1
    except NotRestored as exc:
        print(f"apply: error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())

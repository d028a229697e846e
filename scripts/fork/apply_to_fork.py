#!/usr/bin/env python3
"""Apply the backport to an SGLang 0.5.16 fork as one commit, or change nothing.

    scripts/fork/apply_to_fork.py /path/to/fork [PATCH]

PATCH defaults to the exported file (dist/...patch), exported first when it
is missing. Plain git underneath:

1. refuse what is not a git work tree with ``python/sglang/``, a detached
   HEAD, an unborn branch, a git operation in progress;
2. leave alone a fork whose HEAD already has the fix (this backport, or an
   upstream v0.5.17+ base), and say which;
3. refuse a dirty work tree (tracked changes, or untracked files where the
   patch creates files);
4. ``git apply --check``; where drift makes that fail, a 3-way dry run
   (``git apply --cached --3way`` into a throwaway index) must succeed;
5. ``git am`` (``--3way`` when 4 needed it): one commit on the current branch
   with the patch's message. Should ``git am`` still fail, ``git am --abort``
   and a check that HEAD and the work tree are as before.

Exit status: 0 applied or nothing to do, 1 refused or failed, 2 usage.
Standard library only; needs git.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple, Optional

SCRIPT_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPT_DIR))

import export_patch  # noqa: E402

PR_URL = "https://github.com/sgl-project/sglang/pull/33335"
FIXED_IN = (0, 5, 17)
BASE_VERSION = "0.5.16"

# This backport defines the draft-copy helper in server_args.py.
OURS_FILE = "python/sglang/srt/server_args.py"
OURS_MARKER = "def draft_server_args_copy("
# Upstream's own fix: v0.5.17 (PR #33335) puts the helper in
# draft_worker_common.py; the next step upstream (PR #33491) drops the copy
# for per-runner resolution in ModelRunner. Either is a fixed tree.
UPSTREAM_MARKERS = (
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
VERSION_FILE = "python/sglang/_version.py"
RELEASE_TAG = re.compile(r"^v(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?$")
VERSION_STRING = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post\d+)?$")
IN_PROGRESS = (
    ("rebase-apply", "a git am or rebase"),
    ("rebase-merge", "a rebase"),
    ("MERGE_HEAD", "a merge"),
    ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ("REVERT_HEAD", "a revert"),
)


class Refused(Exception):
    """A precondition failed or the patch does not apply; nothing changed."""


class Fork(NamedTuple):
    top: Path
    head: str
    branch: str


class Snapshot(NamedTuple):
    head: str
    branch: Optional[str]
    status: str


def say(msg: str) -> None:
    print(f"apply: {msg}", flush=True)


def git(
    cwd: Path, *args: str, env: Optional[dict] = None, check: bool = False
) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, LC_ALL="C", GIT_TERMINAL_PROMPT="0")
    if env:
        full_env.update(env)
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if check and proc.returncode != 0:
        raise Refused(f"git {' '.join(args)} failed:\n{proc.stderr.strip()}")
    return proc


def out(cwd: Path, *args: str) -> str:
    return git(cwd, *args, check=True).stdout.strip()


# ---------------------------------------------------------------- the patch


def resolve_patch(patch_arg: Optional[str]) -> Path:
    if patch_arg is None:
        patch = export_patch.DEFAULT_OUTPUT
        if not patch.is_file():
            say(f"{patch} is missing; exporting it first")
            try:
                export_patch.export(patch)
            except export_patch.ExportError as exc:
                raise Refused(f"could not export the patch: {exc}") from None
    else:
        patch = Path(patch_arg).expanduser().resolve()
        if not patch.is_file():
            raise Refused(
                f"patch file {patch_arg} not found; "
                "make it with scripts/fork/export_patch.py"
            )
    head = patch.read_text(encoding="utf-8", errors="replace")[:4096]
    if not head.startswith("From ") or "\nSubject:" not in head:
        raise Refused(
            f"{patch} is not a git format-patch mbox; "
            "make it with scripts/fork/export_patch.py"
        )
    return patch


def patch_subject(patch: Path) -> str:
    text = patch.read_text(encoding="utf-8", errors="replace")
    match = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", text, re.M)
    if not match:
        return "?"
    subject = re.sub(r"\s*\n[ \t]+", " ", match.group(1))
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)


def created_paths(patch: Path) -> list[str]:
    """Paths the patch adds as new files."""
    paths = []
    current = None
    for line in patch.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("diff --git "):
            match = re.match(r"diff --git a/(\S+) b/(\S+)$", line)
            current = match.group(2) if match else None
        elif line.startswith("new file mode") and current:
            paths.append(current)
    return paths


# ----------------------------------------------------------------- the fork


def locate_fork(path_arg: str) -> Fork:
    path = Path(path_arg).expanduser()
    if not path.exists():
        raise Refused(f"{path_arg} does not exist")
    if not path.is_dir():
        raise Refused(f"{path_arg} is not a directory")
    path = path.resolve()
    inside = git(path, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise Refused(
            f"{path} is not a git work tree; clone your fork "
            "(git clone <your fork's URL>) and pass the clone's directory"
        )
    top = Path(out(path, "rev-parse", "--show-toplevel")).resolve()
    where = str(top) if top == path else f"{top} (the git work tree holding {path})"
    if not (top / "python" / "sglang").is_dir():
        raise Refused(
            f"{where} has no python/sglang/; this patch is for a checkout of "
            "SGLang's own repository layout (python/sglang/srt/...). Pass the "
            "top of your SGLang fork"
        )
    head = git(top, "rev-parse", "-q", "--verify", "HEAD^{commit}")
    if head.returncode != 0:
        raise Refused(f"{top}: the current branch has no commit yet")
    branch = git(top, "symbolic-ref", "-q", "--short", "HEAD")
    if branch.returncode != 0:
        raise Refused(
            f"{top}: HEAD is detached at {head.stdout.strip()[:12]}; "
            "check out the branch that should get the commit (git switch <branch>)"
        )
    for name, what in IN_PROGRESS:
        marker = Path(out(top, "rev-parse", "--git-path", name))
        if not marker.is_absolute():
            marker = top / marker
        if marker.exists():
            raise Refused(f"{top}: {what} is in progress; finish or abort it first")
    return Fork(top, head.stdout.strip(), branch.stdout.strip())


def show_head(fork: Fork, rel: str) -> Optional[str]:
    proc = git(fork.top, "show", f"HEAD:{rel}")
    return proc.stdout if proc.returncode == 0 else None


def parse_version(text: str, pattern: re.Pattern) -> Optional[tuple]:
    match = pattern.match(text.strip())
    return tuple(int(g) for g in match.groups()[:3]) if match else None


def base_versions(fork: Fork) -> list[tuple[tuple, str]]:
    """(version, evidence) from the fork's _version.py and its release tags."""
    found = []
    version_py = show_head(fork, VERSION_FILE)
    if version_py:
        match = re.search(
            r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", version_py
        )
        if match:
            version = parse_version(match.group(1), VERSION_STRING)
            if version:
                found.append((version, f"{VERSION_FILE} says {match.group(1)}"))
    tags = git(fork.top, "tag", "--merged", "HEAD", "--list", "v*").stdout.split()
    releases = [(parse_version(t, RELEASE_TAG), t) for t in tags]
    releases = [(v, t) for v, t in releases if v]
    if releases:
        version, tag = max(releases)
        found.append((version, f"release tag {tag} is in HEAD's history"))
    return found


def with_scratch_index(fork: Fork, *apply_args: str) -> tuple[int, str, list[str]]:
    """``git apply --cached ARGS`` against HEAD in a throwaway index.

    Returns the exit status, stderr and the paths left unmerged. The fork's
    index and work tree are never touched.
    """
    with tempfile.TemporaryDirectory(prefix="sglang-fork-apply-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(fork.top, "read-tree", "HEAD", env=env, check=True)
        proc = git(fork.top, "apply", "--cached", *apply_args, env=env)
        unmerged = git(fork.top, "ls-files", "-u", "-z", env=env).stdout
    paths = []
    for entry in unmerged.split("\0"):
        if "\t" in entry:
            path = entry.split("\t", 1)[1]
            if path not in paths:
                paths.append(path)
    return proc.returncode, proc.stderr, paths


def existing_fix(fork: Fork, patch: Path) -> Optional[str]:
    """Why HEAD already has the fix, or None."""
    ours = show_head(fork, OURS_FILE)
    reverse_rc, _, _ = with_scratch_index(fork, "--check", "--reverse", str(patch))
    if (ours is not None and OURS_MARKER in ours) or reverse_rc == 0:
        commit = git(
            fork.top,
            "log",
            "-1",
            "--format=%h %s",
            "--fixed-strings",
            f"--grep={PR_URL}",
            "HEAD",
        ).stdout.strip()
        evidence = (
            f"{OURS_FILE} defines draft_server_args_copy()"
            if ours is not None and OURS_MARKER in ours
            else "the patch's changes are all present"
        )
        where = f", from commit {commit}" if commit else ""
        return (
            f"already patched: {fork.top} already has this backport "
            f"({evidence}{where}); nothing to do"
        )
    for rel, marker, what in UPSTREAM_MARKERS:
        text = show_head(fork, rel)
        if text is not None and marker in text:
            return (
                f"already fixed upstream: {fork.top} has {what}, upstream's own "
                f"fix ({PR_URL}, released in v0.5.17); this patch is only for "
                f"v{BASE_VERSION} bases; nothing to do"
            )
    for version, evidence in base_versions(fork):
        if version >= FIXED_IN:
            return (
                f"already fixed upstream: {fork.top} is based on sglang "
                f"{'.'.join(map(str, version))} ({evidence}); v0.5.17 and later "
                f"ship the fix ({PR_URL}); this patch is only for "
                f"v{BASE_VERSION} bases; nothing to do"
            )
    return None


def snapshot(fork: Fork) -> Snapshot:
    head = out(fork.top, "rev-parse", "HEAD")
    branch = git(fork.top, "symbolic-ref", "-q", "--short", "HEAD").stdout.strip()
    status = out(fork.top, "status", "--porcelain=v1", "--untracked-files=all")
    return Snapshot(head, branch or None, status)


def refuse_dirty(fork: Fork, patch: Path) -> None:
    tracked = git(
        fork.top, "status", "--porcelain=v1", "--untracked-files=no"
    ).stdout.splitlines()
    if tracked:
        listing = "\n".join(f"    {line}" for line in tracked[:20])
        more = f"\n    ... and {len(tracked) - 20} more" if len(tracked) > 20 else ""
        raise Refused(
            f"{fork.top} has uncommitted changes:\n{listing}{more}\n"
            "  Commit or stash them (git stash) and run this again"
        )
    created = created_paths(patch)
    tracked_created = set(
        git(fork.top, "ls-files", "-z", "--", *created).stdout.split("\0")
        if created
        else []
    )
    # A tracked file there is a conflict, reported by the checks below.
    in_the_way = [
        p for p in created if (fork.top / p).exists() and p not in tracked_created
    ]
    if in_the_way:
        listing = "\n".join(f"    {p}" for p in in_the_way)
        raise Refused(
            f"{fork.top} has untracked files where the patch creates files:\n"
            f"{listing}\n"
            "  Move them away or commit them (if they are yours, expect a "
            "conflict) and run this again"
        )


def refuse_identity(fork: Fork) -> None:
    if git(fork.top, "var", "GIT_COMMITTER_IDENT").returncode != 0:
        raise Refused(
            f"{fork.top}: git has no committer identity; set one "
            '(git config user.name "..." and git config user.email "...") '
            "and run this again"
        )


def failed_paths(stderr: str) -> list[str]:
    paths = []
    patterns = (
        r"^error: patch failed: (.+):\d+$",
        r"^error: (.+): (?:does not exist in index|already exists in index"
        r"|does not match index|patch does not apply|already exists in working "
        r"directory|No such file or directory)$",
        r"^(?:CONFLICT \([^)]*\): .* in |U\s+)(\S+)$",
    )
    for line in stderr.splitlines():
        for pattern in patterns:
            match = re.match(pattern, line.strip())
            if match and match.group(1) not in paths:
                paths.append(match.group(1))
    return paths


def conflict_message(
    fork: Fork, patch: Path, paths: list[str], stderr: str, why: str
) -> str:
    lines = [f"the patch does not apply to {fork.top}, not even with a 3-way merge."]
    for path in paths or ["(git named no file; its output follows)"]:
        lines.append(f"  conflict in {path}")
    created = set(created_paths(patch))
    reasons = []
    if "does not exist in index" in stderr:
        reasons.append(
            "A file the patch changes is missing from your fork (moved or deleted?)."
        )
    if "lacks the necessary blob" in stderr:
        reasons.append(
            "The fork's history lacks sglang v0.5.16's version of these files, "
            "so git cannot merge. If the fork is based on v0.5.16, give git "
            "that release's objects (git fetch "
            "https://github.com/sgl-project/sglang v0.5.16) and run this again."
        )
    if not reasons and (not paths or set(paths) - created):
        reasons.append(why)
    if "already exists in" in stderr or created.intersection(paths):
        reasons.append(
            "Your fork already has a file where the patch creates one "
            "(your own, or upstream's under the same name)."
        )
    lines.extend(f"  {reason}" for reason in reasons)
    for version, evidence in base_versions(fork):
        if version != (0, 5, 16):
            lines.append(
                f"  Note: {evidence}; this patch is for sglang v{BASE_VERSION} bases."
            )
    if not paths:
        lines.extend(f"    {line}" for line in stderr.strip().splitlines()[-15:])
    lines.append(
        "  Nothing was changed. To apply and resolve by hand:\n"
        f"    cd {fork.top} && git am --3way {patch}\n"
        "    then edit the conflicted files, git add them, git am --continue "
        "(or git am --abort to give up)"
    )
    return "\n".join(lines)


def verify_unchanged(fork: Fork, before: Snapshot) -> None:
    after = snapshot(fork)
    if after != before:
        raise Refused(
            f"{fork.top} is NOT as it was (HEAD {before.head[:12]} -> "
            f"{after.head[:12]}); inspect it with git status and git log"
        )


def apply(fork_arg: str, patch_arg: Optional[str]) -> int:
    patch = resolve_patch(patch_arg)
    fork = locate_fork(fork_arg)

    reason = existing_fix(fork, patch)
    if reason:
        say(reason)
        return 0

    refuse_dirty(fork, patch)
    refuse_identity(fork)
    before = snapshot(fork)

    plain = git(fork.top, "apply", "--check", str(patch))
    if plain.returncode == 0:
        am_args = ["am", "--no-3way", str(patch)]
        mode = "cleanly"
    else:
        rc, stderr, unmerged = with_scratch_index(fork, "--3way", str(patch))
        if rc != 0:
            paths = unmerged or failed_paths(stderr) or failed_paths(plain.stderr)
            verify_unchanged(fork, before)
            raise Refused(
                conflict_message(
                    fork,
                    patch,
                    paths,
                    stderr,
                    "Your fork changed the same lines as the patch.",
                )
            )
        am_args = ["am", "--3way", str(patch)]
        mode = "with a 3-way merge (your fork has drifted near the patched lines)"

    am = git(fork.top, *am_args)
    if am.returncode != 0:
        unmerged = git(
            fork.top, "diff", "--name-only", "--diff-filter=U"
        ).stdout.split()
        git(fork.top, "am", "--abort")
        verify_unchanged(fork, before)
        output = am.stdout + am.stderr
        paths = unmerged or failed_paths(output)
        if paths:
            raise Refused(
                conflict_message(
                    fork, patch, paths, output, "git am could not merge them."
                )
            )
        listing = "\n".join(f"    {line}" for line in output.strip().splitlines())
        raise Refused(
            f"git am failed in {fork.top} (a hook or a git setting of the "
            f"fork?); its output:\n{listing}\n"
            "  It was aborted (git am --abort) and nothing was changed"
        )

    head = out(fork.top, "rev-parse", "HEAD")
    parent = out(fork.top, "rev-parse", "HEAD^")
    branch = git(fork.top, "symbolic-ref", "-q", "--short", "HEAD").stdout.strip()
    if parent != before.head or branch != fork.branch:
        raise Refused(
            f"{fork.top}: git am did not leave one commit on {fork.branch}; "
            "inspect it with git log"
        )
    say(f"applied {mode}: {head[:12]} {patch_subject(patch)}")
    say(f"branch {fork.branch} in {fork.top} (was {before.head[:12]})")
    shipped_tests = shipped_test_files(patch)
    if shipped_tests:
        # Only the files the patch added: the fork's own test/registered/unit/
        # holds upstream's tests too.
        say("run the shipped tests against the fork's tree with:")
        print(f"    cd {fork.top} && PYTHONPATH=python python -m pytest \\")
        print(" \\\n".join(f"        {path}" for path in shipped_tests))
    return 0


def shipped_test_files(patch: Path) -> list[str]:
    """The test modules the patch adds under test/registered/unit/."""
    return sorted(
        p
        for p in created_paths(patch)
        if p.startswith("test/registered/unit/")
        and p.rsplit("/", 1)[-1].startswith("test_")
        and p.endswith(".py")
    )


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(
        description="Apply the draft ServerArgs isolation backport to an "
        "SGLang 0.5.16 fork as one commit, or change nothing."
    )
    parser.add_argument("fork", help="the fork's git work tree (has python/sglang/)")
    parser.add_argument(
        "patch",
        nargs="?",
        help=f"the exported patch (default: {export_patch.DEFAULT_OUTPUT}, "
        "exported first if missing)",
    )
    args = parser.parse_args(argv)
    try:
        return apply(args.fork, args.patch)
    except Refused as exc:
        print(f"apply: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

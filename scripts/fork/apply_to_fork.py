#!/usr/bin/env python3
"""Apply this backport's patches/ to an SGLang v0.5.16 fork, or revert it.

    python3 scripts/fork/apply_to_fork.py [--revert] FORK

Applying: one commit per patch, as `git am -3` makes it, unless the fork's code
has the fix (this backport's, upstream's), a part of it, or its commits of
another Backport-Revision (revert first); .build/pristine supplies the v0.5.16
files a 3-way merge needs. --revert: `git revert` of the commits with its
Backport-Of trailer, newest first; the way to v0.5.17. Both try it in a temporary
worktree, name every conflict, then fast-forward the fork. Exit 0 done or nothing
to do; 1 refused, nothing changed; 2 usage; 3 not restored. Errors: "apply: error:"
"""

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
from types import SimpleNamespace as Record

ROOT, TOOL = Path(__file__).resolve().parents[2], Path(__file__).resolve()
PATCHES, PRISTINE = ROOT / "patches", ROOT / ".build" / "pristine"
UPSTREAM_REPO = "https://github.com/sgl-project/sglang"
BACKPORT_OF, SRT = f"{UPSTREAM_REPO}/pull/33335", "python/sglang/srt/"
OURS = (  # (file, code, what it is): this backport's own code
    (SRT + "server_args.py", "def draft_server_args_copy(", "draft_server_args_copy()"),
    (SRT + "runtime_context.py", "def scoped_server_args(", "scoped_server_args()"),
)
W = "eagle standalone multi_layer_eagle frozen_kv_mtp".split()  # v0.5.16's draft
BUG_SITES = [("managers/scheduler.py", "scheduler.draft_load_format")]  # writes
BUG_SITES += [(f"speculative/{w}_worker_v2.py", "match_target_context") for w in W]
BUG_SITES = tuple((SRT + f, code, f.rsplit("/", 1)[1]) for f, code in BUG_SITES)
UPSTREAM = (  # upstream's own fix: v0.5.17's, and that of later releases
    (SRT + "speculative/draft_worker_common.py", "def draft_server_args_copy("),
    (SRT + "model_executor/model_runner.py", "def _resolve_draft_load_format("),
)
UPSTREAM = tuple((f, code, f"{code[4:]}) in {f[len(SRT):]}") for f, code in UPSTREAM)
IN_PROGRESS = "rebase-merge:rebase rebase-apply/applying:am rebase-apply:rebase"
IN_PROGRESS += " MERGE_HEAD:merge BISECT_LOG:bisect CHERRY_PICK_HEAD:cherry-pick"
IN_PROGRESS = dict(s.split(":") for s in f"{IN_PROGRESS} REVERT_HEAD:revert".split())
LOCATION = "DIR WORK_TREE INDEX_FILE OBJECT_DIRECTORY COMMON_DIR PREFIX NAMESPACE"
LOCATION = {f"GIT_{v}" for v in LOCATION.split() + ["ALTERNATE_OBJECT_DIRECTORIES"]}
# A trial leaves only objects: no gc, no rr-cache, no hooks when it resumes.
CHORES_OFF = "-c gc.auto=0 -c maintenance.auto=false -c rerere.enabled=false"
HOOKS_OFF = f"-c core.hooksPath={os.devnull}"
TEST_FILE = re.compile(r"^test/registered/unit/(?:.*/)?test_[^/]*\.py$")
WHY = {"123": "changed in your fork too", "23": "your fork already has a file there"}
WHY.update({"12": "deleted by the change, changed in your fork", "": "no v0.5.16 base"})
WHY["13"] = "deleted or moved in your fork"
NOTHING = "; nothing was changed"


class Refused(Exception):
    code = 1  # nothing was changed


class NotRestored(Refused):
    code = 3  # a write failed, and the fork could not be put back as it was


q = lambda path: shlex.quote(str(path))  # noqa: E731
say = lambda msg: print(f"apply: {msg}", flush=True)  # noqa: E731
indented = lambda text: "".join(f"\n    {t}" for t in text.strip().splitlines())  # noqa
RESTORE = f"restore it (`git -C {q(ROOT)} checkout -- patches`)"
damaged = lambda what: Refused(f"{what}; {RESTORE}")  # noqa: E731
adds = lambda p, f, c: any(g == f and c in a for g, a in p.lines)  # noqa: E731
found = lambda sites, texts: [w for f, c, w in sites if c in texts[f]]  # noqa: E731


def git(cwd, cmd: str, *args, env=None, input=None, check=False):
    env = {**{k: v for k, v in os.environ.items() if k not in LOCATION}, **(env or {})}
    env.update(
        LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_EDITOR=":"
    )
    argv, text = ["git", "-C", cwd, *cmd.split(), *args], dict(errors="replace")
    try:  # file contents need not be UTF-8
        run = subprocess.run(argv, env=env, input=input, capture_output=True, **text)
    except FileNotFoundError:
        raise Refused("git is not on PATH; install git and run this again") from None
    if check and run.returncode != 0:
        raise Refused(f"git {cmd} failed in {q(cwd)}{NOTHING}:{indented(run.stderr)}")
    return run


out = lambda *args, **kwargs: git(*args, check=True, **kwargs).stdout.strip()  # noqa


def parse_patch(path: Path) -> Record:
    text = path.read_text(encoding="utf-8", errors="replace")
    message, *sections = re.split(r"^(?=diff --git )", text, flags=re.M)
    if not text.startswith("From ") or "\nSubject: " not in message or not sections:
        raise damaged(f"{q(path)} is not a patch from git format-patch")
    revision = re.findall(r"^Backport-Revision: *(\S+)$", message, re.M) or [None]
    patch = Record(path=path, name=path.name, created=[], changed=[], pre={}, post=[])
    patch.lines, patch.revision = set(), revision[0]  # {(file, a line it adds)}
    for section in sections:
        old, new = (re.findall(r"^diff --git a/(\S+) b/(\S+)", section) or [(0, 0)])[0]
        head, _, body = section.partition("\n@@")
        ids = re.findall(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)", head, re.M) or [()]
        new_file = "\nnew file mode" in head
        patch.created += [new] if new_file or "\nrename from" in head else []
        patch.changed += [] if new_file else [old]
        patch.pre.update({old: ids[0][0]} if ids[0] and not new_file else {})
        patch.post += ids[0][1:]
        plus = [line[1:].strip() for line in body.splitlines() if line[:1] == "+"]
        patch.lines |= {(new, line) for line in plus if re.search(r"\w", line)}
    return patch


def load_series() -> list:
    series = [parse_patch(p) for p in sorted(PATCHES.glob("*.patch"))]
    if not series:
        raise damaged(f"{q(PATCHES)} holds no *.patch file")
    if not any(adds(p, *OURS[0][:2]) for p in series):
        why = f"none adds draft_server_args_copy() to {OURS[0][0]}"
        raise damaged(f"the patches in {q(PATCHES)} are not this backport's ({why})")
    return series


def locate_fork(arg: str) -> Record:
    probe = git(arg, "rev-parse --is-inside-work-tree --absolute-git-dir")
    if not probe.stdout.startswith("true\n"):
        bare = " (a bare repository or a .git directory)" * bool(probe.stdout)
        said = f"; git said:{indented(probe.stderr)}" * bool(probe.returncode)
        raise Refused(f"{q(arg)} is not in a git work tree{bare}; pass your fork{said}")
    git_dir, top = probe.stdout.split("\n")[1], out(arg, "rev-parse --show-toplevel")
    fork = Record(top=Path(top), q=q(top), cd=f"cd {q(top)} &&")
    fork.git = lambda cmd, *args, **kwargs: git(top, cmd, *args, **kwargs)
    if not (fork.top / "python" / "sglang").is_dir():
        raise Refused(f"{fork.q} has no python/sglang/; pass the top of your fork")
    for name, op in IN_PROGRESS.items():
        stop = "bisect reset" if op == "bisect" else op + " --abort"
        if os.path.exists(os.path.join(git_dir, name)):
            stop = f"finish it, or end it (`{fork.cd} git {stop}`)"
            raise Refused(f"a git {op} is in progress in {fork.q}; {stop}")
    fork.branch = fork.git("symbolic-ref -q HEAD").stdout.strip()
    fork.head = fork.git("rev-parse -q --verify HEAD^{commit}").stdout.strip()
    switch = f"switch to your fork's branch (`{fork.cd} git switch <branch>`) or "
    switch += f"make one (`{fork.cd} git switch -c sglang-draft-isolation`)"
    if not fork.head or not fork.branch:
        where = f"the branch {fork.branch[11:]} of {fork.q} has no commit yet"
        where = where if not fork.head else f"HEAD of {fork.q} is detached"
        raise Refused(f"{where}; {switch}")
    dirty = [t[3:] for t in fork.git("status --porcelain -uno").stdout.splitlines()]
    if dirty:
        files = ", ".join(dirty[:10]) + " ..." * (len(dirty) > 11)
        stash = f"commit or stash them (`{fork.cd} git stash`)"
        raise Refused(f"{fork.q} has uncommitted changes ({files}); {stash}")
    return fork


def texts_at(fork, rev: str, paths) -> dict:  # path -> its text at rev, or ""
    return {p: fork.git("show", f"{rev}:{p}").stdout for p in dict.fromkeys(paths)}


def backport_commits(fork) -> list:  # [(sha, revision)] in HEAD, not reverted
    trailer = "%(trailers:key=Backport-{},valueonly,separator=%x01)%x00"
    fmt = f"--format=%H%x00{trailer.format('Of')}{trailer.format('Revision')}"
    grep = f"--grep=^Backport-Of: {BACKPORT_OF}$"
    log = fork.git("log -z", fmt, grep, fork.head).stdout
    grep = "--grep=This reverts commit "
    reverts = fork.git("log -z -F --format=%H%x00%B", grep, fork.head).stdout
    undone = {}  # sha -> the commits that revert it
    for sha, body in re.findall(r"([0-9a-f]{40})\0([^\0]*)", reverts):
        for target in re.findall(r"This reverts commit ([0-9a-f]{40})", body):
            undone.setdefault(target, []).append(sha)
    live = lambda sha: not any(map(live, undone.get(sha, ())))  # noqa: E731
    commits = []
    for sha, of, rev in re.findall(r"([0-9a-f]{40})\0([^\0]*)\0([^\0]*)\0", log):
        if BACKPORT_OF in of.strip().split("\x01") and live(sha):
            commits.append((sha, rev.split("\x01")[0].strip() or None))
    return commits


def missing_patches(fork, series: list) -> list:  # those the fork lacks, or refuse
    exact = [not fork.git("apply --check -R", p.path).returncode for p in series]
    files = [f for f, _, _ in UPSTREAM + OURS + BUG_SITES]
    texts = texts_at(fork, fork.head, files + [f for p in series for f, _ in p.lines])
    # A patch merged 3-way is in when every line it adds (with a letter) is there.
    have = {(f, t.strip()) for f, text in texts.items() for t in text.splitlines()}
    merged = [not e and p.lines <= have for p, e in zip(series, exact)]
    missing = [p for p, e, m in zip(series, exact, merged) if not (e or m)]
    names = lambda patches: ", ".join(p.name for p in patches)  # noqa: E731
    upstream, ours, bugs = (found(s, texts) for s in (UPSTREAM, OURS, BUG_SITES))
    has, revision = f"{fork.q} has", series[-1].revision
    other = {str(r) for _, r in backport_commits(fork) if r != revision} - {"None"}
    if upstream and not all(exact):
        why = "upstream's own fix (sgl-project/sglang#33335, released in v0.5.17)"
        return say(f"already fixed upstream: {has} {upstream[0]}, {why}; nothing to do")
    if revision and other and not all(exact):
        older = f"Backport-Revision {', '.join(sorted(other))} of this backport"
        again = f"revert it (`python3 {q(TOOL)} --revert {fork.q}`), then apply"
        raise Refused(f"{has} {older}, patches/ Revision {revision}; {again}{NOTHING}")
    if not missing:
        merged = [p for p, m in zip(series, merged) if m]
        merged = f"; merged with your changes: {names(merged)}" * bool(merged)
        every = f"every patch of this backport ({names(series)}{merged})"
        return say(f"already patched: {has} {every}; nothing to do")
    sglang = any(f.startswith("python/") for p in missing for f in p.changed)
    if len(ours) == len(OURS) and not bugs and sglang:
        fix = f"this backport's fix ({' and '.join(ours)}, none of the draft writes)"
        other = f"in another revision than {q(PATCHES)}"
        return say(f"already patched: {has} {fix} {other}; nothing to do")
    for f, code, _ in OURS:
        if code in texts[f] and any(adds(p, f, code) for p in missing):
            lacks = [what for f, code, what in OURS if code not in texts[f]]
            lacks = ", ".join(lacks + [names(missing)])
            part = f"part of this backport: it has {', '.join(ours)}; it lacks {lacks}"
            still = f"; it still has the draft writes in {', '.join(bugs)}" * bool(bugs)
            find = f"find its commits: `{fork.cd} git log {q('-S' + code)} -- {f}`"
            raise Refused(f"{has} {part}{still}; revert it ({find}){NOTHING}")
    return missing


def supply_bases(fork, patches: list) -> list:  # v0.5.16's blobs, for a 3-way am
    made = {b for p in patches for b in p.post}
    wanted = {b: f for p in patches for f, b in p.pre.items() if b not in made}
    check = fork.git("cat-file --batch-check", input="\n".join([*wanted, ""]))
    supplied, lacking, hash_it = [], [], "hash-object --no-filters"
    for blob in re.findall(r"^(\S+) missing$", check.stdout, re.M):
        release = PRISTINE / wanted[blob][len("python/") :]
        ours = wanted[blob].startswith("python/sglang/") and release.is_file()
        ours = ours and out(fork.top, hash_it, release).startswith(blob)
        (supplied if ours else lacking).append(wanted[blob])
        out(fork.top, hash_it + " -w", release) if ours else None
    if supplied:
        say(f"gave git v0.5.16's {len(supplied)} file(s) to merge 3-way (objects only)")
    return lacking


def unmerged(fork, tree: Path) -> dict:  # the trial's conflicting files: why
    stages, listing = {}, git(tree, "ls-files -u -z").stdout
    for stage, path in re.findall(r"\S+ \S+ (\d)\t([^\0]*)", listing):
        stages[path] = stages.get(path, "") + stage
    why = {p: WHY.get(s, "conflict") for p, s in stages.items()}
    for path in (p for p, s in stages.items() if s == "13"):
        if not fork.git("rev-list -1", fork.head, "--", path).stdout:
            why[path] = f"your fork has no {path}"
    return why


def trial(fork, paths, cmd: str, args: list, what: str, step_files) -> Record:
    """`git cmd args` in a temporary worktree, noting each conflict, then refuse."""
    tmp = Path(tempfile.mkdtemp(prefix="sglang-backport-trial-"))
    tree, paths, conflicts, verb = tmp / "fork", set(paths), [], cmd.split()[0]
    head = fork.head
    try:
        out(fork.top, f"{HOOKS_OFF} worktree add --detach --no-checkout", tree, head)
        out(tree, "read-tree HEAD")
        tracked = set(out(tree, "ls-files -z").split("\0")) - {""}
        skip = "".join(p + "\0" for p in tracked - paths)
        out(tree, "update-index --skip-worktree -z --stdin", input=skip)
        out(tree, "checkout-index -f --", *(tracked & paths))
        git_dir = Path(out(tree, "rev-parse --absolute-git-dir"))
        marks = [git_dir / "rebase-apply" / "next", git_dir / "REVERT_HEAD"]
        run, log = git(tree, f"{CHORES_OFF} {cmd}", *args), ""
        while run.returncode:
            said, files = run.stdout + run.stderr, unmerged(fork, tree)
            step = next((m.read_text().strip() for m in marks if m.is_file()), None)
            no_base = re.search("lacking or useless|lacks necessary blobs", said)
            if step is None or not (files or no_base):
                where = (
                    f"{cmd} failed in a trial run (a hook or a setting of the fork?)"
                )
                raise Refused(f"git {where}{NOTHING}; git said:{indented(said)}")
            conflicts.append(step_files(step, files))
            log += run.stdout
            git(tree, "add -A --", *files) if files else None
            resume = f"{verb} --{'continue' if files else 'skip'}"
            run = git(tree, f"{CHORES_OFF} {HOOKS_OFF} {resume}")
        head = Record(sha=out(tree, "rev-parse HEAD"), log=log + run.stdout)
    finally:
        fork.git("worktree remove --force --force", tree)
        shutil.rmtree(tmp, ignore_errors=True)
    for name, files in conflicts:
        what += f" {name}: " + ", ".join(f"{f} ({why})" for f, why in files.items())
    if conflicts:
        hand = f"`{fork.cd} git {cmd} {' '.join(map(q, args))}`, fix the files"
        hand += f", git add them, git {verb} --continue (or --abort)"
        raise Refused(f"{what}{NOTHING}; to do it by hand: {hand}")
    return head


def fast_forward(fork, head: Record, done: str) -> None:  # or restore the fork
    views = ("rev-parse HEAD", "ls-files -s -z", "status --porcelain -z -uall")
    before = [fork.git(view).stdout for view in views]
    if before[0].strip() != fork.head:
        raise Refused(f"HEAD of {fork.q} moved while this ran; run this again")
    index = fork.top / out(fork.top, "rev-parse --git-path index")
    saved = index.read_bytes() if index.exists() else None
    added = fork.git("diff-tree -r -z --name-only --diff-filter=A", fork.head, head.sha)
    added, top = [Path(a) for a in added.stdout.split("\0") if a], fork.top
    created = {p: os.path.lexists(top / p) for a in added for p in [a, *a.parents]}
    fork.git("update-index -q --refresh")
    back = f"`{fork.cd} git reset --hard {fork.head[:12]}`"
    step = fork.git("read-tree -m -u", fork.head, head.sha)
    if not step.returncode:
        update = ("-m apply_to_fork.py", fork.branch, head.sha, fork.head)
        step = fork.git("update-ref", *update)
    if not step.returncode:
        fork.git("update-ref ORIG_HEAD", fork.head)
        say(f"{done} branch {fork.branch[11:]} of {fork.q} (undo: {back}):")
        log = fork.git("log --reverse --format=%h%x20%s", f"{fork.head}..")
        return print(indented(log.stdout)[1:])
    fork.git("update-ref", fork.branch, fork.head)  # restore the branch, the
    fork.git("read-tree --reset -u", fork.head)  # files, then what git created
    for path in sorted((p for p in created if not created[p]), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(top / path) if (top / path).is_dir() else os.unlink(top / path)
    index.write_bytes(saved) if saved is not None else None
    failed = f"writing into {fork.q} failed (git {step.args[3]}:{indented(step.stderr)}"
    if before != [fork.git(view).stdout for view in views]:
        raise NotRestored(f"{failed}), and it could not be restored; get back: {back}")
    raise Refused(f"{failed}); it was restored as it was{NOTHING}")


def apply(fork_arg: str) -> int:
    series = load_series()
    fork = locate_fork(fork_arg)
    patches = missing_patches(fork, series)
    if not patches:
        return 0
    lacking = supply_bases(fork, patches)
    paths = [f for p in patches for f in p.changed + p.created]

    def step_files(step, files):
        patch = patches[int(step) - 1]
        return patch.name, files or {f: WHY[""] for f in patch.pre if f in lacking}

    what = f"the series does not apply to {fork.q}, not even with a 3-way merge"
    setup = f"`bash {q(ROOT / 'scripts/dev/setup.sh')} --pristine-only`"
    fetch = f"`{fork.cd} git fetch {UPSTREAM_REPO} v0.5.16`"
    what += f" (for {WHY['']}: run {setup} or {fetch});" if lacking else ";"
    head = trial(fork, paths, "am -3", [p.path for p in patches], what, step_files)
    fast_forward(fork, head, f"applied {len(patches)} of the {len(series)} patches to")
    steps = zip(patches, head.log.split("Applying: ")[1:])
    merged = ", ".join(p.name for p, step in steps if "3-way merge" in step)
    if merged:
        review = f"`{fork.cd} git log -p {fork.head[:12]}..`"
        say(f"merged 3-way with your fork's changes: {merged}; review them ({review})")
    tests = sorted(q(c) for p in series for c in p.created if TEST_FILE.match(c))
    say("run the shipped tests on the fork's own tree, in its Python environment:")
    print(f"    {fork.cd} PYTHONPATH=python python3 -m pytest {' '.join(tests)}")
    return 0


def revert(fork_arg: str) -> int:
    fork = locate_fork(fork_arg)
    commits = [sha for sha, _ in backport_commits(fork)]
    head, trailer = Record(sha=fork.head), f"`Backport-Of: {BACKPORT_OF}`"

    def step_files(sha, files):
        for f, why in files.items():
            log = fork.git("log --format=%H%x20%h%x20%s", f"{sha}..HEAD", "--", f)
            by = [c[41:] for c in log.stdout.splitlines() if c[:40] not in commits]
            files[f] = f"{why}; changed since by {', '.join(by) or 'a merge'}"
        return f"reverting {sha[:12]}", files

    if commits:
        paths = out(fork.top, "show -z --name-only --format=", *commits).split("\0")
        what = f"this backport does not revert in {fork.q}, not even 3-way;"
        head = trial(fork, paths, "revert --no-edit", commits, what, step_files)
    left = texts_at(fork, head.sha, [f for f, _, _ in OURS + BUG_SITES])
    gone = [f"no draft write in {w}" for f, c, w in BUG_SITES if c not in left[f]]
    left = ", ".join(found(OURS, left) + gone * bool(commits))
    if left:
        where = f"after reverting {len(commits)}" if commits else "in none"
        find = f"`{fork.cd} git log {q('-S' + OURS[0][1])} -- {OURS[0][0]}`"
        fix = f"this backport's fix ({left}) {where} of its commits with the trailer"
        hand = f"squashed, or applied by hand; revert it by hand (find it: {find})"
        raise Refused(f"{fork.q} has {fix} {trailer}: {hand}{NOTHING}")
    if not commits:
        why = f"no commit of this backport ({trailer}) that is not reverted"
        return say(f"nothing to revert: {fork.q} has {why}; nothing to do") or 0
    fast_forward(fork, head, f"reverted {len(commits)} commit(s), newest first, on")
    say(f"now merge v0.5.17, or apply again (`python3 {q(TOOL)} {fork.q}`)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fork", help="the fork's git work tree (it has python/sglang/)")
    what = "revert this backport's commits (its Backport-Of trailer) instead"
    parser.add_argument("--revert", action="store_true", help=what)
    args = parser.parse_args(argv)
    try:
        return (revert if args.revert else apply)(args.fork)
    except Refused as exc:
        print(f"apply: error: {exc}", file=sys.stderr)
        return exc.code


if __name__ == "__main__":
    sys.exit(main())

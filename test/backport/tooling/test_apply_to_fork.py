"""scripts/fork/apply_to_fork.py on real git forks: one test per case of its
message table (README, "The apply tool"), and the way to v0.5.17.

A fork is a git repository of the untouched 0.5.16 package (.build/pristine) as
python/sglang/, tagged v0.5.16: the files the series changes or the tool reads,
or the whole package (``full``). A refusal leaves HEAD, branch, index, every
file, stash and worktrees as they were (``state``). The older revision is this
repository's patches/ at OLD_REVISION (Backport-Revision 2).
"""

import hashlib
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

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=90, suite="stage-a-test-cpu")

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "scripts" / "fork" / "apply_to_fork.py"
SERIES = sorted((ROOT / "patches").glob("*.patch"))
PRISTINE, WHEELS = ROOT / ".build" / "pristine", ROOT / ".build" / "wheels"
OLD_REVISION = "1db19c3"  # this repository's patches/ of Backport-Revision 2
REVISION = re.findall(r"^Backport-Revision: (\S+)$", SERIES[0].read_text(), re.M)[0]
SRT = "python/sglang/srt/"
SERVER_ARGS, SCHEDULER = SRT + "server_args.py", SRT + "managers/scheduler.py"
SPEC, RUNTIME_CONTEXT = SRT + "speculative/", SRT + "runtime_context.py"
EAGLE, MULTI_LAYER = (
    SPEC + "eagle_worker_v2.py",
    SPEC + "multi_layer_eagle_worker_v2.py",
)
# Where a patched fork's merge of v0.5.17 conflicts.
FOUR = [SCHEDULER, EAGLE, SPEC + "draft_worker_common.py"]
FOUR += [SPEC + "frozen_kv_mtp_worker_v2.py"]
UPSTREAM_FIXES = [("speculative/draft_worker_common.py", "draft_server_args_copy")]
UPSTREAM_FIXES += [("model_executor/model_runner.py", "_resolve_draft_load_format")]
PIPES = dict(capture_output=True, text=True)


def setUpModule():
    global TMP, ENV, BASE
    if not (PRISTINE / "sglang" / "srt" / "server_args.py").is_file():
        raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
    TMP = Path(tempfile.mkdtemp(prefix="apply-to-fork-"))
    ENV = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    ENV.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    ENV.update(GIT_OPTIONAL_LOCKS="0", GIT_CEILING_DIRECTORIES=str(TMP))
    files = {"__init__.py", "version.py", "srt/model_executor/model_runner.py"}
    for patch in SERIES:
        diff = r"^diff --git a/python/sglang/(\S+) b/"
        files |= set(re.findall(diff, patch.read_text(), re.M))
    BASE = make_base(TMP / "base", files)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def git(cwd, *args, check=True):
    run = subprocess.run(["git", *args], cwd=cwd, env=ENV, **PIPES)
    if check and run.returncode:
        raise AssertionError(f"git {' '.join(args)} failed:\n{run.stderr}")
    return run.stdout.strip()


def commit_all(fork, message):
    git(fork, "add", "-A")
    who = "-c user.name=Fork -c user.email=fork@example.invalid".split()
    git(fork, *who, "commit", "-q", "--allow-empty", "-m", message)


def make_base(path, files=None):
    package, release = path / "python" / "sglang", PRISTINE / "sglang"
    if files is None:
        shutil.copytree(release, package, ignore=lambda *_: ["__pycache__"])
    for rel in (f for f in files or () if (release / f).is_file()):
        (package / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(release / rel, package / rel)
    git(path, "init", "-q", "-b", "main")
    commit_all(path, "sglang 0.5.16")
    git(path, "tag", "v0.5.16")
    return path


def created(patches):
    pattern = r"^diff --git a/\S+ b/(\S+)\nnew file mode"
    return [m for p in patches for m in re.findall(pattern, p.read_text(), re.M)]


def hunk(path, at_change):
    """0-based line of v0.5.16's path in the series' first hunk there: the one
    it changes first (or, adding only, the one after its addition), or (not
    at_change) the second of its leading context lines."""
    for patch in SERIES:
        head = rf"^diff --git a/{re.escape(path)} (?s:.*?)^@@ -(\d+).*\n((?: .*\n)*)"
        if found := re.search(head, patch.read_text(), re.M):
            return int(found[1]) - 1 + (len(found[2].splitlines()) if at_change else 1)
    raise AssertionError(f"the series does not change {path}")


def write(path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode) if mode else None


class ForkCase(CustomTestCase):
    count = 0

    def clone(self, name=None, source=None, full=False, init=False):
        if full and not (TMP / "full").exists():
            make_base(TMP / "full")
        type(self).count += 1
        fork = TMP / (name or f"{type(self).__name__}-{self.count}")
        fork.parent.mkdir(parents=True, exist_ok=True)
        source = source or (TMP / "full" if full else BASE)
        git(TMP, "clone", "-q", "--shared", str(source), str(fork))
        self.addCleanup(shutil.rmtree, fork, ignore_errors=True)
        shutil.rmtree(fork / ".git") if init else None
        git(fork, "init", "-q", "-b", "main") if init else None
        git(fork, "config", "user.name", "Fork Maintainer")
        git(fork, "config", "user.email", "fork@example.invalid")
        return fork

    def tool(self, fork, *flags, tool=TOOL, env=None):
        command = [sys.executable, tool, *flags, fork]
        return subprocess.run(command, env={**ENV, **(env or {})}, **PIPES)

    def project(self, patches=SERIES, pristine=True):
        """A copy of this project: the tool, these patches, .build/pristine."""
        type(self).count += 1
        root = TMP / f"project-{self.count}"
        write(root / "scripts" / "fork" / TOOL.name, TOOL.read_text())
        (root / "patches").mkdir()
        for patch in map(Path, patches):
            write(root / "patches" / patch.name, patch.read_text())
        (root / ".build").mkdir()
        (root / ".build" / "pristine").symlink_to(PRISTINE) if pristine else None
        return root / "scripts" / "fork" / TOOL.name

    def state(self, fork):
        files = {}
        for dirpath, dirnames, filenames in os.walk(fork):
            dirnames[:] = [d for d in dirnames if d != ".git" or dirpath != str(fork)]
            for path in (Path(dirpath, n) for n in dirnames + filenames):
                body = path.is_file() and not path.is_symlink() and path.read_bytes()
                digest = hashlib.sha1(body or b"").digest()
                files[str(path)] = (path.lstat().st_mode, digest)
        views = "rev-parse HEAD,symbolic-ref -q HEAD,stash list,worktree list"
        views += ",status --porcelain -uall --ignored,rev-parse --git-path index"
        state = [git(fork, *v.split(), check=False) for v in views.split(",")]
        return state + [(fork / state[-1]).read_bytes(), files]

    def refuses(self, fork, *needles, flags=(), **tool_args):
        before = self.state(fork)
        run = self.tool(fork, *flags, **tool_args)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        self.assertTrue(run.stderr.startswith("apply: error: "), run.stderr)
        for needle in needles:
            self.assertIn(needle, run.stderr)
        self.assertEqual(self.state(fork), before)
        return run

    def leaves_alone(self, fork, *needles, flags=()):
        before, run = self.state(fork), self.tool(fork, *flags)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for needle in ("; nothing to do", *needles):
            self.assertIn(needle, run.stdout)
        self.assertEqual(self.state(fork), before)

    def assert_done(self, run, fork, needle=f"applied {len(SERIES)} of the"):
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertIn(f"apply: {needle}", run.stdout)
        self.assertEqual(git(fork, "status", "--porcelain", "-uno"), "")
        self.assertEqual(len(git(fork, "worktree", "list").splitlines()), 1)

    def edit(self, fork, path, at_change=False, note="# fork: a local note"):
        """A note on the line the series changes first in path (a conflict), or
        inside its leading context (a plain apply fails, a 3-way merges)."""
        lines, i = (fork / path).read_text().splitlines(True), hunk(path, at_change)
        if at_change:
            lines[i] = lines[i].rstrip("\n") + f"  {note}\n"
        else:
            lines.insert(i, re.match(r"[ \t]*", lines[i])[0] + note + "\n")
        (fork / path).write_text("".join(lines))

    def printed(self, text, start, env=None):
        """Runs the printed command (in backticks, or indented) that starts so."""
        indented = [t.strip() for t in text.splitlines() if t.startswith("    ")]
        for command in re.findall(r"`([^`]+)`", text) + indented:
            if command.startswith(start):
                return subprocess.run(["bash", "-c", command], env=env or ENV, **PIPES)
        self.fail(f"no command starting {start!r} in:\n{text}")

    def imported(self, without=()):
        """A fork imported without upstream history, server_args.py and
        multi_layer_eagle_worker_v2.py drifted: it lacks their v0.5.16 blobs."""
        fork = self.clone(init=True)
        for path in (SERVER_ARGS, MULTI_LAYER):
            self.edit(fork, path, note="# fork: imported")
        for path in without:
            (fork / path).unlink()
        commit_all(fork, "fork: imported")
        return fork

    def older_series(self):
        ls = ["ls-tree", "--name-only", OLD_REVISION, "patches/"]
        if not (listing := git(ROOT, *ls, check=False)):
            self.skipTest(f"needs this repository's history ({OLD_REVISION})")
        folder = Path(tempfile.mkdtemp(dir=TMP))
        for name in filter(lambda n: n.endswith(".patch"), listing.splitlines()):
            text = git(ROOT, "show", f"{OLD_REVISION}:{name}") + "\n"
            (folder / Path(name).name).write_text(text)
        return sorted(folder.glob("*.patch"))

    def am(self, fork, *patches, how="am -3"):
        git(fork, *how.split(), *map(str, patches))


class TestApply(ForkCase):
    def test_applied_as_git_am_does_and_the_printed_tests_pass(self):
        fork, by_hand = self.clone(full=True), self.clone(full=True)
        git(fork, "switch", "-q", "-c", "my-fork")
        start, run = git(fork, "rev-parse", "HEAD"), self.tool(fork)
        self.assert_done(run, fork)
        self.assertEqual(git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(git(fork, "rev-parse", "ORIG_HEAD"), start)
        self.assertIn(f"git reset --hard {start[:12]}", run.stdout)
        self.am(by_hand, *SERIES)
        for args in (["log", "--format=%an %ae %B", f"{start}.."], ["write-tree"]):
            self.assertEqual(git(fork, *args), git(by_hand, *args))
        for path in created(SERIES):  # the printed command runs the shipped tests
            shipped = path.startswith("test/registered/") and "/test_" in path
            self.assertEqual(shipped, path in run.stdout, path)
        env = {k: v for k, v in ENV.items() if not k.startswith("PYTEST_")}
        env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        prefix = f"cd {fork} && PYTHONPATH=python python3"
        tests = self.printed(run.stdout, f"{prefix} -m pytest", env)
        self.assertRegex(tests.stdout, r"\d+ passed", tests.stdout[-3000:])
        where = "-c 'import sglang; print(sglang.__file__)' #"
        run.stdout = run.stdout.replace("-m pytest", where)
        where = self.printed(run.stdout, f"{prefix} -c", env)
        self.assertEqual(where.stdout.strip(), str(fork / "python/sglang/__init__.py"))

    def test_a_drifted_fork_is_merged_3way_and_gets_the_patches_it_lacks(self):
        for count in (0, 1, len(SERIES) - 1):  # patches the fork already has
            with self.subTest(present=count):
                fork = self.clone()
                self.edit(fork, SCHEDULER)
                commit_all(fork, "fork: a note near the backport")
                self.am(fork, *SERIES[:count])
                run, rest = self.tool(fork), len(SERIES) - count
                self.assert_done(run, fork, f"applied {rest} of the {len(SERIES)}")
                subjects = git(fork, "log", "--format=%s", f"HEAD~{rest}..")
                self.assertTrue(all(s in run.stdout for s in subjects.splitlines()))
                merged = "merged 3-way with your fork's changes: "  # SERIES[1]'s
                self.assertEqual(merged + SERIES[1].name in run.stdout, count < 2)
                self.assertIn("# fork: a local note", (fork / SCHEDULER).read_text())
                self.leaves_alone(fork, "every patch", "; merged with your changes: ")

    def test_the_release_gives_the_bases_a_history_lacks_or_they_are_named(self):
        fork, by_hand = self.imported(), self.imported()
        am = subprocess.run(["git", "am", "-3", *SERIES], cwd=by_hand, env=ENV, **PIPES)
        self.assertRegex(am.stderr, "lacking or useless|lacks necessary blobs")
        tool = self.project(pristine=False)
        setup = shlex.quote(str(tool.parents[2] / "scripts/dev/setup.sh"))
        base = f"{SERVER_ARGS} (no v0.5.16 base), {MULTI_LAYER} (no v0.5.16 base)"
        self.refuses(fork, base, f"run `bash {setup} --pristine-only`", tool=tool)
        run = self.tool(fork)
        self.assert_done(run, fork)
        self.assertIn("gave git v0.5.16's 2 file(s) to merge 3-way", run.stdout)
        self.assertIn("# fork: imported", (fork / SERVER_ARGS).read_text())

    def test_twice_or_in_another_revision_is_already_patched(self):
        # Twice (the fork's own tags do not count); edited after applying; the
        # older revision squashed, without trailers.
        twice, edited, squashed = self.clone(), self.clone(), self.clone()
        write(twice / "python/sglang/version.py", '__version__ = "1.0.0"\n')
        commit_all(twice, "release 1.0.0 of our fork")
        git(twice, "tag", "v1.0.0")
        self.assert_done(self.tool(twice), twice)
        self.leaves_alone(twice, "already patched", "has every patch of this backport")
        self.tool(edited)
        text = (edited / SERVER_ARGS).read_text()
        doc = re.search(r"def draft_server_args_copy\(.*\n\s+\"\"\"(.*)\n", text)[1]
        write(edited / SERVER_ARGS, text.replace(doc, "Our own revision."))
        commit_all(edited, "fork: our own revision of the backport")
        self.am(squashed, *self.older_series(), how="apply --index")
        commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        for fork in (edited, squashed):
            with self.subTest(fork=fork.name):
                self.leaves_alone(fork, "already patched", "in another revision than")

    def test_upstreams_fix_is_recognised_from_its_code(self):
        for path, name in UPSTREAM_FIXES:
            with self.subTest(path=path):
                fork = self.clone()
                code = f"\n\ndef {name}(*args):\n    pass\n"
                write(fork / SRT / path, (fork / SRT / path).read_text() + code)
                commit_all(fork, "upstream: its own fix")
                self.leaves_alone(fork, "already fixed upstream", f"{name}() in {path}")

    def test_an_older_revision_is_told_to_revert_then_apply(self):
        fork, fresh = self.clone(), self.clone()
        self.am(fork, *self.older_series(), how="am")
        older = f"has Backport-Revision {int(REVISION) - 1} of this backport"
        run = self.refuses(fork, older, f"patches/ Revision {REVISION}; revert it")
        self.assertEqual(self.printed(run.stderr, "python3 ").returncode, 0)
        self.assert_done(self.tool(fork), fork)
        self.tool(fresh)
        trees = {git(f, "rev-parse", "HEAD^{tree}") for f in (fork, fresh)}
        self.assertEqual(len(trees), 1)

    def test_a_partial_backport_is_refused_with_what_it_lacks(self):
        fork = self.clone()
        spec = next(p for p in SERIES if "def draft_server_args_copy(" in p.read_text())
        git(fork, "apply", f"--include={SERVER_ARGS}", str(spec))
        commit_all(fork, "fork: take draft_server_args_copy only")
        has = "part of this backport: it has draft_server_args_copy()"
        lacks = f"it lacks scoped_server_args(), {SERIES[0].name}"
        writes = "draft writes in scheduler.py, eagle_worker_v2.py"
        found = self.printed(self.refuses(fork, has, lacks, writes).stderr, "cd ")
        self.assertIn(git(fork, "rev-parse", "--short", "HEAD"), found.stdout)

    def test_conflicts_in_several_files_and_patches_are_named_at_once(self):
        fork, never = self.clone(), self.imported(without=[MULTI_LAYER])
        for path in (RUNTIME_CONTEXT, SCHEDULER, EAGLE):
            self.edit(fork, path, True, "# fork: our own change")
        write(fork / created(SERIES)[0], "upstream's own\n")
        commit_all(fork, "fork: change lines the backport changes")
        why = [f"{SERIES[0].name}: {RUNTIME_CONTEXT} (changed in your fork too)"]
        why += [f"{SCHEDULER} (changed", f"{EAGLE} (changed", "not even with a 3-way"]
        run = self.refuses(fork, *why, f"{created(SERIES)[0]} (your fork already has")
        self.assertEqual(run.stderr.count("\n"), 1, "one line")
        self.assertIn("git am --continue", self.printed(run.stderr, "cd ").stdout)
        self.refuses(never, f"{MULTI_LAYER} (your fork has no {MULTI_LAYER})")

    def test_what_git_refuses_in_the_trial_or_the_real_run_changes_nothing(self):
        policy = "#!/bin/sh\necho 'fork policy: no' >&2\nexit 1\n"
        ref = '#!/bin/sh\n[ "$1" = prepared ] || exit 0\n'
        ref += "grep -q refs/heads/ || exit 0\necho no >&2\nexit 1\n"
        hook, restored = ".git/hooks/reference-transaction", "it was restored as it"
        trial = ("git am -3 failed in a trial run", "\n    fork policy: no")
        for flags, path, text, needles in (
            ((), ".git/hooks/pre-applypatch", policy, trial),
            ((), hook, ref, (restored, "git update-ref:")),
            (("--revert",), hook, ref, (restored, "git update-ref:")),
            ((), created(SERIES)[-1], "mine\n", (restored, "would be overwritten")),
            ((), "test", "a file where a folder goes\n", (restored, "git read-tree:")),
        ):
            with self.subTest(flags=flags, path=path):
                fork = self.clone()
                self.am(fork, *SERIES) if flags else None
                write(fork / "notes.txt", "untracked notes\n")
                write(fork / path, text, 0o755)
                self.refuses(fork, *needles, flags=flags)

    def test_patches_that_are_not_this_backports_series_are_refused(self):
        other = Path(tempfile.mkdtemp(dir=TMP))
        git(other, "init", "-q")
        write(other / "README.md", "another project\n")
        commit_all(other, "docs: an unrelated change")
        unrelated = git(other, "format-patch", "-1", "--root", "-o", str(other))
        write(other / "0001-notes.patch", "just some notes\n")
        for patches, needle in (
            ([unrelated], "are not this backport's"),
            ([*SERIES, other / "0001-notes.patch"], "is not a patch from git"),
            ([], "holds no *.patch file"),
        ):
            with self.subTest(needle=needle):
                tool = self.project(patches)
                self.refuses(self.clone(), needle, "checkout -- patches", tool=tool)


class TestTheFork(ForkCase):
    def test_paths_that_are_not_a_fork_are_refused(self):
        scratch = Path(tempfile.mkdtemp(dir=TMP))
        (scratch / "plain" / "python" / "sglang").mkdir(parents=True)
        git(scratch, "init", "-q", "other")
        commit_all(scratch / "other", "init")
        git(scratch, "clone", "-q", "--bare", str(BASE), "bare.git")
        for name, needle in (
            ("plain", "is not in a git work tree; pass"),
            ("other", "has no python/sglang/"),
            ("bare.git", "(a bare repository or a .git directory)"),
        ):
            with self.subTest(needle=needle):
                run = self.tool(scratch / name)
                self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
                self.assertTrue(run.stderr.startswith("apply: error: "), run.stderr)
                self.assertIn(needle, run.stderr)
        self.assertEqual(os.listdir(scratch / "plain"), ["python"])

    def test_a_git_operation_in_progress_gets_its_way_out(self):
        for op, start in (
            ("rebase", "rebase other"),
            ("am", "am .git/0001-other.patch"),
            ("merge", "merge other"),
            ("bisect", "bisect start"),
        ):
            with self.subTest(op=op):
                fork = self.clone()
                git(fork, "switch", "-q", "-c", "other")
                for branch in ("other", "main"):
                    git(fork, "switch", "-q", branch)
                    write(fork / "python/sglang/version.py", f"# {branch}\n")
                    commit_all(fork, branch)
                git(fork, "format-patch", "-q", "-1", "other", "-o", ".git")
                git(fork, *start.split(), check=False)
                stop = "bisect reset" if op == "bisect" else f"{op} --abort"
                run = self.refuses(fork, f"a git {op} is in progress")
                way_out = self.printed(run.stderr, f"cd {fork} && git {stop}")
                branch = git(fork, "symbolic-ref", "--short", "HEAD")
                self.assertEqual((way_out.returncode, branch), (0, "main"))

    def test_detached_and_unborn_heads_are_refused_and_paths_with_spaces_work(self):
        fork = self.clone(name="my forks/sglang fork")
        git(fork, "switch", "-q", "--detach")
        run = self.refuses(fork, "is detached;")
        switch = f"cd {shlex.quote(str(fork))} && git switch -c"
        switch = self.printed(run.stderr, switch)
        self.assertEqual(switch.returncode, 0, switch.stderr)
        applied = self.tool(fork)
        self.assert_done(applied, fork)
        undo = re.findall(r"`(cd '[^`]+)`", applied.stdout)[0]
        self.assertEqual(shlex.split(undo)[1], str(fork))
        git(fork, "checkout", "-q", "--orphan", "empty")
        self.refuses(fork, "the branch empty of", "has no commit yet")

    def test_tracked_changes_are_refused(self):
        fork = self.clone()
        write(fork / SCHEDULER, (fork / SCHEDULER).read_text() + "# work in progress\n")
        for flags in ((), ("--revert",)):
            needles = ("uncommitted changes", SCHEDULER, "git stash")
            self.refuses(fork, *needles, flags=flags)

    def test_without_git_on_path_the_error_is_one_line(self):
        run = self.tool(BASE, env={"PATH": str(TMP / "no-bin")})
        error = "apply: error: git is not on PATH; install git and run this again\n"
        self.assertEqual((run.returncode, run.stderr), (1, error))


class TestRevert(ForkCase):
    def test_reverted_a_v0_5_17_merge_is_clean_and_then_upstreams_fix_is_found(self):
        fork, wheels = self.clone(full=True), sorted(WHEELS.glob("sglang-0.5.17-*"))
        self.assertTrue(wheels, f"no sglang 0.5.17 wheel in {WHEELS}; run setup.sh")
        git(fork, "switch", "-q", "-c", "v0.5.17")
        shutil.rmtree(fork / "python" / "sglang")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if re.match(r"sglang/.*[^/]$", n)]
            wheel.extractall(fork / "python", names)
        commit_all(fork, "sglang 0.5.17")
        git(fork, "switch", "-q", "main")
        own = {"FORK_NOTES.md": "our notes\n", "python/sglang/fork_local.py": "X = 1\n"}
        for i, (path, text) in enumerate(own.items()):  # before and after the series
            write(fork / path, text)
            commit_all(fork, f"fork: our own commit {i}")
            self.assert_done(self.tool(fork), fork) if not i else None
        control = self.clone(source=fork)  # without the revert: the four conflicts
        git(control, "merge", "--no-edit", "origin/v0.5.17", check=False)
        conflicts = git(control, "diff", "--name-only", "--diff-filter=U")
        self.assertEqual(sorted(conflicts.split()), sorted(FOUR))
        run = self.tool(fork, "--revert")
        self.assert_done(run, fork, f"reverted {len(SERIES)} commit(s), newest first")
        git(fork, "merge", "--no-edit", "v0.5.17")
        self.assertEqual(git(fork, "status", "--porcelain", "-uall"), "")
        self.assertEqual({path: (fork / path).read_text() for path in own}, own)
        mine = git(fork, "log", "--format=%s", "--grep=^fork: our own")
        self.assertEqual(len(mine.splitlines()), 2)
        fix = "draft_server_args_copy() in speculative/draft_worker_common.py"
        self.leaves_alone(fork, "already fixed upstream", fix)

    def test_nothing_to_revert(self):
        reverted = self.clone()
        self.am(reverted, *SERIES)
        git(reverted, "revert", "--no-edit", f"HEAD~{len(SERIES)}..HEAD")
        for fork in (self.clone(), reverted):
            self.leaves_alone(fork, "nothing to revert: ", flags=("--revert",))

    def test_a_fix_without_its_trailers_is_left_for_a_revert_by_hand(self):
        squashed, mixed = self.clone(), self.clone()
        self.am(squashed, *SERIES, how="apply --index")
        commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        self.am(mixed, SERIES[0])
        self.am(mixed, *SERIES[1:], how="apply --index")
        commit_all(mixed, "fork: the rest of it, by hand")
        for fork, needle in (
            (squashed, "scoped_server_args()) in none of its commits with the"),
            (mixed, "(draft_server_args_copy(), no draft write in scheduler.py"),
        ):
            with self.subTest(fork=fork.name):
                needles = (needle, "squashed, or applied by hand")
                run = self.refuses(fork, *needles, flags=("--revert",))
                self.assertIn("fork: ", self.printed(run.stderr, "cd ").stdout)

    def test_a_revert_that_conflicts_names_the_files_and_the_forks_commits(self):
        fork = self.clone()
        self.am(fork, *SERIES)
        text = (fork / SERVER_ARGS).read_text()
        write(fork / SERVER_ARGS, text.replace("args_copy(", "args_copy_v2("))
        commit_all(fork, "fork: rename the helper")
        mine = git(fork, "log", "-1", "--format=%h fork: rename the helper")
        why = f"{SERVER_ARGS} (changed in your fork too; changed since by {mine})"
        run = self.refuses(fork, "does not revert in", why, flags=("--revert",))
        by_hand = self.printed(run.stderr, "cd ")
        self.assertIn("git revert --continue", by_hand.stdout + by_hand.stderr)


if __name__ == "__main__":
    unittest.main()

"""scripts/fork/apply_to_fork.py on real git forks: a test per case of its
message table (README, "The apply tool"), and the way to v0.5.17.

A fork is a git repository of the untouched 0.5.16 package (.build/pristine) as
python/sglang/, tagged v0.5.16: the files the series changes or the tool reads,
or the whole package (`full`). patches/ is read at run time. A refusal leaves
HEAD, branch, index file, every file of the work tree, stash and worktrees as
they were. The older revision is this repository's patches/ at OLD_REVISION
(Backport-Revision 2); while patches/ is Revision 2 itself, the copy is
relabelled 1 and a line it adds changed, to stand for an older one.
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

register_cpu_ci(est_time=120, suite="stage-a-test-cpu")

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
FOUR = [
    SCHEDULER,
    SPEC + "draft_worker_common.py",
    EAGLE,
    SPEC + "frozen_kv_mtp_worker_v2.py",
]
UPSTREAM_FIXES = [("speculative/draft_worker_common.py", "draft_server_args_copy")]
UPSTREAM_FIXES += [("model_executor/model_runner.py", "_resolve_draft_load_format")]
NOBODY, SHARED, PIPES = 65534, {}, dict(capture_output=True, text=True)


def created(patches):
    pattern = r"^diff --git a/\S+ b/(\S+)\nnew file mode"
    return [m for p in patches for m in re.findall(pattern, p.read_text(), re.M)]


def hunk_line(path, removing):
    """(0-based line, text) of v0.5.16's path at the series' first hunk there: a
    line whose change conflicts, or (not removing) where a note defeats a plain
    apply (between two leading context lines)."""
    for patch in SERIES:
        for part in re.split(r"^(?=diff --git )", patch.read_text(), flags=re.M):
            hunks = re.findall(r"^@@ -(\d+).*\n((?:[ +-].*\n)*)", part, re.M)
            for start, body in (
                hunks if part.startswith(f"diff --git a/{path} ") else ()
            ):
                lines, n, after_added = body.splitlines(), int(start) - 1, False
                if not removing and all(line[0] == " " for line in lines[:3]):
                    return int(start), None
                for line in lines if removing else ():
                    if line[0] == "-" or line[0] == " " and after_added:
                        return n, line[1:]
                    after_added |= line[0] == "+"
                    n += line[0] != "+"
    raise AssertionError(f"the series has no suitable hunk in {path}")


def chown_tree(top, uid):
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [""] + dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


def write(path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode) if mode else None


def tearDownModule():
    shutil.rmtree(SHARED.get("tmp", "/nonexistent"), ignore_errors=True)


class ForkCase(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not SHARED:
            if not (PRISTINE / "sglang" / "srt" / "server_args.py").is_file():
                raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
            tmp = Path(tempfile.mkdtemp(prefix="apply-to-fork-"))
            tmp.chmod(0o755)  # the read-only case runs the tool as another user
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
            env.update(GIT_OPTIONAL_LOCKS="0", GIT_CEILING_DIRECTORIES=str(tmp))
            SHARED.update(tmp=tmp, env=env)
            files = {"__init__.py", "version.py", "srt/model_executor/model_runner.py"}
            for patch in SERIES:
                diff = r"^diff --git a/python/sglang/(\S+) b/"
                files |= set(re.findall(diff, patch.read_text(), re.M))
            SHARED["base"] = cls.make_base(tmp / "base", files)
        cls.tmp, cls.env, cls.count = SHARED["tmp"], SHARED["env"], 0

    @classmethod
    def make_base(cls, path, files=None):
        package, release = path / "python" / "sglang", PRISTINE / "sglang"
        if files is None:
            shutil.copytree(release, package, ignore=lambda *_: ["__pycache__"])
        for rel in (f for f in files or () if (release / f).is_file()):
            (package / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(release / rel, package / rel)
        cls.git(path, "init", "-q", "-b", "main")
        cls.commit_all(path, "sglang 0.5.16")
        cls.git(path, "tag", "v0.5.16")
        return path

    @classmethod
    def git(cls, cwd, *args, check=True):
        run = subprocess.run(["git", *args], cwd=cwd, env=SHARED["env"], **PIPES)
        if check and run.returncode:
            raise AssertionError(f"git {' '.join(args)} failed:\n{run.stderr}")
        return run.stdout.strip()

    @classmethod
    def commit_all(cls, fork, message):
        cls.git(fork, "add", "-A")
        who = "-c user.name=Fork -c user.email=fork@example.invalid".split()
        cls.git(fork, *who, "commit", "-q", "--allow-empty", "-m", message)

    def clone(self, name=None, source=None, full=False, init=False):
        if full and "full" not in SHARED:
            SHARED["full"] = self.make_base(self.tmp / "full")
        type(self).count += 1
        fork = self.tmp / (name or f"{type(self).__name__}-{self.count}")
        fork.parent.mkdir(parents=True, exist_ok=True)
        source = source or SHARED["full" if full else "base"]
        self.git(self.tmp, "clone", "-q", "--shared", str(source), str(fork))
        self.addCleanup(shutil.rmtree, fork, ignore_errors=True)
        shutil.rmtree(fork / ".git") if init else None
        self.git(fork, "init", "-q", "-b", "main") if init else None
        self.git(fork, "config", "user.name", "Fork Maintainer")
        self.git(fork, "config", "user.email", "fork@example.invalid")
        return fork

    def tool(self, fork, *flags, tool=TOOL, env=None, user=None):
        who = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
        command = [*who * (user is not None), sys.executable, tool, *flags, fork]
        return subprocess.run(command, env={**self.env, **(env or {})}, **PIPES)

    def project(self, patches=SERIES, pristine=True):
        """A copy of this project: the tool, these patches, .build/pristine."""
        type(self).count += 1
        root = self.tmp / f"project-{self.count}"
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
                files[str(path)] = (
                    path.lstat().st_mode,
                    hashlib.sha1(body or b"").digest(),
                )
        views = "rev-parse HEAD,symbolic-ref -q HEAD,stash list,worktree list"
        views += ",status --porcelain -uall --ignored,rev-parse --git-path index"
        state = [self.git(fork, *v.split(), check=False) for v in views.split(",")]
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
        self.assertEqual(self.git(fork, "status", "--porcelain", "-uno"), "")
        self.assertEqual(len(self.git(fork, "worktree", "list").splitlines()), 1)

    def edit(self, fork, path, index, text=None, note="# fork: a local note"):
        lines = (fork / path).read_text().splitlines(keepends=True)
        if text is None:
            lines.insert(index, re.match(r"[ \t]*", lines[index])[0] + note + "\n")
        else:
            lines[index] = f"{text}  # fork: our own change\n"
        (fork / path).write_text("".join(lines))

    def printed(self, text, start):
        """Runs the printed command (in backticks, or indented) that starts so."""
        indented = [t.strip() for t in text.splitlines() if t.startswith("    ")]
        for command in re.findall(r"`([^`]+)`", text) + indented:
            if command.startswith(start):
                return subprocess.run(["bash", "-c", command], env=self.env, **PIPES)
        self.fail(f"no command starting {start!r} in:\n{text}")

    def imported(self, without=()):
        """A fork imported without upstream history, server_args.py and
        multi_layer_eagle_worker_v2.py drifted: it lacks their v0.5.16 blobs."""
        fork = self.clone(init=True)
        for path in (SERVER_ARGS, MULTI_LAYER):
            self.edit(fork, path, hunk_line(path, False)[0], note="# fork: imported")
        for path in without:
            (fork / path).unlink()
        self.commit_all(fork, "fork: imported")
        return fork

    def older_series(self):
        ls = ["ls-tree", "--name-only", OLD_REVISION, "patches/"]
        listing = self.git(ROOT, *ls, check=False)
        if not listing:
            self.skipTest(f"needs this repository's history ({OLD_REVISION})")
        folder = Path(tempfile.mkdtemp(dir=self.tmp))
        for name in filter(lambda n: n.endswith(".patch"), listing.splitlines()):
            text = self.git(ROOT, "show", f"{OLD_REVISION}:{name}") + "\n"
            if REVISION == "2":
                text = text.replace("Backport-Revision: 2", "Backport-Revision: 1")
                text = re.sub(r'(?m)^(\+\s+""".+)$', r"\1 (older)", text, count=1)
            (folder / Path(name).name).write_text(text)
        return sorted(folder.glob("*.patch"))

    def run_git(self, cwd, *args):
        return subprocess.run(["git", *args], cwd=cwd, env=self.env, **PIPES)

    def am(self, fork, *patches, how="am -3"):
        self.git(fork, *how.split(), *map(str, patches))


class TestApply(ForkCase):
    def test_applied_as_git_am_does_and_the_printed_tests_pass(self):
        fork, by_hand = self.clone(full=True), self.clone(full=True)
        self.git(fork, "switch", "-q", "-c", "my-fork")
        start, run = self.git(fork, "rev-parse", "HEAD"), self.tool(fork)
        self.assert_done(run, fork)
        self.assertEqual(self.git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(self.git(fork, "rev-parse", "ORIG_HEAD"), start)
        self.assertIn(f"git reset --hard {start[:12]}", run.stdout)
        self.am(by_hand, *SERIES)
        for args in (
            ["log", "--format=%an %ae %B", f"{start}.."],
            ["rev-parse", "HEAD^{tree}"],
        ):
            self.assertEqual(self.git(fork, *args), self.git(by_hand, *args))
        for path in created(SERIES):  # the printed command runs the shipped tests
            shipped = path.startswith("test/registered/") and "/test_" in path
            self.assertEqual(shipped, path in run.stdout, path)
        self.env = {k: v for k, v in self.env.items() if not k.startswith("PYTEST_")}
        self.env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        prefix = f"cd {fork} && PYTHONPATH=python python3"
        tests = self.printed(run.stdout, f"{prefix} -m pytest")
        self.assertRegex(tests.stdout, r"\d+ passed", tests.stdout[-3000:])
        where = "-c 'import sglang; print(sglang.__file__)' #"
        where = self.printed(run.stdout.replace("-m pytest", where), f"{prefix} -c")
        self.assertEqual(where.stdout.strip(), str(fork / "python/sglang/__init__.py"))

    def test_twice_is_already_patched_and_a_forks_own_tags_do_not_count(self):
        fork = self.clone()
        write(fork / "python/sglang/version.py", '__version__ = "1.0.0"\n')
        self.commit_all(fork, "release 1.0.0 of our fork")
        self.git(fork, "tag", "v1.0.0")
        self.assert_done(self.tool(fork), fork)
        self.leaves_alone(fork, "already patched", "has every patch of this backport")

    def test_a_drifted_fork_is_merged_3way(self):
        fork = self.clone()
        self.edit(fork, SCHEDULER, hunk_line(SCHEDULER, False)[0])
        self.commit_all(fork, "fork: a note near the backport")
        run = self.tool(fork)
        self.assert_done(run, fork)
        self.assertIn("merged 3-way with your fork's changes", run.stdout)
        self.assertIn("# fork: a local note", (fork / SCHEDULER).read_text())
        self.leaves_alone(fork, "every patch", "; merged with your changes: ")

    def test_the_release_gives_the_bases_a_history_lacks(self):
        fork, by_hand = self.imported(), self.imported()
        am = self.run_git(by_hand, "am", "-3", *map(str, SERIES))
        self.assertRegex(am.stderr, "lacking or useless|lacks necessary blobs")
        run = self.tool(fork)
        self.assert_done(run, fork)
        self.assertIn("gave git v0.5.16's 2 file(s) to merge 3-way", run.stdout)
        self.assertIn("# fork: imported", (fork / SERVER_ARGS).read_text())

    def test_without_the_release_the_missing_bases_are_named(self):
        tool = self.project(pristine=False)
        setup = shlex.quote(str(tool.parents[2] / "scripts/dev/setup.sh"))
        base = f"{SERVER_ARGS} (no v0.5.16 base), {MULTI_LAYER} (no v0.5.16 base)"
        self.refuses(
            self.imported(), base, f"run `bash {setup} --pristine-only`", tool=tool
        )

    def test_the_first_patches_present_get_the_rest(self):
        for count, drifted in (
            (1, False),
            (len(SERIES) - 1, False),
            (len(SERIES) - 1, True),
        ):
            with self.subTest(present=count, drifted=drifted):
                fork = self.clone()
                if drifted:
                    self.edit(fork, SCHEDULER, hunk_line(SCHEDULER, False)[0])
                    self.commit_all(fork, "fork: a note")
                self.am(fork, *SERIES[:count])
                run, rest = self.tool(fork), len(SERIES) - count
                self.assert_done(run, fork, f"applied {rest} of the {len(SERIES)}")
                subjects = self.git(fork, "log", "--format=%s", f"HEAD~{rest}..")
                self.assertTrue(all(s in run.stdout for s in subjects.splitlines()))

    def test_upstreams_fix_is_recognised_from_its_code(self):
        for path, name in UPSTREAM_FIXES:
            with self.subTest(path=path):
                fork = self.clone()
                code = f"\n\ndef {name}(*args):\n    pass\n"
                write(fork / SRT / path, (fork / SRT / path).read_text() + code)
                self.commit_all(fork, "upstream: its own fix")
                self.leaves_alone(fork, "already fixed upstream", f"{name}() in {path}")

    def test_the_fix_in_another_revision_is_left_alone_not_called_partial(self):
        # Edited after applying; and the older revision squashed, no trailers.
        edited, squashed = self.clone(), self.clone()
        self.tool(edited)
        text = (edited / SERVER_ARGS).read_text()
        doc = re.search(r"def draft_server_args_copy\(.*\n\s+\"\"\"(.*)\n", text)[1]
        write(edited / SERVER_ARGS, text.replace(doc, "Our own revision."))
        self.commit_all(edited, "fork: our own revision of the backport")
        self.am(squashed, *self.older_series(), how="apply --index")
        self.commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        for fork in (edited, squashed):
            with self.subTest(fork=fork.name):
                self.leaves_alone(fork, "already patched", "in another revision than")

    def test_an_older_revision_is_told_to_revert_then_apply(self):
        fork, fresh = self.clone(), self.clone()
        self.am(fork, *self.older_series(), how="am")
        older = f"has Backport-Revision {int(REVISION) - 1} of this backport"
        run = self.refuses(fork, older, f"patches/ Revision {REVISION}; revert it")
        self.assertEqual(self.printed(run.stderr, "python3 ").returncode, 0)
        self.assert_done(self.tool(fork), fork)
        self.tool(fresh)
        trees = {self.git(f, "rev-parse", "HEAD^{tree}") for f in (fork, fresh)}
        self.assertEqual(len(trees), 1)

    def test_a_partial_backport_is_refused_with_what_it_lacks(self):
        fork = self.clone()
        spec = next(p for p in SERIES if "def draft_server_args_copy(" in p.read_text())
        self.git(fork, "apply", f"--include={SERVER_ARGS}", str(spec))
        self.commit_all(fork, "fork: take draft_server_args_copy only")
        has = "part of this backport: it has draft_server_args_copy()"
        lacks = f"it lacks scoped_server_args(), {SERIES[0].name}"
        writes = "draft writes in scheduler.py, eagle_worker_v2.py"
        found = self.printed(self.refuses(fork, has, lacks, writes).stderr, "cd ")
        self.assertIn(self.git(fork, "rev-parse", "--short", "HEAD"), found.stdout)

    def test_patches_that_are_not_this_backports_series_are_refused(self):
        other = Path(tempfile.mkdtemp(dir=self.tmp))
        self.git(other, "init", "-q")
        write(other / "README.md", "another project\n")
        self.commit_all(other, "docs: an unrelated change")
        unrelated = self.git(other, "format-patch", "-1", "--root", "-o", str(other))
        write(other / "0001-notes.patch", "just some notes\n")
        for patches, needle in (
            ([unrelated], "are not this backport's"),
            ([*SERIES, other / "0001-notes.patch"], "is not a patch from git"),
            ([], "holds no *.patch file"),
        ):
            with self.subTest(needle=needle):
                tool = self.project(patches)
                self.refuses(self.clone(), needle, "checkout -- patches", tool=tool)

    def test_conflicts_in_several_files_and_patches_are_named_at_once(self):
        fork, never = self.clone(), self.imported(without=[MULTI_LAYER])
        for path in (RUNTIME_CONTEXT, SCHEDULER, EAGLE):
            self.edit(fork, path, *hunk_line(path, True))
        write(fork / created(SERIES)[0], "upstream's own\n")
        self.commit_all(fork, "fork: change lines the backport changes")
        why = [f"{SERIES[0].name}: {RUNTIME_CONTEXT} (changed in your fork too)"]
        why += [f"{SCHEDULER} (changed", f"{EAGLE} (changed", "not even with a 3-way"]
        run = self.refuses(fork, *why, f"{created(SERIES)[0]} (your fork already has")
        self.assertEqual(run.stderr.count("\n"), 1, "one line")
        self.assertIn("git am --continue", self.printed(run.stderr, "cd ").stdout)
        self.refuses(never, f"{MULTI_LAYER} (your fork has no {MULTI_LAYER})")

    def test_a_trial_that_git_fails_says_what_git_said(self):
        hooked, anonymous = self.clone(), self.clone()
        hook = "#!/bin/sh\necho 'fork policy: no' >&2\nexit 1\n"
        write(hooked / ".git/hooks/pre-applypatch", hook, 0o755)
        self.refuses(hooked, "git am -3 failed in a trial run", "\n    fork policy: no")
        for key in ("user.name", "user.email"):
            self.git(anonymous, "config", "--unset", key)
        self.git(anonymous, "config", "user.useConfigOnly", "true")
        self.refuses(anonymous, "git am -3 failed", "Please tell me who you are")

    def in_the_way(self, fork, name):
        """What makes git read-tree or git update-ref refuse the real run."""
        if name.startswith("hook"):
            hook = '#!/bin/sh\n[ "$1" = prepared ] || exit 0\n'
            hook += "grep -q refs/heads/ || exit 0\necho no >&2\nexit 1\n"
            write(fork / ".git/hooks/reference-transaction", hook, 0o755)
        elif name == "untracked file":
            write(fork / created(SERIES)[-1], "mine\n")
        elif name == "untracked where a folder goes":
            write(fork / "test", "mine\n")
        elif name == "read-only folder":
            (fork / SPEC).chmod(0o555)
            self.addCleanup((fork / SPEC).chmod, 0o755)
        elif subprocess.run(["chattr", "+i", fork / SERVER_ARGS], **PIPES).returncode:
            self.skipTest("chattr +i is not available here (root and ext4/xfs/btrfs)")
        else:
            self.addCleanup(subprocess.run, ["chattr", "-i", fork / SERVER_ARGS])

    def test_a_real_run_that_git_refuses_restores_the_fork(self):
        for name, needle in (
            ("hook", "git update-ref:"),
            ("hook --revert", "git update-ref:"),
            ("untracked file", "would be overwritten"),
            ("untracked where a folder goes", "git read-tree:"),
            ("read-only folder", "Permission denied"),
            ("immutable file", "git read-tree:"),
        ):
            with self.subTest(name):
                fork, flags = self.clone(), ("--revert",) * name.endswith("--revert")
                self.am(fork, *SERIES) if flags else None
                write(fork / "notes.txt", "untracked notes\n")
                self.in_the_way(fork, name)
                before, root = self.state(fork), os.geteuid() == 0
                user = NOBODY if root and name == "read-only folder" else None
                chown_tree(fork, NOBODY) if user else None
                run = self.tool(fork, *flags, user=user, env={"HOME": str(fork)})
                chown_tree(fork, 0) if user else None
                self.assertEqual((run.returncode, self.state(fork)), (1, before))
                self.assertIn("it was restored as it was", run.stderr)
                self.assertIn(needle, run.stderr)


class TestTheFork(ForkCase):
    def test_paths_that_are_not_a_fork_are_refused(self):
        scratch = Path(tempfile.mkdtemp(dir=self.tmp))
        (scratch / "plain" / "python" / "sglang").mkdir(parents=True)
        write(scratch / "a-file", "x\n")
        self.git(scratch, "init", "-q", "other")
        self.commit_all(scratch / "other", "init")
        self.git(scratch, "clone", "-q", "--bare", str(SHARED["base"]), "bare.git")
        for name, needle in (
            ("missing", "No such file or directory"),
            ("a-file", "Not a directory"),
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

    def test_a_repository_of_another_user_gets_gits_safe_directory_command(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the fork another owner")
        fork = self.clone()
        chown_tree(fork, NOBODY)
        self.addCleanup(chown_tree, fork, 0)
        write(self.tmp / "gitconfig", "")
        self.env = {**self.env, "GIT_CONFIG_GLOBAL": str(self.tmp / "gitconfig")}
        run = self.tool(fork)
        self.assertEqual(run.returncode, 1)
        self.assertIn("is not in a git work tree", run.stderr)
        add = self.printed(run.stderr, "git config --global --add safe.directory")
        self.assertEqual((add.returncode, self.tool(fork).returncode), (0, 0))

    def test_a_git_operation_in_progress_gets_its_way_out(self):
        ops = "rebase:rebase other,am:am .git/0001-other.patch,merge:merge other"
        for op, start in (
            o.split(":") for o in f"{ops},bisect:bisect start".split(",")
        ):
            with self.subTest(op=op):
                fork = self.clone()
                self.git(fork, "switch", "-q", "-c", "other")
                for branch in ("other", "main"):
                    self.git(fork, "switch", "-q", branch)
                    write(fork / "python/sglang/version.py", f"# {branch}\n")
                    self.commit_all(fork, branch)
                self.git(fork, "format-patch", "-q", "-1", "other", "-o", ".git")
                self.git(fork, *start.split(), check=False)
                stop = "bisect reset" if op == "bisect" else f"{op} --abort"
                run = self.refuses(fork, f"a git {op} is in progress")
                way_out = self.printed(run.stderr, f"cd {fork} && git {stop}")
                branch = self.git(fork, "symbolic-ref", "--short", "HEAD")
                self.assertEqual((way_out.returncode, branch), (0, "main"))

    def test_detached_and_unborn_heads_are_refused_and_paths_with_spaces_work(self):
        fork = self.clone(name="my forks/sglang fork")
        self.git(fork, "switch", "-q", "--detach")
        run = self.refuses(fork, "is detached;")
        switch = f"cd {shlex.quote(str(fork))} && git switch -c"
        switch = self.printed(run.stderr, switch)
        self.assertEqual(switch.returncode, 0, switch.stderr)
        applied = self.tool(fork)
        self.assert_done(applied, fork)
        undo = re.findall(r"`(cd '[^`]+)`", applied.stdout)[0]
        self.assertEqual(shlex.split(undo)[1], str(fork))
        self.git(fork, "checkout", "-q", "--orphan", "empty")
        self.refuses(fork, "the branch empty of", "has no commit yet")

    def test_tracked_changes_are_refused(self):
        fork = self.clone()
        write(fork / SCHEDULER, (fork / SCHEDULER).read_text() + "# work in progress\n")
        for flags in ((), ("--revert",)):
            needles = ("uncommitted changes", SCHEDULER, "git stash")
            self.refuses(fork, *needles, flags=flags)

    def test_without_git_on_path_the_error_is_one_line(self):
        run = self.tool(SHARED["base"], env={"PATH": str(self.tmp / "no-bin")})
        error = "apply: error: git is not on PATH; install git and run this again\n"
        self.assertEqual((run.returncode, run.stderr), (1, error))


class TestRevert(ForkCase):
    def release_0_5_17(self):
        """sglang 0.5.17's package, from its wheel in .build/wheels (cached)."""
        wheels, get = (
            sorted(WHEELS.glob("sglang-0.5.17-*.whl")),
            "download -q --no-deps",
        )
        if not wheels:
            pip = [sys.executable, "-m", "pip", *get.split(), "sglang==0.5.17", "-d"]
            said = subprocess.run([*pip, WHEELS], **PIPES).stderr.strip()[-300:]
            wheels = sorted(WHEELS.glob("sglang-0.5.17-*.whl"))
        if not wheels:
            self.fail(f"no sglang 0.5.17 wheel in {WHEELS}; pip download said {said}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            names = [n for n in wheel.namelist() if re.match(r"sglang/.*[^/]$", n)]
            return {name: wheel.read(name) for name in names}

    def test_reverted_a_v0_5_17_merge_is_clean_and_then_upstreams_fix_is_found(self):
        fork = self.clone(full=True)
        self.git(fork, "switch", "-q", "-c", "v0.5.17")
        shutil.rmtree(fork / "python" / "sglang")
        for name, data in self.release_0_5_17().items():
            (fork / "python" / name).parent.mkdir(parents=True, exist_ok=True)
            (fork / "python" / name).write_bytes(data)
        self.commit_all(fork, "sglang 0.5.17")
        self.git(fork, "switch", "-q", "main")
        own = {"FORK_NOTES.md": "our notes\n", "python/sglang/fork_local.py": "X = 1\n"}
        for i, (path, text) in enumerate(own.items()):  # before and after the series
            write(fork / path, text)
            self.commit_all(fork, f"fork: our own commit {i}")
            self.assert_done(self.tool(fork), fork) if not i else None
        control = self.clone(source=fork)  # without the revert: the four conflicts
        self.run_git(control, "merge", "--no-edit", "origin/v0.5.17")
        conflicts = self.git(control, "diff", "--name-only", "--diff-filter=U")
        self.assertEqual(sorted(conflicts.split()), sorted(FOUR))
        run = self.tool(fork, "--revert")
        self.assert_done(run, fork, f"reverted {len(SERIES)} commit(s), newest first")
        merge = self.run_git(fork, "merge", "--no-edit", "v0.5.17")
        self.assertEqual(merge.returncode, 0, merge.stdout + merge.stderr)
        self.assertEqual(self.git(fork, "status", "--porcelain", "-uall"), "")
        self.assertEqual({path: (fork / path).read_text() for path in own}, own)
        mine = self.git(fork, "log", "--format=%s", "--grep=^fork: our own")
        self.assertEqual(len(mine.splitlines()), 2)
        fix = "draft_server_args_copy() in speculative/draft_worker_common.py"
        self.leaves_alone(fork, "already fixed upstream", fix)

    def test_nothing_to_revert(self):
        reverted = self.clone()
        self.am(reverted, *SERIES)
        self.git(reverted, "revert", "--no-edit", f"HEAD~{len(SERIES)}..HEAD")
        for fork in (self.clone(), reverted):
            self.leaves_alone(fork, "nothing to revert: ", flags=("--revert",))

    def test_a_fix_without_its_trailers_is_left_for_a_revert_by_hand(self):
        squashed, mixed = self.clone(), self.clone()
        self.am(squashed, *SERIES, how="apply --index")
        self.commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        self.am(mixed, SERIES[0])
        self.am(mixed, *SERIES[1:], how="apply --index")
        self.commit_all(mixed, "fork: the rest of it, by hand")
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
        self.commit_all(fork, "fork: rename the helper")
        mine = self.git(fork, "log", "-1", "--format=%h fork: rename the helper")
        why = f"{SERVER_ARGS} (changed in your fork too; changed since by {mine})"
        run = self.refuses(fork, "does not revert in", why, flags=("--revert",))
        by_hand = self.printed(run.stderr, "cd ")
        self.assertIn("git revert --continue", by_hand.stdout + by_hand.stderr)


if __name__ == "__main__":
    unittest.main()

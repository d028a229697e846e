"""scripts/fork/apply_to_fork.py on real git forks: one test per case of its
message table (README, "The apply tool"), and the way to v0.5.17.

A fork is a git repository of the untouched sglang 0.5.16 package
(.build/pristine/sglang as python/sglang/, tag v0.5.16): the files the series
changes or the tool reads, or the whole package where a test says `full`.
patches/ is read at run time. A refusal must leave HEAD, branch, index file,
every file of the work tree (untracked and ignored ones too), the stash and
the worktrees as they were. The older revision comes from this repository's
history (patches/ at OLD_REVISION, Backport-Revision 2); while patches/ is
still Revision 2 itself, it is relabelled Revision 1 and one line it adds is
changed, so that it stands for an older revision all the same.
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
RUNTIME_CONTEXT = SRT + "runtime_context.py"
EAGLE, SPEC = SRT + "speculative/eagle_worker_v2.py", SRT + "speculative/"
MULTI_LAYER = SPEC + "multi_layer_eagle_worker_v2.py"
FOUR = [SCHEDULER, SPEC + "draft_worker_common.py", EAGLE]
FOUR += [SPEC + "frozen_kv_mtp_worker_v2.py"]  # where a patched fork meets v0.5.17
NOBODY = 65534
_SHARED = {}


def created(patches):
    pattern = r"^diff --git a/\S+ b/(\S+)\nnew file mode"
    return [m for p in patches for m in re.findall(pattern, p.read_text(), re.M)]


def hunk_line(path, removing):
    """(0-based line, text) of v0.5.16's path in the series' first hunk there:
    a line a changed line would conflict with, or (removing=False) a place
    between two context lines where a note defeats a plain apply."""
    for patch in SERIES:
        for section in re.split(r"^(?=diff --git )", patch.read_text(), flags=re.M):
            if not section.startswith(f"diff --git a/{path} "):
                continue
            for start, body in re.findall(
                r"^@@ -(\d+).*\n((?:[ +-].*\n)*)", section, re.M
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
        for name in [
            dirpath,
            *(os.path.join(dirpath, n) for n in dirnames + filenames),
        ]:
            os.lchown(name, uid, uid)


def tearDownModule():
    shutil.rmtree(_SHARED.get("tmp", "/nonexistent"), ignore_errors=True)


class ForkCase(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not _SHARED:
            if not (PRISTINE / "sglang" / "srt" / "server_args.py").is_file():
                raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
            tmp = Path(tempfile.mkdtemp(prefix="apply-to-fork-"))
            tmp.chmod(0o755)  # the read-only case runs the tool as another user
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            env.update(
                GIT_CONFIG_NOSYSTEM="1",
                GIT_CONFIG_GLOBAL=os.devnull,
                GIT_OPTIONAL_LOCKS="0",
            )
            _SHARED.update(tmp=tmp, env={**env, "GIT_CEILING_DIRECTORIES": str(tmp)})
            files = {"__init__.py", "version.py", "srt/model_executor/model_runner.py"}
            for patch in SERIES:
                files |= set(
                    re.findall(
                        r"^diff --git a/python/sglang/(\S+) b/", patch.read_text(), re.M
                    )
                )
            _SHARED["base"] = cls.make_base(tmp / "base", files & cls.released())
        cls.tmp, cls.env, cls.base, cls.count = (
            _SHARED["tmp"],
            _SHARED["env"],
            _SHARED["base"],
            0,
        )

    @staticmethod
    def released():
        return {
            str(p.relative_to(PRISTINE / "sglang"))
            for p in (PRISTINE / "sglang").rglob("*.py")
        }

    @classmethod
    def make_base(cls, path, files=None):
        package = path / "python" / "sglang"
        if files is None:
            shutil.copytree(
                PRISTINE / "sglang",
                package,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        for rel in files or ():
            (package / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PRISTINE / "sglang" / rel, package / rel)
        cls.git(path, "init", "-q", "-b", "main")
        cls.commit_all(path, "sglang 0.5.16")
        cls.git(path, "tag", "v0.5.16")
        return path

    @classmethod
    def git(cls, cwd, *args, check=True):
        run = subprocess.run(
            ["git", *args], cwd=cwd, env=_SHARED["env"], capture_output=True, text=True
        )
        if check and run.returncode:
            raise AssertionError(f"git {' '.join(args)} failed:\n{run.stderr}")
        return run.stdout.strip()

    @classmethod
    def commit_all(cls, fork, message):
        cls.git(fork, "add", "-A")
        ident = (
            "-c",
            "user.name=Fork Maintainer",
            "-c",
            "user.email=fork@example.invalid",
        )
        cls.git(fork, *ident, "commit", "-q", "--allow-empty", "-m", message)

    def clone(self, name=None, source=None, full=False):
        type(self).count += 1
        if full and "full" not in _SHARED:
            _SHARED["full"] = self.make_base(self.tmp / "full")
        fork = self.tmp / (name or f"{type(self).__name__}-{self.count}")
        fork.parent.mkdir(parents=True, exist_ok=True)
        source = source or _SHARED["full" if full else "base"]
        self.git(self.tmp, "clone", "-q", "--shared", str(source), str(fork))
        self.addCleanup(shutil.rmtree, fork, ignore_errors=True)
        self.git(fork, "config", "user.name", "Fork Maintainer")
        self.git(fork, "config", "user.email", "fork@example.invalid")
        return fork

    def tool(self, fork, *flags, tool=TOOL, env=None, user=None):
        command = [sys.executable, str(tool), *flags, str(fork)]
        if user is not None:
            command = [
                "setpriv",
                f"--reuid={user}",
                f"--regid={user}",
                "--clear-groups",
                *command,
            ]
        env = {**self.env, **(env or {})}
        return subprocess.run(command, env=env, capture_output=True, text=True)

    def project(self, patches=SERIES, pristine=True):
        """A throwaway copy of this project: the tool, these patches, and the
        release copy unless told not to."""
        type(self).count += 1
        root = self.tmp / f"project-{self.count}"
        (root / "scripts" / "fork").mkdir(parents=True)
        shutil.copy2(TOOL, root / "scripts" / "fork")
        (root / "patches").mkdir()
        for patch in patches:
            shutil.copy2(patch, root / "patches")
        if pristine:
            (root / ".build").mkdir()
            (root / ".build" / "pristine").symlink_to(PRISTINE)
        return root / "scripts" / "fork" / TOOL.name

    def state(self, fork):
        files = {}
        for dirpath, dirnames, filenames in os.walk(fork):
            dirnames[:] = [d for d in dirnames if d != ".git" or dirpath != str(fork)]
            for path in (Path(dirpath, n) for n in dirnames + filenames):
                body = (
                    path.read_bytes()
                    if path.is_file() and not path.is_symlink()
                    else None
                )
                files[str(path)] = (
                    path.lstat().st_mode,
                    body and hashlib.sha1(body).digest(),
                )
        views = (
            "rev-parse HEAD",
            "symbolic-ref -q HEAD",
            "stash list",
            "worktree list",
        )
        views += ("status --porcelain -uall --ignored",)
        index = fork / self.git(fork, "rev-parse", "--git-path", "index")
        state = [self.git(fork, *view.split(), check=False) for view in views]
        return state + [index.read_bytes() if index.exists() else None, files]

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
        before = self.state(fork)
        run = self.tool(fork, *flags)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        for needle in ("; nothing to do",) + needles:
            self.assertIn(needle, run.stdout)
        self.assertEqual(self.state(fork), before)

    def assert_done(
        self, run, fork, needle=f"applied {len(SERIES)} of the {len(SERIES)} patches"
    ):
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
        lines = [line.strip() for line in text.splitlines() if line.startswith("    ")]
        for command in re.findall(r"`([^`]+)`", text) + lines:
            if command.startswith(start):
                return subprocess.run(
                    ["bash", "-c", command],
                    env=self.env,
                    capture_output=True,
                    text=True,
                )
        self.fail(f"no command starting {start!r} in:\n{text}")

    def imported(self, without=()):
        """A fork imported without upstream history, its server_args.py and
        multi_layer_eagle_worker_v2.py drifted: the history lacks their v0.5.16
        blobs. `without`: files it never had."""
        fork = self.clone()
        shutil.rmtree(fork / ".git")
        self.git(fork, "init", "-q", "-b", "main")
        self.git(fork, "config", "user.name", "Fork Maintainer")
        self.git(fork, "config", "user.email", "fork@example.invalid")
        for path in (SERVER_ARGS, MULTI_LAYER):
            self.edit(fork, path, hunk_line(path, False)[0], note="# fork: imported")
        for path in without:
            (fork / path).unlink()
        self.commit_all(fork, "fork: imported")
        return fork

    def older_series(self):
        """patches/ of another, older Backport-Revision (see the docstring)."""
        listing = self.git(
            ROOT, "ls-tree", "--name-only", OLD_REVISION, "patches/", check=False
        )
        if not listing:
            self.skipTest(
                f"needs this repository's history ({OLD_REVISION}); clone it whole"
            )
        folder = Path(tempfile.mkdtemp(dir=self.tmp))
        for name in filter(lambda n: n.endswith(".patch"), listing.splitlines()):
            text = self.git(ROOT, "show", f"{OLD_REVISION}:{name}") + "\n"
            if REVISION == "2":
                text = text.replace("Backport-Revision: 2", "Backport-Revision: 1")
                text = re.sub(r'(?m)^(\+\s+""".+)$', r"\1 (older)", text, count=1)
            (folder / Path(name).name).write_text(text)
        return sorted(folder.glob("*.patch"))


class TestApply(ForkCase):
    def test_applied_as_git_am_does_and_the_printed_tests_pass(self):
        fork, by_hand = self.clone(full=True), self.clone(full=True)
        self.git(fork, "switch", "-q", "-c", "my-fork")
        start = self.git(fork, "rev-parse", "HEAD")
        run = self.tool(fork)
        self.assert_done(run, fork)
        self.assertEqual(self.git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(self.git(fork, "rev-parse", "ORIG_HEAD"), start)
        self.assertIn(f"git reset --hard {start[:12]}", run.stdout)
        self.git(by_hand, "am", "-q", *map(str, SERIES))
        for args in (
            ["log", "--format=%an %ae %B", f"{start}.."],
            ["rev-parse", "HEAD^{tree}"],
        ):
            self.assertEqual(self.git(fork, *args), self.git(by_hand, *args))
        env = {
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.env = {
            **{k: v for k, v in self.env.items() if not k.startswith("PYTEST_")},
            **env,
        }
        tests = self.printed(
            run.stdout, f"cd {fork} && PYTHONPATH=python python3 -m pytest"
        )
        self.assertRegex(tests.stdout, r"\d+ passed", tests.stdout[-3000:])
        for path in created(SERIES):
            self.assertEqual(
                path.startswith("test/registered/") and "/test_" in path,
                path in run.stdout,
            )
        where = run.stdout.replace(
            "-m pytest", "-c 'import sglang; print(sglang.__file__)' #"
        )
        where = self.printed(where, f"cd {fork} && PYTHONPATH=python python3 -c")
        self.assertEqual(where.stdout.strip(), str(fork / "python/sglang/__init__.py"))

    def test_twice_is_already_patched_and_a_forks_own_tags_do_not_count(self):
        fork = self.clone()
        (fork / "python/sglang/version.py").write_text('__version__ = "1.0.0"\n')
        self.commit_all(fork, "release 1.0.0 of our fork")
        self.git(fork, "tag", "v1.0.0")
        self.assertNotIn("already", self.tool(fork).stdout)
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
        fork = self.imported()
        am = subprocess.run(
            ["git", "am", "-3", *map(str, SERIES)],
            cwd=self.clone(source=fork),
            env=self.env,
            capture_output=True,
            text=True,
        )
        self.assertRegex(am.stderr, "lacking or useless|lacks necessary blobs")
        run = self.tool(fork)
        self.assert_done(run, fork)
        self.assertIn("gave git v0.5.16's 2 file(s) for a 3-way merge", run.stdout)
        self.assertIn("# fork: imported", (fork / SERVER_ARGS).read_text())

    def test_without_the_release_the_missing_bases_are_named(self):
        tool = self.project(pristine=False)
        setup = shlex.quote(str(tool.parents[2] / "scripts/dev/setup.sh"))
        self.refuses(
            self.imported(),
            f"{SERVER_ARGS} (no v0.5.16 base), {MULTI_LAYER} (no v0.5.16 base)",
            f"run `bash {setup} --pristine-only`",
            tool=tool,
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
                self.git(fork, "am", "-q", "-3", *map(str, SERIES[:count]))
                run = self.tool(fork)
                rest = f"applied {len(SERIES) - count} of the {len(SERIES)} patches"
                self.assert_done(run, fork, rest)
                for patch in SERIES[count:]:
                    self.assertIn(
                        patch.read_text()
                        .split("Subject: [PATCH")[1]
                        .split("] ")[1][:40],
                        run.stdout,
                    )

    def test_upstreams_fix_is_recognised_from_its_code(self):
        for path, code, evidence in (
            (
                SPEC + "draft_worker_common.py",
                "def draft_server_args_copy(sa, cfg):\n    return sa\n",
                "draft_server_args_copy() in speculative/draft_worker_common.py",
            ),
            (
                SRT + "model_executor/model_runner.py",
                "def _resolve_draft_load_format(self):\n    pass\n",
                "_resolve_draft_load_format() in model_executor/model_runner.py",
            ),
        ):
            with self.subTest(evidence=evidence):
                fork = self.clone()
                with (fork / path).open("a") as f:
                    f.write("\n\n" + code)
                self.commit_all(fork, "upstream: its own fix")
                self.leaves_alone(fork, "already fixed upstream", evidence)

    def test_the_fix_in_another_revision_is_left_alone_not_called_partial(self):
        # Edited after applying; and the older revision squashed, no trailers.
        edited, squashed = self.clone(), self.clone()
        self.tool(edited)
        text = (edited / SERVER_ARGS).read_text()
        doc = re.search(r"def draft_server_args_copy\(.*\n\s+\"\"\"(.*)\n", text)[1]
        (edited / SERVER_ARGS).write_text(text.replace(doc, "Our own revision."))
        self.commit_all(edited, "fork: our own revision of the backport")
        for patch in self.older_series():
            self.git(squashed, "apply", "--index", str(patch))
        self.commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        for fork in (edited, squashed):
            with self.subTest(fork=fork.name):
                self.leaves_alone(fork, "already patched", "in another revision than")

    def test_an_older_revision_is_told_to_revert_then_apply(self):
        fork, fresh = self.clone(), self.clone()
        self.git(fork, "am", "-q", *map(str, self.older_series()))
        run = self.refuses(
            fork,
            "has Backport-Revision ",
            f"patches/ Revision {REVISION}; revert it (`python3 ",
        )
        self.assertEqual(self.printed(run.stderr, "python3 ").returncode, 0)
        self.assert_done(self.tool(fork), fork)
        self.tool(fresh)
        self.assertEqual(
            self.git(fork, "rev-parse", "HEAD^{tree}"),
            self.git(fresh, "rev-parse", "HEAD^{tree}"),
        )

    def test_a_partial_backport_is_refused_with_what_it_lacks(self):
        fork = self.clone()
        spec = next(p for p in SERIES if "def draft_server_args_copy(" in p.read_text())
        self.git(fork, "apply", f"--include={SERVER_ARGS}", str(spec))
        self.commit_all(fork, "fork: take draft_server_args_copy only")
        run = self.refuses(
            fork,
            "part of this backport: it has draft_server_args_copy()",
            "it lacks scoped_server_args(), " + SERIES[0].name,
            "draft writes in scheduler.py, eagle_worker_v2.py",
        )
        self.assertIn(
            self.git(fork, "rev-parse", "--short", "HEAD"),
            self.printed(run.stderr, "cd ").stdout,
        )

    def test_patches_that_are_not_this_backports_series_are_refused(self):
        other = Path(tempfile.mkdtemp(dir=self.tmp))
        self.git(other, "init", "-q")
        (other / "README.md").write_text("another project\n")
        self.commit_all(other, "docs: an unrelated change")
        unrelated = Path(
            self.git(other, "format-patch", "-1", "--root", "-o", str(other))
        )
        (other / "0001-notes.patch").write_text("just some notes\n")
        for patches, needle in (
            ([unrelated], "are not this backport's"),
            (
                [*SERIES, other / "0001-notes.patch"],
                "is not a patch from git format-patch",
            ),
            ([], "holds no *.patch file"),
        ):
            with self.subTest(needle=needle):
                self.refuses(
                    self.clone(),
                    needle,
                    "checkout -- patches",
                    tool=self.project(patches),
                )

    def test_conflicts_in_several_files_and_patches_are_named_at_once(self):
        fork = self.clone()
        for path in (RUNTIME_CONTEXT, SCHEDULER, EAGLE):
            index, text = hunk_line(path, True)
            self.edit(fork, path, index, text)
        (fork / created(SERIES)[0]).parent.mkdir(parents=True, exist_ok=True)
        (fork / created(SERIES)[0]).write_text("upstream's own\n")
        self.commit_all(fork, "fork: change lines the backport changes")
        run = self.refuses(
            fork,
            "not even with a 3-way merge",
            f"{SERIES[0].name}: {RUNTIME_CONTEXT} (changed in your fork too)",
            f"{SCHEDULER} (changed in your fork too)",
            f"{EAGLE} (changed",
            f"{created(SERIES)[0]} (your fork already has a file there)",
        )
        self.assertEqual(run.stderr.count("\n"), 1, "one line")
        self.assertIn("git am --continue", self.printed(run.stderr, "cd ").stdout)
        self.git(fork, "am", "--abort")
        never = self.imported(without=[MULTI_LAYER])
        self.refuses(never, f"{MULTI_LAYER} (your fork has no {MULTI_LAYER})")

    def test_a_trial_that_git_fails_says_what_git_said(self):
        hooked, anonymous = self.clone(), self.clone()
        hook = hooked / ".git/hooks/pre-applypatch"
        hook.write_text("#!/bin/sh\necho 'fork policy: no backports' >&2\nexit 1\n")
        hook.chmod(0o755)
        self.refuses(
            hooked, "git am -3 failed in a trial run", "\n    fork policy: no backports"
        )
        for key in ("user.name", "user.email"):
            self.git(anonymous, "config", "--unset", key)
        self.git(anonymous, "config", "user.useConfigOnly", "true")
        self.refuses(anonymous, "git am -3 failed", "Please tell me who you are")

    def test_a_real_run_that_git_refuses_restores_the_fork(self):
        root = os.geteuid() == 0

        def policy(fork):
            hook = fork / ".git/hooks/reference-transaction"
            hook.write_text(
                '#!/bin/sh\n[ "$1" = prepared ] || exit 0\ngrep -q refs/heads/ || exit 0\necho "fork policy: no" >&2\nexit 1\n'
            )
            hook.chmod(0o755)
            return "git update-ref:"

        def untracked_file(fork):
            (fork / created(SERIES)[-1]).parent.mkdir(parents=True, exist_ok=True)
            (fork / created(SERIES)[-1]).write_text("mine\n")
            return "would be overwritten"

        def untracked_where_a_folder_goes(fork):
            (fork / "test").write_text("mine\n")
            return "git read-tree:"

        def read_only(fork):
            (fork / SPEC).chmod(0o555)
            self.addCleanup((fork / SPEC).chmod, 0o755)
            return "Permission denied"

        def immutable(fork):
            if subprocess.run(
                ["chattr", "+i", str(fork / SERVER_ARGS)], capture_output=True
            ).returncode:
                self.skipTest(
                    "chattr +i is not available here (root and ext4/xfs/btrfs)"
                )
            self.addCleanup(subprocess.run, ["chattr", "-i", str(fork / SERVER_ARGS)])
            return "git read-tree:"

        for make, flags in (
            (policy, ()),
            (policy, ("--revert",)),
            (untracked_file, ()),
            (untracked_where_a_folder_goes, ()),
            (read_only, ()),
            (immutable, ()),
        ):
            with self.subTest(make.__name__, flags=flags):
                fork = self.clone()
                if flags:
                    self.git(fork, "am", "-q", *map(str, SERIES))
                (fork / "notes.txt").write_text("untracked notes\n")
                needle = make(fork)
                user = NOBODY if make is read_only and root else None
                before = self.state(fork)
                chown_tree(fork, NOBODY) if user else None
                run = self.tool(fork, *flags, user=user, env={"HOME": str(fork)})
                chown_tree(fork, 0) if user else None
                self.assertEqual(
                    (run.returncode, self.state(fork)), (1, before), run.stderr
                )
                self.assertIn("it was restored as it was", run.stderr)
                self.assertIn(needle, run.stderr)


class TestTheFork(ForkCase):
    def test_paths_that_are_not_a_fork_are_refused(self):
        scratch = Path(tempfile.mkdtemp(dir=self.tmp))
        (scratch / "plain" / "python" / "sglang").mkdir(parents=True)
        (scratch / "a-file").write_text("x\n")
        (scratch / "other").mkdir()
        self.git(scratch / "other", "init", "-q")
        self.commit_all(scratch / "other", "init")
        self.git(
            scratch, "clone", "-q", "--bare", str(self.base), str(scratch / "bare.git")
        )
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
        (self.tmp / "gitconfig").write_text("")
        self.env = {**self.env, "GIT_CONFIG_GLOBAL": str(self.tmp / "gitconfig")}
        run = self.tool(fork)
        self.assertEqual(run.returncode, 1)
        self.assertIn("is not in a git work tree", run.stderr)
        add = self.printed(run.stderr, "git config --global --add safe.directory")
        self.assertEqual((add.returncode, self.tool(fork).returncode), (0, 0))

    def test_a_git_operation_in_progress_gets_its_way_out(self):
        for op, start in (
            ("rebase", "rebase other"),
            ("am", "am .git/0001-other.patch"),
            ("merge", "merge other"),
            ("bisect", "bisect start HEAD v0.5.16"),
        ):
            with self.subTest(op=op):
                fork = self.clone()
                self.git(fork, "switch", "-q", "-c", "other")
                for branch in ("other", "main"):
                    self.git(fork, "switch", "-q", branch)
                    (fork / "python/sglang/version.py").write_text(f"# {branch}\n")
                    self.commit_all(fork, branch)
                self.git(
                    fork, "format-patch", "-q", "-1", "other", "-o", str(fork / ".git")
                )
                self.git(fork, *start.split(), check=False)
                stop = "bisect reset" if op == "bisect" else f"{op} --abort"
                run = self.refuses(fork, f"a git {op} is in progress")
                self.assertEqual(
                    self.printed(run.stderr, f"cd {fork} && git {stop}").returncode, 0
                )
                self.assertEqual(
                    self.git(fork, "symbolic-ref", "--short", "HEAD"), "main"
                )

    def test_detached_and_unborn_heads_are_refused_and_paths_with_spaces_work(self):
        fork = self.clone(name="my forks/sglang fork")
        self.git(fork, "switch", "-q", "--detach")
        run = self.refuses(fork, "is detached;")
        switch = self.printed(
            run.stderr, f"cd {shlex.quote(str(fork))} && git switch -c"
        )
        self.assertEqual(switch.returncode, 0, switch.stderr)
        applied = self.tool(fork)
        self.assert_done(applied, fork)
        undo = re.findall(r"`(cd '[^`]+)`", applied.stdout)[0]
        self.assertEqual(shlex.split(undo)[1], str(fork))
        self.git(fork, "checkout", "-q", "--orphan", "empty")
        self.refuses(fork, "the branch empty of", "has no commit yet")

    def test_tracked_changes_are_refused(self):
        fork = self.clone()
        with (fork / SCHEDULER).open("a") as f:
            f.write("# work in progress\n")
        for flags in ((), ("--revert",)):
            self.refuses(
                fork, "uncommitted changes", SCHEDULER, "git stash", flags=flags
            )

    def test_without_git_on_path_the_error_is_one_line(self):
        run = self.tool(self.base, env={"PATH": str(self.tmp / "no-bin")})
        self.assertEqual(
            (run.returncode, run.stderr),
            (1, "apply: error: git is not on PATH; install git and run this again\n"),
        )


class TestRevert(ForkCase):
    def release_0_5_17(self):
        wheels = sorted(WHEELS.glob("sglang-0.5.17-*.whl"))
        if not wheels:
            pip = [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "sglang==0.5.17",
                "-d",
                str(WHEELS),
            ]
            said = subprocess.run(pip, capture_output=True, text=True).stderr.strip()
            wheels = sorted(WHEELS.glob("sglang-0.5.17-*.whl"))
            if not wheels:
                self.skipTest(
                    f"sglang 0.5.17's wheel is not in {WHEELS} and pip cannot fetch it: {said[-300:]}"
                )
        return wheels[0]

    def test_reverted_a_v0_5_17_merge_is_clean_and_then_upstreams_fix_is_found(self):
        fork = self.clone(full=True)
        self.git(fork, "switch", "-q", "-c", "v0.5.17")
        shutil.rmtree(fork / "python" / "sglang")
        with zipfile.ZipFile(self.release_0_5_17()) as wheel:
            wheel.extractall(
                fork / "python",
                [n for n in wheel.namelist() if n.startswith("sglang/")],
            )
        self.commit_all(fork, "sglang 0.5.17")
        self.git(fork, "switch", "-q", "main")
        own = {
            "FORK_NOTES.md": "our deployment notes\n",
            "python/sglang/fork_local.py": "LOCAL = 1\n",
        }
        for i, (path, text) in enumerate(own.items()):
            (fork / path).write_text(text)
            self.commit_all(fork, f"fork: our own commit {i}")
            if not i:
                self.assert_done(self.tool(fork), fork)
        control = self.clone(source=fork)
        self.git(control, "merge", "-q", "--no-edit", "origin/v0.5.17", check=False)
        self.assertEqual(
            sorted(self.git(control, "diff", "--name-only", "--diff-filter=U").split()),
            sorted(FOUR),
        )
        run = self.tool(fork, "--revert")
        self.assert_done(run, fork, f"reverted {len(SERIES)} commit(s), newest first")
        self.assertEqual(run.stdout.count("    "), len(SERIES))
        merge = subprocess.run(
            ["git", "merge", "--no-edit", "v0.5.17"],
            cwd=fork,
            env=self.env,
            capture_output=True,
            text=True,
        )
        self.assertEqual(merge.returncode, 0, merge.stdout + merge.stderr)
        self.assertEqual(self.git(fork, "status", "--porcelain", "-uall"), "")
        for path, text in own.items():
            self.assertEqual((fork / path).read_text(), text)
        self.assertEqual(
            len(
                self.git(fork, "log", "--format=%s", "--grep=^fork: our own").split(
                    "\n"
                )
            ),
            2,
        )
        self.leaves_alone(
            fork,
            "already fixed upstream",
            "draft_server_args_copy() in speculative/draft_worker_common.py",
        )

    def test_nothing_to_revert(self):
        reverted = self.clone()
        self.git(reverted, "am", "-q", *map(str, SERIES))
        self.git(reverted, "revert", "--no-edit", f"HEAD~{len(SERIES)}..HEAD")
        for fork in (self.clone(), reverted):
            self.leaves_alone(fork, "nothing to revert: ", flags=("--revert",))

    def test_a_fix_without_its_trailers_is_left_for_a_revert_by_hand(self):
        squashed, mixed = self.clone(), self.clone()
        for patch in SERIES:
            self.git(squashed, "apply", "--index", str(patch))
        self.commit_all(squashed, "fork: the draft ServerArgs fix, squashed")
        self.git(mixed, "am", "-q", str(SERIES[0]))
        for patch in SERIES[1:]:
            self.git(mixed, "apply", "--index", str(patch))
        self.commit_all(mixed, "fork: the rest of it, by hand")
        for fork, needle in (
            (
                squashed,
                "(draft_server_args_copy(), scoped_server_args()) in none of its commits with",
            ),
            (mixed, "(draft_server_args_copy(), no draft write in scheduler.py"),
        ):
            with self.subTest(fork=fork.name):
                run = self.refuses(
                    fork, needle, "squashed, or applied by hand", flags=("--revert",)
                )
                self.assertIn("fork: ", self.printed(run.stderr, "cd ").stdout)

    def test_a_revert_that_conflicts_names_the_files_and_the_forks_commits(self):
        fork = self.clone()
        self.git(fork, "am", "-q", *map(str, SERIES))
        text = (
            (fork / SERVER_ARGS)
            .read_text()
            .replace("draft_server_args_copy(", "draft_server_args_copy_v2(")
        )
        (fork / SERVER_ARGS).write_text(text)
        self.commit_all(fork, "fork: rename the helper")
        mine = self.git(fork, "log", "-1", "--format=%h fork: rename the helper")
        run = self.refuses(
            fork,
            "this backport does not revert in",
            f"{SERVER_ARGS} (changed in your fork too; changed since by {mine})",
            flags=("--revert",),
        )
        by_hand = self.printed(run.stderr, "cd ")
        self.assertIn("git revert --continue", by_hand.stdout + by_hand.stderr)


if __name__ == "__main__":
    unittest.main()

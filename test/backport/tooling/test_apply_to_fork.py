"""scripts/fork/apply_to_fork.py on real git forks: it applies patches/*.patch
to an SGLang v0.5.16 fork, one commit per patch, or changes nothing.

Every fork is a real git repository made from the untouched sglang 0.5.16
package (.build/pristine/sglang) laid out as a fork (python/sglang/), with a
stand-in for upstream's own tests under test/registered/unit/. The forks hold
the package files that the series changes or the tool reads, byte for byte,
which keeps a clone cheap; the two end-to-end tests (the commits of a clean
fork, the shipped tests run in the patched fork) use the whole package. Each
base is built once for the module and cloned for each test. A refusal must
leave the fork byte-identical: HEAD, branch, index file, every file of the
work tree (untracked and ignored ones too) and the stash are compared.

Where a test needs a different series or no release copy, it runs a copy of
the tool from a throwaway project directory (scripts/fork/ and patches/).
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
from pathlib import Path

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=60, suite="stage-a-test-cpu")

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "scripts" / "fork" / "apply_to_fork.py"
SERIES = sorted((ROOT / "patches").glob("*.patch"))
PRISTINE = ROOT / ".build" / "pristine"
UPSTREAM_STAND_IN = "test/registered/unit/spec/test_upstream_stand_in.py"
SERVER_ARGS = "python/sglang/srt/server_args.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
RUNTIME_CONTEXT = "python/sglang/srt/runtime_context.py"
EAGLE_WORKER = "python/sglang/srt/speculative/eagle_worker_v2.py"
MULTI_LAYER_EAGLE = "python/sglang/srt/speculative/multi_layer_eagle_worker_v2.py"
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")
NOBODY = 65534


def git_env(tmp):
    """The caller's environment minus its git configuration and any git
    repository above the test's temporary directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CEILING_DIRECTORIES=str(tmp),
        GIT_OPTIONAL_LOCKS="0",
        LC_ALL="C",
    )
    return env


class Hunk:
    """One hunk of a change to an existing file, in the file's old lines."""

    def __init__(self, patch, path, old_start):
        self.path, self.old_start, self.lines = path, old_start, []

    def drift_line(self):
        """0-based index of a line between the first two context lines: a note
        there defeats a plain apply and merges 3-way."""
        return self.old_start

    def conflict_line(self):
        """(0-based index, text) of a line whose change conflicts: the first
        removed line, or the line after the first added block."""
        number = self.old_start - 1
        after_added = False
        for line in self.lines:
            if line.startswith("-"):
                return number, line[1:]
            if line.startswith("+"):
                after_added = True
                continue
            if after_added:
                return number, line[1:]
            number += 1
        raise AssertionError(f"hunk in {self.path} has nothing to conflict with")


def hunks(patch):
    found, path, new_file, current = [], None, False, None
    for line in patch.read_text(encoding="utf-8").splitlines():
        if line.startswith("diff --git "):
            path, new_file, current = line.split(" b/", 1)[1], False, None
        elif line.startswith("new file mode"):
            new_file = True
        elif line.startswith("@@ ") and not new_file:
            current = Hunk(patch, path, int(re.match(r"@@ -(\d+)", line)[1]))
            found.append(current)
        elif (
            current is not None
            and line[:1] in (" ", "+", "-")
            and not line.startswith(("--- a/", "+++ b/"))
        ):
            current.lines.append(line)
    return found


def created_paths(patches):
    return [
        m
        for p in patches
        for m in re.findall(
            r"^diff --git a/\S+ b/(\S+)\nnew file mode",
            p.read_text(encoding="utf-8"),
            re.M,
        )
    ]


def first_hunk(path, with_leading_context=True):
    for patch in SERIES:
        for hunk in hunks(patch):
            if hunk.path == path and (
                not with_leading_context
                or all(line.startswith(" ") for line in hunk.lines[:3])
            ):
                return hunk
    raise AssertionError(f"the series has no suitable hunk in {path}")


def chown_tree(top, uid):
    for dirpath, dirnames, filenames in os.walk(top):
        os.lchown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)


_SHARED = {}


def tearDownModule():
    if "tmp" in _SHARED:
        shutil.rmtree(_SHARED["tmp"], ignore_errors=True)


class ForkCase(CustomTestCase):
    """The base forks, made once for the module; each test clones one."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not _SHARED:
            if not (PRISTINE / "sglang" / "srt" / "server_args.py").is_file():
                raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
            if not SERIES:
                raise RuntimeError(f"{ROOT / 'patches'} holds no patch")
            tmp = Path(tempfile.mkdtemp(prefix="apply-to-fork-"))
            tmp.chmod(0o755)  # the read-only test runs the tool as another user
            _SHARED.update(tmp=tmp, env=git_env(tmp))
            _SHARED["base"] = cls._make_base(tmp / "base", cls._files_read())
        cls.tmp, cls.env, cls.base = _SHARED["tmp"], _SHARED["env"], _SHARED["base"]
        cls._count = 0

    @staticmethod
    def _files_read():
        """The package files that the series changes or the tool reads."""
        files = {"__init__.py", "_version.py", "version.py"}
        files.add("srt/model_executor/model_runner.py")  # upstream's later fix
        for patch in SERIES:
            text = patch.read_text(encoding="utf-8")
            for path in re.findall(r"^diff --git a/python/sglang/(\S+) b/", text, re.M):
                files.add(path)
        return sorted(files)

    @classmethod
    def full_base(cls):
        if "full" not in _SHARED:
            _SHARED["full"] = cls._make_base(cls.tmp / "full")
        return _SHARED["full"]

    @classmethod
    def _make_base(cls, path, files=None):
        """A fork at v0.5.16: the wheel's package as python/sglang/, whole or
        only ``files`` of it, byte for byte."""
        package = path / "python" / "sglang"
        if files is None:
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(PRISTINE / "sglang", package, ignore=ignore)
        for rel in files or ():
            (package / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PRISTINE / "sglang" / rel, package / rel)
        stand_in = path / UPSTREAM_STAND_IN
        stand_in.parent.mkdir(parents=True)
        stand_in.write_text(
            "def test_upstream_stand_in():\n"
            "    raise AssertionError('upstream stand-in: not a shipped test')\n",
            encoding="utf-8",
        )
        cls.git(path, "init", "-q", "-b", "main")
        cls.git(path, "add", "-A")
        cls.git(path, *IDENTITY, "commit", "-q", "-m", "sglang 0.5.16")
        cls.git(path, "tag", "v0.5.16")
        return path

    # -- helpers -----------------------------------------------------------

    @classmethod
    def git(cls, cwd, *args, check=True, env=None):
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env={**_SHARED["env"], **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout.strip()

    def clone(self, name=None, source=None, full=False):
        type(self)._count += 1
        fork = self.tmp / (name or f"{type(self).__name__}-{type(self)._count}")
        fork.parent.mkdir(parents=True, exist_ok=True)
        source = source or (self.full_base() if full else self.base)
        self.git(self.tmp, "clone", "-q", "--shared", str(source), str(fork))
        self.addCleanup(shutil.rmtree, fork, ignore_errors=True)
        self.git(fork, "config", "user.name", "Fork Maintainer")
        self.git(fork, "config", "user.email", "fork@example.invalid")
        return fork

    def apply(self, fork, tool=TOOL, env=None, user=None):
        command = [sys.executable, str(tool), str(fork)]
        if user is not None:
            ids = [f"--reuid={user}", f"--regid={user}", "--clear-groups"]
            command = ["setpriv", *ids, *command]
        return subprocess.run(
            command,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def project(self, patches=SERIES, pristine=True):
        """A throwaway copy of this project: the tool, patches/, and the
        release copy (.build/pristine) unless told not to."""
        type(self)._count += 1
        root = self.tmp / f"project-{type(self).__name__}-{type(self)._count}"
        (root / "scripts" / "fork").mkdir(parents=True)
        shutil.copy2(TOOL, root / "scripts" / "fork" / TOOL.name)
        (root / "patches").mkdir()
        for patch in patches:
            shutil.copy2(patch, root / "patches" / Path(patch).name)
        if pristine:
            (root / ".build").mkdir()
            (root / ".build" / "pristine").symlink_to(PRISTINE)
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        return root / "scripts" / "fork" / TOOL.name

    def state(self, fork):
        """Everything a refusal must leave as it was."""
        files = {}
        for dirpath, dirnames, filenames in os.walk(fork):
            if dirpath == str(fork):
                dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                info = path.lstat()
                if path.is_symlink():
                    content = os.readlink(path)
                elif path.is_file():
                    content = hashlib.sha1(path.read_bytes()).hexdigest()
                else:
                    content = None
                files[str(path.relative_to(fork))] = (info.st_mode, content)
        index = Path(self.git(fork, "rev-parse", "--git-path", "index"))
        index = index if index.is_absolute() else fork / index
        return dict(
            head=self.git(fork, "rev-parse", "-q", "--verify", "HEAD", check=False),
            branch=self.git(fork, "symbolic-ref", "-q", "HEAD", check=False),
            index=hashlib.sha1(index.read_bytes()).hexdigest(),
            stash=self.git(fork, "stash", "list", "--format=%H %s"),
            status=self.git(fork, "status", "--porcelain", "-uall", "--ignored"),
            worktrees=self.git(fork, "worktree", "list", "--porcelain"),
            files=files,
        )

    def commit_all(self, fork, message):
        self.git(fork, "add", "-A")
        self.git(fork, *IDENTITY, "commit", "-q", "-m", message)

    def edit_line(self, fork, path, index, new_text=None, insert=None):
        target = fork / path
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        if insert is not None:
            indent = re.match(r"[ \t]*", lines[index])[0]
            lines.insert(index, f"{indent}{insert}\n")
        else:
            lines[index] = new_text + "\n"
        target.write_text("".join(lines), encoding="utf-8")

    def drift(self, fork, path, note="# fork: a local note near the backport"):
        self.edit_line(fork, path, first_hunk(path).drift_line(), insert=note)

    def conflict(self, fork, path):
        index, text = first_hunk(path, with_leading_context=False).conflict_line()
        self.edit_line(fork, path, index, text + "  # fork: our own change")

    def assert_refused_untouched(self, proc, before, fork, *needles):
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertTrue(proc.stderr.startswith("apply: error: "), proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        for needle in needles:
            self.assertIn(needle, proc.stderr)
        self.assertEqual(self.state(fork), before)

    def assert_nothing_to_do(self, proc, before, fork, *needles):
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("; nothing to do", proc.stdout)
        for needle in needles:
            self.assertIn(needle, proc.stdout)
        self.assertEqual(self.state(fork), before)

    def refuses(self, fork, *needles, **apply_args):
        """Runs the tool, which must refuse saying ``needles`` and leave the
        fork as it was; returns the run."""
        before = self.state(fork)
        proc = self.apply(fork, **apply_args)
        self.assert_refused_untouched(proc, before, fork, *needles)
        return proc

    def leaves_alone(self, fork, *needles):
        """Runs the tool, which must find nothing to do, saying ``needles``."""
        before = self.state(fork)
        proc = self.apply(fork)
        self.assert_nothing_to_do(proc, before, fork, *needles)
        return proc

    def assert_applied(self, proc, fork, count=len(SERIES)):
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn(f"apply: applied {count} patch(es)", proc.stdout)
        self.assertEqual(self.git(fork, "status", "--porcelain", "-uno"), "")
        self.assertEqual(len(self.git(fork, "worktree", "list").splitlines()), 1)

    def printed_command(self, text, starts_with):
        """The `...` command of a message (or an indented output line)."""
        for candidate in re.findall(r"`([^`]+)`", text) + [
            line.strip() for line in text.splitlines() if line.startswith("    ")
        ]:
            if candidate.startswith(starts_with):
                return candidate
        self.fail(f"no command starting {starts_with!r} in:\n{text}")

    def run_printed(self, command, env=None):
        return subprocess.run(
            ["bash", "-c", command],
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


class TestApplyingTheSeries(ForkCase):
    def test_a_clean_fork_gets_the_commits_that_plain_git_am_makes(self):
        fork = self.clone(full=True)
        self.git(fork, "switch", "-q", "-c", "my-fork")
        start = self.git(fork, "rev-parse", "HEAD")

        proc = self.apply(fork)

        self.assert_applied(proc, fork)
        self.assertEqual(self.git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(self.git(fork, "rev-parse", f"HEAD~{len(SERIES)}"), start)
        self.assertEqual(self.git(fork, "rev-parse", "ORIG_HEAD"), start)
        by_hand = self.clone(full=True)
        self.git(by_hand, "am", "-q", *map(str, SERIES))
        log = ["log", "--format=%an <%ae>%n%B", f"{start}..HEAD"]
        self.assertEqual(self.git(fork, *log), self.git(by_hand, *log))
        self.assertEqual(
            self.git(fork, "rev-parse", "HEAD^{tree}"),
            self.git(by_hand, "rev-parse", "HEAD^{tree}"),
        )
        self.assertIn(f"git reset --hard {start[:12]}", proc.stdout)

    def test_applying_twice_says_already_patched_and_changes_nothing(self):
        fork = self.clone()
        self.assertEqual(self.apply(fork).returncode, 0)
        self.leaves_alone(fork, "already patched", "has every patch of this backport")

    def test_a_fork_with_its_own_release_tags_and_version_still_gets_the_fix(self):
        fork = self.clone()
        version = fork / "python/sglang/_version.py"
        version.write_text(
            version.read_text(encoding="utf-8").replace("0.5.16", "1.0.0"),
            encoding="utf-8",
        )
        self.commit_all(fork, "release 1.0.0 of our fork")
        self.git(fork, "tag", "v1.0.0")
        self.git(fork, "tag", "-a", "v0.6.0", "-m", "our 0.6.0")

        proc = self.apply(fork)

        self.assert_applied(proc, fork)
        self.assertNotIn("already", proc.stdout)
        text = (fork / SERVER_ARGS).read_text(encoding="utf-8")
        self.assertIn("def draft_server_args_copy(", text)

    def test_a_fork_that_drifted_near_the_hunks_gets_a_3way_merge(self):
        fork = self.clone()
        self.drift(fork, SCHEDULER)
        self.commit_all(fork, "fork: a note near the backport")
        plain = subprocess.run(
            ["git", "apply", "--check", *map(str, SERIES)],
            cwd=fork,
            env=self.env,
            capture_output=True,
        )
        self.assertNotEqual(plain.returncode, 0, "the drift must defeat a plain apply")

        proc = self.apply(fork)

        self.assert_applied(proc, fork)
        self.assertIn("merged 3-way with your fork's changes", proc.stdout)
        merged = (fork / SCHEDULER).read_text(encoding="utf-8")
        self.assertIn("# fork: a local note near the backport", merged)
        self.assertIn("draft_server_args_copy(", merged)
        self.leaves_alone(
            fork, "has every patch of this backport", "; merged with your changes: "
        )

    def _imported_fork(self):
        """A fork imported without upstream history: its server_args.py and
        multi_layer_eagle_worker_v2.py drifted, so their v0.5.16 versions are
        on no branch and in no object of the fork."""
        fork = self.clone()
        shutil.rmtree(fork / ".git")
        self.git(fork, "init", "-q", "-b", "main")
        self.git(fork, "config", "user.name", "Fork Maintainer")
        self.git(fork, "config", "user.email", "fork@example.invalid")
        self.drift(fork, SERVER_ARGS, "# fork: imported without upstream history")
        self.drift(fork, MULTI_LAYER_EAGLE, "# fork: imported without upstream history")
        self.commit_all(fork, "fork: imported")
        return fork

    def test_a_fork_whose_history_lacks_the_release_files_still_merges_3way(self):
        fork = self._imported_fork()
        by_hand = self.clone(source=fork)
        am = subprocess.run(
            ["git", "am", "-3", *map(str, SERIES)],
            cwd=by_hand,
            env=self.env,
            capture_output=True,
            text=True,
        )
        self.assertNotEqual(am.returncode, 0, "plain git am -3 must lack the base")
        self.assertRegex(am.stderr, "lacking or useless|lacks necessary blobs")
        head = self.git(fork, "rev-parse", "HEAD")

        proc = self.apply(fork)

        self.assert_applied(proc, fork)
        self.assertIn("gave git sglang v0.5.16's version of 2 file(s)", proc.stdout)
        self.assertIn("merged 3-way", proc.stdout)
        self.assertEqual(self.git(fork, "rev-parse", f"HEAD~{len(SERIES)}"), head)
        for path in (SERVER_ARGS, MULTI_LAYER_EAGLE):
            self.assertIn("# fork: imported", (fork / path).read_text(encoding="utf-8"))

    def test_without_the_release_copy_the_missing_bases_are_named_with_the_fix(self):
        fork = self._imported_fork()
        tool = self.project(pristine=False)
        self.refuses(
            fork,
            f"needs sglang v0.5.16's version of {SERVER_ARGS}, {MULTI_LAYER_EAGLE}",
            "lacks; nothing was changed",
            f"run `bash {shlex.quote(str(tool.parents[2] / 'scripts/dev/setup.sh'))}"
            " --pristine-only`",
            tool=tool,
        )

    def test_the_printed_test_command_runs_only_the_shipped_tests_and_they_pass(self):
        shipped = [p for p in created_paths(SERIES) if p.startswith("test/registered/")]
        if not shipped:
            self.skipTest("the series ships no tests")
        fork = self.clone(full=True)
        proc = self.apply(fork)
        self.assert_applied(proc, fork)
        command = self.printed_command(
            proc.stdout, f"cd {shlex.quote(str(fork))} && PYTHONPATH=python python3"
        )
        for path in shipped:
            if path.rsplit("/", 1)[-1].startswith("test_"):
                self.assertIn(path, command)
        self.assertNotIn(UPSTREAM_STAND_IN, command)
        env = {k: v for k, v in self.env.items() if not k.startswith("PYTEST_")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        env["PYTHONDONTWRITEBYTECODE"] = "1"

        run = subprocess.run(
            ["bash", "-c", command + " -q -p no:cacheprovider"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

        self.assertEqual(run.returncode, 0, run.stdout[-6000:])
        self.assertRegex(run.stdout, r"\d+ passed")
        self.assertNotIn("upstream stand-in", run.stdout)
        # The same prefix makes Python import the fork's sglang, not this venv's.
        prefix = command.split(" python3 -m pytest ")[0]
        where = subprocess.run(
            [
                "bash",
                "-c",
                prefix + " python3 -c 'import sglang; print(sglang.__file__)'",
            ],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.assertEqual(
            Path(where.stdout.strip()), fork / "python" / "sglang" / "__init__.py"
        )

    def test_an_upstream_fix_is_recognised_from_its_code_and_left_alone(self):
        for path, code, evidence in (
            (
                "python/sglang/srt/speculative/draft_worker_common.py",
                "def draft_server_args_copy(server_args: ServerArgs, "
                "target_model_config) -> ServerArgs:\n    return server_args.derive("
                '"draft_worker.copy")\n',
                "v0.5.17's draft_server_args_copy()",
            ),
            (
                "python/sglang/srt/model_executor/model_runner.py",
                "def _resolve_draft_load_format(self) -> str | None:\n    return None\n",
                "ModelRunner._resolve_draft_load_format",
            ),
        ):
            with self.subTest(evidence=evidence):
                fork = self.clone()
                with (fork / path).open("a", encoding="utf-8") as f:
                    f.write("\n\n" + code)
                self.commit_all(fork, "upstream: its own fix")
                self.leaves_alone(fork, "already fixed upstream", evidence)


class TestWhatTheForkAlreadyHas(ForkCase):
    def test_a_partial_backport_is_refused_with_what_it_lacks(self):
        fork = self.clone()
        spec = next(p for p in SERIES if "draft_server_args_copy(" in p.read_text())
        self.git(fork, "apply", f"--include={SERVER_ARGS}", str(spec))
        self.commit_all(fork, "fork: take draft_server_args_copy only")
        helper_commit = self.git(fork, "rev-parse", "--short", "HEAD")
        proc = self.refuses(
            fork,
            "has part of this backport, not all of it: it has draft_server_args_copy()",
            "it lacks RuntimeContext.scoped_server_args(), " + SERIES[0].name,
            "it still has the draft load-format write in scheduler.py",
            "the context-length write in eagle_worker_v2.py",
            "nothing was changed",
        )
        find = self.run_printed(self.printed_command(proc.stderr, "cd "))
        self.assertEqual(find.returncode, 0, find.stderr)
        self.assertIn(helper_commit, find.stdout)

    def test_the_whole_fix_in_another_revision_is_left_alone(self):
        fork = self.clone()
        self.assertEqual(self.apply(fork).returncode, 0)
        path = fork / SERVER_ARGS
        text = path.read_text(encoding="utf-8")
        docstring = re.search(r"def draft_server_args_copy\(.*\n\s+\"\"\"(.*)\n", text)
        path.write_text(text.replace(docstring[1], "Our own revision."), "utf-8")
        self.commit_all(fork, "fork: our own revision of the backport")

        self.leaves_alone(fork, "already patched", "in another revision than")

    def test_a_fork_with_the_first_patches_gets_only_the_rest(self):
        # One patch, and every patch but the last (an earlier, shorter series),
        # also merged 3-way into a fork that drifted.
        for count, drifted in (
            (1, False),
            (len(SERIES) - 1, False),
            (len(SERIES) - 1, True),
        ):
            with self.subTest(present=count, drifted=drifted):
                fork = self.clone()
                if drifted:
                    self.drift(fork, SCHEDULER)
                    self.commit_all(fork, "fork: a note near the backport")
                self.git(fork, "am", "-q", "-3", *map(str, SERIES[:count]))
                head = self.git(fork, "rev-parse", "HEAD")

                proc = self.apply(fork)

                self.assert_applied(proc, fork, count=len(SERIES) - count)
                names = ", ".join(p.name for p in SERIES[:count])
                self.assertIn(f"already has {names}; applying the rest", proc.stdout)
                rest = len(SERIES) - count
                self.assertEqual(self.git(fork, "rev-parse", f"HEAD~{rest}"), head)
                again = self.apply(fork)
                self.assertIn("has every patch of this backport", again.stdout)

    def test_patches_that_are_not_this_backports_series_are_refused(self):
        fork = self.clone()
        other = Path(tempfile.mkdtemp(dir=self.tmp))
        self.git(other, "init", "-q")
        (other / "README.md").write_text("another project\n", encoding="utf-8")
        self.commit_all(other, "docs: an unrelated change")
        self.git(other, "format-patch", "-q", "-1", "-o", str(other / "out"))
        unrelated = next((other / "out").glob("*.patch"))
        not_a_patch = other / "0001-notes.patch"
        not_a_patch.write_text("just some notes\n", encoding="utf-8")
        for patches, needle in (
            ([unrelated], "are not this backport's series"),
            ([*SERIES, not_a_patch], "is not a patch from git format-patch"),
            ([], "holds no *.patch file"),
        ):
            with self.subTest(needle=needle):
                tool = self.project(patches)
                self.refuses(fork, needle, "checkout -- patches", tool=tool)


class TestNothingHalfDone(ForkCase):
    def test_an_untracked_file_where_the_series_needs_a_folder_is_refused(self):
        fork = self.clone()
        for path in created_paths(SERIES):
            parts = Path(path).parts
            missing = [
                d
                for d in range(1, len(parts))
                if not (fork.joinpath(*parts[:d])).exists()
            ]
            if missing:
                folder = "/".join(parts[: missing[0]])
                break
        else:
            self.fail("the series creates no file in a new folder")
        (fork / folder).write_text("mine\n", encoding="utf-8")
        self.refuses(
            fork,
            "untracked files",
            f"are where the series writes: {folder}",
            f"mv {folder} {folder}.mine",
        )

    def test_an_untracked_file_where_the_series_creates_one_is_refused(self):
        fork = self.clone()
        path = created_paths(SERIES)[-1]
        (fork / path).parent.mkdir(parents=True, exist_ok=True)
        (fork / path).write_text("mine\n", encoding="utf-8")
        self.refuses(fork, f"series writes: {path}")

    def test_a_read_only_folder_is_refused(self):
        fork = self.clone()
        folder = (fork / EAGLE_WORKER).parent
        folder.chmod(0o555)
        self.addCleanup(folder.chmod, 0o755)
        before = self.state(fork)
        root = os.geteuid() == 0  # root writes anywhere: run the tool as nobody

        if root:
            chown_tree(fork, NOBODY)
        proc = self.apply(fork, user=NOBODY if root else None, env={"HOME": str(fork)})
        if root:
            chown_tree(fork, 0)

        self.assert_refused_untouched(
            proc,
            before,
            fork,
            "python/sglang/srt/speculative (a read-only directory)",
            "chmod u+w python/sglang/srt/speculative",
        )

    def test_an_immutable_file_is_refused(self):
        fork = self.clone()
        target = fork / SERVER_ARGS
        if subprocess.run(
            ["chattr", "+i", str(target)], capture_output=True
        ).returncode:
            self.skipTest(
                "chattr +i is not available here (needs root and ext4/xfs/btrfs)"
            )
        self.addCleanup(subprocess.run, ["chattr", "-i", str(target)])
        self.refuses(
            fork, f"{SERVER_ARGS} (an immutable file)", f"chattr -i {SERVER_ARGS}"
        )

    def test_a_failure_after_the_checks_restores_the_fork_exactly(self):
        fork = self.clone()
        (fork / SCHEDULER).write_text("work in progress\n", encoding="utf-8")
        self.git(fork, "stash", "-q")
        (fork / "notes.txt").write_text("untracked notes\n", encoding="utf-8")
        hook = fork / ".git" / "hooks" / "reference-transaction"
        hook.write_text(
            "#!/bin/sh\n"
            '[ "$1" = prepared ] || exit 0\n'
            "while read -r old new ref; do\n"
            '  case "$ref" in refs/heads/*) echo "fork policy: no" >&2; exit 1;; esac\n'
            "done\n"
        )
        hook.chmod(0o755)
        self.refuses(
            fork,
            "failed (git update-ref:",
            "it was restored as it was",
            "nothing was changed",
        )
        for path in created_paths(SERIES):
            self.assertFalse((fork / path).exists(), path)

    def test_a_hook_that_rejects_the_patches_is_reported_and_changes_nothing(self):
        fork = self.clone()
        hook = fork / ".git" / "hooks" / "pre-applypatch"
        hook.write_text("#!/bin/sh\necho 'fork policy: no backports' >&2\nexit 1\n")
        hook.chmod(0o755)
        self.refuses(fork, "git am -3 failed on", "fork policy: no backports")

    def test_a_dirty_tree_is_refused(self):
        fork = self.clone()
        with (fork / SCHEDULER).open("a", encoding="utf-8") as f:
            f.write("# work in progress\n")
        self.refuses(fork, "uncommitted changes", SCHEDULER, "git stash")

    def test_conflicts_in_several_files_and_patches_are_named_at_once(self):
        fork = self.clone()
        for path in (RUNTIME_CONTEXT, SCHEDULER, EAGLE_WORKER):
            self.conflict(fork, path)
        self.commit_all(fork, "fork: change lines the backport changes")
        proc = self.refuses(
            fork,
            "not even with a 3-way merge",
            f"{SERIES[0].name}: {RUNTIME_CONTEXT} (changed in your fork too)",
            f"{SCHEDULER} (changed in your fork too)",
            f"{EAGLE_WORKER} (changed in your fork too)",
            "nothing was changed",
        )
        self.assertEqual(proc.stderr.count("\n"), 1, "one line")
        by_hand = self.run_printed(self.printed_command(proc.stderr, "cd "))
        self.assertNotEqual(by_hand.returncode, 0)
        self.assertIn("git am --continue", by_hand.stdout + by_hand.stderr)
        self.git(fork, "am", "--abort")

    def test_a_committed_file_where_the_series_creates_one_is_a_named_conflict(self):
        fork = self.clone()
        path = created_paths(SERIES)[0]
        (fork / path).parent.mkdir(parents=True, exist_ok=True)
        (fork / path).write_text("upstream's own\n", encoding="utf-8")
        self.commit_all(fork, "fork: a file of the same name")
        self.refuses(fork, f"{path} (your fork already has a file there)")


class TestEdgeStates(ForkCase):
    def _conflicting_branch(self, fork):
        self.git(fork, "switch", "-q", "-c", "other")
        self.edit_line(fork, "python/sglang/version.py", 0, "# other")
        self.commit_all(fork, "other")
        self.git(fork, "switch", "-q", "main")
        self.edit_line(fork, "python/sglang/version.py", 0, "# main")
        self.commit_all(fork, "main")

    def test_a_git_operation_in_progress_gets_its_own_message_and_way_out(self):
        def rebase(fork):
            self.git(fork, "rebase", "other", check=False)

        def am(fork):
            patch = self.git(
                fork, "format-patch", "-1", "other", "-o", str(fork / ".git")
            )
            self.git(fork, "am", patch, check=False)

        def merge(fork):
            self.git(fork, "merge", "other", check=False)

        def bisect(fork):
            self.git(fork, "bisect", "start", "HEAD", "v0.5.16")

        for make, needle, way_out in (
            (rebase, "a rebase is in progress", "git rebase --abort"),
            (am, "a git am is in progress", "git am --abort"),
            (merge, "a merge is in progress", "git merge --abort"),
            (bisect, "a bisect is in progress", "git bisect reset"),
        ):
            with self.subTest(needle=needle):
                fork = self.clone()
                self._conflicting_branch(fork)
                make(fork)
                proc = self.refuses(fork, needle, way_out)
                out = self.run_printed(
                    self.printed_command(
                        proc.stderr, f"cd {shlex.quote(str(fork))} && {way_out}"
                    )
                )
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertEqual(
                    self.git(fork, "symbolic-ref", "--short", "HEAD"), "main"
                )

    def test_a_repository_owned_by_another_user_gets_the_safe_directory_command(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to give the fork another owner")
        fork = self.clone()
        before = self.state(fork)
        chown_tree(fork, NOBODY)
        config = self.tmp / f"gitconfig-{self._count}"
        config.write_text("", encoding="utf-8")
        env = {"GIT_CONFIG_GLOBAL": str(config)}

        proc = self.apply(fork, env=env)

        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn(
            "it belongs to another user (git's safe.directory check)", proc.stderr
        )
        command = self.printed_command(proc.stderr, "git config --global --add")
        self.assertEqual(self.run_printed(command, env=env).returncode, 0)
        applied = self.apply(fork, env=env)
        chown_tree(fork, 0)
        self.assertNotEqual(self.state(fork), before)
        self.assert_applied(applied, fork)

    def test_printed_commands_work_on_a_path_with_spaces(self):
        fork = self.clone(name="my forks/sglang fork")
        self.git(fork, "switch", "-q", "--detach")
        proc = self.refuses(fork, "HEAD of", "is detached at")
        switch_command = f"cd {shlex.quote(str(fork))} && git switch -c"
        switch = self.run_printed(self.printed_command(proc.stderr, switch_command))
        self.assertEqual(switch.returncode, 0, switch.stderr)
        applied = self.apply(fork)
        self.assert_applied(applied, fork)
        undo = self.printed_command(applied.stdout, "cd '")
        self.assertEqual(shlex.split(undo)[1], str(fork))

    def test_without_git_on_path_the_error_is_one_line(self):
        bin_dir = self.tmp / "bin-without-git"
        bin_dir.mkdir(exist_ok=True)
        proc = self.apply(self.base, env={"PATH": str(bin_dir)})
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertEqual(
            proc.stderr,
            "apply: error: git is not on PATH; install git and run this again\n",
        )

    def test_a_detached_head_and_an_unborn_branch_are_refused(self):
        fork = self.clone()
        self.git(fork, "switch", "-q", "--detach")
        self.refuses(fork, "is detached at", "git switch -c sglang-draft-isolation")
        self.git(fork, "checkout", "-q", "--orphan", "empty")
        self.refuses(fork, "the branch empty of", "has no commit yet")

    def test_a_fork_without_a_git_identity_is_refused(self):
        fork = self.clone()
        self.git(fork, "config", "--unset", "user.name")
        self.git(fork, "config", "--unset", "user.email")
        self.git(fork, "config", "user.useConfigOnly", "true")
        proc = self.refuses(fork, "git has no identity")
        set_one = self.printed_command(proc.stderr, "cd ")
        self.assertEqual(self.run_printed(set_one).returncode, 0)
        self.assert_applied(self.apply(fork), fork)

    def test_paths_that_are_not_a_fork_are_refused(self):
        scratch = Path(tempfile.mkdtemp(dir=self.tmp))
        plain = scratch / "plain"
        (plain / "python" / "sglang").mkdir(parents=True)
        a_file = scratch / "a-file"
        a_file.write_text("x\n", encoding="utf-8")
        other = scratch / "other"
        other.mkdir()
        self.git(other, "init", "-q", "-b", "main")
        (other / "README.md").write_text("another project\n", encoding="utf-8")
        self.commit_all(other, "init")
        bare = scratch / "bare.git"
        self.git(scratch, "clone", "-q", "--bare", str(self.base), str(bare))
        for path, needle in (
            (scratch / "missing", "does not exist"),
            (a_file, "is not a directory"),
            (plain, "is not in a git work tree; pass the checkout"),
            (other, "has no python/sglang/"),
            (bare, "(a bare repository or a .git directory)"),
        ):
            with self.subTest(needle=needle):
                proc = self.apply(path)
                self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
                self.assertEqual(proc.stderr.count("\n"), 1, proc.stderr)
                self.assertIn(needle, proc.stderr)
        self.assertEqual(sorted(p.name for p in plain.iterdir()), ["python"])
        self.assertFalse((scratch / "missing").exists())


if __name__ == "__main__":
    unittest.main()

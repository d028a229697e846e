"""Delivering the backport to a fork: scripts/fork/export_patch.py writes one
``git am``-able patch, scripts/fork/apply_to_fork.py applies it to a fork as
one commit or changes nothing.

Every fork here is a real git repository made from the untouched sglang
0.5.16 package (.build/pristine/sglang) laid out as a fork: python/sglang/.
One base repository per class, cloned for each test.

The patch is this repository's real export (patches/series plus the shipped
tests and scripts/ratchet/). Where patches/series lists no patch yet, the
delivery mechanics are exercised with a throwaway patch instead, and the test
that runs the shipped tests in the patched fork is skipped.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=180, suite="stage-a-test-cpu")

ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "scripts" / "fork" / "export_patch.py"
APPLY = ROOT / "scripts" / "fork" / "apply_to_fork.py"
COMMIT_MESSAGE = ROOT / "scripts" / "fork" / "COMMIT_MESSAGE"
PRISTINE = ROOT / ".build" / "pristine" / "sglang"
SERIES = ROOT / "patches" / "series"
SHIPPED_DIRS = ("test/registered/unit", "scripts/ratchet")
# The fast, representative part of the shipped tests, run in a patched fork:
# the spec isolation tests and the ratchet tests. Left out: the real draft
# construction on CPU (over a minute; this repository's own suite runs it).
AFTER_APPLY_TEST_DIRS = ("test/registered/unit/spec/", "test/registered/unit/ratchet/")
AFTER_APPLY_LEFT_OUT = (
    "test/registered/unit/spec/test_real_draft_construction_cpu.py",
)
# A real fork's test/registered/unit/ holds upstream's own tests; they must
# not be what the shipped-test command runs.
UPSTREAM_STAND_IN = "test/registered/unit/spec/test_upstream_stand_in.py"
IDENTITY = {"user.name": "Fork Maintainer", "user.email": "maintainer@fork.invalid"}


def series_has_patches():
    if not SERIES.is_file():
        return False
    lines = SERIES.read_text(encoding="utf-8").splitlines()
    return any(line.strip() and not line.strip().startswith("#") for line in lines)


def git_env(tmp_root):
    """The caller's environment, minus the user's git configuration and any
    git repository above the test's temporary directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CEILING_DIRECTORIES=str(tmp_root),
        LC_ALL="C",
    )
    return env


class Hunk:
    """One hunk of a modification in the patch, in old-file line numbers."""

    def __init__(self, path, old_start, lines):
        self.path = path
        self.old_start = old_start
        self.lines = lines

    def leading_context(self):
        count = 0
        for line in self.lines:
            if not line.startswith(" "):
                break
            count += 1
        return count

    def first_removed_line(self):
        """(1-based old line number, text) of the first removed line."""
        number = self.old_start
        for line in self.lines:
            if line.startswith("-"):
                return number, line[1:]
            if line.startswith(" "):
                number += 1
        return None

    def added_lines(self):
        return [line[1:] for line in self.lines if line.startswith("+")]


def modification_hunks(mbox):
    hunks, path, new_file, current = [], None, False, None
    for line in mbox.splitlines():
        if line.startswith("diff --git "):
            path = line.split(" b/", 1)[1]
            new_file, current = False, None
        elif line.startswith("new file mode"):
            new_file = True
        elif line.startswith("@@ ") and path and not new_file:
            old_start = int(re.match(r"@@ -(\d+)", line).group(1))
            current = Hunk(path, old_start, [])
            hunks.append(current)
        elif current is not None and line[:1] in (" ", "-", "+"):
            if line.startswith(("--- a/", "+++ b/")):
                continue
            current.lines.append(line)
        elif current is not None and line.startswith("-- "):
            current = None
    return hunks


_SHARED = {}


def tearDownModule():
    if "tmp" in _SHARED:
        shutil.rmtree(_SHARED["tmp"], ignore_errors=True)


class ForkDeliveryCase(CustomTestCase):
    """Shared set-up: the patch under test and a base fork repository, made
    once for the module; each test clones the base."""

    @classmethod
    def setUpClass(cls):
        if not _SHARED:
            _SHARED.update(cls._make_shared())
        for name, value in _SHARED.items():
            setattr(cls, name, value)
        cls._count = 0

    @classmethod
    def _make_shared(cls):
        if not (PRISTINE / "srt" / "server_args.py").is_file():
            raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh first")
        cls.tmp = Path(tempfile.mkdtemp(prefix="fork-delivery-"))
        cls.env = git_env(cls.tmp)
        cls.real_patch = series_has_patches()
        cls.base = cls._make_base_fork(cls.tmp / "base")
        cls.patch = cls.tmp / "backport.patch"
        export_args = ["--output", str(cls.patch)]
        if not cls.real_patch:
            export_args += ["--patches-dir", str(cls._throwaway_series())]
        export = cls.run_script(EXPORT, *export_args)
        if export.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise RuntimeError(f"export failed:\n{export.stderr}")
        return dict(
            tmp=cls.tmp,
            env=cls.env,
            real_patch=cls.real_patch,
            base=cls.base,
            patch=cls.patch,
            mbox=cls.patch.read_text(encoding="utf-8"),
        )

    # -- helpers -----------------------------------------------------------

    @classmethod
    def git(cls, cwd, *args, check=True):
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=cls.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
        return proc.stdout.strip()

    @classmethod
    def run_script(cls, script, *args):
        return subprocess.run(
            [sys.executable, str(script), *args],
            env=cls.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @classmethod
    def _configure(cls, repo):
        for key, value in IDENTITY.items():
            cls.git(repo, "config", key, value)

    @classmethod
    def _make_base_fork(cls, path):
        shutil.copytree(
            PRISTINE,
            path / "python" / "sglang",
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
        stand_in = path / UPSTREAM_STAND_IN
        stand_in.parent.mkdir(parents=True)
        stand_in.write_text(
            "def test_upstream_stand_in():\n"
            "    raise AssertionError('upstream stand-in: not a shipped test')\n",
            encoding="utf-8",
        )
        cls.git(path, "init", "-q", "-b", "main")
        cls._configure(path)
        cls.git(path, "add", "-A")
        cls.git(path, "commit", "-q", "-m", "sglang 0.5.16")
        cls.git(path, "tag", "v0.5.16")
        cls.git(path, "repack", "-adq")
        return path

    @classmethod
    def _throwaway_series(cls):
        """A stand-in series for while patches/ is empty: a one-line change,
        our marker in server_args.py, and a new file."""
        work = cls.tmp / "throwaway"
        cls.git(cls.tmp, "clone", "-q", str(cls.base), str(work))
        cls._configure(work)
        spec_utils = work / "python/sglang/srt/speculative/spec_utils.py"
        text = spec_utils.read_text(encoding="utf-8")
        spec_utils.write_text(
            text.replace("_is_xpu = is_xpu()\n", "_is_xpu = is_xpu()  # throwaway\n"),
            encoding="utf-8",
        )
        server_args = work / "python/sglang/srt/server_args.py"
        with server_args.open("a", encoding="utf-8") as f:
            f.write("\n\ndef draft_server_args_copy(server_args):\n    return None\n")
        new_file = work / "python/sglang/srt/speculative/throwaway_helper.py"
        new_file.write_text('"""Throwaway."""\n', encoding="utf-8")
        cls.git(work, "add", "-A")
        cls.git(work, "commit", "-q", "-m", "dev: throwaway change")
        patches = cls.tmp / "throwaway-patches"
        cls.git(work, "format-patch", "-q", "-o", str(patches), "HEAD~1")
        names = sorted(p.name for p in patches.glob("*.patch"))
        (patches / "series").write_text("\n".join(names) + "\n", encoding="utf-8")
        return patches

    def clone(self):
        type(self)._count += 1
        fork = self.tmp / f"{type(self).__name__}-{type(self)._count}"
        self.git(self.tmp, "clone", "-q", str(self.base), str(fork))
        self.addCleanup(shutil.rmtree, fork, ignore_errors=True)
        self._configure(fork)
        return fork

    def apply(self, fork, *extra):
        return self.run_script(APPLY, str(fork), str(self.patch), *extra)

    def state(self, fork):
        """HEAD, branch and the full status, untracked files included."""
        return (
            self.git(fork, "rev-parse", "HEAD"),
            self.git(fork, "symbolic-ref", "-q", "HEAD", check=False),
            self.git(fork, "status", "--porcelain=v1", "--untracked-files=all"),
        )

    def commit_all(self, fork, message):
        self.git(fork, "add", "-A")
        self.git(fork, "commit", "-q", "-m", message)

    def pick_hunk(self):
        """A hunk with three leading context lines and a removed line."""
        for hunk in modification_hunks(self.mbox):
            if hunk.leading_context() >= 3 and hunk.first_removed_line():
                return hunk
        self.fail("the patch has no hunk with 3 leading context lines and a removal")

    def assert_refused_untouched(self, proc, before, fork, *needles):
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("apply: error:", proc.stderr)
        for needle in needles:
            self.assertIn(needle, proc.stderr)
        self.assertEqual(self.state(fork), before)


class TestForkDelivery(ForkDeliveryCase):
    def test_the_export_is_one_commit_with_our_message_and_provenance(self):
        self.assertTrue(self.mbox.startswith("From "))
        self.assertEqual(len(re.findall(r"^Subject: \[PATCH\]", self.mbox, re.M)), 1)
        message = COMMIT_MESSAGE.read_text(encoding="utf-8")
        subject = message.splitlines()[0]
        self.assertIn(f"Subject: [PATCH] {subject}", self.mbox)
        for trailer in (
            "Origin: backport, https://github.com/sgl-project/sglang/pull/33335",
            "Applied-Upstream: v0.5.17",
            "Applies-To: v0.5.16",
            "Forwarded: not-needed",
        ):
            self.assertIn(trailer, message)
            self.assertIn(trailer, self.mbox)
        paths = re.findall(r"^diff --git a/(\S+) b/", self.mbox, re.M)
        self.assertTrue(any(p.startswith("python/sglang/") for p in paths))
        tracked = subprocess.run(
            ["git", "ls-files", "--", *SHIPPED_DIRS],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            check=True,
        ).stdout.split()
        for path in tracked:
            if "__pycache__" not in path:
                self.assertIn(path, paths)

    def test_exporting_twice_writes_the_same_bytes(self):
        scratch = Path(tempfile.mkdtemp(dir=self.tmp))
        outputs = []
        for name in ("first.patch", "second.patch"):
            args = ["--output", str(scratch / name)]
            if not self.real_patch:
                args += ["--patches-dir", str(self.tmp / "throwaway-patches")]
            proc = self.run_script(EXPORT, *args)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            outputs.append((scratch / name).read_bytes())
        self.assertEqual(outputs[0], outputs[1])

    def test_a_clean_fork_gets_one_commit_on_its_branch_with_our_message(self):
        fork = self.clone()
        self.git(fork, "switch", "-q", "-c", "my-fork")
        before = self.git(fork, "rev-parse", "HEAD")

        proc = self.apply(fork)

        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("apply: applied cleanly", proc.stdout)
        self.assertEqual(self.git(fork, "rev-parse", "HEAD^"), before)
        self.assertEqual(self.git(fork, "symbolic-ref", "--short", "HEAD"), "my-fork")
        self.assertEqual(
            self.git(fork, "log", "-1", "--format=%B"),
            COMMIT_MESSAGE.read_text(encoding="utf-8").strip(),
        )
        self.assertEqual(self.git(fork, "status", "--porcelain"), "")
        for path in re.findall(r"^diff --git a/\S+ b/(\S+)", self.mbox, re.M):
            if path.startswith(SHIPPED_DIRS):
                self.assertEqual(
                    (fork / path).read_bytes(), (ROOT / path).read_bytes(), path
                )

    def test_a_fork_that_drifted_near_our_hunks_gets_a_3way_merge(self):
        fork = self.clone()
        hunk = self.pick_hunk()
        target = fork / hunk.path
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        # Between the hunk's first and second context lines: the context no
        # longer matches, two untouched lines still separate it from our change.
        anchor = hunk.old_start  # 1-based: the line after the first context line
        indent = re.match(r"[ \t]*", lines[anchor]).group(0)
        note = f"{indent}# fork: a local note near the backport's hunk\n"
        lines.insert(anchor, note)
        target.write_text("".join(lines), encoding="utf-8")
        self.commit_all(fork, "fork: a local change near the backport")
        fork_head = self.git(fork, "rev-parse", "HEAD")
        plain = subprocess.run(
            ["git", "apply", "--check", str(self.patch)],
            cwd=fork,
            env=self.env,
            capture_output=True,
        )
        self.assertNotEqual(plain.returncode, 0, "the drift must defeat a plain apply")

        proc = self.apply(fork)

        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        self.assertIn("3-way merge", proc.stdout)
        self.assertEqual(self.git(fork, "rev-parse", "HEAD^"), fork_head)
        merged = target.read_text(encoding="utf-8")
        self.assertIn(note, merged)
        for added in hunk.added_lines():
            self.assertIn(added, merged)
        self.assertEqual(self.git(fork, "status", "--porcelain"), "")

    def test_a_fork_without_the_v0_5_16_objects_is_told_to_fetch_them(self):
        fork = self.clone()
        shutil.rmtree(fork / ".git")
        self.git(fork, "init", "-q", "-b", "main")
        self._configure(fork)
        hunk = self.pick_hunk()
        target = fork / hunk.path
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        lines.insert(hunk.old_start, "# fork: imported without upstream history\n")
        target.write_text("".join(lines), encoding="utf-8")
        self.commit_all(fork, "fork: imported")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(
            proc,
            before,
            fork,
            f"conflict in {hunk.path}",
            "lacks sglang v0.5.16's version",
            "git fetch https://github.com/sgl-project/sglang v0.5.16",
        )

        # What the message asks for, with the base repository standing in for
        # upstream: objects only, no ref of the fork moves.
        self.git(fork, "fetch", "-q", str(self.base), "v0.5.16")
        self.assertEqual(self.state(fork), before)
        again = self.apply(fork)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("3-way merge", again.stdout)

    def test_applying_twice_is_a_no_op_that_says_so(self):
        fork = self.clone()
        first = self.apply(fork)
        self.assertEqual(first.returncode, 0, first.stdout + first.stderr)
        before = self.state(fork)

        second = self.apply(fork)

        self.assertEqual(second.returncode, 0, second.stdout + second.stderr)
        self.assertIn("already patched", second.stdout)
        self.assertIn("already has this backport", second.stdout)
        self.assertEqual(self.state(fork), before)

    def test_an_upstream_base_with_the_fix_is_recognised_and_left_alone(self):
        def upstream_helper(fork):
            path = fork / "python/sglang/srt/speculative/draft_worker_common.py"
            with path.open("a", encoding="utf-8") as f:
                f.write("\n\ndef draft_server_args_copy(server_args, config):\n")
                f.write("    return server_args\n")
            self.commit_all(fork, "upstream: v0.5.17's draft copy")

        def per_runner(fork):
            path = fork / "python/sglang/srt/model_executor/model_runner.py"
            with path.open("a", encoding="utf-8") as f:
                f.write("\n\ndef _resolve_draft_load_format(self):\n    return None\n")
            self.commit_all(fork, "upstream: per-runner draft config")

        def version_file(fork):
            path = fork / "python/sglang/_version.py"
            path.write_text(
                path.read_text(encoding="utf-8").replace("0.5.16", "0.5.17"),
                encoding="utf-8",
            )
            self.git(fork, "commit", "-q", "-am", "upstream: 0.5.17")

        def release_tag(fork):
            self.git(fork, "tag", "v0.5.18")

        for make, evidence in (
            (upstream_helper, "draft_worker_common.py"),
            (per_runner, "_resolve_draft_load_format"),
            (version_file, "_version.py says 0.5.17"),
            (release_tag, "release tag v0.5.18"),
        ):
            with self.subTest(evidence=evidence):
                fork = self.clone()
                make(fork)
                before = self.state(fork)

                proc = self.apply(fork)

                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.assertIn("already fixed upstream", proc.stdout)
                self.assertIn(evidence, proc.stdout)
                self.assertEqual(self.state(fork), before)

    def test_a_dirty_tree_is_refused_and_left_untouched(self):
        fork = self.clone()
        path = "python/sglang/srt/managers/scheduler.py"
        with (fork / path).open("a", encoding="utf-8") as f:
            f.write("# work in progress\n")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(
            proc, before, fork, "uncommitted changes", path, "git stash"
        )

    def test_an_untracked_file_where_the_patch_creates_one_is_refused(self):
        created = re.findall(
            r"^diff --git a/\S+ b/(\S+)\nnew file mode", self.mbox, re.M
        )
        if not created:
            self.skipTest("the patch creates no file (nothing shipped yet)")
        fork = self.clone()
        (fork / created[0]).parent.mkdir(parents=True, exist_ok=True)
        (fork / created[0]).write_text("mine\n", encoding="utf-8")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(proc, before, fork, "untracked", created[0])

    def test_a_committed_file_where_the_patch_creates_one_is_a_named_conflict(self):
        created = re.findall(
            r"^diff --git a/\S+ b/(\S+)\nnew file mode", self.mbox, re.M
        )
        if not created:
            self.skipTest("the patch creates no file (nothing shipped yet)")
        fork = self.clone()
        (fork / created[0]).parent.mkdir(parents=True, exist_ok=True)
        (fork / created[0]).write_text("upstream's own\n", encoding="utf-8")
        self.commit_all(fork, "fork: a file of the same name")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(
            proc,
            before,
            fork,
            f"conflict in {created[0]}",
            "already has a file where the patch creates one",
            "Nothing was changed",
        )

    def test_a_path_that_is_not_a_git_work_tree_is_refused(self):
        scratch = Path(tempfile.mkdtemp(dir=self.tmp))
        plain = scratch / "not-a-repo"
        (plain / "python" / "sglang").mkdir(parents=True)
        missing = scratch / "no-such-dir"
        for path, needle in (
            (plain, "is not a git work tree"),
            (missing, "does not exist"),
        ):
            with self.subTest(path=path.name):
                proc = self.apply(path)
                self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
                self.assertIn(needle, proc.stderr)
        self.assertEqual([p.name for p in plain.iterdir()], ["python"])
        self.assertFalse(missing.exists())

    def test_a_git_work_tree_without_python_sglang_is_refused(self):
        repo = Path(tempfile.mkdtemp(dir=self.tmp)) / "not-sglang"
        repo.mkdir()
        self.git(repo, "init", "-q", "-b", "main")
        self._configure(repo)
        (repo / "README.md").write_text("another project\n", encoding="utf-8")
        self.commit_all(repo, "init")
        before = self.state(repo)

        proc = self.apply(repo)

        self.assert_refused_untouched(proc, before, repo, "has no python/sglang/")

    def test_a_detached_head_is_refused(self):
        fork = self.clone()
        self.git(fork, "switch", "-q", "--detach")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(proc, before, fork, "HEAD is detached")

    def test_a_git_am_that_fails_after_the_checks_is_aborted_and_changes_nothing(
        self,
    ):
        fork = self.clone()
        hook = Path(self.git(fork, "rev-parse", "--git-path", "hooks/pre-applypatch"))
        hook = hook if hook.is_absolute() else fork / hook
        hook.parent.mkdir(parents=True, exist_ok=True)
        hook.write_text("#!/bin/sh\necho 'fork policy: no' >&2\nexit 1\n")
        hook.chmod(0o755)
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(
            proc, before, fork, "git am failed", "fork policy: no", "aborted"
        )
        git_path = self.git(fork, "rev-parse", "--git-path", "rebase-apply")
        self.assertFalse((fork / git_path).exists())

    def test_a_conflicting_local_change_fails_names_the_file_and_changes_nothing(
        self,
    ):
        fork = self.clone()
        hunk = self.pick_hunk()
        number, text = hunk.first_removed_line()
        target = fork / hunk.path
        lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
        self.assertEqual(lines[number - 1].rstrip("\n"), text)
        lines[number - 1] = text + "  # fork: our own change to this line\n"
        target.write_text("".join(lines), encoding="utf-8")
        self.commit_all(fork, "fork: change a line the backport changes")
        before = self.state(fork)

        proc = self.apply(fork)

        self.assert_refused_untouched(
            proc,
            before,
            fork,
            f"conflict in {hunk.path}",
            "Nothing was changed",
            "git am --3way",
        )
        for leftover in ("rebase-apply", "MERGE_HEAD"):
            git_path = self.git(fork, "rev-parse", "--git-path", leftover)
            self.assertFalse((fork / git_path).exists(), leftover)


@unittest.skipUnless(
    series_has_patches(), "patches/series lists no patch yet: nothing real to ship"
)
class TestShippedTestsInAPatchedFork(ForkDeliveryCase):
    def test_the_shipped_tests_pass_against_the_patched_fork(self):
        fork = self.clone()
        proc = self.apply(fork)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        created = re.findall(
            r"^diff --git a/\S+ b/(\S+)\nnew file mode", self.mbox, re.M
        )
        tests = [
            path
            for path in created
            if path.startswith(AFTER_APPLY_TEST_DIRS)
            and path.rsplit("/", 1)[-1].startswith("test_")
            and path not in AFTER_APPLY_LEFT_OUT
        ]
        self.assertTrue(tests, f"the patch ships no test under {AFTER_APPLY_TEST_DIRS}")
        self.assertIn("run the shipped tests", proc.stdout)
        for path in tests:
            self.assertIn(path, proc.stdout)
        self.assertNotIn(UPSTREAM_STAND_IN, proc.stdout)
        env = {k: v for k, v in self.env.items() if not k.startswith("PYTEST_")}
        env.update(PYTHONPATH=str(fork / "python"), PYTHONDONTWRITEBYTECODE="1")

        where = subprocess.run(
            [sys.executable, "-c", "import sglang; print(sglang.__file__)"],
            cwd=fork,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.assertEqual(where.returncode, 0, where.stderr)
        self.assertEqual(
            Path(where.stdout.strip()).resolve(),
            (fork / "python" / "sglang" / "__init__.py").resolve(),
        )

        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
            cwd=fork,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.assertEqual(run.returncode, 0, run.stdout[-6000:])
        self.assertRegex(run.stdout, r"\d+ passed")
        self.assertNotIn("upstream stand-in", run.stdout)


if __name__ == "__main__":
    unittest.main()

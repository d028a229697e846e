"""A fork's own CI stays green with the series, as its workflows run it:
mixed into one ``unittest.TestCase`` per series by the ``test_fork_ci*.py``
files.

For each series the shared fork of its release is cloned
(``release_forks.shared_fork``: the wheel's package, the series applied with
``git am -3``, C, a fork's own commit that extends the draft path, and D, on a
branch of its own, writes onto a ``ServerArgs`` on the draft side in each form
the shipped ratchet must catch: in a worker's ``__init__``, in the Scheduler
method that builds the draft split across lines by black's layout, and
through a local name in a function of ``srt/speculative/``).

The jobs of SGLang's workflows at the cut (see shared/fork-ci-at-the-cut.md
and docs/fork-ci-v0.5.6-v0.5.13.md):

- the CPU test job (``pr-test.yml``) checks out the commit with
  ``actions/checkout@v4``, a depth-1 clone, and runs ``cd test && python3
  run_suite.py --hw cpu --suite SUITE``, the cut's per-commit CPU suite
  (``release_forks.RUN_SUITE`` and ``cpu_suite``: its steps with the fork's
  own ``sglang.test.ci``). In a depth-1 clone of D, the runner's own way, each
  file as its own ``python3 FILE`` process, runs the shipped ratchet and turns
  red, naming every write by file and line. That every shipped file passes in
  a depth-1 clone of C, on every release, is in ``test_release_lines*.py``;
- the lint job (``lint.yml``) runs ``pre-commit run --all-files``: every hook
  of ``pre-commit-hooks`` v6.0.0 the config lists (their console scripts, with
  git's file modes), ruff ``--select=F401,F821,UP037``, black, isort and
  codespell at the pinned versions, and the local ``check-registered-tests``;
  on the files the series adds or touches, none reports anything the release
  did not, and no fixer rewrites a file;
- the fork's own ratchets (upstream's ratchet tests at the line's cut, each an
  exact pin): counted with their rules, the series changes no count that one
  of them pins, and makes no other count grow.

These run once per series, on the release the series is made from: a
release a series also serves (v0.5.15) gets its series' files as they are.
"""

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

from release_forks import (
    clone,
    cpu_suite,
    draft_side_write_sites,
    git,
    run_suite,
)

BIN = os.path.dirname(sys.executable)

RATCHET_TEST = "test/registered/unit/test_server_args_write_sites_ratchet.py"

# The linters of the fork's .pre-commit-config.yaml at the v0.5.16 cut (the
# same at the v0.5.14 to v0.5.15.post1 cuts; at the v0.5.6 to v0.5.13.post1
# cuts not determined, and the only dated copies found pin the same), and
# how its hooks call them (ruff with --select=F401,F821,UP037 --fix; black and
# isort with no arguments; codespell with --config .codespellrc).
LINTER_PINS = {
    "ruff": "0.15.1",
    "black": "26.1.0",
    "isort": "7.0.0",
    "codespell": "2.4.1",
    "pre-commit-hooks": "6.0.0",
}
RUFF_RULES = "F401,F821,UP037"
# The pre-commit-hooks ids of the config at the cut, as console scripts with
# their arguments, and the files pre-commit hands each (its `types`). Two are
# made strict: check-added-large-files checks every file, not only those
# staged as new, and check-merge-conflict looks for markers outside a merge.
PRE_COMMIT_HOOKS = (
    (("check-symlinks",), "symlink"),
    (("destroyed-symlinks",), "file"),
    (("trailing-whitespace-fixer",), "text"),
    (("end-of-file-fixer",), "text"),
    (("check-yaml", "--allow-multiple-documents"), "yaml"),
    (("check-toml",), "toml"),
    (("check-ast",), "python"),
    (("check-added-large-files", "--maxkb=1500", "--enforce-all"), "file"),
    (("check-merge-conflict", "--assume-in-merge"), "text"),
    (("check-shebang-scripts-are-executable",), "text"),
    (("detect-private-key",), "text"),
    (("debug-statement-hook",), "python"),
)
CI_REGISTER_CALL = re.compile(r"\bregister_\w+_ci\(")

# The fork's own ratchets: upstream's ratchet tests at each line's cut, by
# their rules, each over the fork's python/sglang (the package the fork's CI
# installs). The series changes no file but those it touches, so the
# release's counts and the fork's can differ only there: those alone are
# counted.
PACKAGE = "python/sglang/"
MUTATION_RULES = (
    re.compile(r"\bserver_args\.[a-z0-9_]+\s*=(?![=}])"),
    re.compile(r"\bsa\.[a-z0-9_]+\s*=(?![=}])"),
    re.compile(r"get_(?:global_)?server_args\(\)\.[a-z0-9_]+\s*=(?![=}])"),
    re.compile(
        r"setattr\(\s*(?:[\w.]+\.)?(?:server_args|sa|get_(?:global_)?server_args\(\))\s*,"
    ),
)
MUTATION_NOT_COUNTED = ("srt/server_args.py", "srt/arg_groups", "multimodal_gen")
LEGACY_GLOBAL_RULES = {
    "get_global_server_args": re.compile(r"\bget_global_server_args\s*\("),
    "set_global_server_args_for_*": re.compile(
        r"\bset_global_server_args_for_(?:scheduler|tokenizer)\s*\("
    ),
}
MODULE_STATE_FILES = ("srt/layers/moe/utils.py", "srt/layers/dp_attention.py")
LEGACY_PARALLEL_GETTERS = re.compile(
    r"\b(?:dcp_enabled|get_(?:"
    r"(?:tensor_model|pipeline_model|moe_expert|moe_tensor|moe_data"
    r"|attn_tensor_model|attn_context_model)_parallel_(?:world_size|rank)"
    r"|dcp_(?:world_size|rank)|dcp_group(?:_no_assert)?"
    r"|attention_dcp_(?:world_size|rank)|attention_(?:tp|cp)_(?:group|rank|size)"
    r"))\(\)"
)
PARALLEL_NOT_COUNTED = (
    "srt/distributed/",
    "srt/runtime_context.py",
    "srt/layers/dp_attention.py",
    "srt/layers/dcp/comm.py",
    "srt/debug_utils/dumper.py",
)


def run_linter(tree, *argv):
    """Run one of the venv's linters in ``tree``; return its stdout and stderr."""
    proc = subprocess.run(
        [os.path.join(BIN, argv[0]), *argv[1:]],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return proc.stdout + proc.stderr


def package_files(tree, paths):
    """{path under python/sglang/: text} of the .py files of the package
    among ``paths`` (relative to the tree's root) that ``tree`` has."""
    found = {}
    for path in paths:
        if not (path.startswith(PACKAGE) and path.endswith(".py")):
            continue
        if os.path.isfile(os.path.join(tree, path)):
            with open(os.path.join(tree, path), encoding="utf-8") as fh:
                found[path[len(PACKAGE) :]] = fh.read()
    return found


def fork_ratchet_counts(tree, paths):
    """What each of the fork's own ratchets counts in ``paths`` of a tree:
    {ratchet: count} for the counting ones, {ratchet: sorted names or files}
    for the others."""
    files = package_files(tree, paths)
    srt = {path: text for path, text in files.items() if path.startswith("srt/")}
    counts = {
        "mutation": sum(
            len(rule.findall(text))
            for path, text in files.items()
            if not path.startswith(MUTATION_NOT_COUNTED)
            for rule in MUTATION_RULES
        )
    }
    for name, rule in LEGACY_GLOBAL_RULES.items():
        counts[name] = sum(len(rule.findall(text)) for text in srt.values())
    for path in MODULE_STATE_FILES:
        names = set()
        if path in files:
            for node in ast.walk(ast.parse(files[path])):
                if isinstance(node, ast.Global):
                    names.update(node.names)
        counts[f"module state of {path}"] = sorted(names)
    # The file of each offending line (its number moves with the patches).
    counts["parallel getters"] = sorted(
        path
        for path, text in srt.items()
        if not path.startswith(PARALLEL_NOT_COUNTED)
        for line in text.split("\n")
        if LEGACY_PARALLEL_GETTERS.search(line)
    )
    return counts


def load_fork_module(tree, rel):
    """A module of the fork's tree, loaded from its file (as the fork's
    check_registered_tests.py loads ci_register.py: without sglang's imports)."""
    spec = importlib.util.spec_from_file_location(
        "fork_" + os.path.basename(rel)[:-3], os.path.join(tree, rel)
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class SeriesForkChecks:
    """A clone of RELEASE's shared fork with its series, the release beside
    it, and the clones the workflows make (mixed into one unittest.TestCase
    per series)."""

    RELEASE = ""  # the release the series is made from
    PINNED_RATCHETS = ()  # the fork's own ratchets at this line's cut
    # Whether no other count may grow either: on the lines from v0.5.14, whose
    # forks may take upstream's ratchets (v0.5.15's first) with the commits
    # after their release. On older lines no ratchet comes within a release.
    NO_COUNT_GROWS = True

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="fork-ci-")
        # The lint job's checkout: the whole history (fetch-depth: 0).
        cls.fork = clone(cls.RELEASE, "main", os.path.join(cls.tmp, "fork"))
        cls.release = clone(cls.RELEASE, cls.RELEASE, os.path.join(cls.tmp, "release"))
        changes = git(
            cls.fork,
            "diff",
            "--name-status",
            "--no-renames",
            cls.RELEASE,
            "origin/series",
        )
        rows = [line.split("\t") for line in changes.splitlines()]
        cls.touched = sorted(path for status, path in rows)
        cls.added = sorted(path for status, path in rows if status == "A")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    # The CPU test job.

    def test_the_runner_fails_on_each_draft_side_write_in_a_depth_1_clone(self):
        checkout = clone(
            self.RELEASE, "draft-write", os.path.join(self.tmp, "d"), depth=1
        )

        said, returncode = run_suite(
            checkout,
            self.RELEASE,
            "--each-file",
            os.path.relpath(RATCHET_TEST, "test"),
        )

        self.assertNotEqual(returncode, 0, said[-4000:])
        # The runner's own way: the file in a process of its own.
        self.assertIn(f"python3 {os.path.join(checkout, RATCHET_TEST)}", said)
        self.assertIn(
            "new writes onto a ServerArgs on the speculative draft side", said
        )
        for site in draft_side_write_sites(self.RELEASE):
            with self.subTest(site=site):
                self.assertIn(site, said)

    # The lint job.

    def files_of_type(self, tree, kind):
        """The files the series adds or touches that pre-commit hands a hook
        of this type (by git's mode and the file's name and content)."""
        stage = git(tree, "ls-files", "-s", "--", *self.touched)
        modes = {line.split("\t")[1]: line.split()[0] for line in stage.splitlines()}
        found = []
        for path, mode in sorted(modes.items()):
            if kind == "symlink":
                keep = mode == "120000"
            elif kind == "python":
                keep = path.endswith(".py")
            elif kind in ("yaml", "toml"):
                keep = path.endswith(
                    {"yaml": (".yaml", ".yml"), "toml": (".toml",)}[kind]
                )
            elif kind == "text":
                with open(os.path.join(tree, path), "rb") as fh:
                    keep = b"\0" not in fh.read()
            else:
                keep = True
            if keep:
                found.append(path)
        return found

    def test_every_pre_commit_hook_passes_on_the_files_the_series_adds_or_touches(self):
        # A checkout of its own: the fixers among them must leave it as it is.
        checkout = clone(self.RELEASE, "main", os.path.join(self.tmp, "hooks"))
        for argv, kind in PRE_COMMIT_HOOKS:
            files = self.files_of_type(checkout, kind)
            with self.subTest(hook=argv[0]):
                proc = subprocess.run(
                    [os.path.join(BIN, argv[0]), *argv[1:], *files],
                    cwd=checkout,
                    capture_output=True,
                    text=True,
                )
                self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
                self.assertEqual(git(checkout, "status", "--porcelain"), "")

    def test_the_shebang_script_the_series_adds_is_executable_in_git(self):
        stage = git(self.fork, "ls-files", "-s", "scripts/ratchet/writer_ratchet.py")
        self.assertTrue(stage.startswith("100755 "), stage)

    def test_every_test_file_the_series_adds_registers_to_the_cuts_cpu_suite(self):
        tests = [
            p
            for p in self.added
            if p.startswith("test/registered/")
            and not p.endswith(("/conftest.py", "/__init__.py"))
        ]
        self.assertTrue(tests, "the series adds no test under test/registered/")
        # The fork's own ci_register, loaded as check_registered_tests.py does.
        ci_register = load_fork_module(
            self.fork, "python/sglang/test/ci/ci_register.py"
        )

        registries = ci_register.collect_tests(
            [os.path.join(self.fork, p) for p in tests], sanity_check=True
        )

        found = {os.path.relpath(r.filename, self.fork): r for r in registries}
        self.assertEqual(sorted(found), tests)
        for path, registry in found.items():
            with self.subTest(path=path):
                self.assertEqual(registry.backend, ci_register.HWBackend.CPU)
                suite = getattr(registry, "effective_suite", registry.suite)
                self.assertEqual(suite, cpu_suite(self.RELEASE))
                self.assertFalse(registry.nightly)
                self.assertIsNone(registry.disabled)

    def test_no_file_the_series_adds_under_python_registers_a_test(self):
        # check-no-registered-tests-in-package
        for path in self.added:
            if path.startswith("python/"):
                with open(os.path.join(self.fork, path), encoding="utf-8") as fh:
                    self.assertIsNone(CI_REGISTER_CALL.search(fh.read()), path)

    def ruff_findings(self, tree):
        out = run_linter(
            tree,
            "ruff",
            "check",
            "--no-cache",
            f"--select={RUFF_RULES}",
            "--output-format=json",
            "--exit-zero",
            *self.touched_files(tree, ".py"),
        )
        return Counter(
            (os.path.relpath(f["filename"], tree), f["code"], f["message"])
            for f in json.loads(out)
        )

    def touched_files(self, tree, suffix=""):
        """The files the series touches that ``tree`` has, ending in ``suffix``."""
        return [
            path
            for path in self.touched
            if path.endswith(suffix) and os.path.exists(os.path.join(tree, path))
        ]

    def test_ruff_reports_no_unused_import_or_undefined_name_the_series_added(self):
        new = self.ruff_findings(self.fork) - self.ruff_findings(self.release)

        self.assertEqual(sorted(new), [])

    def files_reported(self, tree, *argv):
        """The touched files in ``tree`` that a linter's --check names."""
        files = self.touched_files(tree, ".py")
        out = run_linter(tree, *argv, *files)
        return {path for path in files if path in out}

    def test_black_would_reformat_no_file_the_series_touched(self):
        argv = ("black", "--check")
        new = self.files_reported(self.fork, *argv)
        # The release is asked only about the files the fork's run names.
        if new:
            new -= self.files_reported(self.release, *argv)

        self.assertEqual(sorted(new), [])

    def test_isort_would_reorder_no_import_block_the_series_touched(self):
        argv = ("isort", "--check-only")
        new = self.files_reported(self.fork, *argv)
        # The release is asked only about the files the fork's run names.
        if new:
            new -= self.files_reported(self.release, *argv)

        self.assertEqual(sorted(new), [])

    def codespell_findings(self, tree):
        out = run_linter(tree, "codespell", *self.touched_files(tree))
        # path:line: word ==> fix; the line number moves with the patch.
        return Counter(
            (line.split(":")[0], line.split(": ", 1)[1])
            for line in out.splitlines()
            if "==>" in line
        )

    def test_codespell_finds_no_misspelling_the_series_added(self):
        new = self.codespell_findings(self.fork)
        new -= self.codespell_findings(self.release)

        self.assertEqual(sorted(new), [])

    # The fork's own ratchets.

    def test_the_series_changes_no_count_a_ratchet_of_this_line_pins(self):
        released = fork_ratchet_counts(self.release, self.touched)
        patched = fork_ratchet_counts(self.fork, self.touched)

        for ratchet in self.PINNED_RATCHETS:
            with self.subTest(ratchet=ratchet):
                self.assertEqual(patched[ratchet], released[ratchet])
        if not self.NO_COUNT_GROWS:
            return
        for ratchet, count in patched.items():
            with self.subTest(ratchet=ratchet, grows=False):
                if isinstance(count, int):
                    self.assertLessEqual(count, released[ratchet])
                else:
                    self.assertEqual(Counter(count) - Counter(released[ratchet]), {})


# The ratchet tests of upstream's tree at the v0.5.16 cut.
V0_5_16_RATCHETS = (
    "mutation",
    "get_global_server_args",
    "set_global_server_args_for_*",
    f"module state of {MODULE_STATE_FILES[0]}",
    f"module state of {MODULE_STATE_FILES[1]}",
    "parallel getters",
)
# At the v0.5.15 and v0.5.15.post1 cuts: test_legacy_global_ratchet.py alone.
V0_5_15_RATCHETS = ("get_global_server_args", "set_global_server_args_for_*")

"""The series in forks that drifted from v0.5.16 where forks most often do.

Every fork is a clone of the shared fork of v0.5.16 (``release_forks``: the
released wheel's package as ``python/sglang``, tagged ``v0.5.16``) at its tag,
with one commit of its own on top, and takes the series with ``git am -3
patches/v0.5.16/*.patch`` as a fork maintainer runs it:

- module-level import lines of the files the fix changes, edited as upstream
  edited them after 0.5.16 (``scheduler.py`` dropped ``get_server_args`` from
  its ``runtime_context`` import; ``eagle_worker_v2.py`` rewrote its own): no
  hunk touches them, so the series applies;
- the lines around ``get_global_server_args()`` and ``_has_cli_arg`` in
  ``server_args.py`` as v0.5.17 has them: the helper sits next to lines
  0.5.15.post1, 0.5.16 and 0.5.17 share, so the series applies;
- a comment inside ``if self.server_args.speculative_draft_load_format is not
  None:`` in ``Scheduler.maybe_init_draft_worker``, whose ``override`` the fix
  deletes: a genuine conflict, in ``scheduler.py`` only;
- ``draft_worker_common.py``'s ``runtime_context`` import line as v0.5.17 has
  it: the fix drops ``get_server_args`` from that line (an unused import fails
  SGLang's pre-commit), so a fork that rewrote it conflicts there, in that file
  only.

The README says how to resolve both conflicts.
"""

import os
import shutil
import subprocess
import tempfile
import unittest

from release_forks import IDENTITY, clone, line_patches

SERIES = line_patches("v0.5.16")
SRT = "python/sglang/srt"


def git(cwd, *args, check=True):
    proc = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True
    )
    if check and proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc


def setUpModule():
    global TMP
    TMP = tempfile.mkdtemp(prefix="drifted-forks-")


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class TestSeriesInDriftedForks(unittest.TestCase):
    def fork_with(self, *edits):
        """A clone of the v0.5.16 fork with one commit making ``edits``, each
        (file under srt/, old text, new text)."""
        fork = clone("v0.5.16", "v0.5.16", tempfile.mkdtemp(dir=TMP))
        git(fork, "switch", "-q", "-c", "main")
        for rel, old, new in edits:
            path = os.path.join(fork, SRT, rel)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            self.assertEqual(text.count(old), 1, f"{rel}: {old!r}")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text.replace(old, new))
        git(fork, "commit", "-q", "-am", "fork: its own change")
        return fork

    def git_am(self, fork):
        return git(fork, "am", "-3", *SERIES, check=False)

    def assert_applies(self, fork):
        am = self.git_am(fork)
        self.assertEqual(am.returncode, 0, am.stdout + am.stderr)
        log = git(fork, "log", "--format=%s", "v0.5.16..HEAD").stdout.split("\n")
        self.assertEqual(len([s for s in log if s]), len(SERIES) + 1)
        self.assertEqual(git(fork, "status", "--porcelain").stdout, "")

    def test_edited_import_lines_of_the_changed_files_take_the_series(self):
        fork = self.fork_with(
            (
                "managers/scheduler.py",
                "from sglang.srt.runtime_context import "
                "get_parallel, get_server_args\n",
                "from sglang.srt.runtime_context import get_parallel\n",
            ),
            (
                "speculative/eagle_worker_v2.py",
                "from sglang.srt.runtime_context import get_parallel\n",
                "from sglang.srt.runtime_context import get_context, get_parallel\n",
            ),
            (
                "server_args.py",
                "import argparse\nimport dataclasses\n",
                "import argparse\nimport copy\nimport dataclasses\n",
            ),
        )

        self.assert_applies(fork)

    def test_changed_neighbours_of_get_global_server_args_take_the_series(self):
        fork = self.fork_with(
            (
                "server_args.py",
                "set_global_server_args_for_tokenizer = "
                "set_global_server_args_for_scheduler\n",
                "def set_global_server_args_for_tokenizer(server_args: ServerArgs):\n"
                '    """Legacy publish shim (tokenizer)."""\n'
                "    set_global_server_args_for_scheduler(server_args)\n",
            ),
            (
                "server_args.py",
                "def _has_cli_arg(argv: List[str], flag: str) -> bool:\n",
                "def _has_cli_arg(argv: List[str], flag: str) -> bool:  # fork\n",
            ),
        )

        self.assert_applies(fork)

    def assert_conflicts_only_in(self, fork, rel):
        am = self.git_am(fork)

        self.assertNotEqual(am.returncode, 0)
        conflicted = git(fork, "diff", "--name-only", "--diff-filter=U").stdout
        self.assertEqual(conflicted.split(), [f"{SRT}/{rel}"])
        git(fork, "am", "--abort")

    def test_a_comment_in_the_draft_load_format_block_conflicts_in_the_scheduler(
        self,
    ):
        fork = self.fork_with(
            (
                "managers/scheduler.py",
                "        if self.server_args.speculative_draft_load_format"
                " is not None:\n",
                "        if self.server_args.speculative_draft_load_format"
                " is not None:\n"
                "            # The draft may load with its own format.\n",
            ),
        )

        self.assert_conflicts_only_in(fork, "managers/scheduler.py")

    def test_a_rewritten_runtime_context_import_conflicts_in_draft_worker_common(
        self,
    ):
        fork = self.fork_with(
            (
                "speculative/draft_worker_common.py",
                "from sglang.srt.runtime_context import get_context, get_server_args\n",
                "from sglang.srt.runtime_context import get_context, get_schedule, "
                "get_spec\n",
            ),
        )

        self.assert_conflicts_only_in(fork, "speculative/draft_worker_common.py")


if __name__ == "__main__":
    unittest.main()

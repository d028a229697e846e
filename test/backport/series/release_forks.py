"""Forks made from a released wheel's package, for the tests in this folder.

A fork is a git repository with the package as ``python/sglang`` in one
commit, tagged with the release, as a maintainer's fork of that release is.
The older releases' packages are unpacked by the set-up into
``.build/releases/vVERSION/sglang``.

``extend_the_draft_path`` is a fork's own commit as real forks make it: one
that added speculative pipeline parallelism reads the pipeline rank off the
scheduler's parallel state, the pipeline group off the target worker and off
its model runner, in ``Scheduler.maybe_init_draft_worker``.
"""

import os
import shutil
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")
SCHEDULER = "python/sglang/srt/managers/scheduler.py"
# Where the extension goes in maybe_init_draft_worker, on every release: after
# the draft worker's kwargs, before the draft load format is handled.
KWARGS_END = "        )\n\n"
LOAD_FORMAT = "        if self.server_args.speculative_draft_load_format is not None:\n"
EXTENSION = """\
        # Speculative decoding with pipeline parallelism: the draft runs on
        # the last stage, beside the target's last layers.
        self.draft_pp_rank = self.ps.pp_rank
        self.draft_pp_group = self.tp_worker.pp_group
        self.draft_on_last_stage = self.tp_worker.model_runner.pp_group.is_last_rank

"""


def git(cwd, *args):
    """Run git in ``cwd`` and return its output; fail with git's words if it fails."""
    proc = subprocess.run(
        ["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True
    )
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)}: {proc.stdout}{proc.stderr}")
    return proc.stdout


def series_patches(folder):
    """The patch files of the series in ``folder``, in the order they apply."""
    return sorted(
        os.path.join(folder, name)
        for name in os.listdir(folder)
        if name.endswith(".patch")
    )


def release_fork(top, package, release, files=None):
    """Make a fork of ``package`` at ``top``, tagged ``release``; ``files``
    ({path: text}) are committed with it (the fork's own configuration)."""
    shutil.copytree(
        package,
        os.path.join(top, "python", "sglang"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for path, text in (files or {}).items():
        with open(os.path.join(top, path), "w", encoding="utf-8") as fh:
            fh.write(text)
    git(top, "init", "-q", "-b", "main")
    git(top, "add", "-A")
    git(top, "commit", "-q", "-m", f"sglang {release}")
    git(top, "tag", release)


def release_package(release):
    """The folder holding ``release``'s ``sglang`` package as released."""
    package = os.path.join(REPO, ".build", "releases", release)
    if not os.path.isdir(os.path.join(package, "sglang")):
        raise AssertionError(f"no {package}; run scripts/dev/setup.sh first")
    return package


def fork_with_series(top, release, line):
    """Make a fork of ``release`` at ``top`` and apply the series of ``line``
    (its folder under ``patches/``) with ``git am -3``, as a maintainer does."""
    release_fork(top, os.path.join(release_package(release), "sglang"), release)
    git(top, "am", "-3", *series_patches(os.path.join(REPO, "patches", line)))


def extend_the_draft_path(fork):
    """Commit the fork's own change to maybe_init_draft_worker."""
    path = os.path.join(fork, SCHEDULER)
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    anchor = KWARGS_END + LOAD_FORMAT
    if source.count(anchor) != 1:
        raise AssertionError(f"{SCHEDULER}: no one place for the extension")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(source.replace(anchor, KWARGS_END + EXTENSION + LOAD_FORMAT))
    git(fork, "commit", "-q", "-am", "fork: the draft on the last pipeline stage")

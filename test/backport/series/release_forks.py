"""Forks made from a released wheel's package, for the tests in this folder.

A fork is a git repository with the package as ``python/sglang`` in one
commit, tagged with the release, as a maintainer's fork of that release is.
The older releases' packages are unpacked by the set-up into
``.build/releases/vVERSION/sglang``.
"""

import os
import shutil
import subprocess

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")


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

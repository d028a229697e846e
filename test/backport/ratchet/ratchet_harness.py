"""What the writer-ratchet tests share: the paths, the ratchet as a command and
as a module, the repository's whole-package walk, throwaway sglang packages,
and git forks of sglang 0.5.16.

A throwaway package (``synthetic_package``) is a temporary directory::

    <tmp>/sglang/__init__.py
    <tmp>/sglang/<the test's files>

A fork (``v0_5_16_fork``) is a real git repository in fork layout, oldest
commit first::

    A   "sglang 0.5.16"           python/sglang/: the whole of .build/pristine
    F   "fork: our own change"    only when the test gives one
    P1 P2 P3 P4                   the series, by git am -3 (apply_series)
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from types import ModuleType
from typing import Callable, Optional

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "ratchet", "writer_ratchet.py")
WHOLE_PACKAGE = os.path.join(os.path.dirname(__file__), "whole_package_writes.py")
SHIPPED_TEST = "test/registered/unit/test_server_args_write_sites_ratchet.py"
PRISTINE = os.path.join(REPO, ".build", "pristine", "sglang")
PATCHES = os.path.join(REPO, "patches", "v0.5.16")
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")


def load_module(name: str, path: str) -> ModuleType:
    """The Python file at ``path``, imported as the module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_ratchet() -> ModuleType:
    """The shipped ratchet script, imported as a module."""
    return load_module("writer_ratchet", SCRIPT)


def load_whole_package_walk() -> ModuleType:
    """This repository's whole-package walk, imported as a module."""
    return load_module("whole_package_writes", WHOLE_PACKAGE)


def run_ratchet(
    *args: str, cwd: Optional[str] = None, env: Optional[dict] = None
) -> tuple[int, str, str]:
    """Run the ratchet as a user does: (exit status, stdout, stderr)."""
    proc = subprocess.run(
        [sys.executable, SCRIPT, *args],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


def write_file(root: str, rel: str, text: str) -> str:
    """Write ``text`` (dedented) to ``root/rel``; its path."""
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))
    return path


def synthetic_package(case: unittest.TestCase, files: dict[str, str]) -> str:
    """A throwaway package ``<tmp>/sglang`` holding ``files``, removed after the
    test; the package directory."""
    tmp = tempfile.mkdtemp(prefix="ratchet-")
    case.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    root = os.path.join(tmp, "sglang")
    write_file(root, "__init__.py", "")
    for rel, text in files.items():
        write_file(root, rel, text)
    return root


def git_env() -> dict[str, str]:
    """The environment without the user's git configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env


def git(cwd: str, *args: str) -> str:
    """git's output, run in ``cwd`` as the fork's maintainer; raises if it fails."""
    proc = subprocess.run(
        ["git", *IDENTITY, *args],
        cwd=cwd,
        env=git_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout.strip()


def commit_all(repo: str, message: str) -> None:
    """Commit every change in ``repo``."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def v0_5_16_fork(path: str, fork_change: Optional[Callable[[str], None]] = None) -> str:
    """Commit A (tag v0.5.16) at ``path``, then F if ``fork_change(path)`` is
    given (see the module docstring); ``path``."""
    if not os.path.isfile(os.path.join(PRISTINE, "srt", "server_args.py")):
        raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
    shutil.copytree(
        PRISTINE,
        os.path.join(path, "python", "sglang"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    git(path, "init", "-q", "-b", "main")
    commit_all(path, "sglang 0.5.16")
    git(path, "tag", "v0.5.16")
    if fork_change:
        fork_change(path)
        commit_all(path, "fork: our own change")
    return path


def apply_series(fork: str) -> None:
    """P1 to P4: ``git am -3 patches/v0.5.16/*.patch``, as the maintainer does."""
    names = sorted(n for n in os.listdir(PATCHES) if n.endswith(".patch"))
    git(fork, "am", "-q", "-3", *(os.path.join(PATCHES, n) for n in names))


def run_shipped_test(fork: str) -> tuple[int, str]:
    """The shipped ratchet test as the fork's CI runs it, ``python3 FILE -f``
    with the fork's python/ as its sglang: (exit status, output)."""
    env = git_env()
    env["PYTHONPATH"] = os.path.join(fork, "python")
    proc = subprocess.run(
        [sys.executable, SHIPPED_TEST, "-f"],
        cwd=fork,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr

"""What the writer-ratchet tests share: the paths, the ratchet as a command
and as a module, throwaway sglang-like trees, and git forks.

A fork here is a real git repository in fork layout (python/sglang/ from the
untouched 0.5.16 package, .build/pristine/sglang) with this repository's
series applied by ``git am -3``. It holds only the package files that the
series edits or that have a writer site (``site_files``): the ratchet's
verdicts depend on no other file, and each run then parses a tenth of the tree.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "ratchet", "writer_ratchet.py")
BASELINE = os.path.join(REPO, "scripts", "ratchet", "baseline.txt")
SHIPPED_TEST = "test/registered/unit/test_server_args_write_sites_ratchet.py"
PRISTINE = os.path.join(REPO, ".build", "pristine", "sglang")
PATCHES = os.path.join(REPO, "patches")
IDENTITY = ("-c", "user.name=Fork Maintainer", "-c", "user.email=fork@example.invalid")


def load_ratchet():
    spec = importlib.util.spec_from_file_location("writer_ratchet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ratchet(*args, cwd=None, env=None):
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


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text))
    return path


def make_tree(case, files):
    """A throwaway package ``<tmp>/sglang`` holding ``files``; removed after
    the test. Returns the package directory."""
    tmp = tempfile.mkdtemp(prefix="ratchet-")
    case.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
    root = os.path.join(tmp, "sglang")
    write(root, "__init__.py", "")
    for rel, text in files.items():
        write(root, rel, text)
    return root


def git_env():
    """The environment without the user's git configuration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env


def git(cwd, *args):
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


def commit_all(repo, message):
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


def site_files():
    """The package files (relative to python/sglang) the series edits, and
    those with a writer site in the patched 0.5.16 (the recorded baseline)."""
    files = {site.file for site in load_ratchet().read_baseline(BASELINE)}
    for name in os.listdir(PATCHES):
        with open(os.path.join(PATCHES, name), encoding="utf-8") as fh:
            diff = r"^diff --git a/python/sglang/(\S+) "
            files.update(re.findall(diff, fh.read(), re.M))
    return files


def make_v0_5_16_fork(path, fork_change=None):
    """A git repository in fork layout at sglang 0.5.16 (tag v0.5.16) holding
    ``site_files()``, then one commit of the fork's own (``fork_change(path)``),
    if given."""
    if not os.path.isfile(os.path.join(PRISTINE, "srt", "server_args.py")):
        raise RuntimeError(f"{PRISTINE} is missing; run scripts/dev/setup.sh")
    for rel in site_files():
        target = os.path.join(path, "python", "sglang", rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(PRISTINE, rel), target)
    git(path, "init", "-q", "-b", "main")
    commit_all(path, "sglang 0.5.16")
    git(path, "tag", "v0.5.16")
    if fork_change:
        fork_change(path)
        commit_all(path, "fork: our own change")
    return path


def apply_series(fork):
    """``git am -3 patches/*.patch``, as the maintainer does."""
    names = sorted(n for n in os.listdir(PATCHES) if n.endswith(".patch"))
    git(fork, "am", "-q", "-3", *(os.path.join(PATCHES, n) for n in names))


def run_shipped_test(fork):
    """The shipped check test, from the fork's root: (exit status, output). It
    checks the fork's python/sglang; its imports (sglang.test) come from the
    installed sglang, as the fork holds only ``site_files()``."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", SHIPPED_TEST],
        cwd=fork,
        env=git_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr

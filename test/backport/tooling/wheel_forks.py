"""What the apply tool's tests on small forks share: a scratch folder where git
and pip read none of this machine's configuration, and a fork repository made
from the files of a release's wheel."""

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "scripts" / "fork" / "apply_to_fork.py"
# The environment git, pip and the tool run with; make_scratch() sets it.
ENV: dict[str, str] = {}


def unpacked(release: str) -> Path:
    """The folder that holds the release's sglang/ package, unpacked by setup.sh."""
    if release == "v0.5.16":
        return ROOT / ".build" / "pristine"
    return ROOT / ".build" / "releases" / release


def make_scratch(prefix: str, releases: Iterable[str]) -> Path:
    """Makes the scratch folder and sets ENV: no configuration of this
    machine's, no package index (the wheels are in .build/wheels). Fails first
    when a release's wheel is not unpacked."""
    for release in releases:
        if not (unpacked(release) / "sglang" / "srt" / "server_args.py").is_file():
            missing = unpacked(release)
            raise RuntimeError(f"{missing} is missing; run scripts/dev/setup.sh")
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    ENV.clear()
    for name, value in os.environ.items():
        if not name.startswith(("GIT_", "PIP_")):
            ENV[name] = value
    ENV["GIT_CONFIG_NOSYSTEM"] = "1"
    ENV["GIT_CONFIG_GLOBAL"] = os.devnull
    ENV["GIT_OPTIONAL_LOCKS"] = "0"
    ENV["GIT_CEILING_DIRECTORIES"] = str(scratch)
    ENV["PIP_CONFIG_FILE"] = os.devnull
    ENV["PIP_NO_INDEX"] = "1"
    return scratch


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Runs git in cwd and returns its stripped output; fails the test if git fails."""
    run = subprocess.run(
        ["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True
    )
    if check and run.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{run.stderr}")
    return run.stdout.strip()


def commit_everything(repo: Path, message: str) -> None:
    """Commits every change in repo."""
    git(repo, "add", "-A")
    identity = ["-c", "user.name=Fork", "-c", "user.email=fork@example.invalid"]
    git(repo, *identity, "commit", "-q", "-m", message)


def series(release: str) -> list[Path]:
    """The patches of the release's series, in order."""
    return sorted((ROOT / "patches" / release).glob("*.patch"))


def release_repository(fork: Path, release: str) -> None:
    """Makes fork a repository whose branch main has one commit, "sglang
    VERSION": the files under python/sglang/ of the release's wheel that its
    series changes, those every line with a series has, and the version files
    the tool reads to find the line."""
    files = {"_version.py", "version.py", "srt/runtime_context.py"}
    for patch in series(release):
        diff = r"^diff --git a/python/sglang/(\S+) b/"
        files |= set(re.findall(diff, patch.read_text(), re.M))
    package = fork / "python" / "sglang"
    for name in sorted(files):
        source = unpacked(release) / "sglang" / name
        if source.is_file():
            (package / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, package / name)
    git(fork, "init", "-q", "-b", "main")
    commit_everything(fork, f"sglang {release[1:]}")


def snapshot(fork: Path) -> dict:
    """HEAD, branch, stash, worktrees, status, the index's bytes, and each
    file's and folder's mode and content outside .git."""
    views = {
        "HEAD": "rev-parse HEAD",
        "branch": "symbolic-ref -q HEAD",
        "stash": "stash list",
        "worktrees": "worktree list",
        "status": "status --porcelain -uall --ignored",
    }
    state = {}
    for name, view in views.items():
        state[name] = git(fork, *view.split(), check=False)
    index = git(fork, "rev-parse", "--git-path", "index")
    state["index"] = (fork / index).read_bytes()
    state["files"] = {}
    for folder, folders, files in os.walk(fork):
        if folder == str(fork):
            folders.remove(".git")
        for name in folders + files:
            path = Path(folder, name)
            content = b""
            if path.is_file() and not path.is_symlink():
                content = path.read_bytes()
            digest = hashlib.sha1(content).hexdigest()
            state["files"][str(path)] = (path.lstat().st_mode, digest)
    return state

#!/usr/bin/env python3
"""Export the backport as one ``git am``-able patch for SGLang 0.5.16 forks.

    scripts/fork/export_patch.py [--output FILE] [--base-tree DIR]

The patch is built with plain git in a throwaway repository: the pristine
sglang 0.5.16 package laid out as a fork (``python/sglang/``) is committed and
tagged ``v0.5.16``, the series in ``patches/`` is applied with ``git am``, the
files a fork needs from this repository (every tracked file under
``test/registered/unit/`` and ``scripts/ratchet/``) are added, and the result
is squashed into one commit carrying ``scripts/fork/COMMIT_MESSAGE``. That
commit is written out with ``git format-patch``.

Dates and identities are fixed, so the same inputs give the same bytes.
Standard library only; needs git.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT = REPO_ROOT / "dist" / "sglang-v0.5.16-draft-server-args-isolation.patch"
DEFAULT_BASE_TREE = REPO_ROOT / ".build" / "pristine"
DEFAULT_PATCHES = REPO_ROOT / "patches"
COMMIT_MESSAGE = Path(__file__).resolve().parent / "COMMIT_MESSAGE"

# What a fork receives besides the edits in patches/: tracked files only.
SHIPPED_DIRS = ("test/registered/unit", "scripts/ratchet")
BASE_TAG = "v0.5.16"
BASE_VERSION = "0.5.16"
# Our helper; a base that already has it is not the pristine 0.5.16 tree.
PATCHED_MARKER = "def draft_server_args_copy("
CACHE_PARTS = ("__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache")
FALLBACK_AUTHOR = ("SGLang 0.5.16 backport", "backport@localhost")


class ExportError(Exception):
    pass


def _isolated_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Git that ignores the user's and the system's configuration."""
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("GIT_") and key not in ("GIT_EXEC_PATH",):
            del env[key]
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    if extra:
        env.update(extra)
    return env


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env=env if env is not None else _isolated_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if proc.returncode != 0:
        raise ExportError(
            f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr.strip()}"
        )
    return proc.stdout


def find_package(base_tree: Path) -> Path:
    """The ``sglang`` package inside --base-tree (several layouts accepted)."""
    for candidate in (
        base_tree / "sglang",
        base_tree,
        base_tree / "python" / "sglang",
    ):
        if (candidate / "srt" / "server_args.py").is_file():
            return candidate
    raise ExportError(
        f"no sglang package in {base_tree} (looked for sglang/srt/server_args.py); "
        "run scripts/dev/setup.sh, which unpacks the sglang 0.5.16 wheel into "
        ".build/pristine, or pass --base-tree"
    )


def check_pristine(package: Path) -> None:
    server_args = (package / "srt" / "server_args.py").read_text(encoding="utf-8")
    if PATCHED_MARKER in server_args:
        raise ExportError(
            f"{package} already carries the backport ({PATCHED_MARKER!r} in "
            "srt/server_args.py); the base must be the untouched 0.5.16 package "
            "(.build/pristine/sglang), not the venv's patched copy"
        )
    version_file = package / "_version.py"
    if version_file.is_file():
        match = re.search(
            r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""",
            version_file.read_text(encoding="utf-8"),
        )
        if match and match.group(1) != BASE_VERSION:
            raise ExportError(
                f"{package} is sglang {match.group(1)}, not {BASE_VERSION}"
            )


def read_series(patches_dir: Path) -> list[Path]:
    series = patches_dir / "series"
    if not series.is_file():
        raise ExportError(f"{series} is missing")
    patches = []
    for line in series.read_text(encoding="utf-8").splitlines():
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        path = patches_dir / name
        if not path.is_file():
            raise ExportError(f"{series} lists {name}, which is not in {patches_dir}")
        patches.append(path)
    if not patches:
        raise ExportError(f"{series} lists no patch")
    return patches


def is_cache(path: str) -> bool:
    parts = path.split("/")
    return any(p in CACHE_PARTS for p in parts) or path.endswith((".pyc", ".pyo"))


def shipped_files(repo_root: Path) -> list[str]:
    out = git(repo_root, "ls-files", "-z", "--", *SHIPPED_DIRS)
    files = [p for p in out.split("\0") if p and not is_cache(p)]
    missing = [p for p in files if not (repo_root / p).is_file()]
    if missing:
        raise ExportError(
            "tracked but missing from the work tree: " + ", ".join(missing)
        )
    return sorted(files)


def author_of_inputs(repo_root: Path) -> tuple[str, str, str]:
    """Name, e-mail and raw date of the last commit that touched the inputs."""
    try:
        out = git(
            repo_root,
            "log",
            "-1",
            "--format=%an%x00%ae%x00%ad",
            "--date=raw",
            "--",
            "patches",
            *SHIPPED_DIRS,
            str(COMMIT_MESSAGE.relative_to(repo_root)),
        ).strip()
    except (ExportError, ValueError):
        out = ""
    if out:
        name, email, date = out.split("\0")
        return name, email, date
    return (*FALLBACK_AUTHOR, "1700000000 +0000")


def build_patch(
    *,
    package: Path,
    patches: list[Path],
    repo_root: Path,
    files: list[str],
    message: str,
    workdir: Path,
) -> str:
    name, email, date = author_of_inputs(repo_root)
    env = _isolated_env(
        {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
            "GIT_COMMITTER_DATE": date,
        }
    )
    fork = workdir / "fork"
    shutil.copytree(
        package,
        fork / "python" / "sglang",
        symlinks=True,
        ignore=shutil.ignore_patterns(*CACHE_PARTS, "*.pyc", "*.pyo"),
    )
    git(fork, "init", "-q", "-b", "main", env=env)
    git(fork, "config", "core.autocrlf", "false", env=env)
    git(fork, "add", "-A", env=env)
    git(fork, "commit", "-q", "-m", f"sglang {BASE_VERSION}", env=env)
    git(fork, "tag", BASE_TAG, env=env)

    for patch in patches:
        try:
            git(fork, "am", "-q", str(patch), env=env)
        except ExportError as exc:
            raise ExportError(
                f"{patch} does not apply to the pristine {BASE_VERSION} tree:\n{exc}"
            ) from None

    for rel in files:
        dest = fork / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo_root / rel, dest)
    if files:
        git(fork, "add", "--", *files, env=env)

    git(fork, "reset", "-q", "--soft", BASE_TAG, env=env)
    if not git(fork, "diff", "--cached", "--name-only", env=env).strip():
        raise ExportError("the series and the shipped files change nothing")
    msg_file = workdir / "message"
    msg_file.write_text(message, encoding="utf-8")
    git(fork, "commit", "-q", "--cleanup=whitespace", "-F", str(msg_file), env=env)
    return git(
        fork,
        "-c",
        "diff.noprefix=false",
        "-c",
        "diff.mnemonicPrefix=false",
        "-c",
        "diff.renames=false",
        "format-patch",
        "-1",
        "--stdout",
        "--no-signature",
        "--full-index",
        "--binary",
        "HEAD",
        env=env,
    )


def export(
    output: Path,
    base_tree: Path = DEFAULT_BASE_TREE,
    patches_dir: Path = DEFAULT_PATCHES,
    repo_root: Path = REPO_ROOT,
    message_file: Path = COMMIT_MESSAGE,
) -> Path:
    package = find_package(base_tree)
    check_pristine(package)
    patches = read_series(patches_dir)
    files = shipped_files(repo_root)
    message = message_file.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="sglang-fork-export-") as tmp:
        mbox = build_patch(
            package=package,
            patches=patches,
            repo_root=repo_root,
            files=files,
            message=message,
            workdir=Path(tmp),
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = output.with_name(output.name + ".tmp")
    tmp_out.write_text(mbox, encoding="utf-8")
    tmp_out.replace(output)
    print(
        f"export: wrote {output} ({len(patches)} patch(es) from "
        f"{patches_dir} squashed with {len(files)} shipped file(s), "
        f"base {BASE_TAG})"
    )
    if not files:
        print(
            "export: warning: no tracked files under " + ", ".join(SHIPPED_DIRS),
            file=sys.stderr,
        )
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write the backport as one git-am-able patch for 0.5.16 forks."
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="where to write the mbox (default: %(default)s)",
    )
    parser.add_argument(
        "--base-tree",
        type=Path,
        default=DEFAULT_BASE_TREE,
        help="the untouched sglang 0.5.16 package, or a directory holding "
        "sglang/ or python/sglang/ (default: %(default)s)",
    )
    parser.add_argument(
        "--patches-dir",
        type=Path,
        default=DEFAULT_PATCHES,
        help="directory with series and the patches it names (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        export(args.output, args.base_tree, args.patches_dir)
    except ExportError as exc:
        print(f"export: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# Idempotent set-up for this project on a CPU-only machine.
#
# Makes .venv/ (torch from local disk, sglang==0.5.16 without its CUDA
# dependencies, the pinned extras in requirements/cpu.txt, the fork's pinned
# linters in requirements/lint.txt) and .build/pristine/
# (the untouched sglang 0.5.16 package from the wheel: the unpatched side of
# the demonstration and of the regression proof), and the sglang 0.5.17 wheel
# in .build/wheels (the apply tool's test merges it into a patched fork), and
# the packages of the older releases that have a series of their own in
# .build/releases/vVERSION/sglang (test/backport/series makes forks of them). A
# second run with nothing changed does nothing and says so.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

PYTHON=${PYTHON:-python3.11}
SGLANG_VERSION=0.5.16
NEXT_VERSION=0.5.17
# The older releases a series serves (patches/vVERSION/, as v0.5.16's is):
# the forks test/backport/series makes, and the apply tool's merge bases.
OLDER_VERSIONS="0.5.6 0.5.6.post1 0.5.6.post2 0.5.7 0.5.8 0.5.8.post1 0.5.9
0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13 0.5.13.post1
0.5.14 0.5.15 0.5.15.post1"
# CUDA builds that run on the CPU; both lie on this machine's disk, so pip
# takes them without a multi-GB download. The CPU-only torch wheel on disk has
# no matching torchvision, and sglang 0.5.16 imports torchvision.
TORCH_PINS="torch==2.14.1 torchvision==0.29.1"
VENV=.venv
PRISTINE=.build/pristine
STAMP=$VENV/.backport-setup

log() { printf 'set-up: %s\n' "$*"; }

stamp_value() {
    {
        echo "$SGLANG_VERSION $TORCH_PINS"
        cat requirements/cpu.txt requirements/lint.txt
    } | sha256sum | cut -d' ' -f1
}

pristine_ok() {
    [ -f "$PRISTINE/sglang/srt/server_args.py" ] &&
        [ -f "$PRISTINE/.complete" ]
}

# Download the wheel of sglang $2 into .build/wheels and unpack its sglang/
# package into $3, with $1 -m pip.
unpack_release() {
    mkdir -p .build/wheels "$3"
    "$1" -m pip --disable-pip-version-check -q download --no-deps \
        "sglang==$2" -d .build/wheels 2> >(grep -v '^WARNING: Location' >&2)
    "$1" - "$3" .build/wheels/sglang-"$2"-*.whl <<'EOF'
import sys
import zipfile

dest, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as zf:
    zf.extractall(dest, [n for n in zf.namelist() if n.startswith("sglang/")])
EOF
}

# Unpack the released package from the wheel into $PRISTINE, with $1 -m pip.
unpack_pristine() {
    log "unpacking the pristine sglang $SGLANG_VERSION package into $PRISTINE"
    rm -rf "$PRISTINE" .build/wheels/sglang-"$SGLANG_VERSION"-*.whl
    unpack_release "$1" "$SGLANG_VERSION" "$PRISTINE"
    # Its own bytecode: the regression proof imports it in several processes,
    # and each would otherwise compile sglang from source.
    "$1" -m compileall -q -j0 "$PRISTINE" >/dev/null
    touch "$PRISTINE/.complete"
}

next_wheel_ok() { ls .build/wheels/sglang-"$NEXT_VERSION"-*.whl >/dev/null 2>&1; }

older_releases_ok() {
    local version
    for version in $OLDER_VERSIONS; do
        [ -f ".build/releases/v$version/.complete" ] || return 1
    done
}

# Unpack each older release's package into .build/releases/vVERSION/, with $1 -m pip.
unpack_older_releases() {
    local version dest
    for version in $OLDER_VERSIONS; do
        dest=.build/releases/v$version
        [ -f "$dest/.complete" ] && continue
        log "unpacking the sglang $version package into $dest"
        rm -rf "$dest"
        unpack_release "$1" "$version" "$dest"
        touch "$dest/.complete"
    done
}

# The next release's wheel, with $1 -m pip.
fetch_next_wheel() {
    log "downloading the sglang $NEXT_VERSION wheel into .build/wheels"
    "$1" -m pip --disable-pip-version-check -q download --no-deps \
        "sglang==$NEXT_VERSION" -d .build/wheels 2> >(grep -v '^WARNING: Location' >&2)
}

want=$(stamp_value)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && pristine_ok && next_wheel_ok &&
    older_releases_ok; then
    log "up to date, nothing to do ($VENV, $PRISTINE)"
    exit 0
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "set-up: $PYTHON not found; sglang 0.5.16's wheel is built for CPython 3.11." >&2
    echo "set-up: install Python 3.11 or point PYTHON at it (PYTHON=/path/to/python3.11 $0)." >&2
    exit 2
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
# pip byte-compiles what it installs one file at a time; compileall does it
# on every core once everything is in (below).
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$want" ]; then
    log "installing $TORCH_PINS"
    # shellcheck disable=SC2086
    "${PIP[@]}" install --no-compile $TORCH_PINS 2> >(grep -v '^WARNING: Location' >&2)
    log "installing requirements/cpu.txt"
    "${PIP[@]}" install --no-compile -r requirements/cpu.txt 2> >(grep -v '^WARNING: Location' >&2)
    log "installing requirements/lint.txt"
    "${PIP[@]}" install --no-compile -r requirements/lint.txt 2> >(grep -v '^WARNING: Location' >&2)
    # Last, and without its dependencies (most are CUDA-only): pip checks the
    # dependencies of what is already installed only when it resolves some,
    # so installing sglang before the extras would print a page of
    # "dependency conflicts" that mean nothing here.
    log "installing sglang==$SGLANG_VERSION (no CUDA dependencies)"
    "${PIP[@]}" install --no-compile --no-deps "sglang==$SGLANG_VERSION" 2> >(grep -v '^WARNING: Location' >&2)
    log "byte-compiling $VENV"
    # Exit status 1 names the few files no Python 3.11 compiles (templates,
    # Python 2 examples in packages); pip skips those silently too.
    "$VENV/bin/python" -m compileall -q -j0 "$VENV/lib" >/dev/null || true
fi

if ! pristine_ok; then
    unpack_pristine "$VENV/bin/python"
fi
next_wheel_ok || fetch_next_wheel "$VENV/bin/python"
older_releases_ok || unpack_older_releases "$VENV/bin/python"

"$VENV/bin/python" -c "import sglang.srt.server_args, sglang.srt.managers.scheduler" \
    2>/dev/null || {
    echo "set-up: sglang $SGLANG_VERSION does not import in $VENV; see the error with:" >&2
    echo "  $VENV/bin/python -c 'import sglang.srt.managers.scheduler'" >&2
    exit 1
}
echo "$want" >"$STAMP"
log "done"

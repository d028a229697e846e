#!/usr/bin/env bash
# The patch queue: patches/series lists patches in `git format-patch` form
# whose paths are a fork's (python/sglang/...). Plain git underneath.
#
#   patches.sh apply     apply the series to the venv's installed sglang
#   patches.sh status    say, per patch, whether the venv has it
#   patches.sh reset     reinstall the venv's sglang 0.5.16 as released
#   patches.sh checkout  make .build/fork: a git checkout of sglang 0.5.16
#                        (tag v0.5.16) with the series applied as commits
#   patches.sh refresh   rewrite patches/ from .build/fork's commits
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

VENV=.venv
PRISTINE=.build/pristine
FORK=.build/fork
BASE_TAG=v0.5.16
SERIES=patches/series

die() {
    printf 'patches: %s\n' "$*" >&2
    exit 2
}

series() {
    [ -f "$SERIES" ] || die "$SERIES is missing"
    grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$SERIES" || true
}

site_packages() {
    [ -x "$VENV/bin/python" ] || die "no $VENV; run scripts/dev/setup.sh first"
    "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'
}

# git apply inside site-packages, never discovering this repo above it.
site_git() {
    local site=$1
    shift
    (cd "$site" && GIT_CEILING_DIRECTORIES=$(dirname "$site") git "$@")
}

# Prints applied / unapplied / conflict for one patch against site-packages.
# Fork paths a/python/sglang/... map onto site-packages/sglang/... with -p2.
patch_state() {
    local site=$1 patch=$2
    if site_git "$site" apply -p2 --reverse --check "$ROOT/$patch" 2>/dev/null; then
        echo applied
    elif site_git "$site" apply -p2 --check "$ROOT/$patch" 2>/dev/null; then
        echo unapplied
    else
        echo conflict
    fi
}

cmd_apply() {
    local site patch state
    site=$(site_packages)
    mapfile -t patches < <(series)
    # Check the whole series first: nothing is applied unless all of it can be.
    for patch in "${patches[@]}"; do
        state=$(patch_state "$site" "patches/$patch")
        if [ "$state" = conflict ]; then
            site_git "$site" apply -p2 --check "$ROOT/patches/$patch" || true
            die "patches/$patch neither applies to nor is applied in $site/sglang (an older version of the series?); run 'scripts/dev/patches.sh reset', then apply again"
        fi
    done
    for patch in "${patches[@]}"; do
        state=$(patch_state "$site" "patches/$patch")
        if [ "$state" = applied ]; then
            echo "patches: $patch: already applied"
        else
            site_git "$site" apply -p2 "$ROOT/patches/$patch"
            echo "patches: $patch: applied"
        fi
    done
}

cmd_status() {
    local site patch
    site=$(site_packages)
    series | while read -r patch; do
        echo "patches: $patch: $(patch_state "$site" "patches/$patch")"
    done
}

cmd_reset() {
    site_packages >/dev/null
    "$VENV/bin/python" -m pip --disable-pip-version-check -q install \
        --force-reinstall --no-deps "sglang==0.5.16" 2> >(grep -v '^WARNING: Location' >&2)
    echo "patches: the venv's sglang is 0.5.16 as released again"
}

fork_git() {
    git -C "$FORK" -c user.name="sglang-backport" -c user.email="backport@localhost" "$@"
}

cmd_checkout() {
    [ -f "$PRISTINE/.complete" ] || die "no $PRISTINE; run scripts/dev/setup.sh first"
    if [ -d "$FORK/.git" ]; then
        if [ "${1:-}" != "--force" ]; then
            die "$FORK exists; 'refresh' writes its commits to patches/, '--force' remakes it from patches/"
        fi
        rm -rf "$FORK"
    fi
    mkdir -p "$FORK/python"
    cp -a "$PRISTINE/sglang" "$FORK/python/sglang"
    find "$FORK" -name '__pycache__' -prune -exec rm -rf {} +
    fork_git init -q -b backport
    fork_git add -A
    fork_git commit -q -m "sglang 0.5.16 (the released wheel's python/sglang)"
    fork_git tag "$BASE_TAG"
    local patch
    while read -r patch; do
        fork_git am -q "$ROOT/patches/$patch"
        echo "patches: $patch: committed in $FORK"
    done < <(series)
    echo "patches: $FORK is on branch backport, base tagged $BASE_TAG"
}

cmd_refresh() {
    [ -d "$FORK/.git" ] || die "no $FORK; run 'patches.sh checkout' first"
    [ -z "$(fork_git status --porcelain)" ] || die "$FORK has uncommitted changes; commit them first"
    local tmp
    tmp=$(mktemp -d)
    fork_git format-patch -q --zero-commit --no-signature --no-stat \
        -o "$tmp" "$BASE_TAG..HEAD"
    rm -f patches/*.patch
    : >"$SERIES.new"
    for f in "$tmp"/*.patch; do
        [ -e "$f" ] || continue
        cp "$f" patches/
        basename "$f" >>"$SERIES.new"
    done
    mv "$SERIES.new" "$SERIES"
    rm -rf "$tmp"
    echo "patches: wrote $(wc -l <"$SERIES") patch(es) from $FORK ($BASE_TAG..HEAD)"
}

case "${1:-}" in
apply) cmd_apply ;;
status) cmd_status ;;
reset) cmd_reset ;;
checkout) cmd_checkout "${2:-}" ;;
refresh) cmd_refresh ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

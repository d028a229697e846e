#!/usr/bin/env bash
# The patch series in patches/v0.5.16/ is the product: `git format-patch`
# files with a fork's paths, applied in file-name order (`git am -3
# patches/v0.5.16/*.patch`; its series file lists the same order for
# quilt-style tools).
# The patches that edit SGLang (python/sglang/...) come first; then the ones
# that add the shipped tests and the ratchet, whose files are kept in this
# repository (test/registered/unit/, scripts/ratchet/) and written into the
# series by `refresh`. Plain git underneath.
#
#   patches.sh apply     apply the SGLang edits to the venv's installed sglang
#   patches.sh status    say, per SGLang patch, whether the venv has it
#   patches.sh reset     reinstall the venv's sglang 0.5.16 as released
#   patches.sh checkout  make .build/fork: sglang 0.5.16 (tag v0.5.16) in fork
#                        layout with the series as commits, to edit SGLang in
#   patches.sh refresh   rewrite patches/v0.5.16/ from .build/fork's SGLang
#                        commits and this repository's shipped files
#   patches.sh check     fail if patches/v0.5.16/ is not what refresh would
#                        write
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

VENV=.venv
PRISTINE=.build/pristine
FORK=.build/fork
BASE_TAG=v0.5.16
SERIES_DIR=patches/v0.5.16
IDENTITY=(-c user.name="SGLang 0.5.16 backport" -c user.email="backport@localhost")

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

die() {
    printf 'patches: %s\n' "$*" >&2
    exit 2
}

series() {
    compgen -G "$SERIES_DIR/*.patch" >/dev/null || die "no $SERIES_DIR/*.patch"
    printf '%s\n' "$SERIES_DIR"/*.patch
}

# A patch that only touches python/ edits SGLang; the others add shipped files.
edits_sglang() {
    ! grep '^diff --git ' "$1" | grep -qv '^diff --git a/python/'
}

sglang_series() {
    series | while read -r patch; do
        if edits_sglang "$patch"; then echo "$patch"; fi
    done
}

# The files of this repository that a shipped-files patch adds: the ratchet
# patch takes scripts/ratchet/ and the shipped ratchet test (whose pin is the
# patched 0.5.16's draft side), the tests patch every other file under
# test/registered/unit/.
shipped_files() {
    local files
    files=$(git ls-files --cached --others --exclude-standard -- \
        test/registered/unit scripts/ratchet |
        grep -v '__pycache__' | sort -u)
    if grep -q '^diff --git a/scripts/ratchet/' "$1"; then
        grep -e '^scripts/ratchet/' -e '^test/registered/unit/.*ratchet' <<<"$files" || true
    else
        grep '^test/registered/unit/' <<<"$files" | grep -v 'ratchet' || true
    fi
}

site_packages() {
    [ -x "$VENV/bin/python" ] || die "no $VENV; run scripts/dev/setup.sh first"
    "$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])'
}

# git apply inside site-packages, never discovering this repo above it. Fork
# paths a/python/sglang/... map onto site-packages/sglang/... with -p2.
site_apply() {
    local site=$1
    shift
    (cd "$site" && GIT_CEILING_DIRECTORIES=$(dirname "$site") git apply -p2 "$@")
}

patch_state() {
    if site_apply "$1" --reverse --check "$ROOT/$2" 2>/dev/null; then
        echo applied
    elif site_apply "$1" --check "$ROOT/$2" 2>/dev/null; then
        echo unapplied
    else
        echo conflict
    fi
}

cmd_apply() {
    local site patch
    site=$(site_packages)
    mapfile -t patches < <(sglang_series)
    # Check them all first: nothing is applied unless all of them can be.
    for patch in "${patches[@]}"; do
        if [ "$(patch_state "$site" "$patch")" = conflict ]; then
            site_apply "$site" --check "$ROOT/$patch" || true
            die "$patch neither applies to nor is applied in $site/sglang (an older version of the series?); run 'scripts/dev/patches.sh reset', then apply again"
        fi
    done
    for patch in "${patches[@]}"; do
        if [ "$(patch_state "$site" "$patch")" = applied ]; then
            echo "patches: $patch: already applied"
        else
            site_apply "$site" "$ROOT/$patch"
            echo "patches: $patch: applied"
        fi
    done
}

cmd_status() {
    local site patch
    site=$(site_packages)
    sglang_series | while read -r patch; do
        echo "patches: $patch: $(patch_state "$site" "$patch")"
    done
}

cmd_reset() {
    site_packages >/dev/null
    "$VENV/bin/python" -m pip --disable-pip-version-check -q install \
        --force-reinstall --no-deps "sglang==0.5.16" 2> >(grep -v '^WARNING: Location' >&2)
    echo "patches: the venv's sglang is 0.5.16 as released again"
}

# Fixed dates and identities: the same inputs give the same patch files.
export GIT_COMMITTER_DATE="2026-12-01T00:00:00+00:00"

# A git repository at $1 holding the pristine 0.5.16 package in fork layout,
# committed and tagged v0.5.16.
init_base() {
    [ -f "$PRISTINE/.complete" ] || die "no $PRISTINE; run scripts/dev/setup.sh first"
    mkdir -p "$1/python"
    cp -a "$PRISTINE/sglang" "$1/python/sglang"
    find "$1" -name '__pycache__' -prune -exec rm -rf {} +
    git -C "$1" init -q -b backport
    git -C "$1" add -A
    git -C "$1" "${IDENTITY[@]}" commit -q -m "sglang 0.5.16 (the released wheel's python/sglang)"
    git -C "$1" tag "$BASE_TAG"
}

# build_series SGLANG_PATCHES... -- OUT: the SGLang patches, then each
# shipped-files patch of patches/v0.5.16/ with its message and date but this
# repository's files, written to OUT by git format-patch.
build_series() {
    local repo patch out file
    repo=$(mktemp -d -p "$SCRATCH")
    init_base "$repo"
    while [ "$1" != -- ]; do
        git -C "$repo" "${IDENTITY[@]}" am -q "$(realpath "$1")" || die "$1 does not apply to sglang 0.5.16"
        shift
    done
    out=$2
    series | while read -r patch; do
        edits_sglang "$patch" && continue
        git -C "$repo" "${IDENTITY[@]}" am -q "$ROOT/$patch"
        git -C "$repo" rm -q -r -- $(git -C "$repo" diff --name-only HEAD~1 HEAD)
        shipped_files "$patch" | while read -r file; do
            mkdir -p "$repo/$(dirname "$file")"
            cp "$file" "$repo/$file"
        done
        git -C "$repo" add -A
        git -C "$repo" "${IDENTITY[@]}" commit -q --amend --no-edit --allow-empty
    done
    git -C "$repo" format-patch -q --zero-commit --no-signature --full-index -o "$out" "$BASE_TAG..HEAD"
    # The order, for quilt and other patch-queue tools; git am takes *.patch.
    (cd "$out" && ls -- *.patch >series)
}

cmd_checkout() {
    if [ -d "$FORK/.git" ]; then
        [ "${1:-}" = --force ] ||
            die "$FORK exists; 'refresh' writes its commits to $SERIES_DIR/, 'checkout --force' remakes it from $SERIES_DIR/"
        rm -rf "$FORK"
    fi
    init_base "$FORK"
    series | while read -r patch; do
        git -C "$FORK" "${IDENTITY[@]}" am -q "$ROOT/$patch"
        echo "patches: $patch: committed in $FORK"
    done
    echo "patches: $FORK is on branch backport, base tagged $BASE_TAG"
}

cmd_refresh() {
    [ -d "$FORK/.git" ] || die "no $FORK; run 'patches.sh checkout' first"
    [ -z "$(git -C "$FORK" status --porcelain)" ] || die "$FORK has uncommitted changes; commit them first"
    local tmp=$SCRATCH commit
    mkdir "$tmp/sglang" "$tmp/out"
    # The fork's commits that edit SGLang, in order.
    for commit in $(git -C "$FORK" rev-list --reverse "$BASE_TAG..HEAD" -- python); do
        if git -C "$FORK" diff --name-only "$commit~1" "$commit" | grep -qv '^python/'; then
            die "commit $commit in $FORK edits python/ and other files; keep SGLang edits in commits of their own"
        fi
        git -C "$FORK" format-patch -q --zero-commit --no-signature --full-index -o "$tmp/sglang" \
            --start-number "$(($(find "$tmp/sglang" -name '*.patch' | wc -l) + 1))" -1 "$commit"
    done
    # shellcheck disable=SC2046
    build_series $(find "$tmp/sglang" -name '*.patch' | sort) -- "$tmp/out"
    rm -f "$SERIES_DIR"/*.patch
    cp "$tmp"/out/*.patch "$tmp/out/series" "$SERIES_DIR/"
    echo "patches: wrote $(find "$tmp/out" -name '*.patch' | wc -l) patches from $FORK and the shipped files"
}

cmd_check() {
    local tmp=$SCRATCH/out
    # shellcheck disable=SC2046
    build_series $(sglang_series) -- "$tmp"
    # The other patches/vVERSION/ folders hold the series of older release
    # lines, which are edited as patch files (see the README); only the v0.5.16
    # series is made from this repository's files.
    if ! diff -r -q "$tmp" "$SERIES_DIR" >/dev/null; then
        diff -r -u "$SERIES_DIR" "$tmp" | head -n 40 >&2 || true
        die "$SERIES_DIR/ disagrees with the shipped files in this repository (above: what the series has, and what it would have); run 'scripts/dev/patches.sh refresh' and commit $SERIES_DIR/"
    fi
    echo "patches: $SERIES_DIR/ matches the shipped files"
}

case "${1:-}" in
apply) cmd_apply ;;
status) cmd_status ;;
reset) cmd_reset ;;
checkout) cmd_checkout "${2:-}" ;;
refresh) cmd_refresh ;;
check) cmd_check ;;
*)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

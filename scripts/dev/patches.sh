#!/usr/bin/env bash
# The series in patches/vRELEASE/ are the product: `git format-patch` files
# with a fork's paths, applied in file-name order (`git am -3
# patches/v0.5.16/*.patch`; each series file lists the same order for
# quilt-style tools). One folder per release line, named after the release
# whose files the series is written against.
# Each series is made and checked by the one procedure below, plain git
# underneath: a fork of the line's release (its wheel's package, unpacked by
# scripts/dev/setup.sh) with the series as commits is where a line is edited,
# and `refresh` writes the line's series from it with `git format-patch`.
# v0.5.16's shipped files (patches 0003 and 0004) are kept in this repository
# (test/registered/unit/, scripts/ratchet/), where its own tests run them, and
# `refresh` writes them into that series; an older line's shipped files live
# only in its series and its fork. docs/development.md says why, and how a
# change reaches every line.
#
#   patches.sh apply              apply the v0.5.16 SGLang edits to the venv's sglang
#   patches.sh status             say, per v0.5.16 SGLang patch, whether the venv has it
#   patches.sh reset              reinstall the venv's sglang 0.5.16 as released
#   patches.sh lines              list the release lines, newest first
#   patches.sh checkout [LINE]    make .build/fork/LINE: the release LINE (default
#                                 v0.5.16) in fork layout, tagged LINE, with its
#                                 series as commits on branch backport
#   patches.sh refresh [LINE]     rewrite patches/LINE/ from .build/fork/LINE
#   patches.sh check [LINE...]    fail, naming each, if a series is not what
#                                 refresh would write (default: every line)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

VENV=.venv
PRISTINE=.build/pristine
FORKS=.build/fork
# The line whose shipped files are kept in this repository, and whose SGLang
# edits apply, reset and status handle in the venv.
NEWEST=v0.5.16
IDENTITY=(-c user.name="SGLang 0.5.16 backport" -c user.email="backport@localhost")

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT

die() {
    printf 'patches: %s\n' "$*" >&2
    exit 2
}

# Every release line, newest first: the folders under patches/.
lines() {
    find patches -mindepth 1 -maxdepth 1 -type d -name 'v*' -printf '%f\n' | sort -V -r
}

check_line() {
    [ -d "patches/$1" ] || die "no release line '$1'; the lines are: $(lines | tr '\n' ' ')"
}

series() {
    compgen -G "patches/$1/*.patch" >/dev/null || die "no patches/$1/*.patch"
    printf '%s\n' "patches/$1"/*.patch
}

# A patch that only touches python/ edits SGLang; the others add shipped files.
edits_sglang() {
    ! grep '^diff --git ' "$1" | grep -qv '^diff --git a/python/'
}

sglang_series() {
    series "$1" | while read -r patch; do
        if edits_sglang "$patch"; then echo "$patch"; fi
    done
}

# The sglang package of the release a line is named after, as its wheel has it.
release_package() {
    local package=.build/releases/$1/sglang complete=.build/releases/$1/.complete
    if [ "$1" = "$NEWEST" ]; then
        package=$PRISTINE/sglang complete=$PRISTINE/.complete
    fi
    [ -f "$complete" ] || die "no $package; run scripts/dev/setup.sh first"
    echo "$package"
}

# This repository's files that a shipped-files patch of v0.5.16 adds: the
# ratchet patch takes scripts/ratchet/ and the shipped ratchet test (whose pin
# is the patched 0.5.16's draft side), the tests patch every other file under
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
    mapfile -t patches < <(sglang_series "$NEWEST")
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
    sglang_series "$NEWEST" | while read -r patch; do
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

# init_base LINE DIR [FILE...]: a git repository at DIR holding the release's
# package in fork layout (python/sglang), committed and tagged LINE. With
# FILEs (fork paths), only those: all that applying and writing a series needs.
init_base() {
    local line=$1 repo=$2 package file
    shift 2
    package=$(release_package "$line")
    mkdir -p "$repo/python"
    if [ "$#" -eq 0 ]; then
        cp -a "$package" "$repo/python/sglang"
        find "$repo" -name '__pycache__' -prune -exec rm -rf {} +
    fi
    for file in "$@"; do
        [ -f "$package/${file#python/sglang/}" ] || die "patches/$line edits $file, which sglang ${line#v} does not have"
        mkdir -p "$repo/$(dirname "$file")"
        cp "$package/${file#python/sglang/}" "$repo/$file"
    done
    git -C "$repo" init -q -b backport
    git -C "$repo" add -A
    git -C "$repo" "${IDENTITY[@]}" commit -q -m "sglang ${line#v} (the released wheel's python/sglang)"
    git -C "$repo" tag "$line"
}

# The SGLang files the given patches edit.
edited_files() {
    grep -h '^diff --git a/python/' "$@" | sed 's|^diff --git a/\([^ ]*\) .*|\1|' | sort -u
}

# commit_series LINE REPO PATCH...: commit each patch in REPO with git am. On
# v0.5.16 a patch that adds shipped files is committed with this repository's
# files instead of its own, keeping its message and date.
commit_series() {
    local line=$1 repo=$2 patch file
    shift 2
    for patch in "$@"; do
        if ! git -C "$repo" "${IDENTITY[@]}" am -q "$patch" >"$SCRATCH/am.log" 2>&1; then
            sed 's/^/  /' "$SCRATCH/am.log" >&2
            echo "patches: $(basename "$patch") does not apply to sglang ${line#v}" >&2
            return 1
        fi
        if [ "$line" != "$NEWEST" ] || edits_sglang "$patch"; then
            continue
        fi
        git -C "$repo" rm -q -r -- $(git -C "$repo" diff --name-only HEAD~1 HEAD)
        shipped_files "$patch" | while read -r file; do
            mkdir -p "$repo/$(dirname "$file")"
            cp "$file" "$repo/$file"
        done
        git -C "$repo" add -A
        git -C "$repo" "${IDENTITY[@]}" commit -q --amend --no-edit --allow-empty
    done
}

# write_series LINE REPO OUT: the commits REPO has on top of the tag LINE, as
# git format-patch writes them, into OUT with the series file.
write_series() {
    git -C "$2" format-patch -q --zero-commit --no-signature --full-index -o "$3" "$1..HEAD"
    # The order, for quilt and other patch-queue tools; git am takes *.patch.
    (cd "$3" && ls -- *.patch >series)
}

# build_series LINE OUT PATCH...: the series those patches make on the
# release's files, as refresh writes it.
build_series() {
    local line=$1 out=$2 repo
    shift 2
    repo=$(mktemp -d -p "$SCRATCH")
    mapfile -t files < <(edited_files "$@")
    init_base "$line" "$repo" "${files[@]}"
    commit_series "$line" "$repo" "$@" || return 1
    write_series "$line" "$repo" "$out"
}

fork_of() {
    echo "$FORKS/$1"
}

cmd_checkout() {
    local line=${1:-$NEWEST} force=${2:-} fork patch
    check_line "$line"
    fork=$(fork_of "$line")
    if [ -d "$fork/.git" ]; then
        [ "$force" = --force ] ||
            die "$fork exists; 'refresh $line' writes its commits to patches/$line/, 'checkout $line --force' remakes it from patches/$line/"
        rm -rf "$fork"
    fi
    init_base "$line" "$fork"
    # Commits made in the fork, rewordings and fixups too, carry the series'
    # identity.
    git -C "$fork" config user.name "SGLang 0.5.16 backport"
    git -C "$fork" config user.email backport@localhost
    series "$line" | while read -r patch; do
        git -C "$fork" "${IDENTITY[@]}" am -q "$ROOT/$patch"
        echo "patches: $patch: committed in $fork"
    done
    echo "patches: $fork is on branch backport, the release tagged $line"
}

cmd_refresh() {
    local line=${1:-$NEWEST} fork out commit
    check_line "$line"
    fork=$(fork_of "$line")
    [ -d "$fork/.git" ] || die "no $fork; run 'patches.sh checkout $line' first"
    [ -z "$(git -C "$fork" status --porcelain)" ] || die "$fork has uncommitted changes; commit them first"
    for commit in $(git -C "$fork" rev-list --reverse "$line..HEAD"); do
        if git -C "$fork" diff --name-only "$commit~1" "$commit" | grep -q '^python/' &&
            git -C "$fork" diff --name-only "$commit~1" "$commit" | grep -qv '^python/'; then
            die "commit $commit in $fork edits python/ and other files; keep SGLang edits in commits of their own"
        fi
    done
    git -C "$fork" format-patch -q --zero-commit --no-signature --full-index -o "$SCRATCH/in" "$line..HEAD"
    out=$SCRATCH/out
    build_series "$line" "$out" "$SCRATCH"/in/*.patch || die "the commits of $fork do not apply to sglang ${line#v} (above)"
    rm -f "patches/$line"/*.patch "patches/$line/series"
    cp "$out"/*.patch "$out/series" "patches/$line/"
    echo "patches: wrote $(find "$out" -name '*.patch' | wc -l) patches to patches/$line/ from $fork"
}

# check_one LINE: whether patches/LINE/ is what refresh writes from a fork
# checked out of it; on v0.5.16, with this repository's shipped files.
check_one() {
    local line=$1 out=$SCRATCH/check-$1
    mapfile -t patches < <(series "$line")
    if ! build_series "$line" "$out" "${patches[@]/#/$ROOT/}"; then
        echo "patches: patches/$line/ does not apply to sglang ${line#v}" >&2
        return 1
    fi
    if ! diff -r -q "$out" "patches/$line" >/dev/null; then
        diff -r -u "patches/$line" "$out" | head -n 40 >&2 || true
        echo "patches: patches/$line/ is not what refresh writes (above: what the series has, and what it would have)" >&2
        return 1
    fi
    echo "patches: patches/$line/ is what refresh writes"
}

cmd_check() {
    local line failed=()
    [ "$#" -gt 0 ] || set -- $(lines)
    for line in "$@"; do
        check_line "$line"
        check_one "$line" || failed+=("$line")
    done
    if [ "${#failed[@]}" -gt 0 ]; then
        printf 'patches: not what refresh writes: %s\n' "${failed[*]}" >&2
        printf "patches: on v0.5.16 run 'scripts/dev/patches.sh refresh' after editing the shipped files; on any line, make the change in its fork ('checkout LINE'), then 'refresh LINE' (docs/development.md, \"Changing the series\")\n" >&2
        exit 1
    fi
}

case "${1:-}" in
apply) cmd_apply ;;
status) cmd_status ;;
reset) cmd_reset ;;
lines) lines ;;
checkout) cmd_checkout "${@:2}" ;;
refresh) cmd_refresh "${@:2}" ;;
check) cmd_check "${@:2}" ;;
*)
    sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"
    exit 2
    ;;
esac

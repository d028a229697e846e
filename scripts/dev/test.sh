#!/usr/bin/env bash
# The project's test command: set up, lint this repository's Python, check
# that every release line's series is what `patches.sh refresh` writes
# (v0.5.16's with this repository's shipped files), apply the v0.5.16 SGLang
# edits to the venv's sglang, prove that the regression tests fail on the
# unpatched 0.5.16, then run every test against the patched install. Extra
# arguments go to the final pytest run (e.g. scripts/dev/test.sh -k scheduler).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# Each stage says how long it took when the next one starts, and the run its
# total at the end, so that a slower run shows where the time went.
stage_name=""
stage_start=$SECONDS
stage() {
    if [ -n "$stage_name" ]; then
        echo "== $stage_name: $((SECONDS - stage_start)) s"
    fi
    stage_name=$1
    stage_start=$SECONDS
    [ -z "$1" ] || echo "== $1"
}

stage "set-up"
bash scripts/dev/setup.sh

stage "black, isort and ruff (E, F, W, B) on this repository's Python files"
# The versions a fork's pre-commit pins at the v0.5.16 cut (requirements/lint.txt).
mapfile -t python_files < <(git ls-files --cached --others --exclude-standard -- '*.py')
.venv/bin/black --check --quiet "${python_files[@]}"
.venv/bin/isort --check-only --quiet "${python_files[@]}"
.venv/bin/ruff check --no-cache --quiet --select E,F,W,B "${python_files[@]}"
# Two workers; each test file runs whole in one of them, so that a class's
# server or model is set up once.
PYTEST=(.venv/bin/python -m pytest -n 2 --dist loadfile)
stage "every line's series is what refresh writes; v0.5.16's applied to .venv's sglang"
bash scripts/dev/patches.sh check
bash scripts/dev/patches.sh apply

stage "regression tests against the unpatched sglang 0.5.16 (.build/pristine): each must fail"
log=.build/regression-unpatched.log
set +e
PYTHONPATH="$ROOT/.build/pristine" "${PYTEST[@]}" -m regression -q --tb=line \
    --junitxml=.build/regression-unpatched.xml >"$log" 2>&1
set -e
.venv/bin/python scripts/dev/check_regressions_fail.py .build/regression-unpatched.xml || {
    tail -n 40 "$log"
    exit 1
}

if [ "$#" -gt 0 ]; then
    stage "the tests named on the command line, against the patched install"
    "${PYTEST[@]}" -q "$@"
else
    # pytest lists the slowest tests of each stage (with the set-up and
    # tear-down of their classes) after its summary.
    stage "every test but the real servers, against the patched install"
    "${PYTEST[@]}" -q --durations=15 --ignore=test/backport/e2e
    # The real servers last, beside each other: xdist hands out the files with
    # the fewest tests last, and these few-test files are the longest.
    stage "the real servers (test/backport/e2e), against the patched install"
    "${PYTEST[@]}" -q --durations=8 test/backport/e2e
fi
stage ""
echo "== all stages: $SECONDS s"

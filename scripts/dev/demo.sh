#!/usr/bin/env bash
# The main demonstration: one real EAGLE server (python -m sglang.launch_server
# --speculative-algorithm EAGLE --speculative-draft-load-format dummy, tiny
# local models) on unpatched sglang 0.5.16, then on the patched install, and the
# fields of the scheduler's published config that differ. Sets up and applies
# the series first. Extra arguments go to scripts/demo/draft_isolation_demo.py
# (e.g. --json out.json).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

bash scripts/dev/setup.sh >&2
bash scripts/dev/patches.sh apply >&2
exec .venv/bin/python scripts/demo/draft_isolation_demo.py --pristine .build/pristine "$@"

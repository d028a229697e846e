#!/usr/bin/env bash
# The main demonstration: for every speculative algorithm, what building the
# draft does to the target's ServerArgs on unpatched sglang 0.5.16 and on the
# patched install, side by side. Sets up and applies the series first.
# EAGLE, EAGLE3, STANDALONE and FROZEN_KV_MTP are built for real (tiny local
# models, no stub); the rest through the real scheduler with the draft model
# loading stubbed. Extra arguments go to scripts/demo/draft_isolation_demo.py
# (--runner stub: stub every algorithm, faster).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

bash scripts/dev/setup.sh >&2
bash scripts/dev/patches.sh apply >&2
exec .venv/bin/python scripts/demo/draft_isolation_demo.py --pristine .build/pristine --runner real "$@"

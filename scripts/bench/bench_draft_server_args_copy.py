"""What building the draft's ServerArgs costs Scheduler.maybe_init_draft_worker.

The patch adds one draft_server_args_copy() and one scoped publish to the
draft's construction. This prints their median time on a resolved EAGLE
config beside a bare copy.deepcopy of the same config, which the copy must
not exceed. Run with the patched sglang (scripts/dev/demo.sh sets it up):

    .venv/bin/python scripts/bench/bench_draft_server_args_copy.py [--runs N]
"""

import argparse
import copy
import os
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(
    0,
    os.path.join(os.path.dirname(__file__), "..", "..", "test/registered/unit/spec"),
)


def _median_us(fn, runs: int) -> float:
    for _ in range(min(runs, 50)):
        fn()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()

    from draft_isolation_harness import (
        TARGET_CONTEXT_LEN,
        build_target_server_args,
        published_target,
    )

    import sglang.srt.server_args as server_args_module
    from sglang.srt.runtime_context import get_context

    if not hasattr(server_args_module, "draft_server_args_copy"):
        print("this sglang is not patched (no draft_server_args_copy); run")
        print("scripts/dev/patches.sh apply first")
        return 2

    target = build_target_server_args("EAGLE", "dummy")
    target_model_config = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)

    def added_by_the_patch():
        draft = server_args_module.draft_server_args_copy(target, target_model_config)
        with get_context().scoped_server_args(draft):
            pass

    with published_target(target):
        patch_us = _median_us(added_by_the_patch, args.runs)
        deepcopy_us = _median_us(lambda: copy.deepcopy(target), args.runs)

    print(f"resolved EAGLE ServerArgs, median of {args.runs} runs")
    print(f"  draft_server_args_copy + scoped publish: {patch_us:8.1f} us")
    print(f"  copy.deepcopy of the same config:        {deepcopy_us:8.1f} us")
    print(f"  ratio: {patch_us / deepcopy_us:.2f}x the bare deepcopy")
    if patch_us > deepcopy_us:
        print("FAIL: the draft copy costs more than a bare deepcopy")
        return 1
    print("OK: the draft copy costs no more than a bare deepcopy")
    return 0


if __name__ == "__main__":
    sys.exit(main())

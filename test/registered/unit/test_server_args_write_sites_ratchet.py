"""Ratchet guard: writes onto a ServerArgs on the speculative draft side.

Draft workers wrote their values onto the ServerArgs the target shares; each
is now built from its own copy. The writes left on the draft side are pinned
below by function, less their values: a new one fails, named by file and line,
and so does a pinned one that is gone.
"""

import runpy
import unittest
from pathlib import Path

import sglang
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=8, suite="base-a-test-cpu")

_BASELINE = {
    "Scheduler.init_all_attention_backends": [
        "self.draft_server_args.override(linear_attn_backend)",
        "self.draft_server_args.override(linear_attn_decode_backend)",
        "self.draft_server_args.override(linear_attn_prefill_backend)",
    ],
    "draft_server_args_copy": ["draft_server_args.override(**draft_fields)"],
    "build_draft_tp_worker": [
        "draft_server_args.override(attention_backend)",
        "draft_server_args.override(context_length)",
        "draft_server_args.override(decode_attention_backend)",
        "draft_server_args.override(prefill_attention_backend)",
        "draft_server_args.override(skip_tokenizer_init)",
        "draft_server_args.override(speculative_draft_attention_backend)",
    ],
    "_override_spec_server_args": [
        "server_args.override(**fields)",
        "target_server_args.override(**fields)",
    ],
    "MultiLayerEagleDraftWorker.alloc_memory_pool": [
        "self.server_args.override(max_mamba_cache_size)"
    ],
}


class TestServerArgsWriteSitesRatchet(CustomTestCase):
    def test_draft_side_writes_onto_a_server_args_match_the_baseline(self):
        checkout = Path(__file__).resolve().parents[3]
        check = runpy.run_path(f"{checkout}/scripts/ratchet/writer_ratchet.py")["check"]
        report = check(sglang.__path__[0], _BASELINE)
        if report:
            self.fail(report)


if __name__ == "__main__":
    unittest.main()

"""Ratchet guard: writes onto a ServerArgs on the speculative draft side.

Draft workers used to write their own values (load_format, context_length,
json_model_override_args) onto the ServerArgs the target shares. Each draft is
now built from its own copy, and the writes left on the draft side are pinned
below, one entry per site: its file under python/sglang/, its function, and the
write less its values. The pin is exact: a new site fails, named by file and
line, and so does a pinned site that is gone.
"""

import importlib.util
import unittest
from collections import Counter
from pathlib import Path

import sglang
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=8, suite="base-a-test-cpu")

_SGLANG_ROOT = str(next(iter(sglang.__path__)))
_WRITER_RATCHET = (
    Path(__file__).resolve().parents[3] / "scripts" / "ratchet" / "writer_ratchet.py"
)

_BASELINE = [
    (
        "srt/managers/scheduler.py",
        "Scheduler.init_all_attention_backends",
        "self.draft_server_args.override('scheduler.target_linear_attn_backends',"
        " linear_attn_backend=..., linear_attn_decode_backend=...,"
        " linear_attn_prefill_backend=...)",
    ),
    (
        "srt/server_args.py",
        "draft_server_args_copy",
        "draft_server_args.override('spec_worker.draft_server_args', **draft_fields)",
    ),
    (
        "srt/speculative/draft_worker_common.py",
        "build_draft_tp_worker",
        "draft_server_args.override('draft_worker.build', attention_backend=...,"
        " context_length=..., decode_attention_backend=...,"
        " prefill_attention_backend=..., skip_tokenizer_init=...,"
        " speculative_draft_attention_backend=...)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        "_override_spec_server_args",
        "server_args.override(..., **fields)",
    ),
    (
        "srt/speculative/eagle_worker_v2.py",
        "_override_spec_server_args",
        "target_server_args.override(..., **fields)",
    ),
    (
        "srt/speculative/multi_layer_eagle_worker_v2.py",
        "MultiLayerEagleDraftWorker.alloc_memory_pool",
        "self.server_args.override('spec_worker.target_mamba_cache_size',"
        " max_mamba_cache_size=...)",
    ),
]


def _load_writer_ratchet():
    spec = importlib.util.spec_from_file_location("writer_ratchet", _WRITER_RATCHET)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TestServerArgsWriteSitesRatchet(CustomTestCase):
    def test_draft_side_writes_onto_a_server_args_match_the_baseline(self):
        writer_ratchet = _load_writer_ratchet()
        sites = writer_ratchet.draft_side_sites(_SGLANG_ROOT)
        found = Counter(writer_ratchet.site_key(site) for site in sites)
        new = found - Counter(_BASELINE)
        gone = Counter(_BASELINE) - found
        if new:
            self.fail(
                "new writes onto a ServerArgs on the speculative draft side:\n"
                + "".join(
                    f"  {writer_ratchet.site_line(_SGLANG_ROOT, site)}\n"
                    for site in sites
                    if writer_ratchet.site_key(site) in new
                )
                + "Build the draft from its own copy (draft_server_args_copy) or "
                "pass it the value. If the write is reviewed and meant, add it to "
                "_BASELINE in this file:\n"
                + "".join(f"    {key!r},\n" for key in sorted(new.elements()))
            )
        if gone:
            self.fail(
                "draft-side writes onto a ServerArgs shrank; remove them from "
                "_BASELINE in this file to lock in the progress:\n"
                + "".join(f"    {key!r},\n" for key in sorted(gone.elements()))
            )


if __name__ == "__main__":
    unittest.main()

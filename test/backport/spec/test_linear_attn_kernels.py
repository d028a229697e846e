"""The SM100 GDN prefill default the target resolves reaches the draft.

``maybe_set_default_flashinfer_gdn_prefill`` (0.5.16's
``layers/attention/linear/gdn_backend.py``) sets ``linear_attn_prefill_backend
= "flashinfer"`` on the config of the runner whose attention backends are
being built, on SM100 with CUDA 13, and ``initialize_linear_attn_config`` then
sets the process-wide kernel choice from that runner's config. The scheduler
builds the target's backends first and the draft's last, so with a draft copy
made before, a draft that does not qualify for the default itself would reset
the process to Triton. Here both are 0.5.16's real functions, with the device
checks stubbed to an SM100 GPU with CUDA 13 and FlashInfer's GDN prefill
present; the target qualifies, the draft (an fp32 mamba cache) does not.

This passes on 0.5.16 as released, where the draft shares the target's
instance, and fails on a port that only hands the draft a copy.
"""

import os
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.layers.attention.linear import gdn_backend
from sglang.srt.layers.attention.linear import utils as linear_attn
from sglang.srt.layers.attention.linear.kernels import gdn_flashinfer
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import spec_registry
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

PLUGIN = "LINEAR_ATTN_KERNELS_TEST"
GDN = SimpleNamespace(linear_key_head_dim=128, linear_value_head_dim=128)


def _runner(server_args, mamba_dtype):
    mamba_cache = SimpleNamespace(temporal=torch.empty(0, dtype=mamba_dtype))
    return SimpleNamespace(
        server_args=server_args,
        model_config=None,
        req_to_token_pool=SimpleNamespace(
            mamba_pool=SimpleNamespace(mamba_cache=mamba_cache)
        ),
    )


def _build_linear_attn_backends(runner):
    # What attention_registry.attn_backend_wrapper does for a hybrid GDN model.
    gdn_backend.maybe_set_default_flashinfer_gdn_prefill(runner)
    linear_attn.initialize_linear_attn_config(runner.server_args)


class _MtpLikeDraftWorker:
    def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
        self.runner = _runner(server_args, torch.float32)

    def init_attention_backends(self):
        _build_linear_attn_backends(self.runner)


class TestGdnPrefillDefaultReachesTheDraft(unittest.TestCase):
    def setUp(self):
        stubs = (
            mock.patch.dict(os.environ, {"SGLANG_STRICT_CONFIG_MUTATION": "0"}),
            mock.patch.object(gdn_backend, "is_cuda", return_value=True),
            mock.patch.object(gdn_backend, "hybrid_gdn_config", return_value=GDN),
            mock.patch.object(
                torch.cuda, "get_device_capability", return_value=(10, 0)
            ),
            mock.patch.object(torch.version, "cuda", "13.0"),
            mock.patch.object(
                gdn_flashinfer, "is_flashinfer_gdn_prefill_available", return_value=True
            ),
            mock.patch.object(linear_attn, "LINEAR_ATTN_DECODE_BACKEND", None),
            mock.patch.object(linear_attn, "LINEAR_ATTN_PREFILL_BACKEND", None),
        )
        for stub in stubs:
            stub.start()
            self.addCleanup(stub.stop)
        ctx = get_context()
        saved = (ctx._server_args, ctx.flags.capture.enable_torch_compile)
        self.addCleanup(setattr, ctx, "_server_args", saved[0])
        self.addCleanup(setattr, ctx.flags.capture, "enable_torch_compile", saved[1])

    def test_the_process_keeps_the_targets_flashinfer_prefill_kernel(self):
        target = ServerArgs(model_path="dummy", device="cpu", chunked_prefill_size=2048)
        get_context().set_server_args(target)
        target_runner = _runner(target, torch.bfloat16)
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = target
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        scheduler.tp_worker = SimpleNamespace(
            model_runner=SimpleNamespace(
                server_args=target, model_config=SimpleNamespace(context_len=4096)
            ),
            init_attention_backends=lambda: _build_linear_attn_backends(target_runner),
        )
        SpeculativeAlgorithm.register(PLUGIN, supports_overlap=True)(
            lambda server_args: _MtpLikeDraftWorker
        )
        try:
            scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(PLUGIN)
            scheduler.maybe_init_draft_worker()
        finally:
            spec_registry._REGISTRY.pop(PLUGIN)

        scheduler.init_all_attention_backends()

        self.assertEqual(target.linear_attn_prefill_backend, "flashinfer")
        draft = scheduler.draft_worker.runner.server_args
        self.assertEqual(draft.linear_attn_prefill_backend, "flashinfer")
        self.assertTrue(linear_attn.get_linear_attn_prefill_backend().is_flashinfer())
        self.assertTrue(linear_attn.get_linear_attn_decode_backend().is_triton())


if __name__ == "__main__":
    unittest.main()

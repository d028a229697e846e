"""The real EAGLE draft workers leave the target's ``ServerArgs`` alone.

Regression: ``EAGLEWorkerV2`` wrote the target's context length, and its
hot-token map ``{"hot_vocab_size": N}`` over ``--json-model-override-args``,
onto the ``ServerArgs`` the target worker and ``get_server_args()`` share, and
``StandaloneWorkerV2``, ``MultiLayerEagleWorkerV2`` and ``FrozenKVMTPWorkerV2``
wrote the context length. The workers are built through the real
``Scheduler.maybe_init_draft_worker`` with a stand-in draft ``TpModelWorker``.
What 0.5.16 shared through the one instance still reaches the target (adaptive
speculative decoding's switches) or the draft (the mamba cache size the target
resolves later).
"""

import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=12, suite="base-a-test-cpu")

TARGET_CONTEXT_LEN = 4096
USER_OVERRIDES = '{"rope_theta": 20000.0}'
HOT_TOKENS = [0, 1, 2, 5, 8]
SWITCHED = {
    "speculative_num_steps": 3,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_bs_decode": [],
    "disable_cuda_graph": True,
}


class _LoadedDraftTpModelWorker:
    """What the spec workers read off their draft TpModelWorker."""

    def __init__(self, server_args=None, **kwargs):
        self.server_args = server_args
        self.tokenizer = None
        self.model_config = SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["LlamaForCausalLMEagle"]),
            vocab_size=256,
        )
        self.model_runner = SimpleNamespace(
            server_args=server_args,
            model_config=self.model_config,
            tp_group=None,
            attn_backend=None,
            draft_attn_backend=None,
        )
        self.model_runner_list = [self.model_runner]

    def alloc_memory_pool(self, **kwargs):
        # What the draft's KV cache configurator reads for an MTP head's pool.
        raise _PoolSized(self.server_args.max_mamba_cache_size)


class _PoolSized(Exception):
    pass


class _FrozenKVMTPDraftWorker:
    """The frozen-KV MTP draft worker, which is its own draft TpModelWorker."""

    def __init__(self, server_args, *ranks_and_target):
        self.server_args = server_args


STAND_INS = {
    "TpModelWorker": _LoadedDraftTpModelWorker,
    "FrozenKVMTPDraftWorker": _FrozenKVMTPDraftWorker,
}


class _EagleDraftCase(CustomTestCase):
    def build_draft_worker(
        self, module="eagle_worker_v2", stand_in="TpModelWorker", **fields
    ):
        """Publish a target config and build its draft through the scheduler."""
        algorithm = fields.pop("speculative_algorithm", "EAGLE")
        override = get_context().override_server_args(
            speculative_algorithm=algorithm,
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            **fields,
        )
        self.target = override.install()
        self.addCleanup(override.restore)

        # A mock, so a scheduler that reads more of its target worker still runs.
        target_worker = mock.Mock(name="target_worker")
        target_worker.model_config = target_worker.model_runner.model_config
        target_worker.model_config.context_len = TARGET_CONTEXT_LEN
        target_worker.model_config.vocab_size = 256
        target_worker.model_runner.server_args = self.target
        target_worker.get_memory_pool.return_value = (None, None)
        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = self.target
        scheduler.spec_algorithm = SpeculativeAlgorithm.from_string(algorithm)
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        scheduler.tp_worker = target_worker
        with mock.patch(
            f"sglang.srt.speculative.{module}.{stand_in}",
            STAND_INS[stand_in],
        ):
            scheduler.maybe_init_draft_worker()
        return scheduler.draft_worker


class TestEagleDraftLeavesTheTargetAlone(_EagleDraftCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        token_map = f"{tmp.name}/hot_token_map.pt"
        torch.save(HOT_TOKENS, token_map)
        self.worker = self.build_draft_worker(
            speculative_draft_load_format="dummy",
            speculative_token_map=token_map,
            json_model_override_args=USER_OVERRIDES,
        )
        # Runs from alloc_memory_pool, after the draft model was built.
        self.worker.draft_worker.init_token_map()

    def test_the_target_keeps_its_fields_through_the_draft_and_its_token_map(self):
        target = self.target
        self.assertEqual((target.context_length, target.load_format), (None, "auto"))
        self.assertEqual(target.json_model_override_args, USER_OVERRIDES)
        draft = self.worker.server_args
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")

    def test_the_token_map_leaves_the_users_overrides_on_the_drafts_config(self):
        self.assertEqual(self.worker.draft_worker.hot_token_id.tolist(), HOT_TOKENS)
        self.assertEqual(
            self.worker.server_args.json_model_override_args, USER_OVERRIDES
        )


class TestOtherDraftWorkersLeaveTheTargetAlone(_EagleDraftCase):
    def test_standalone_multi_layer_and_frozen_kv_drafts_leave_the_target(self):
        for module, stand_in, kwargs in (
            (
                "standalone_worker_v2",
                "TpModelWorker",
                dict(speculative_algorithm="STANDALONE"),
            ),
            (
                "multi_layer_eagle_worker_v2",
                "TpModelWorker",
                dict(enable_multi_layer_eagle=True),
            ),
            (
                "frozen_kv_mtp_worker_v2",
                "FrozenKVMTPDraftWorker",
                dict(speculative_algorithm="FROZEN_KV_MTP"),
            ),
        ):
            with self.subTest(module=module):
                worker = self.build_draft_worker(
                    module, stand_in, speculative_draft_load_format="dummy", **kwargs
                )

                self.assertEqual(
                    (self.target.context_length, self.target.load_format),
                    (None, "auto"),
                )
                self.assertEqual(worker.server_args.context_length, TARGET_CONTEXT_LEN)
                self.assertEqual(worker.server_args.load_format, "dummy")


class TestAdaptiveSpecReachesTheTarget(_EagleDraftCase):
    def setUp(self):
        self.worker = self.build_draft_worker()
        # Left by init_attention_backends / init_cuda_graphs in a real server.
        dw = self.worker.draft_worker
        dw.draft_attn_backend = dw.draft_extend_attn_backend = None
        dw.cuda_graph_runner = dw.cuda_graph_runner_for_draft_extend = None

    def fields(self):
        return [
            {name: getattr(sa, name) for name in SWITCHED}
            for sa in (self.target, self.worker.server_args)
        ]

    def test_capture_switches_reach_the_target_and_are_restored_on_raise(self):
        before = self.fields()

        with self.assertRaises(RuntimeError):
            with self.worker._override_worker_state(3, 4, cuda_graph_bs=[]):
                self.assertEqual(self.fields(), [SWITCHED, SWITCHED])
                raise RuntimeError("capture failed")

        self.assertEqual(self.fields(), before)

    def test_a_runtime_state_switch_reaches_the_target(self):
        state = SpecRuntimeState(
            speculative_num_steps=3,
            speculative_num_draft_tokens=4,
            draft_attn_backend=None,
            cuda_graph_runner=None,
            target_attn_backend=None,
            target_graph_runner=None,
            draft_extend_attn_backend=None,
            cuda_graph_runner_for_draft_extend=None,
        )

        self.worker.apply_runtime_state(state)

        for sa in (self.target, self.worker.server_args):
            self.assertEqual(sa.speculative_num_steps, 3)
            self.assertEqual(sa.speculative_num_draft_tokens, 4)


class TestMultiLayerDraftPoolSizing(_EagleDraftCase):
    def test_the_draft_pool_is_sized_from_the_targets_mamba_cache_size(self):
        worker = self.build_draft_worker(
            "multi_layer_eagle_worker_v2", enable_multi_layer_eagle=True
        )
        # The target resolves it while allocating its pools, after the draft
        # was built; the draft TpModelWorker stand-in stops at its own.
        self.target.override("test.target_pool", max_mamba_cache_size=37)
        with self.assertRaises(_PoolSized) as sized:
            worker.alloc_memory_pool()

        self.assertEqual(sized.exception.args, (37,))


if __name__ == "__main__":
    unittest.main()

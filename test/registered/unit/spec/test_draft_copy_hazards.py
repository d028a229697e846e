"""What 0.5.16 shared through the one ServerArgs instance keeps working once
each draft worker has its own copy.

The workers are the real classes, built through the real
``Scheduler.maybe_init_draft_worker``; only the draft ``TpModelWorker``
(model loading) is a stand-in that completes construction.

- Adaptive speculative decoding writes its runtime switches where the target
  attention backend, decode graph runner and scheduler metrics read them
  (the target's instance), as well as on the draft's copy, and restores both.
  These pass on unpatched 0.5.16 (one shared instance) and fail on a port that
  only hands the draft a copy.
- The multi-layer MTP draft sizes its mamba pools from the value the target
  resolves while allocating its own pools, after the copy was made.
- The EAGLE hot-token map no longer replaces the user's
  ``--json-model-override-args`` (a regression test: 0.5.16 wrote it).
"""

import os
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from draft_isolation_harness import (
    build_target_server_args,
    make_scheduler,
    model_dirs,
    published_target,
)

from sglang.srt.server_args import ServerArgs
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

_ADAPTIVE_FIELDS = (
    "speculative_num_steps",
    "speculative_num_draft_tokens",
    "cuda_graph_bs_decode",
    "disable_cuda_graph",
)


class _LoadedDraftTpModelWorker:
    """Stands in for the draft TpModelWorker once its model is loaded: the
    attributes the spec workers read right after constructing it."""

    def __init__(self, server_args=None, **kwargs):
        self.server_args = server_args
        self.model_config = SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["LlamaForCausalLMEagle"])
        )
        self.model_runner = SimpleNamespace(
            server_args=server_args,
            model_config=self.model_config,
            tp_group=None,
            attn_backend=None,
            draft_attn_backend=None,
        )
        self.model_runner_list = [self.model_runner]
        self.pool_sized_with = None

    def alloc_memory_pool(self, **kwargs):
        # What the draft's KV cache configurator reads for an MTP head's pool.
        self.pool_sized_with = self.server_args.max_mamba_cache_size


def _build_spec_worker(target: ServerArgs, tp_worker_site: str):
    """Run the real maybe_init_draft_worker with a loaded-draft stand-in."""
    scheduler = make_scheduler(target)
    with (
        published_target(target),
        mock.patch(tp_worker_site, _LoadedDraftTpModelWorker),
    ):
        scheduler.maybe_init_draft_worker()
    return scheduler.draft_worker


def _fields(server_args: ServerArgs) -> dict:
    return {name: getattr(server_args, name) for name in _ADAPTIVE_FIELDS}


class TestAdaptiveSpecReachesTheTarget(CustomTestCase):
    def setUp(self):
        self.target = build_target_server_args("EAGLE", None)
        self.worker = _build_spec_worker(
            self.target, "sglang.srt.speculative.eagle_worker_v2.TpModelWorker"
        )
        # Left by init_attention_backends / init_cuda_graphs in a real server.
        dw = self.worker._draft_worker
        dw.draft_attn_backend = dw.draft_extend_attn_backend = None
        dw.cuda_graph_runner = dw.cuda_graph_runner_for_draft_extend = None
        self.draft = self.worker.server_args

    def test_capture_overrides_reach_the_target_and_the_draft(self):
        with self.worker._override_worker_state(3, 4, cuda_graph_bs=[]):
            expected = {
                "speculative_num_steps": 3,
                "speculative_num_draft_tokens": 4,
                "cuda_graph_bs_decode": [],
                "disable_cuda_graph": True,
            }
            self.assertEqual(_fields(self.target), expected)
            self.assertEqual(_fields(self.draft), expected)

    def test_capture_overrides_are_restored_on_the_target_and_the_draft(self):
        target_before, draft_before = _fields(self.target), _fields(self.draft)

        with self.assertRaises(RuntimeError):
            with self.worker._override_worker_state(3, 4, cuda_graph_bs=[1, 2]):
                raise RuntimeError("capture failed")

        self.assertEqual(_fields(self.target), target_before)
        self.assertEqual(_fields(self.draft), draft_before)

    def test_a_runtime_state_switch_reaches_the_target(self):
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

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

        for server_args in (self.target, self.draft):
            self.assertEqual(server_args.speculative_num_steps, 3)
            self.assertEqual(server_args.speculative_num_draft_tokens, 4)


class TestMultiLayerDraftPoolSizing(CustomTestCase):
    def test_the_draft_pool_is_sized_from_the_targets_mamba_cache_size(self):
        target = build_target_server_args("MULTI_LAYER_EAGLE", None)
        worker = _build_spec_worker(
            target,
            "sglang.srt.speculative.multi_layer_eagle_worker_v2.TpModelWorker",
        )
        # The target resolves it while allocating its own pools, which the
        # scheduler does after the draft was built.
        target.override("test.target_pool", max_mamba_cache_size=37)

        draft_worker = worker._draft_worker
        with (
            mock.patch.object(draft_worker, "init_lm_head"),
            mock.patch.object(draft_worker, "_init_boundary_kv_fix_state"),
        ):
            draft_worker.alloc_memory_pool(
                memory_pool_config=None,
                req_to_token_pool=None,
                token_to_kv_pool_allocator=None,
            )

        self.assertEqual(draft_worker.draft_worker.pool_sized_with, 37)
        self.assertEqual(target.max_mamba_cache_size, 37)


@pytest.mark.regression
class TestHotTokenMap(CustomTestCase):
    USER_OVERRIDES = '{"rope_theta": 20000.0}'
    HOT_TOKENS = [0, 1, 2, 5, 8]

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.token_map = os.path.join(cls.tmp.name, "hot_token_map.pt")
        torch.save(cls.HOT_TOKENS, cls.token_map)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_the_token_map_keeps_the_users_target_overrides(self):
        target = ServerArgs(
            model_path=model_dirs()["target"],
            device="cpu",
            skip_tokenizer_init=True,
            attention_backend="torch_native",
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=model_dirs()["eagle"],
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            speculative_token_map=self.token_map,
            json_model_override_args=self.USER_OVERRIDES,
        )
        worker = _build_spec_worker(
            target, "sglang.srt.speculative.eagle_worker_v2.TpModelWorker"
        )

        # Runs from alloc_memory_pool, after the draft model was built.
        worker._draft_worker.init_token_map()

        self.assertEqual(worker._draft_worker.hot_token_id.tolist(), self.HOT_TOKENS)
        self.assertEqual(target.json_model_override_args, self.USER_OVERRIDES)
        self.assertEqual(
            worker.server_args.json_model_override_args, self.USER_OVERRIDES
        )


if __name__ == "__main__":
    unittest.main()

"""What the shipped tests leave to this repository, on the v0.5.16 line.

The shipped file (``test/registered/unit/spec/test_draft_server_args.py``)
pins the copy, the scheduler's hand-off and the real EAGLE worker. These
tests pin the rest of what the fix must keep, with the shipped file's own
helpers: the copy's details, the scope as such and nested, the other draft
workers, how the draft loads, and what 0.5.16 shared through the one instance
that must still reach the target (adaptive speculative decoding's switches)
or the draft (the linear attention kernels and the mamba cache size the
target resolves after the copy is made). A class marked ``regression`` fails
on 0.5.16 as released.
"""

import os
import sys
import unittest
from types import SimpleNamespace
from unittest import mock

import pytest

# The shipped file is the module these tests build on.
sys.path.append(
    os.path.join(os.path.dirname(__file__), "..", "..", "registered", "unit", "spec")
)

from test_draft_server_args import (  # noqa: E402
    TARGET_CONTEXT_LEN,
    _DraftCase,
    _LoadedDraftTpModelWorker,
    _StopConstruction,
)

from sglang.srt.arg_groups.overrides import declare_load_time_override  # noqa: E402
from sglang.srt.distributed.parallel_state_wrapper import ParallelState  # noqa: E402
from sglang.srt.model_executor.model_runner_components.load_model_utils import (  # noqa: E402
    build_load_config,
)
from sglang.srt.runtime_context import (  # noqa: E402
    ParallelContext,
    RuntimeContext,
    get_context,
    get_server_args,
)
from sglang.srt.speculative import draft_worker_common  # noqa: E402
from sglang.srt.speculative.adaptive_runtime_state import (  # noqa: E402
    SpecRuntimeState,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402
from sglang.srt.speculative.spec_registry import CustomSpecAlgo  # noqa: E402

SWITCHED = {
    "speculative_num_steps": 3,
    "speculative_num_draft_tokens": 4,
    "cuda_graph_bs_decode": [],
    "disable_cuda_graph": True,
}


class _DraftTpModelWorker(_LoadedDraftTpModelWorker):
    """The shipped stand-in with what the other workers read too."""

    def __init__(self, server_args=None, **kwargs):
        super().__init__(server_args)
        self.tokenizer = None  # STANDALONE's vocabulary check
        # What adaptive speculative decoding swaps on the draft's runner.
        self.model_runner.attn_backend = self.model_runner.draft_attn_backend = None


class _PoolSized(Exception):
    pass


class _PoolSizingDraftTpModelWorker(_DraftTpModelWorker):
    def alloc_memory_pool(self, **kwargs):
        # What the draft's KV cache configurator reads for an MTP head's pool.
        raise _PoolSized(self.server_args.max_mamba_cache_size)


class _FrozenKVMTPDraftWorker:
    """The frozen-KV MTP draft worker, which is its own draft TpModelWorker."""

    def __init__(self, server_args, *ranks_and_target):
        self.server_args = server_args


def _recording_plugin(seen, worker_init=None):
    """A plugin algorithm whose worker records its config and runs worker_init."""

    class DraftWorker:
        def __init__(self, server_args, **kwargs):
            seen.update(worker_args=server_args)
            self.server_args = server_args
            if worker_init is not None:
                worker_init(server_args)

        def init_attention_backends(self):
            seen["backends_built_with"] = {
                name: getattr(self.server_args, name)
                for name in (
                    "linear_attn_backend",
                    "linear_attn_decode_backend",
                    "linear_attn_prefill_backend",
                    "load_format",
                )
            }

    return CustomSpecAlgo(
        "BEYOND_THE_SHIPPED_TESTS", lambda _: DraftWorker, supports_overlap=True
    )


def _load_format(server_args):
    return build_load_config(
        server_args=server_args,
        tp_rank=0,
        remote_instance_weight_transporter_engine=None,
        remote_instance_weight_transporter_session_id="",
        draft_model_idx=None,
    ).load_format


class TestTheCopy(_DraftCase):
    def copy(self):
        from sglang.srt.server_args import draft_server_args_copy

        return draft_server_args_copy(
            self.target, SimpleNamespace(context_len=TARGET_CONTEXT_LEN)
        )

    def test_without_a_draft_load_format_the_copy_keeps_the_targets(self):
        self.publish_target(speculative_draft_load_format=None)
        self.target.override("test", load_format="safetensors")

        self.assertEqual(self.copy().load_format, "safetensors")

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        self.publish_target()
        # As the target's ModelRunner and model code do while it loads.
        declare_load_time_override("test.target_load", {"kv_cache_dtype": "fp8_e5m2"})

        self.assertEqual(self.copy().kv_cache_dtype, "fp8_e5m2")


class TestTheScope(_DraftCase):
    def test_an_empty_slot_comes_back_empty_on_return_and_on_raise(self):
        self.publish_target()
        # A context of its own: its slot holds nothing, as before a publish.
        ctx = RuntimeContext(ParallelContext())
        with ctx.scoped_server_args(self.target):
            self.assertIs(ctx.server_args, self.target)
        self.assertRaises(ValueError, getattr, ctx, "server_args")
        with self.assertRaises(_StopConstruction), ctx.scoped_server_args(self.target):
            raise _StopConstruction()
        self.assertRaises(ValueError, getattr, ctx, "server_args")

    def test_the_capture_flag_comes_back_when_the_draft_raises(self):
        self.publish_target()
        capture = get_context().flags.capture
        capture.enable_torch_compile = True

        def switch_the_flag_and_raise(server_args):
            capture.enable_torch_compile = False
            raise _StopConstruction()

        with self.assertRaises(_StopConstruction):
            self.init_draft_worker(_recording_plugin({}, switch_the_flag_and_raise))

        self.assertTrue(capture.enable_torch_compile)
        self.assert_target_untouched()


@pytest.mark.regression
class TestWhatTheDraftDeclares(_DraftCase):
    def test_what_the_drafts_model_code_declares_stays_on_the_drafts_copy(self):
        self.publish_target()
        seen = {}

        def load_draft_model(server_args):
            # As determine_num_fused_shared_experts does for a DeepSeek draft.
            declare_load_time_override(
                "test.draft_model", {"disable_shared_experts_fusion": True}
            )

        self.init_draft_worker(_recording_plugin(seen, load_draft_model))

        self.assertTrue(seen["worker_args"].disable_shared_experts_fusion)
        self.assertFalse(self.target.disable_shared_experts_fusion)
        self.assert_target_untouched()

    def test_build_draft_tp_worker_publishes_its_own_copy_in_a_nested_scope(self):
        # As DFLASH and DSPARK build their draft TpModelWorker.
        self.publish_target()
        seen = {}

        def build(server_args):
            def record_tp_worker(server_args, **kwargs):
                seen.update(tp_worker_args=server_args, tp_published=get_server_args())
                raise _StopConstruction()

            with (
                mock.patch.object(
                    draft_worker_common, "TpModelWorker", side_effect=record_tp_worker
                ),
                self.assertRaises(_StopConstruction),
            ):
                draft_worker_common.build_draft_tp_worker(
                    server_args=server_args,
                    gpu_id=0,
                    ps=ParallelState.trivial(),
                    nccl_port=12345,
                    target_model_config=SimpleNamespace(context_len=TARGET_CONTEXT_LEN),
                    algo_label="DFLASH",
                )
            seen["published_after"] = get_server_args()

        self.init_draft_worker(_recording_plugin(seen, build))

        inner, outer = seen["tp_worker_args"], seen["worker_args"]
        self.assertFalse(inner is outer or inner is self.target, "no own copy")
        self.assertTrue(seen["tp_published"] is inner, "inner copy unpublished")
        self.assertTrue(seen["published_after"] is outer, "outer copy unpublished")
        self.assertEqual((inner.load_format, inner.context_length), ("dummy", 4096))
        self.assert_target_untouched()


class TestNoAlgorithm(_DraftCase):
    def test_no_speculative_algorithm_builds_no_draft_and_publishes_nothing(self):
        self.publish_target()
        with mock.patch.object(RuntimeContext, "set_server_args") as set_server_args:
            worker = self.init_draft_worker(SpeculativeAlgorithm.NONE)

        set_server_args.assert_not_called()
        self.assertIsNone(worker)
        self.assert_target_untouched()


@pytest.mark.regression
class TestOtherDraftWorkersLeaveTheTargetAlone(_DraftCase):
    def test_standalone_multi_layer_and_frozen_kv_drafts_leave_the_target(self):
        for module, name, stand_in, fields in (
            (
                "standalone_worker_v2",
                "TpModelWorker",
                _DraftTpModelWorker,
                dict(speculative_algorithm="STANDALONE"),
            ),
            (
                "multi_layer_eagle_worker_v2",
                "TpModelWorker",
                _DraftTpModelWorker,
                dict(enable_multi_layer_eagle=True),
            ),
            (
                "frozen_kv_mtp_worker_v2",
                "FrozenKVMTPDraftWorker",
                _FrozenKVMTPDraftWorker,
                dict(speculative_algorithm="FROZEN_KV_MTP"),
            ),
        ):
            with self.subTest(module=module):
                self.publish_target(**fields)
                algorithm = SpeculativeAlgorithm.from_string(
                    self.target.speculative_algorithm
                )
                with mock.patch(f"sglang.srt.speculative.{module}.{name}", stand_in):
                    worker = self.init_draft_worker(algorithm)

                self.assert_target_untouched()
                self.assertEqual(worker.server_args.context_length, TARGET_CONTEXT_LEN)
                self.assertEqual(worker.server_args.load_format, "dummy")


@pytest.mark.regression
class TestDraftLoadConfig(_DraftCase):
    """The draft ModelRunner loads with the draft's LoadConfig; the target and
    the published config keep their own, which EPLB reloads the target with."""

    def assert_load_formats_after(self, build_draft, tp_worker_site):
        built = []

        def record_draft_tp_worker(server_args=None, **kwargs):
            built.append(server_args)
            raise _StopConstruction()

        with mock.patch(tp_worker_site, side_effect=record_draft_tp_worker):
            with self.assertRaises(_StopConstruction):
                build_draft()

        self.assertEqual(len(built), 1)
        self.assertEqual(_load_format(built[0]), "dummy")
        self.assertEqual(built[0].context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(_load_format(self.target), "auto")
        self.assertIsNone(self.target.context_length)
        self.assertEqual(_load_format(get_server_args()), "auto")

    def test_an_eagle_draft_loads_with_the_draft_load_format(self):
        self.publish_target()
        self.assert_load_formats_after(
            lambda: self.init_draft_worker(SpeculativeAlgorithm.EAGLE),
            "sglang.srt.speculative.eagle_worker_v2.TpModelWorker",
        )

    def test_a_build_draft_tp_worker_draft_loads_with_the_draft_load_format(self):
        # As DFLASH and DSPARK build theirs, here handed the target's config.
        self.publish_target()
        self.assert_load_formats_after(
            lambda: draft_worker_common.build_draft_tp_worker(
                server_args=self.target,
                gpu_id=0,
                ps=ParallelState.trivial(),
                nccl_port=12345,
                target_model_config=SimpleNamespace(context_len=TARGET_CONTEXT_LEN),
                algo_label="DFLASH",
            ),
            "sglang.srt.speculative.draft_worker_common.TpModelWorker",
        )


class TestWhatStillReachesTheTarget(_DraftCase):
    def build_eagle_worker(self, **fields):
        self.publish_target(**fields)
        with mock.patch(
            "sglang.srt.speculative.eagle_worker_v2.TpModelWorker",
            _DraftTpModelWorker,
        ):
            worker = self.init_draft_worker(SpeculativeAlgorithm.EAGLE)
        # Left by init_attention_backends / init_cuda_graphs in a real server.
        draft = worker.draft_worker
        draft.draft_attn_backend = draft.draft_extend_attn_backend = None
        draft.cuda_graph_runner = draft.cuda_graph_runner_for_draft_extend = None
        return worker

    def switched(self, worker):
        return [
            {name: getattr(server_args, name) for name in SWITCHED}
            for server_args in (self.target, worker.server_args)
        ]

    def test_adaptive_capture_switches_reach_the_target_and_are_restored(self):
        worker = self.build_eagle_worker()
        before = self.switched(worker)

        with self.assertRaises(RuntimeError):
            with worker._override_worker_state(3, 4, cuda_graph_bs=[]):
                self.assertEqual(self.switched(worker), [SWITCHED, SWITCHED])
                raise RuntimeError("capture failed")

        self.assertEqual(self.switched(worker), before)

    def test_an_adaptive_runtime_state_switch_reaches_the_target(self):
        worker = self.build_eagle_worker()
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

        worker.apply_runtime_state(state)

        for server_args in (self.target, worker.server_args):
            self.assertEqual(server_args.speculative_num_steps, 3)
            self.assertEqual(server_args.speculative_num_draft_tokens, 4)

    def test_the_multi_layer_draft_pool_is_sized_from_the_targets_mamba_cache(self):
        self.publish_target(enable_multi_layer_eagle=True)
        with mock.patch(
            "sglang.srt.speculative.multi_layer_eagle_worker_v2.TpModelWorker",
            _PoolSizingDraftTpModelWorker,
        ):
            worker = self.init_draft_worker(SpeculativeAlgorithm.EAGLE)
        # The target resolves it while allocating its pools, after the draft
        # was built; the stand-in stops at the draft's own.
        self.target.override("test.target_pool", max_mamba_cache_size=37)
        with self.assertRaises(_PoolSized) as sized:
            worker.alloc_memory_pool()

        self.assertEqual(sized.exception.args, (37,))

    def test_the_draft_builds_its_backends_with_the_targets_linear_attn_kernels(self):
        self.publish_target()
        seen = {}
        self.init_draft_worker(_recording_plugin(seen))

        def build_target_backends():
            # As the SM100 GDN prefill default does while the target's
            # backends are built, after the draft's copy was made.
            self.target.override(
                "test.gdn_default", linear_attn_prefill_backend="flashinfer"
            )

        target_worker = self.scheduler.tp_worker
        target_worker.init_attention_backends.side_effect = build_target_backends
        self.scheduler.init_all_attention_backends()

        built_with = seen["backends_built_with"]
        self.assertEqual(built_with["linear_attn_prefill_backend"], "flashinfer")
        for name in ("linear_attn_backend", "linear_attn_decode_backend"):
            self.assertEqual(built_with[name], getattr(self.target, name))
        self.assertEqual(built_with["load_format"], "dummy")


if __name__ == "__main__":
    unittest.main()

"""Speculative draft workers are built from their own copy of ``ServerArgs``.

Regression: ``Scheduler.maybe_init_draft_worker`` wrote
``--speculative-draft-load-format`` onto the ``ServerArgs`` the target worker
and ``get_server_args()`` share, and handed that instance to the worker factory
and the draft worker, so the target later reloaded and reported the draft's
values. The copy comes from ``draft_server_args_copy()`` and is published while
the draft is built; what the target resolves later, building its attention
backends, still reaches it.
"""

import dataclasses
import unittest
from copy import deepcopy
from types import SimpleNamespace
from unittest import mock

from sglang.srt.arg_groups.overrides import declare_load_time_override
from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import (
    ParallelContext,
    RuntimeContext,
    get_context,
    get_server_args,
)
from sglang.srt.speculative import draft_worker_common
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=12, suite="base-a-test-cpu")

TARGET_CONTEXT_LEN = 4096
TARGET_MODEL_CONFIG = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)


class _StopConstruction(Exception):
    """Raised by a stand-in to stop building the draft."""


def _fields(sa):
    return {f.name: deepcopy(getattr(sa, f.name)) for f in dataclasses.fields(sa)}


def _target_worker(target):
    # A mock, so a scheduler that reads more of its target worker still runs.
    worker = mock.Mock(name="target_worker")
    worker.model_runner.server_args = target
    worker.model_runner.model_config = TARGET_MODEL_CONFIG
    return worker


class _DraftServerArgsCase(CustomTestCase):
    """A published EAGLE target config with a dummy draft load format."""

    def setUp(self):
        override = get_context().override_server_args(
            speculative_algorithm="EAGLE",
            speculative_draft_load_format="dummy",
        )
        self.target = override.install()
        self.addCleanup(override.restore)
        self.target_before = _fields(self.target)

    def assert_target_untouched(self):
        after = _fields(self.target)
        changed = [n for n, v in after.items() if v != self.target_before[n]]
        self.assertEqual(changed, [], "the draft changed the target's ServerArgs")
        self.assertTrue(get_server_args() is self.target, "the target is not published")

    def run_draft_init(self, worker_init=None, algorithm=None, fail_in=None):
        """The real maybe_init_draft_worker with a recording plugin worker."""
        seen = {}

        class DraftWorker:
            def __init__(self, server_args, target_worker, **kwargs):
                seen.update(worker_args=server_args, worker_published=get_server_args())
                self.server_args = server_args
                if worker_init is not None:
                    worker_init(seen, server_args)
                if fail_in == "worker":
                    get_context().flags.capture.enable_torch_compile = False
                    raise _StopConstruction()

            def init_attention_backends(self):
                seen["backends_built_with"] = _fields(self.server_args)

        def factory(server_args):
            seen.update(factory_args=server_args, factory_published=get_server_args())
            if fail_in == "factory":
                raise _StopConstruction()
            return DraftWorker

        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = self.target
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        scheduler.tp_worker = _target_worker(self.target)
        scheduler.spec_algorithm = algorithm or CustomSpecAlgo(
            "DRAFT_SERVER_ARGS_TEST", factory, supports_overlap=True
        )
        scheduler.maybe_init_draft_worker()
        return scheduler, seen


class TestDraftServerArgsCopy(_DraftServerArgsCase):
    def copy(self):
        # Imported here: a fork that reverts the fix still runs this file's
        # scheduler tests and sees them fail on their assertions.
        from sglang.srt.server_args import draft_server_args_copy

        return draft_server_args_copy(self.target, TARGET_MODEL_CONFIG)

    def test_the_copy_has_the_targets_context_length_and_the_draft_load_format(self):
        # They win over earlier overrides of the target's config.
        self.target.override("test.earlier", context_length=2048)
        before = _fields(self.target)

        draft = self.copy()

        self.assertEqual((draft.context_length, draft.load_format), (4096, "dummy"))
        changed = [n for n, v in _fields(draft).items() if v != before[n]]
        self.assertEqual(sorted(changed), ["context_length", "load_format"])
        self.assertEqual(_fields(self.target), before)

    def test_without_a_draft_load_format_the_copy_keeps_the_targets(self):
        self.target.override(
            "test", speculative_draft_load_format=None, load_format="safetensors"
        )

        self.assertEqual(self.copy().load_format, "safetensors")

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        # As the target's ModelRunner and model code do while it loads.
        declare_load_time_override("test.target_load", {"kv_cache_dtype": "fp8_e5m2"})

        self.assertEqual(self.copy().kv_cache_dtype, "fp8_e5m2")


class TestScopedServerArgs(_DraftServerArgsCase):
    def test_an_empty_slot_comes_back_empty_on_return_and_on_raise(self):
        # A context of its own: its slot holds nothing, as before a publish.
        ctx = RuntimeContext(ParallelContext())
        with ctx.scoped_server_args(self.target):
            self.assertIs(ctx.server_args, self.target)
        self.assertRaises(ValueError, getattr, ctx, "server_args")
        with self.assertRaises(_StopConstruction), ctx.scoped_server_args(self.target):
            raise _StopConstruction()
        self.assertRaises(ValueError, getattr, ctx, "server_args")


class TestSchedulerDraftHandoff(_DraftServerArgsCase):
    def test_the_factory_and_the_worker_get_one_copy_published_while_they_run(self):
        scheduler, seen = self.run_draft_init()

        draft = seen["worker_args"]
        self.assertFalse(draft is self.target, "the draft got the target's config")
        self.assertTrue(seen["factory_args"] is draft, "two different configs")
        self.assertTrue(seen["factory_published"] is draft, "copy unpublished")
        self.assertTrue(seen["worker_published"] is draft, "copy unpublished")
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertIsNotNone(scheduler.draft_worker)
        self.assert_target_untouched()

    def test_the_target_and_the_capture_flag_come_back_when_the_draft_raises(self):
        ctx = get_context()
        for fail_in in ("factory", "worker"):
            ctx.flags.capture.enable_torch_compile = True
            with self.assertRaises(_StopConstruction):
                self.run_draft_init(fail_in=fail_in)
            self.assert_target_untouched()
            self.assertTrue(ctx.flags.capture.enable_torch_compile, fail_in)

    def test_what_the_drafts_model_code_declares_stays_on_the_drafts_copy(self):
        def load_draft_model(seen, server_args):
            # As determine_num_fused_shared_experts does for a DeepSeek draft.
            declare_load_time_override(
                "test.draft_model", {"disable_shared_experts_fusion": True}
            )

        _, seen = self.run_draft_init(load_draft_model)

        self.assertTrue(seen["worker_args"].disable_shared_experts_fusion)
        self.assertFalse(self.target.disable_shared_experts_fusion)
        self.assert_target_untouched()

    def test_build_draft_tp_worker_publishes_its_own_copy_in_a_nested_scope(self):
        # As DFLASH and DSPARK build their draft TpModelWorker.
        def build(seen, server_args):
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
                    target_model_config=TARGET_MODEL_CONFIG,
                    algo_label="DFLASH",
                )
            seen["published_after"] = get_server_args()

        _, seen = self.run_draft_init(build)

        inner, outer = seen["tp_worker_args"], seen["worker_args"]
        self.assertFalse(inner is outer or inner is self.target, "no own copy")
        self.assertTrue(seen["tp_published"] is inner, "inner copy unpublished")
        self.assertTrue(seen["published_after"] is outer, "outer copy unpublished")
        self.assertEqual(inner.load_format, "dummy")
        self.assertEqual(inner.context_length, TARGET_CONTEXT_LEN)
        self.assert_target_untouched()


class TestSchedulerDraftInitAsBefore(_DraftServerArgsCase):
    def test_no_speculative_algorithm_builds_no_draft_and_publishes_nothing(self):
        with mock.patch.object(RuntimeContext, "set_server_args") as set_server_args:
            scheduler, seen = self.run_draft_init(algorithm=SpeculativeAlgorithm.NONE)

        set_server_args.assert_not_called()
        self.assertEqual(seen, {})
        self.assertIsNone(scheduler.draft_worker)
        self.assert_target_untouched()

    def test_the_draft_builds_its_backends_with_the_targets_linear_attn_kernels(self):
        scheduler, seen = self.run_draft_init()

        def build_target_backends():
            # As the SM100 GDN prefill default does while the target's
            # backends are built, after the draft's copy was made.
            self.target.override(
                "test.gdn_default", linear_attn_prefill_backend="flashinfer"
            )

        scheduler.tp_worker.init_attention_backends.side_effect = build_target_backends
        scheduler.init_all_attention_backends()

        built_with = seen["backends_built_with"]
        self.assertEqual(built_with["linear_attn_prefill_backend"], "flashinfer")
        for name in ("linear_attn_backend", "linear_attn_decode_backend"):
            self.assertEqual(built_with[name], getattr(self.target, name))
        self.assertEqual(built_with["load_format"], "dummy")


if __name__ == "__main__":
    unittest.main()

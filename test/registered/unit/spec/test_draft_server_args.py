"""Speculative draft workers are built from their own copy of ``ServerArgs``.

In a scheduler process the scheduler, the target worker and the published
config (``get_server_args()``) share one ``ServerArgs``. The draft must not
write its values (context length, ``--speculative-draft-load-format``) onto
it: ``Scheduler.maybe_init_draft_worker`` hands the worker factory and the
worker one copy from ``draft_server_args_copy()`` and publishes it while the
draft is built, then the target's config is published again.
"""

import dataclasses
import enum
import logging
import tempfile
import unittest
from copy import deepcopy
from types import SimpleNamespace
from unittest import mock

from transformers import LlamaConfig

import sglang.srt.server_args as server_args_module
from sglang.srt.arg_groups.overrides import declare_load_time_override
from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import RuntimeContext, get_context, get_server_args
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative import draft_worker_common, spec_registry
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=10, suite="stage-a-test-cpu")

TARGET_CONTEXT_LEN = 4096
PLUGIN = "DRAFT_SERVER_ARGS_TEST"


def _write_model_config(path, architecture):
    LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=1024,
        architectures=[architecture],
    ).save_pretrained(path)
    return path


def _fields(server_args):
    return {
        f.name: deepcopy(getattr(server_args, f.name))
        for f in dataclasses.fields(server_args)
    }


def draft_server_args_copy(server_args, target_model_config):
    # Looked up when called: the module is collected on unpatched sglang too.
    return server_args_module.draft_server_args_copy(server_args, target_model_config)


class _FactoryFailed(RuntimeError):
    pass


class _WorkerFailed(RuntimeError):
    pass


class _DraftServerArgsCase(CustomTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls._tmp = tempfile.TemporaryDirectory()
        cls.target_path = _write_model_config(f"{cls._tmp.name}/t", "LlamaForCausalLM")
        cls.draft_path = _write_model_config(
            f"{cls._tmp.name}/d", "LlamaForCausalLMEagle"
        )

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()
        super().tearDownClass()

    def setUp(self):
        self.target = self.resolve(speculative_draft_load_format="dummy")
        self.target_model_config = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)
        # Publish the target as its ModelRunner does; put the slot back after.
        ctx = get_context()
        saved = (ctx._server_args, ctx.flags.capture.enable_torch_compile)
        ctx.set_server_args(self.target)
        self.addCleanup(self._restore_published, saved)

    @staticmethod
    def _restore_published(saved):
        ctx = get_context()
        ctx._server_args, ctx.flags.capture.enable_torch_compile = saved

    def resolve(self, **kwargs):
        return ServerArgs(
            model_path=self.target_path,
            device="cpu",
            skip_tokenizer_init=True,
            attention_backend="torch_native",
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=self.draft_path,
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            **kwargs,
        )

    def assert_target_untouched(self, target_before):
        after = _fields(self.target)
        changed = [
            name for name, value in after.items() if value != target_before[name]
        ]
        self.assertEqual(changed, [], "the draft changed the target's ServerArgs")
        self.assertTrue(get_server_args() is self.target, "target not published")


class TestDraftServerArgsCopy(_DraftServerArgsCase):
    def test_the_copy_has_the_targets_context_length_and_the_draft_load_format(self):
        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertIsNone(self.target.context_length)
        self.assertEqual(self.target.load_format, "auto")

    def test_without_a_draft_load_format_the_copy_keeps_the_targets(self):
        target = self.resolve(load_format="safetensors")

        draft = draft_server_args_copy(target, self.target_model_config)

        self.assertEqual(draft.load_format, "safetensors")

    def test_only_the_draft_fields_differ_from_the_target(self):
        before = _fields(self.target)

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual(_fields(self.target), before)
        changed = sorted(
            name for name, value in _fields(draft).items() if value != before[name]
        )
        self.assertEqual(changed, ["context_length", "load_format"])

    def test_the_draft_fields_win_over_earlier_overrides_of_the_target(self):
        self.target.override("test.earlier", context_length=2048, load_format="auto")

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual((draft.context_length, draft.load_format), (4096, "dummy"))
        self.assertEqual(
            (self.target.context_length, self.target.load_format), (2048, "auto")
        )

    def test_the_copy_shares_no_mutable_state_with_the_target(self):
        draft = draft_server_args_copy(self.target, self.target_model_config)

        mutable = [
            name
            for name, value in vars(self.target).items()
            if isinstance(value, (list, dict, set))
            or (hasattr(value, "__dict__") and not isinstance(value, enum.Enum))
        ]
        self.assertNotEqual(mutable, [])
        shared = [n for n in mutable if getattr(draft, n) is getattr(self.target, n)]
        self.assertEqual(shared, [])

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        # As the target's ModelRunner and model code do while it loads.
        declare_load_time_override("test.target_load", {"kv_cache_dtype": "fp8_e5m2"})

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual(draft.kv_cache_dtype, "fp8_e5m2")

    def test_a_bare_write_on_the_copy_still_raises_under_strict_mutation(self):
        draft = draft_server_args_copy(self.target, self.target_model_config)

        with self.assertRaisesRegex(AttributeError, "assigned after resolution"):
            draft.load_format = "auto"


class TestScopedServerArgs(_DraftServerArgsCase):
    def test_an_empty_slot_comes_back_empty_on_return_and_on_raise(self):
        ctx = get_context()
        ctx._server_args = None
        draft = deepcopy(self.target)

        with ctx.scoped_server_args(draft):
            self.assertTrue(get_server_args() is draft)
        self.assertIsNone(ctx._server_args)
        with self.assertRaises(_WorkerFailed), ctx.scoped_server_args(draft):
            raise _WorkerFailed()
        self.assertIsNone(ctx._server_args)

    def test_nested_scopes_restore_in_order_and_bring_the_capture_flag_back(self):
        ctx = get_context()
        ctx.flags.capture.enable_torch_compile = True
        outer, inner = deepcopy(self.target), deepcopy(self.target)

        with ctx.scoped_server_args(outer):
            with self.assertRaises(_WorkerFailed), ctx.scoped_server_args(inner):
                self.assertTrue(get_server_args() is inner)
                ctx.flags.capture.enable_torch_compile = False
                raise _WorkerFailed()
            self.assertTrue(get_server_args() is outer)
        self.assertTrue(get_server_args() is self.target)
        self.assertTrue(ctx.flags.capture.enable_torch_compile)


class _SchedulerCase(_DraftServerArgsCase):
    def run_draft_init(self, worker_init=None, factory_raises=False, algorithm=None):
        """Run the real maybe_init_draft_worker with a recording factory and
        worker; returns what they saw."""
        seen = {}

        class DraftWorker:
            def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
                seen["worker_args"] = server_args
                seen["worker_published"] = get_server_args()
                seen["target_worker"] = target_worker
                if worker_init is not None:
                    worker_init(seen, server_args, target_worker)

        def factory(server_args):
            seen["factory_args"] = server_args
            seen["factory_published"] = get_server_args()
            if factory_raises:
                raise _FactoryFailed()
            return DraftWorker

        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = self.target
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        scheduler.tp_worker = SimpleNamespace(
            model_runner=SimpleNamespace(model_config=self.target_model_config)
        )
        SpeculativeAlgorithm.register(PLUGIN, supports_overlap=True)(factory)
        try:
            scheduler.spec_algorithm = algorithm or SpeculativeAlgorithm.from_string(
                PLUGIN
            )
            scheduler.maybe_init_draft_worker()
        finally:
            # 0.5.16 has no public unregister.
            spec_registry._REGISTRY.pop(PLUGIN)
        return scheduler, seen


class TestSchedulerDraftHandoff(_SchedulerCase):
    def test_the_factory_and_the_worker_get_one_copy_published_while_they_run(self):
        before = _fields(self.target)

        scheduler, seen = self.run_draft_init()

        draft = seen["worker_args"]
        self.assertTrue(seen["factory_args"] is draft, "two different configs")
        self.assertFalse(draft is self.target, "the draft got the target's config")
        self.assertTrue(seen["factory_published"] is draft, "copy unpublished")
        self.assertTrue(seen["worker_published"] is draft, "copy unpublished")
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertTrue(seen["target_worker"] is scheduler.tp_worker)
        self.assertIsNotNone(scheduler.draft_worker)
        self.assert_target_untouched(before)

    def test_the_target_is_published_again_when_the_factory_raises(self):
        before = _fields(self.target)

        with self.assertRaises(_FactoryFailed):
            self.run_draft_init(factory_raises=True)

        self.assert_target_untouched(before)

    def test_the_target_and_the_capture_flag_come_back_when_the_worker_raises(self):
        before = _fields(self.target)
        ctx = get_context()
        ctx.flags.capture.enable_torch_compile = True

        def flip_the_flag_and_fail(seen, server_args, target_worker):
            ctx.flags.capture.enable_torch_compile = False
            raise _WorkerFailed()

        with self.assertRaises(_WorkerFailed):
            self.run_draft_init(flip_the_flag_and_fail)

        self.assert_target_untouched(before)
        self.assertTrue(ctx.flags.capture.enable_torch_compile)

    def test_build_draft_tp_worker_publishes_its_own_copy_in_a_nested_scope(self):
        # DFLASH and DSPARK build their draft TpModelWorker this way.
        before = _fields(self.target)

        def build_like_dflash(seen, server_args, target_worker):
            def record_tp_worker(server_args, **kwargs):
                seen["tp_worker_args"] = server_args
                seen["tp_worker_published"] = get_server_args()
                return SimpleNamespace(model_runner=SimpleNamespace(model=None))

            with mock.patch.object(
                draft_worker_common, "TpModelWorker", side_effect=record_tp_worker
            ):
                draft_worker_common.build_draft_tp_worker(
                    server_args=server_args,
                    gpu_id=0,
                    ps=ParallelState.trivial(),
                    nccl_port=12345,
                    target_model_config=target_worker.model_runner.model_config,
                    algo_label="DFLASH",
                )
            seen["published_after"] = get_server_args()

        _, seen = self.run_draft_init(build_like_dflash)

        inner = seen["tp_worker_args"]
        self.assertFalse(inner is seen["worker_args"] or inner is self.target)
        self.assertTrue(seen["tp_worker_published"] is inner, "inner copy unpublished")
        self.assertTrue(
            seen["published_after"] is seen["worker_args"],
            "the scheduler's copy is not published again after the inner scope",
        )
        self.assertEqual(inner.load_format, "dummy")
        self.assertEqual(inner.context_length, TARGET_CONTEXT_LEN)
        self.assert_target_untouched(before)


class TestSchedulerDraftInitAsBefore(_SchedulerCase):
    def test_the_draft_load_format_is_logged_once_when_configured(self):
        for load_format, expected in (("dummy", 1), (None, 0)):
            with self.subTest(load_format=load_format):
                self.target = self.resolve(speculative_draft_load_format=load_format)
                get_context().set_server_args(self.target)
                logger = logging.getLogger("sglang.srt.managers.scheduler")
                with self.assertLogs(logger, level="INFO") as logs:
                    self.run_draft_init()
                    logger.info("done")
                lines = [
                    line for line in logs.output if "draft model load_format" in line
                ]
                self.assertEqual(len(lines), expected, logs.output)

    def test_no_speculative_algorithm_builds_no_draft_and_publishes_nothing(self):
        before = _fields(self.target)

        with mock.patch.object(
            RuntimeContext, "set_server_args", autospec=True
        ) as set_server_args:
            scheduler, seen = self.run_draft_init(algorithm=SpeculativeAlgorithm.NONE)

        set_server_args.assert_not_called()
        self.assertEqual(seen, {})
        self.assertIsNone(scheduler.draft_worker)
        self.assert_target_untouched(before)


if __name__ == "__main__":
    unittest.main()

"""Speculative draft workers are built from their own copy of ``ServerArgs``.

The scheduler, the target worker and ``get_server_args()`` share one
``ServerArgs``; the draft's values (context length,
``--speculative-draft-load-format``) go on a copy from
``draft_server_args_copy()``, published while the draft is built. What the
target resolves later, building its attention backends, reaches the copy.
"""

import dataclasses
import shutil
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

register_cpu_ci(est_time=12, suite="base-a-test-cpu")

TARGET_CONTEXT_LEN = 4096
PLUGIN = "DRAFT_SERVER_ARGS_TEST"


def _fields(sa):
    return {f.name: deepcopy(getattr(sa, f.name)) for f in dataclasses.fields(sa)}


def draft_server_args_copy(server_args, target_model_config):
    # Looked up when called: the module is collected on unpatched sglang too.
    return server_args_module.draft_server_args_copy(server_args, target_model_config)


class _Failed(RuntimeError):
    pass


class _DraftServerArgsCase(CustomTestCase):
    """A published EAGLE target config with a dummy draft load format."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)
        for name, arch in (("t", "LlamaForCausalLM"), ("d", "LlamaForCausalLMEagle")):
            LlamaConfig(
                vocab_size=256,
                hidden_size=64,
                intermediate_size=128,
                num_hidden_layers=1,
                num_attention_heads=4,
                architectures=[arch],
            ).save_pretrained(f"{self.tmp}/{name}")
        ctx = get_context()
        saved = (ctx._server_args, ctx.flags.capture.enable_torch_compile)
        self.addCleanup(setattr, ctx, "_server_args", saved[0])
        self.addCleanup(setattr, ctx.flags.capture, "enable_torch_compile", saved[1])
        self.target = ServerArgs(
            model_path=f"{self.tmp}/t",
            device="cpu",
            skip_tokenizer_init=True,
            attention_backend="torch_native",
            speculative_algorithm="EAGLE",
            speculative_draft_model_path=f"{self.tmp}/d",
            speculative_num_steps=2,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=3,
            speculative_draft_load_format="dummy",
        )
        ctx.set_server_args(self.target)
        self.target_before = _fields(self.target)
        self.target_model_config = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)

    def assert_target_untouched(self):
        after = _fields(self.target)
        changed = [n for n, v in after.items() if v != self.target_before[n]]
        self.assertEqual(changed, [], "the draft changed the target's ServerArgs")
        self.assertIs(get_server_args(), self.target, "the target is not published")

    def run_draft_init(self, worker_init=None, algorithm=None, fail_in=None):
        """The real maybe_init_draft_worker with a recording plugin worker."""
        seen = {}

        class DraftWorker:
            def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
                seen.update(worker_args=server_args, worker_published=get_server_args())
                self.server_args = server_args
                if worker_init is not None:
                    worker_init(seen, server_args, target_worker)
                if fail_in == "worker":
                    get_context().flags.capture.enable_torch_compile = False
                    raise _Failed()

            def init_attention_backends(self):
                seen["backends_built_with"] = _fields(self.server_args)

        def factory(server_args):
            seen.update(factory_args=server_args, factory_published=get_server_args())
            if fail_in == "factory":
                raise _Failed()
            return DraftWorker

        scheduler = Scheduler.__new__(Scheduler)
        scheduler.server_args = self.target
        scheduler.ps = ParallelState.trivial()
        scheduler.nccl_port = 12345
        scheduler.tp_worker = SimpleNamespace(
            model_runner=SimpleNamespace(
                server_args=self.target, model_config=self.target_model_config
            )
        )
        SpeculativeAlgorithm.register(PLUGIN, supports_overlap=True)(factory)
        plugin = SpeculativeAlgorithm.from_string(PLUGIN)
        try:
            scheduler.spec_algorithm = algorithm or plugin
            scheduler.maybe_init_draft_worker()
        finally:
            # 0.5.16 has no public unregister.
            spec_registry._REGISTRY.pop(PLUGIN)
        return scheduler, seen


class TestDraftServerArgsCopy(_DraftServerArgsCase):
    def test_the_copy_has_the_targets_context_length_and_the_draft_load_format(self):
        # They win over earlier overrides of the target's config.
        self.target.override("test.earlier", context_length=2048)
        before = _fields(self.target)

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual((draft.context_length, draft.load_format), (4096, "dummy"))
        changed = [n for n, v in _fields(draft).items() if v != before[n]]
        self.assertEqual(sorted(changed), ["context_length", "load_format"])
        self.assertEqual(_fields(self.target), before)

    def test_without_a_draft_load_format_the_copy_keeps_the_targets(self):
        self.target.override(
            "test", speculative_draft_load_format=None, load_format="safetensors"
        )

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual(draft.load_format, "safetensors")

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        # As the target's ModelRunner and model code do while it loads.
        declare_load_time_override("test.target_load", {"kv_cache_dtype": "fp8_e5m2"})

        draft = draft_server_args_copy(self.target, self.target_model_config)

        self.assertEqual(draft.kv_cache_dtype, "fp8_e5m2")


class TestScopedServerArgs(_DraftServerArgsCase):
    def test_an_empty_slot_comes_back_empty_on_return_and_on_raise(self):
        ctx = get_context()
        ctx._server_args = None
        with ctx.scoped_server_args(self.target):
            self.assertIs(get_server_args(), self.target)
        self.assertIsNone(ctx._server_args)
        with self.assertRaises(_Failed), ctx.scoped_server_args(self.target):
            raise _Failed()
        self.assertIsNone(ctx._server_args)


class TestSchedulerDraftHandoff(_DraftServerArgsCase):
    def test_the_factory_and_the_worker_get_one_copy_published_while_they_run(self):
        scheduler, seen = self.run_draft_init()

        draft = seen["worker_args"]
        self.assertFalse(draft is self.target, "the draft got the target's config")
        self.assertIs(seen["factory_args"], draft, "two different configs")
        self.assertIs(seen["factory_published"], draft, "copy unpublished")
        self.assertIs(seen["worker_published"], draft, "copy unpublished")
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertIsNotNone(scheduler.draft_worker)
        self.assert_target_untouched()

    def test_the_target_and_the_capture_flag_come_back_when_the_draft_raises(self):
        ctx = get_context()
        for fail_in in ("factory", "worker"):
            with self.subTest(fail_in=fail_in), self.assertRaises(_Failed):
                ctx.flags.capture.enable_torch_compile = True
                self.run_draft_init(fail_in=fail_in)
            self.assert_target_untouched()
            self.assertTrue(ctx.flags.capture.enable_torch_compile)

    def build(self, server_args, seen):
        # As DFLASH and DSPARK build their draft TpModelWorker.
        def record_tp_worker(server_args, **kwargs):
            seen.update(tp_worker_args=server_args, tp_published=get_server_args())
            return SimpleNamespace(model_runner=SimpleNamespace(model=None))

        with mock.patch.object(
            draft_worker_common, "TpModelWorker", side_effect=record_tp_worker
        ):
            draft_worker_common.build_draft_tp_worker(
                server_args=server_args,
                gpu_id=0,
                ps=ParallelState.trivial(),
                nccl_port=12345,
                target_model_config=self.target_model_config,
                algo_label="DFLASH",
            )
        seen["published_after"] = get_server_args()

    def test_build_draft_tp_worker_publishes_its_own_copy_in_a_nested_scope(self):
        _, seen = self.run_draft_init(lambda seen, sa, _: self.build(sa, seen))

        inner = seen["tp_worker_args"]
        self.assertFalse(inner is seen["worker_args"] or inner is self.target)
        self.assertIs(seen["tp_published"], inner, "inner copy unpublished")
        self.assertIs(seen["published_after"], seen["worker_args"])
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

        scheduler.tp_worker.init_attention_backends = build_target_backends
        scheduler.init_all_attention_backends()

        built_with = seen["backends_built_with"]
        self.assertEqual(built_with["linear_attn_prefill_backend"], "flashinfer")
        for name in ("linear_attn_backend", "linear_attn_decode_backend"):
            self.assertEqual(built_with[name], getattr(self.target, name))
        self.assertEqual(built_with["load_format"], "dummy")


if __name__ == "__main__":
    unittest.main()

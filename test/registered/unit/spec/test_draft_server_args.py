"""Speculative draft workers are built from their own copy of ``ServerArgs``.

Regression: the scheduler wrote ``--speculative-draft-load-format``, and the
draft workers their context length and EAGLE's hot-token map, onto the
``ServerArgs`` that the target worker and ``get_server_args()`` share, so the
target later reloaded and reported the draft's values. The scheduler now hands
the worker factory and the worker one copy from ``draft_server_args_copy()``,
publishes it while the draft is built, and the target's again afterwards.
"""

import dataclasses
import tempfile
import unittest
from copy import deepcopy
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.distributed.parallel_state_wrapper import ParallelState
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.runtime_context import get_context, get_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=10, suite="base-a-test-cpu")

TARGET_CONTEXT_LEN = 4096
USER_OVERRIDES = '{"rope_theta": 20000.0}'
HOT_TOKENS = [0, 1, 2, 5, 8]
EAGLE_TARGET = dict(
    speculative_algorithm="EAGLE",
    speculative_num_steps=2,
    speculative_eagle_topk=1,
    speculative_num_draft_tokens=3,
    speculative_draft_load_format="dummy",
)


class _StopConstruction(Exception):
    """Raised by a stand-in to stop building the draft."""


def _fields(server_args):
    return {
        field.name: deepcopy(getattr(server_args, field.name))
        for field in dataclasses.fields(server_args)
    }


class _LoadedDraftTpModelWorker:
    """What the spec workers read off their draft TpModelWorker once loaded."""

    def __init__(self, server_args=None, **kwargs):
        self.server_args = server_args
        self.model_config = SimpleNamespace(
            hf_config=SimpleNamespace(architectures=["LlamaForCausalLMEagle"]),
            vocab_size=256,
        )
        self.model_runner = SimpleNamespace(
            server_args=server_args, model_config=self.model_config, tp_group=None
        )
        self.model_runner_list = [self.model_runner]


class _DraftCase(CustomTestCase):
    def publish_target(self, **fields):
        """Publish an EAGLE target config with a dummy draft load format."""
        override = get_context().override_server_args(**dict(EAGLE_TARGET, **fields))
        self.target = override.install()
        self.addCleanup(override.restore)
        self.target_before = _fields(self.target)

    def init_draft_worker(self, spec_algorithm):
        """Build the draft through the real Scheduler.maybe_init_draft_worker."""
        # A mock, so a scheduler that reads more of its target worker still runs.
        target_worker = mock.Mock(name="target_worker")
        target_worker.model_config = target_worker.model_runner.model_config
        target_worker.model_config.context_len = TARGET_CONTEXT_LEN
        target_worker.model_config.vocab_size = 256
        target_worker.model_runner.server_args = self.target
        target_worker.get_memory_pool.return_value = (None, None)
        self.scheduler = Scheduler.__new__(Scheduler)
        self.scheduler.server_args = self.target
        self.scheduler.spec_algorithm = spec_algorithm
        self.scheduler.ps = ParallelState.trivial()
        self.scheduler.nccl_port = 12345
        self.scheduler.tp_worker = target_worker
        self.scheduler.maybe_init_draft_worker()
        return self.scheduler.draft_worker

    def assert_target_untouched(self):
        after = _fields(self.target)
        changed = [name for name in after if after[name] != self.target_before[name]]
        self.assertEqual(changed, [], "the draft changed the target's ServerArgs")
        self.assertTrue(get_server_args() is self.target, "target not published")


class TestDraftServerArgsCopy(_DraftCase):
    def test_the_copy_has_the_targets_context_length_and_the_draft_load_format(self):
        # Imported here: a fork that reverts the fix still runs the other tests
        # and sees them fail on their assertions.
        from sglang.srt.server_args import draft_server_args_copy

        self.publish_target()
        model_config = SimpleNamespace(context_len=TARGET_CONTEXT_LEN)

        draft = draft_server_args_copy(self.target, model_config)

        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        after = _fields(draft)
        changed = [name for name in after if after[name] != self.target_before[name]]
        self.assertEqual(sorted(changed), ["context_length", "load_format"])
        self.assert_target_untouched()


class TestSchedulerDraftHandoff(_DraftCase):
    def setUp(self):
        self.publish_target()
        self.seen = {}

    def plugin(self, fail_in=None):
        """A plugin algorithm whose worker factory and worker record what
        they are handed and what is published while they run."""
        seen = self.seen

        class DraftWorker:
            def __init__(self, server_args, **kwargs):
                seen.update(worker_args=server_args, worker_published=get_server_args())
                if fail_in == "worker":
                    raise _StopConstruction()

        def factory(server_args):
            seen.update(factory_args=server_args, factory_published=get_server_args())
            if fail_in == "factory":
                raise _StopConstruction()
            return DraftWorker

        return CustomSpecAlgo("DRAFT_SERVER_ARGS_TEST", factory, supports_overlap=True)

    def test_the_factory_and_the_worker_get_one_copy_published_while_they_run(self):
        self.init_draft_worker(self.plugin())

        draft = self.seen["worker_args"]
        self.assertFalse(draft is self.target, "the worker got the target's config")
        self.assertTrue(self.seen["factory_args"] is draft, "two different configs")
        self.assertTrue(self.seen["factory_published"] is draft, "copy unpublished")
        self.assertTrue(self.seen["worker_published"] is draft, "copy unpublished")
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assert_target_untouched()

    def test_the_target_is_published_again_when_building_the_draft_raises(self):
        for fail_in in ("factory", "worker"):
            with self.subTest(fail_in=fail_in):
                with self.assertRaises(_StopConstruction):
                    self.init_draft_worker(self.plugin(fail_in))
                self.assert_target_untouched()


class TestEagleDraftLeavesTheTargetAlone(_DraftCase):
    def test_the_target_keeps_its_fields_through_the_draft_and_its_token_map(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        token_map = f"{tmp.name}/hot_token_map.pt"
        torch.save(HOT_TOKENS, token_map)
        self.publish_target(
            speculative_token_map=token_map, json_model_override_args=USER_OVERRIDES
        )

        with mock.patch(
            "sglang.srt.speculative.eagle_worker_v2.TpModelWorker",
            _LoadedDraftTpModelWorker,
        ):
            worker = self.init_draft_worker(SpeculativeAlgorithm.EAGLE)
        # Runs from alloc_memory_pool, after the draft model was built.
        worker.draft_worker.init_token_map()

        self.assertEqual(worker.draft_worker.hot_token_id.tolist(), HOT_TOKENS)
        draft = worker.server_args
        self.assertEqual(draft.context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(draft.load_format, "dummy")
        self.assertEqual(draft.json_model_override_args, USER_OVERRIDES)
        self.assert_target_untouched()


if __name__ == "__main__":
    unittest.main()

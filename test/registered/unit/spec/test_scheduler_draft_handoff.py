"""The scheduler's hand-off to the draft worker: ``maybe_init_draft_worker``
makes one copy of ``ServerArgs`` for the draft, gives it to the worker factory
and the worker, publishes it while they run, and puts the target's config
(and the torch-compile capture flag) back afterwards, on success and on
failure. Also the publishing primitive itself,
``RuntimeContext.scoped_server_args``: empty slot, nesting, exceptions.

Fake factories and workers only (a plugin-style ``CustomSpecAlgo``); the real
worker classes are driven in test_draft_worker_isolation.py.
"""

import os
import sys
import unittest
from copy import deepcopy
from unittest import mock

import pytest

from sglang.srt.runtime_context import RuntimeContext, get_context, get_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

# The harness is a sibling module shared with scripts/demo; make it
# importable whichever way this file is run (python3 FILE, pytest).
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
import draft_isolation_harness as harness  # noqa: E402  # isort: skip

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")


class _FactoryFailed(RuntimeError):
    pass


class _WorkerFailed(RuntimeError):
    pass


class _Handoff:
    """Records what the fake factory and worker saw."""

    def __init__(self, factory_raises=False, worker_raises=False, worker_body=None):
        self.factory_raises = factory_raises
        self.worker_raises = worker_raises
        self.worker_body = worker_body
        self.factory_args = None
        self.factory_published = None
        self.worker_args = None
        self.worker_kwargs = None
        self.worker_published = None
        self.capture_flag_in_worker = None

    def factory(self, server_args):
        self.factory_args = server_args
        self.factory_published = get_context()._server_args
        if self.factory_raises:
            raise _FactoryFailed("factory failed")
        handoff = self

        class _FakeDraftWorker:
            def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
                handoff.worker_args = server_args
                handoff.worker_kwargs = dict(
                    gpu_id=gpu_id, ps=ps, nccl_port=nccl_port, target=target_worker
                )
                handoff.worker_published = get_context()._server_args
                handoff.capture_flag_in_worker = harness.capture_flag()
                if handoff.worker_body is not None:
                    handoff.worker_body(server_args)
                if handoff.worker_raises:
                    raise _WorkerFailed("worker failed")

        return _FakeDraftWorker

    def spec_algorithm(self):
        # Unregistered CustomSpecAlgo: the scheduler only calls its
        # is_none/is_ngram/create_worker.
        return CustomSpecAlgo("HANDOFF_FAKE", self.factory, supports_overlap=True)


class _HandoffCase(CustomTestCase):
    def setUp(self):
        self.target = harness.build_target_server_args("EAGLE", "dummy")
        self.before = harness.public_fields(self.target)
        publish = harness.published_target(self.target)
        publish.__enter__()
        self.addCleanup(publish.__exit__, None, None, None)

    def run_scheduler(self, handoff, spec_algorithm=None):
        scheduler = harness.make_scheduler(
            self.target, spec_algorithm or handoff.spec_algorithm()
        )
        scheduler.maybe_init_draft_worker()
        return scheduler

    # Identity checks go through assertTrue: assertIs on a ServerArgs prints
    # all of its fields.
    def assert_published(self, expected, what):
        self.assertTrue(
            get_context()._server_args is expected, f"{what} is not published"
        )

    def assert_target_untouched_and_published(self):
        changed = harness.changed_fields(
            self.before, harness.public_fields(self.target)
        )
        self.assertEqual(changed, [], "the target's ServerArgs was changed")
        self.assert_published(self.target, "the target")

    def assert_copy_published(self, published, args, where):
        self.assertFalse(
            published is self.target, f"the target was published in the {where}"
        )
        self.assertTrue(published is args, f"the copy was not published in the {where}")


class TestSchedulerDraftHandoff(_HandoffCase):
    pytestmark = pytest.mark.regression

    def test_the_factory_and_the_worker_get_the_same_copy(self):
        handoff = _Handoff()
        scheduler = self.run_scheduler(handoff)

        self.assertIsNotNone(handoff.factory_args)
        self.assertTrue(
            handoff.factory_args is handoff.worker_args,
            "the factory and the worker got different ServerArgs",
        )
        self.assertFalse(
            handoff.worker_args is self.target,
            "the factory and the worker got the target's instance",
        )
        self.assertEqual(handoff.worker_args.context_length, harness.TARGET_CONTEXT_LEN)
        self.assertEqual(handoff.worker_args.load_format, "dummy")
        self.assertIs(handoff.worker_kwargs["target"], scheduler.tp_worker)
        self.assertIs(handoff.worker_kwargs["ps"], scheduler.ps)
        self.assertEqual(handoff.worker_kwargs["gpu_id"], scheduler.ps.gpu_id)
        self.assertEqual(handoff.worker_kwargs["nccl_port"], scheduler.nccl_port)

    def test_the_copy_is_published_while_the_factory_and_the_worker_run(self):
        handoff = _Handoff()
        self.run_scheduler(handoff)

        self.assert_copy_published(
            handoff.factory_published, handoff.factory_args, "factory"
        )
        self.assert_copy_published(
            handoff.worker_published, handoff.worker_args, "worker"
        )

    def test_the_target_is_published_again_after_the_draft_is_built(self):
        handoff = _Handoff()
        scheduler = self.run_scheduler(handoff)

        self.assert_copy_published(
            handoff.worker_published, handoff.worker_args, "worker"
        )
        self.assertIsNotNone(scheduler.draft_worker)
        self.assertIsNone(scheduler.external_corpus_manager)
        self.assert_target_untouched_and_published()

    def test_the_target_is_published_again_when_the_factory_raises(self):
        handoff = _Handoff(factory_raises=True)
        with self.assertRaises(_FactoryFailed):
            self.run_scheduler(handoff)

        self.assert_copy_published(
            handoff.factory_published, handoff.factory_args, "factory"
        )
        self.assert_target_untouched_and_published()

    def test_the_target_is_published_again_when_the_worker_raises(self):
        handoff = _Handoff(worker_raises=True)
        with self.assertRaises(_WorkerFailed):
            self.run_scheduler(handoff)

        self.assert_copy_published(
            handoff.worker_published, handoff.worker_args, "worker"
        )
        self.assert_target_untouched_and_published()

    def check_the_capture_flag_comes_back(self, worker_raises):
        # The capture tier differs from what publishing the target seeded, so
        # only a restore (not a reseed from the target) brings it back.
        ctx = get_context()
        self.assertFalse(self.target.enable_torch_compile)
        ctx.flags.capture.enable_torch_compile = True

        def flip_the_flag(server_args):
            ctx.flags.capture.enable_torch_compile = False

        handoff = _Handoff(worker_raises=worker_raises, worker_body=flip_the_flag)
        try:
            self.run_scheduler(handoff)
        except _WorkerFailed:
            self.assertTrue(worker_raises)
        self.assert_copy_published(
            handoff.worker_published, handoff.worker_args, "worker"
        )
        self.assertTrue(ctx.flags.capture.enable_torch_compile)
        self.assert_published(self.target, "the target")

    def test_the_capture_flag_comes_back_after_the_draft_is_built(self):
        self.check_the_capture_flag_comes_back(worker_raises=False)

    def test_the_capture_flag_comes_back_when_the_worker_raises(self):
        self.check_the_capture_flag_comes_back(worker_raises=True)

    def test_a_nested_publish_inside_the_scheduler_scope_restores_in_order(self):
        # As build_draft_tp_worker does for DFLASH/DSPARK: the worker makes its
        # own inner copy and publishes it while its TpModelWorker is built.
        seen = {}

        def inner_publish(server_args):
            inner = deepcopy(server_args)
            seen["inner"] = inner
            with get_context().scoped_server_args(inner):
                seen["in_inner"] = get_context()._server_args
            seen["after_inner"] = get_context()._server_args

        handoff = _Handoff(worker_body=inner_publish)
        self.run_scheduler(handoff)

        self.assertTrue(seen["in_inner"] is seen["inner"], "inner copy not published")
        self.assertTrue(
            seen["after_inner"] is handoff.worker_args,
            "the scheduler's copy is not published again after the inner scope",
        )
        self.assert_target_untouched_and_published()


class TestScopedServerArgs(_HandoffCase):
    # Unit tests of the patch's scoped publish itself (a new API): they pin
    # its contract, not the 0.5.16 bug, so they are not regression tests.

    def test_an_empty_slot_comes_back_empty(self):
        ctx = get_context()
        ctx._server_args = None
        ctx.flags.capture.enable_torch_compile = True
        draft = deepcopy(self.target)

        with ctx.scoped_server_args(draft):
            self.assert_published(draft, "the scoped config")
        self.assertIsNone(ctx._server_args)
        with self.assertRaises(ValueError):
            get_server_args()
        self.assertTrue(ctx.flags.capture.enable_torch_compile)

        with self.assertRaises(_WorkerFailed):
            with ctx.scoped_server_args(draft):
                raise _WorkerFailed("inside the scope")
        self.assertIsNone(ctx._server_args)
        self.assertTrue(ctx.flags.capture.enable_torch_compile)

    def test_nested_scopes_restore_in_order(self):
        ctx = get_context()
        outer, inner = deepcopy(self.target), deepcopy(self.target)

        with ctx.scoped_server_args(outer):
            self.assert_published(outer, "the outer config")
            with self.assertRaises(_WorkerFailed):
                with ctx.scoped_server_args(inner):
                    self.assert_published(inner, "the inner config")
                    raise _WorkerFailed("inside the inner scope")
            self.assert_published(outer, "the outer config, after the inner scope,")
        self.assert_published(self.target, "the target")

    def test_the_capture_flag_comes_back_on_exit(self):
        ctx = get_context()
        ctx.flags.capture.enable_torch_compile = True
        draft = deepcopy(self.target)

        with ctx.scoped_server_args(draft):
            ctx.flags.capture.enable_torch_compile = False
        self.assertTrue(ctx.flags.capture.enable_torch_compile)
        self.assert_published(self.target, "the target")


class TestNoSpeculativeAlgorithm(_HandoffCase):
    # Held on 0.5.16 already: not a regression test.

    def test_the_none_algorithm_builds_no_draft_and_publishes_nothing(self):
        with mock.patch.object(
            RuntimeContext,
            "set_server_args",
            autospec=True,
            side_effect=RuntimeContext.set_server_args,
        ) as set_server_args:
            scheduler = harness.make_scheduler(
                self.target, SpeculativeAlgorithm.NONE, tp_worker=object()
            )
            scheduler.maybe_init_draft_worker()

        set_server_args.assert_not_called()
        self.assertIsNone(scheduler.draft_worker)
        self.assertIsNone(scheduler.external_corpus_manager)
        self.assert_target_untouched_and_published()


if __name__ == "__main__":
    unittest.main()

"""What the shipped tests leave to this repository, on every release with a series.

Each line's shipped file (``test/registered/unit/spec/test_draft_server_args.py``)
pins the copy, the scheduler's hand-off and the real EAGLE worker. These tests
pin the rest of what the fix must keep, with that file's own helpers
(``publish_target``, ``init_draft_worker``, ``assert_target_untouched``): the
copy's details, the scope, what the draft's own code sets, every other draft
worker and how it loads, and what the one shared instance carried that must
still reach the target (adaptive speculative decoding's switches) or the
draft (the MLA-ness its runner publishes, the v1 hot-token size, the linear
attention kernels and the mamba cache size the target resolves late).

In this repository's run they build on v0.5.16's shipped file and the venv's
patched sglang; ``release_line_checks`` runs them on every release with a
series, on its patched fork with that line's shipped file first on the import
path, and runs the regression classes on the release as released. What
differs between releases is looked up where it is used (``release_facts.py``),
never from a version string, and a test that does not apply to a release is
not generated there:

- every release: the copy's details, the scheduler keeping the copy it hands
  over, the scope on an empty slot, the draft built with what the target
  resolved before it (with the draft runner's cache size up to v0.5.9), no
  draft for NONE (a regression test up to v0.5.7, where the scheduler reached
  the draft load format without an algorithm), and one test per draft worker
  the scheduler builds: EAGLE v2 (all) and v1 (to v0.5.12), STANDALONE v1 (to
  v0.5.12) and v2 (from v0.5.8), multi-layer EAGLE v2 (from v0.5.7) and v1
  (v0.5.7 and v0.5.8, the only ones where it imports), FROZEN_KV_MTP v1
  (v0.5.12, v0.5.13) and v2 (from v0.5.14), DFLASH v1 (v0.5.11 to v0.5.13)
  and v2 (from v0.5.14);
- up to v0.5.14, where every ModelRunner publishes its config with its
  MLA-ness: what the draft's runner publishes, and the draft's backends
  following its MLA-ness (v1 and v2 EAGLE); up to v0.5.12: the v1 token map
  sizing the draft head;
- adaptive speculative decoding's switches reaching the target: the v1
  EAGLEWorker on v0.5.11 and v0.5.12, EAGLEWorkerV2 from v0.5.12; the states
  the worker's constructor builds, up to v0.5.13;
- from v0.5.15: the capture flag, and what the draft's model code declares;
  v0.5.15 only: its recorded runtime overrides; v0.5.16: the nested scope of
  ``build_draft_tp_worker``, the MTP pool size and the linear attention
  kernels.

A class marked ``regression`` fails on each release as released (v0.5.16's
against ``.build/pristine`` in ``scripts/dev/test.sh``).
"""

import dataclasses
import inspect
import os
import sys
import tempfile
import unittest
from contextlib import ExitStack
from copy import deepcopy
from types import SimpleNamespace
from unittest import mock

import pytest

# The shipped file is the module these tests build on: the release's own
# where it is first on the import path, else this repository's (v0.5.16's).
sys.path.append(
    os.path.join(os.path.dirname(__file__), "..", "..", "registered", "unit", "spec")
)

from test_draft_server_args import (  # noqa: E402
    HOT_TOKENS,
    TARGET_CONTEXT_LEN,
    USER_OVERRIDES,
    _DraftCase,
    _fields,
    _StopConstruction,
)

# isort: split
# After the shipped file: it stubs sgl_kernel first where its line does.
import release_facts as release  # noqa: E402
import torch  # noqa: E402

from sglang.srt.managers.tp_worker import TpModelWorker  # noqa: E402
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm  # noqa: E402


def _recording_worker(seen, worker_init=None):
    """A plugin's draft worker that records its config and what is published
    while it is built, then runs ``worker_init``."""

    class DraftWorker:
        def __init__(self, server_args, *args, **kwargs):
            seen.update(worker_args=server_args, worker_published=release.published())
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

    return DraftWorker


def _add_tests(cls, check, workers):
    """One test of ``cls`` per worker, named after its module."""
    for worker in workers:

        def test(self, worker=worker):
            check(self, worker)

        setattr(cls, f"test_{worker.module}_{check.__name__}", test)


class _LabCase(_DraftCase):
    def build_with(self, worker_init=None):
        """Build a recording plugin's draft; return what it recorded."""
        seen = {}
        with release.recording_algorithm(_recording_worker(seen, worker_init)) as algo:
            self.init_draft_worker(algo)
        return seen

    def resolve_on_the_target(self):
        """Fields the target resolves while it loads, before its draft."""
        resolved = dict(kv_cache_dtype="fp8_e5m2")
        if release.DRAFT_RUNNER_CACHE_SIZE:
            resolved.update(draft_runner_cache_size=8192)
        release.resolve_on_the_target(self.target, **resolved)
        self.target_before = _fields(self.target)
        return resolved

    def build_whole(self, worker, draft_mla=False, **fields):
        """Build ``worker`` whole through the scheduler on a loaded stand-in
        draft model (MLA or not); the target's MLA-ness is the other kind."""
        self.publish_target(
            **dict(
                dict(attention_backend="flashinfer", disable_cuda_graph=True),
                **worker.fields,
                **fields,
            )
        )
        if release.RUNNER_PUBLISHES:
            # As the target's ModelRunner does while it is built.
            self.target.use_mla_backend = not draft_mla
        with release.loaded_draft_model(worker, draft_mla):
            built = self.init_draft_worker(
                getattr(SpeculativeAlgorithm, worker.algorithm)
            )
        self.assertIsInstance(built, worker.cls)
        return built


def _draft_of(built):
    # A v1 worker is a TpModelWorker and its own draft worker.
    return built if isinstance(built, TpModelWorker) else built.draft_worker


class TestTheCopy(_LabCase):
    def copy(self):
        from sglang.srt.server_args import draft_server_args_copy

        return draft_server_args_copy(
            self.target, SimpleNamespace(context_len=TARGET_CONTEXT_LEN)
        )

    def test_the_targets_model_context_length_wins_over_an_earlier_one(self):
        self.publish_target()
        release.set_fields(self.target, context_length=2048)

        self.assertEqual(self.copy().context_length, TARGET_CONTEXT_LEN)
        self.assertEqual(self.target.context_length, 2048)

    def test_without_a_draft_load_format_the_copy_keeps_the_targets(self):
        self.publish_target(speculative_draft_load_format=None)
        release.set_fields(self.target, load_format="safetensors")

        self.assertEqual(self.copy().load_format, "safetensors")

    def test_load_time_overrides_made_before_the_copy_reach_it(self):
        self.publish_target()
        resolved = self.resolve_on_the_target()

        copy = self.copy()

        for name, value in resolved.items():
            self.assertEqual(getattr(copy, name), value)

    def test_the_draft_is_built_with_what_the_target_resolved_before_it(self):
        self.publish_target()
        resolved = self.resolve_on_the_target()

        built_with = self.build_with()["worker_args"]

        for name, value in resolved.items():
            self.assertEqual(getattr(built_with, name), value)
        self.assertEqual(built_with.load_format, "dummy")
        self.assert_target_untouched()

    def test_the_scheduler_keeps_the_copy_it_hands_over_and_the_worker_built(self):
        self.publish_target()

        seen = self.build_with()

        self.assertTrue(self.scheduler.draft_server_args is seen["worker_args"])
        self.assertIsNotNone(self.scheduler.draft_worker)


class TestTheScope(_LabCase):
    def test_an_empty_slot_comes_back_empty_on_return_and_on_raise(self):
        self.publish_target()
        slot = release.EmptySlot()

        with slot.scope(self.target):
            self.assertIs(slot.read(), self.target)
        self.assertRaises(ValueError, slot.read)
        with self.assertRaises(_StopConstruction), slot.scope(self.target):
            raise _StopConstruction()
        self.assertRaises(ValueError, slot.read)

    if release.HAS_FLAGS:

        def test_the_capture_flag_comes_back_when_the_draft_raises(self):
            self.publish_target()
            capture = release.context().flags.capture
            capture.enable_torch_compile = True

            def switch_the_flag_and_raise(server_args):
                capture.enable_torch_compile = False
                raise _StopConstruction()

            with self.assertRaises(_StopConstruction):
                self.build_with(switch_the_flag_and_raise)

            self.assertTrue(capture.enable_torch_compile)
            self.assert_target_untouched()

    if release.RECORDS_RUNTIME_OVERRIDES:

        def test_the_targets_recorded_overrides_come_back_after_the_draft(self):
            # v0.5.15's context records the runtime overrides (it has no
            # public reader), and its set_server_args re-resolves the flags.
            self.publish_target()
            ctx = release.context()
            self.resolve_on_the_target()
            flags, recorded = ctx.flags, list(ctx._runtime_overrides)
            draft = deepcopy(self.target)

            with ctx.scoped_server_args(draft):
                self.assertEqual(ctx._runtime_overrides, recorded)
                release.declare_in_the_draft(disable_shared_experts_fusion=True)
            with self.assertRaises(_StopConstruction):
                self.build_with(lambda server_args: self.fail_with_a_flag(ctx))

            self.assertTrue(draft.disable_shared_experts_fusion)
            self.assert_target_untouched()
            self.assertIs(ctx.flags, flags)
            self.assertEqual(ctx._runtime_overrides, recorded)

        def fail_with_a_flag(self, ctx):
            ctx.flags.capture.enable_torch_compile = False
            raise _StopConstruction()


@pytest.mark.regression
class TestWhatTheDraftSetsStaysOnItsCopy(_LabCase):
    if release.DECLARES:

        def test_what_the_drafts_model_code_declares_stays_on_the_drafts_copy(self):
            self.publish_target()

            def load_draft_model(server_args):
                # As determine_num_fused_shared_experts does for a DeepSeek draft.
                release.declare_in_the_draft(disable_shared_experts_fusion=True)

            seen = self.build_with(load_draft_model)

            self.assertTrue(seen["worker_args"].disable_shared_experts_fusion)
            self.assertFalse(self.target.disable_shared_experts_fusion)
            self.assert_target_untouched()

    if release.RUNNER_PUBLISHES:

        def test_what_the_drafts_model_runner_publishes_stays_on_the_drafts_copy(self):
            self.publish_target()
            release.publish_as_a_model_runner(self.target, use_mla_backend=False)
            for raises in (False, True):

                def load_draft_model(server_args, raises=raises):
                    # An MLA draft's ModelRunner publishes its config and its
                    # MLA-ness, and adjusts its config for its model.
                    release.publish_as_a_model_runner(server_args, use_mla_backend=True)
                    server_args.disable_chunked_prefix_cache = True
                    if raises:
                        raise _StopConstruction()

                with self.subTest(raises=raises):
                    with ExitStack() as stack:
                        if raises:
                            stack.enter_context(self.assertRaises(_StopConstruction))
                        self.build_with(load_draft_model)

                    self.assertFalse(self.target.disable_chunked_prefix_cache)
                    self.assertIs(self.target.use_mla_backend, False, "the draft's")
                    self.assert_target_untouched()

    if release.BUILDS_DRAFT_TP_WORKERS:

        def test_build_draft_tp_worker_publishes_its_own_copy_in_a_nested_scope(self):
            # As DFLASH and DSPARK build their draft TpModelWorker.
            self.publish_target()
            seen = {}

            def build(server_args):
                with (
                    release.stop_at_the_draft_tp_model_worker(seen, _StopConstruction),
                    self.assertRaises(_StopConstruction),
                ):
                    release.build_draft_tp_worker(server_args, TARGET_CONTEXT_LEN)
                seen["published_after"] = release.published()

            outer = self.build_with(build)["worker_args"]

            inner = seen["server_args"]
            self.assertFalse(inner is outer or inner is self.target, "no own copy")
            self.assertTrue(seen["published"] is inner, "inner copy unpublished")
            self.assertTrue(seen["published_after"] is outer, "outer copy unpublished")
            self.assertEqual(inner.load_format, "dummy")
            self.assertEqual(inner.context_length, TARGET_CONTEXT_LEN)
            self.assert_target_untouched()


class TestNoAlgorithm(_LabCase):
    def test_no_speculative_algorithm_builds_no_draft_and_publishes_nothing(self):
        # The target has a draft load format, which the release reaches
        # without an algorithm up to v0.5.7.
        self.publish_target()
        with ExitStack() as stack:
            made = [
                stack.enter_context(mock.patch.object(owner, name, create=True))
                for owner, name in release.publishing_patches()
            ]
            worker = self.init_draft_worker(SpeculativeAlgorithm.NONE)

        for call in made:
            call.assert_not_called()
        self.assertIsNone(worker)
        self.assert_target_untouched()


if release.BUILDER_SEES_NO_ALGORITHM:
    TestNoAlgorithm = pytest.mark.regression(TestNoAlgorithm)


@pytest.mark.regression
class TestEveryDraftWorkerLoadsFromItsOwnCopy(_LabCase):
    """Each draft worker the release builds hands its draft TpModelWorker,
    whose ModelRunner builds its LoadConfig from it, a copy of the target's
    config, published while it loads; the target and the published config
    keep their own, which EPLB reloads the target with. Each is stopped
    there: everything after it writes onto the config it was handed."""

    def assert_loaded_from_a_copy(self, built):
        draft, published = built["server_args"], built["published"]
        self.assertFalse(draft is self.target, "the draft got the target's config")
        # The copy, or where DFLASH deep-copies it for its draft (v0.5.11 to
        # v0.5.15), the config it was handed.
        self.assertFalse(published is self.target, "the target was published")
        for server_args in (draft, published):
            self.assertEqual(server_args.context_length, TARGET_CONTEXT_LEN)
            self.assertEqual(release.load_format(server_args), "dummy")
        self.assertEqual(release.load_format(self.target), "auto")
        self.assertEqual(release.load_format(release.published()), "auto")
        if release.RUNNER_PUBLISHES:
            self.assertIs(self.target.use_mla_backend, False, "the draft's MLA flag")
        self.assert_target_untouched()

    def publish_target(self, **fields):
        super().publish_target(**fields)
        if release.RUNNER_PUBLISHES:
            # As the target's ModelRunner does; the draft's runner is an MLA one.
            self.target.use_mla_backend = False

    def loads_its_draft_from_a_copy_published_while_it_loads(self, worker):
        self.publish_target(**worker.fields)
        built = {}
        with release.stop_at_the_draft_tp_model_worker(built, _StopConstruction):
            with self.assertRaises(_StopConstruction):
                self.init_draft_worker(getattr(SpeculativeAlgorithm, worker.algorithm))

        # Built by that worker, not by another one the scheduler picked.
        self.assertIn(inspect.getfile(worker.cls), built["built_in"])
        self.assert_loaded_from_a_copy(built)

    if release.BUILDS_DRAFT_TP_WORKERS:

        def test_build_draft_tp_worker_handed_the_targets_config_loads_a_copy(self):
            # As DFLASH and DSPARK build theirs, here handed the target's config.
            self.publish_target()
            built = {}
            with release.stop_at_the_draft_tp_model_worker(built, _StopConstruction):
                with self.assertRaises(_StopConstruction):
                    release.build_draft_tp_worker(self.target, TARGET_CONTEXT_LEN)

            self.assert_loaded_from_a_copy(built)


_add_tests(
    TestEveryDraftWorkerLoadsFromItsOwnCopy,
    TestEveryDraftWorkerLoadsFromItsOwnCopy.loads_its_draft_from_a_copy_published_while_it_loads,
    release.DRAFT_WORKERS,
)


if release.RUNNER_PUBLISHES:

    @pytest.mark.regression
    class TestDraftBackendsFollowTheDraftsMLA(_LabCase):
        """The draft builds its attention backends with its own runner's
        MLA-ness, in its constructor while its config is published (up to
        v0.5.13) or after it, once the target's is published again (v0.5.14);
        the target keeps its own: an MLA target with a non-MLA draft, and the
        other way round."""

        def builds_its_backends_for_its_own_runners_mla(self, worker):
            for draft_mla in (False, True):
                with self.subTest(draft_mla=draft_mla):
                    built = self.build_whole(worker, draft_mla=draft_mla)
                    draft = _draft_of(built)
                    if getattr(draft, "draft_attn_backend", None) is None:
                        # As Scheduler.init_all_attention_backends does.
                        with release.loaded_draft_model(worker, draft_mla):
                            built.init_attention_backends()

                    kind = "mla" if draft_mla else "mha"
                    self.assertEqual(draft.draft_attn_backend, kind)
                    self.assertEqual(draft.draft_extend_attn_backend, kind)
                    self.assertIs(release.published(), self.target)
                    self.assertIs(self.target.use_mla_backend, not draft_mla)

    _add_tests(
        TestDraftBackendsFollowTheDraftsMLA,
        TestDraftBackendsFollowTheDraftsMLA.builds_its_backends_for_its_own_runners_mla,
        release.EAGLE_WORKERS,
    )


_V1_EAGLE_WORKERS = [
    w for w in release.EAGLE_WORKERS if issubclass(w.cls, TpModelWorker)
]
if _V1_EAGLE_WORKERS:

    @pytest.mark.regression
    class TestTheV1TokenMap(_LabCase):
        def test_the_v1_token_map_sizes_the_draft_head_and_leaves_the_target(self):
            # The v1 EAGLEWorker loads the map before its draft model, whose
            # config takes the hot vocab size.
            tmp = tempfile.TemporaryDirectory()
            self.addCleanup(tmp.cleanup)
            token_map = f"{tmp.name}/hot_token_map.pt"
            torch.save(HOT_TOKENS, token_map)

            worker = self.build_whole(
                _V1_EAGLE_WORKERS[0],
                speculative_token_map=token_map,
                json_model_override_args=USER_OVERRIDES,
            )

            self.assertEqual(
                worker.model_config.model_override_args,
                f'{{"hot_vocab_size": {len(HOT_TOKENS)}}}',
            )
            self.assertEqual(worker.hot_token_id.tolist(), HOT_TOKENS)
            self.assertEqual(self.target.json_model_override_args, USER_OVERRIDES)
            self.assertEqual(worker.server_args.context_length, TARGET_CONTEXT_LEN)
            self.assertEqual(worker.server_args.load_format, "dummy")
            self.assert_target_untouched()


class _PoolSized(Exception):
    pass


class TestWhatStillReachesTheTarget(_LabCase):
    def build_adaptive(self, worker, **fields):
        built = self.build_whole(worker, **fields)
        # Left by the draft's backends and CUDA graphs in a real server, built
        # after the draft from v0.5.14 on.
        draft = _draft_of(built)
        for name in (
            "draft_attn_backend",
            "draft_extend_attn_backend",
            "cuda_graph_runner",
            "cuda_graph_runner_for_draft_extend",
        ):
            if not hasattr(draft, name):
                setattr(draft, name, None)
        return built

    def switches_reach_the_target_while_capturing_and_are_restored(self, worker):
        built = self.build_adaptive(worker)
        parameters = inspect.signature(built._override_worker_state).parameters
        # The CUDA graph batch sizes are switched too from v0.5.13.
        graphs = {"cuda_graph_bs": []} if "cuda_graph_bs" in parameters else {}
        before = [_fields(self.target), _fields(built.server_args)]

        with self.assertRaises(RuntimeError):
            with built._override_worker_state(3, 4, **graphs):
                target, draft = _fields(self.target), _fields(built.server_args)
                switched = {n: v for n, v in draft.items() if v != before[1][n]}
                self.assertEqual(draft["speculative_num_steps"], 3)
                self.assertEqual(draft["speculative_num_draft_tokens"], 4)
                self.assertEqual({n: target[n] for n in switched}, switched)
                raise RuntimeError("capture failed")

        self.assertEqual([_fields(self.target), _fields(built.server_args)], before)

    def runtime_state_switch_reaches_the_target(self, worker):
        from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

        built = self.build_adaptive(worker)
        state = SpecRuntimeState(
            **{field.name: None for field in dataclasses.fields(SpecRuntimeState)}
        )
        state.speculative_num_steps, state.speculative_num_draft_tokens = 3, 4

        built.apply_runtime_state(state)

        for server_args in (self.target, built.server_args):
            self.assertEqual(server_args.speculative_num_steps, 3)
            self.assertEqual(server_args.speculative_num_draft_tokens, 4)

    def states_built_at_startup_switch_the_target_for_its_backend(self, worker):
        built_with = []
        build_state = worker.cls.build_adaptive_runtime_state

        def build_recorded_state(built, *args, **kwargs):
            # Each state's target attention backend reads the target's config.
            target_runner = self.scheduler.tp_worker.model_runner
            target_runner._get_attention_backend.side_effect = (
                lambda **kwargs: built_with.append(
                    (
                        self.target.speculative_num_steps,
                        built.server_args.speculative_num_steps,
                    )
                )
            )
            return build_state(built, *args, **kwargs)

        with mock.patch.object(
            worker.cls, "build_adaptive_runtime_state", build_recorded_state
        ):
            built = self.build_adaptive(worker, speculative_adaptive=True)

        candidates = built.adaptive_controller.candidate_steps
        configured = self.target_before["speculative_num_steps"]
        steps = [step for step in candidates if step != configured]
        self.assertEqual(built_with, [(step, step) for step in steps])
        # Afterwards the target is where the draft's copy is.
        for name in ("speculative_num_steps", "speculative_num_draft_tokens"):
            self.assertEqual(
                getattr(self.target, name), getattr(built.server_args, name)
            )

    if release.SIZES_POOLS_IN_A_CONFIGURATOR:

        def test_the_multi_layer_draft_pool_is_sized_from_the_targets_mamba_cache(self):
            (worker,) = [
                w for w in release.DRAFT_WORKERS if w.name == "MultiLayerEagleWorkerV2"
            ]
            built = self.build_whole(worker)
            # The target resolves it while allocating its pools, after the
            # draft was built; the draft's stops at its own.
            release.set_fields(self.target, max_mamba_cache_size=37)

            def size_the_pool(draft_tp_worker, **kwargs):
                raise _PoolSized(draft_tp_worker.server_args.max_mamba_cache_size)

            with (
                mock.patch.object(TpModelWorker, "alloc_memory_pool", size_the_pool),
                self.assertRaises(_PoolSized) as sized,
            ):
                built.alloc_memory_pool()

            self.assertEqual(sized.exception.args, (37,))

    if release.RESOLVES_LINEAR_ATTN_KERNELS_LATE:

        def test_the_draft_builds_its_backends_with_the_targets_linear_attn_kernels(
            self,
        ):
            self.publish_target()
            seen = {}
            with release.recording_algorithm(_recording_worker(seen)) as algorithm:
                self.init_draft_worker(algorithm)

            def build_target_backends():
                # As the SM100 GDN prefill default does while the target's
                # backends are built, after the draft's copy was made.
                release.set_fields(
                    self.target, linear_attn_prefill_backend="flashinfer"
                )

            target_worker = self.scheduler.tp_worker
            target_worker.init_attention_backends.side_effect = build_target_backends
            self.scheduler.init_all_attention_backends()

            built_with = seen["backends_built_with"]
            self.assertEqual(built_with["linear_attn_prefill_backend"], "flashinfer")
            for name in ("linear_attn_backend", "linear_attn_decode_backend"):
                self.assertEqual(built_with[name], getattr(self.target, name))
            self.assertEqual(built_with["load_format"], "dummy")


_add_tests(
    TestWhatStillReachesTheTarget,
    TestWhatStillReachesTheTarget.switches_reach_the_target_while_capturing_and_are_restored,
    release.ADAPTIVE_WORKERS,
)
_add_tests(
    TestWhatStillReachesTheTarget,
    TestWhatStillReachesTheTarget.runtime_state_switch_reaches_the_target,
    release.ADAPTIVE_WORKERS,
)
_add_tests(
    TestWhatStillReachesTheTarget,
    TestWhatStillReachesTheTarget.states_built_at_startup_switch_the_target_for_its_backend,
    [
        worker
        for worker in release.ADAPTIVE_WORKERS
        if release.builds_adaptive_states_in_its_constructor(worker)
    ],
)


if __name__ == "__main__":
    unittest.main()

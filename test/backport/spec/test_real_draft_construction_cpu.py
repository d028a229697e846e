"""Real construction on CPU: the scheduler builds the target and the draft for
real, from tiny local models, and the target keeps its own config.

Each case runs in a process of its own (``real_construction_support.run_cases``:
one subprocess imports sglang once and forks a fresh process per case): the
launcher's own ``prepare_server_args`` resolves the config, then the real
``Scheduler.__init__`` builds the target ``TpModelWorker`` (weights loaded from
safetensors files written by ``test/backport/e2e/tiny_models.py``), the real
draft worker through ``Scheduler.maybe_init_draft_worker``, both KV pools, both
attention backends and (CPU: nothing to capture) the CUDA graphs, then
finishes its ``__init__``.
Nothing in the model-loading path is stubbed. Snapshots of the target's
``ServerArgs`` and of the published config (``get_server_args()``) are taken
after every step, and a profile hook notes what is published when the draft's
``ModelRunner.load_model`` starts. What is not stock is listed in the support
module: a stand-in ``vllm._custom_ops`` (imported by the rotary embedding's
constructor, never called; declared in ``test/backport/e2e/cpu_serving.py``
with the other CPU stand-ins), a no-op ``torch.cuda.synchronize`` (called
before v0.5.16), ``SGLANG_USE_HND_KVCACHE=1`` (the default KV layout runs a
Triton warm-up at pool allocation), ``TRITON_INTERPRET=1`` (v0.5.14 runs it
in either layout) and ``--speculative-draft-attention-backend triton``
(constructed, never run). The same tests run on the older release lines
(``test/backport/series/test_release_line_spec.py``).

Algorithms built for real: EAGLE, EAGLE3, STANDALONE and FROZEN_KV_MTP (its
real worker with a plain Llama drafter; production drafters are Gemma-4
assistants). Not here: DFLASH and DSPARK (``prepare_server_args`` rejects them
off CUDA: "only supports CUDA device"); NGRAM (``ngram_worker`` imports the
CUDA ``sgl_kernel`` unguarded, and it has no draft model); multi-layer EAGLE
(``MultiLayerEagleWorkerV2`` needs an MTP drafter taking ``draft_model_idx``:
MiMo-V2, Step-3.5 or Inkling, MoE/hybrid models, Inkling needing ``helion``).

The classes marked ``regression`` pin the fix: each of their tests fails on
sglang 0.5.16 as released, where the draft's values are written onto the one
``ServerArgs`` the target, the scheduler and the published slot share.
The other classes check that the real path really ran (sanity).
"""

import functools
import os
import shutil
import tempfile
import unittest

import pytest
import real_construction_support as support

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=90, suite="base-a-test-cpu")

# Two cases per algorithm, each in a process of its own:
#   "plain": the draft loads its weights from its files;
#   "dummy": --speculative-draft-load-format dummy and --speculative-token-map.
# Both pass the user's own --json-model-override-args on the target.
_VARIANTS = {
    "plain": dict(draft_load_format=None, token_map=False),
    "dummy": dict(draft_load_format="dummy", token_map=True),
}

# EAGLE only: --speculative-adaptive, whose runtime states are built (with the
# target's attention backend for each step count) during construction.
_ADAPTIVE = dict(adaptive=True)

_models_dir = None


@functools.lru_cache(maxsize=None)
def _models():
    # Built once per module run, shared by every case.
    global _models_dir
    _models_dir = tempfile.mkdtemp(prefix="sgl-tiny-models-")
    return support.build_tiny_models(_models_dir)


@functools.lru_cache(maxsize=None)
def _results():
    """Every case of this module, run once, at the first class that needs one:
    one subprocess imports sglang once and forks a fresh process per case
    (``support.run_cases``). The subprocess imports the same sglang as this
    process (PYTHONPATH is inherited), so PYTHONPATH=.build/pristine runs the
    unpatched package."""
    cases = {
        (algorithm, variant): dict(algorithm=algorithm, **options)
        for algorithm in support.ALGORITHMS
        for variant, options in _VARIANTS.items()
    }
    cases[("EAGLE", "adaptive")] = dict(algorithm="EAGLE", **_ADAPTIVE)
    results = support.run_cases(
        {f"{a}/{v}": options for (a, v), options in cases.items()}, models=_models()
    )
    return {key: results[f"{key[0]}/{key[1]}"] for key in cases}


def _case(algorithm, variant):
    return _results()[(algorithm, variant)]


def tearDownModule():
    if _models_dir is not None:
        shutil.rmtree(_models_dir, ignore_errors=True)


class _CaseAccess:
    """Shared helpers; ALGORITHM is set by each concrete class."""

    ALGORITHM = None

    @classmethod
    def setUpClass(cls):
        # Run (or fetch) both cases up front, so a crash shows here once.
        cls.results = {v: _case(cls.ALGORITHM, v) for v in _VARIANTS}

    def result(self, variant):
        result = self.results[variant]
        if "error" in result:
            self.fail(
                f"{self.ALGORITHM}/{variant}: the case subprocess failed before "
                f"construction: {result['error']}\n{result.get('traceback', '')}"
            )
        return result

    def snapshot(self, variant, view, stage):
        result = self.result(variant)
        if stage not in result[view]:
            stopped = result.get("stopped_at") or {}
            self.fail(
                f"{self.ALGORITHM}/{variant}: construction never reached "
                f"'{stage}' (reached {result['stages']}): "
                f"{stopped.get('error')}\n{stopped.get('traceback', '')}"
            )
        return result[view][stage]


class _LeavesTheTargetAlone(_CaseAccess):
    """Regression checks that fail on 0.5.16 for every algorithm."""

    def changes_by_building_the_draft(self, view):
        changes = {}
        for variant in _VARIANTS:
            before = self.snapshot(variant, view, "target_built")
            after = self.snapshot(variant, view, "draft_built")
            self.assertIsNotNone(before, f"[{variant}] nothing published before")
            self.assertIsNotNone(after, f"[{variant}] nothing published after")
            changed = support.changed_fields(before, after)
            if changed:
                changes[variant] = changed
        return changes

    def test_every_public_target_field_is_unchanged_by_building_the_draft(self):
        self.assertEqual(
            self.changes_by_building_the_draft("target"),
            {},
            "maybe_init_draft_worker changed the target's ServerArgs "
            "({case: {field: [before, after]}})",
        )

    def test_every_published_field_is_unchanged_by_building_the_draft(self):
        self.assertEqual(
            self.changes_by_building_the_draft("published"),
            {},
            "maybe_init_draft_worker changed the published config "
            "({case: {field: [before, after]}})",
        )
        for variant in _VARIANTS:
            self.assertTrue(
                self.result(variant)["published_is_target"]["draft_built"],
                f"[{variant}] get_server_args() is not the target's ServerArgs "
                "after the draft was built",
            )

    def test_the_draft_model_loads_while_its_own_config_is_published(self):
        # Model code reads get_server_args() while the draft model is built.
        for variant in _VARIANTS:
            during = self.result(variant).get("during_draft_load")
            self.assertIsNotNone(during, "the draft's load_model was never seen")
            self.assertFalse(
                during["published_is_target"],
                f"[{variant}] the target's ServerArgs is published while the "
                "draft model loads",
            )
            self.assertTrue(during["published_is_draft_runner_args"], during)

    def test_the_target_keeps_its_context_length(self):
        for variant in _VARIANTS:
            before = self.snapshot(variant, "target", "target_built")
            end = self.snapshot(variant, "target", "scheduler_ready")
            published = self.snapshot(variant, "published", "scheduler_ready")
            self.assertIsNone(before["context_length"], "no --context-length given")
            self.assertEqual(end["context_length"], before["context_length"])
            self.assertEqual(published["context_length"], before["context_length"])

    def test_the_target_keeps_its_load_format_under_a_dummy_draft_load_format(self):
        before = self.snapshot("dummy", "target", "target_built")
        end = self.snapshot("dummy", "target", "scheduler_ready")
        published = self.snapshot("dummy", "published", "scheduler_ready")
        self.assertEqual(before["load_format"], "auto")
        self.assertEqual(before["speculative_draft_load_format"], "dummy")
        self.assertEqual(end["load_format"], "auto")
        self.assertEqual(published["load_format"], "auto")

    def test_the_target_reloads_its_weights_from_its_files_after_a_dummy_draft(self):
        # The EPLB path: update_weights_from_disk(get_server_args().model_path,
        # get_server_args().load_format), after a target weight was scrambled.
        reload = self.result("dummy")["reload"]
        self.assertIsNotNone(reload, "the reload did not run")
        self.assertTrue(
            reload["success"],
            f"reload with load_format={reload.get('load_format')!r} failed: "
            f"{reload.get('message')}",
        )
        self.assertTrue(
            reload["target_matches_file_after"],
            "after the reload the target's weights are not its file's",
        )
        self.assertEqual(reload["load_format"], "auto")

    def test_the_draft_is_built_from_its_own_copy_of_server_args(self):
        for variant in _VARIANTS:
            draft = self.result(variant)["draft"]
            self.assertIsNotNone(draft, "no draft recorded")
            self.assertFalse(
                draft["server_args_is_target"],
                "the draft ModelRunner holds the target's ServerArgs instance",
            )


class _TokenMapLeavesTheUserOverrideAlone(_CaseAccess):
    """EAGLE and STANDALONE read --speculative-token-map (EAGLE3 ignores it)."""

    def test_the_users_json_model_override_args_survive_the_token_map(self):
        for view in ("target", "published"):
            end = self.snapshot("dummy", view, "scheduler_ready")
            self.assertEqual(
                end["json_model_override_args"],
                support.USER_JSON_MODEL_OVERRIDE_ARGS,
                f"the {view} config lost the user's --json-model-override-args",
            )

    def test_the_draft_pools_backends_and_graphs_leave_the_target_config_alone(self):
        for variant in _VARIANTS:
            for view in ("target", "published"):
                changes = support.draft_step_changes(self.result(variant), view)
                self.assertEqual(
                    set(changes), set(support.DRAFT_STEPS), "a draft step never ran"
                )
                changes.pop("draft_built")  # checked by the tests above
                self.assertEqual(
                    {step: c for step, c in changes.items() if c},
                    {},
                    f"[{variant}] draft steps changed the {view} config",
                )


def _in_order_of_last_run(stages):
    """The stages in the order each last ran: on v0.5.14 the scheduler also
    allocates the target's pool before it builds a FROZEN_KV_MTP draft."""
    order = []
    for stage in stages:
        if stage in order:
            order.remove(stage)
        order.append(stage)
    return order


class _RealPathSanity(_CaseAccess):
    """Not regressions: they pass on 0.5.16 too, and show the path is real."""

    def test_construction_runs_through_the_whole_scheduler_init(self):
        for variant in _VARIANTS:
            result = self.result(variant)
            self.assertIsNone(result["stopped_at"], result["stopped_at"])
            self.assertEqual(_in_order_of_last_run(result["stages"]), support.STAGES)

    def test_the_case_ran_the_sglang_this_process_imports(self):
        import sglang

        for variant in _VARIANTS:
            self.assertEqual(
                os.path.dirname(self.result(variant)["sglang_file"]),
                os.path.dirname(sglang.__file__),
            )

    def test_the_capture_flag_stays_the_targets_through_construction(self):
        # RuntimeContext.set_server_args reseeds it from what is published.
        for variant in _VARIANTS:
            result = self.result(variant)
            expected = self.snapshot(variant, "target", "target_built")[
                "enable_torch_compile"
            ]
            flags = dict(result["capture_enable_torch_compile"])
            self.assertEqual(set(flags), set(support.STAGES))
            during = result.get("during_draft_load")
            self.assertIsNotNone(during, "the draft's load_model was never seen")
            flags["during_draft_load"] = during["capture_enable_torch_compile"]
            self.assertEqual(
                {k: v for k, v in flags.items() if v != expected}, {}, variant
            )

    def test_the_target_loads_its_weights_from_its_files(self):
        for variant in _VARIANTS:
            self.assertTrue(self.result(variant)["weights"]["target_matches_file"])

    def test_the_draft_loads_its_weights_from_its_files_by_default(self):
        draft = self.result("plain")["draft"]
        self.assertEqual(draft["load_format"], "auto")
        self.assertTrue(self.result("plain")["weights"]["draft_matches_file"])

    def test_a_dummy_draft_load_format_gives_the_draft_dummy_weights(self):
        result = self.result("dummy")
        self.assertEqual(result["draft"]["load_format"], "dummy")
        self.assertEqual(result["draft"]["load_config_format"], "LoadFormat.DUMMY")
        self.assertFalse(result["weights"]["draft_matches_file"])
        self.assertTrue(result["weights"]["target_matches_file"])

    def test_the_draft_model_config_context_len_equals_the_targets(self):
        for variant in _VARIANTS:
            result = self.result(variant)
            self.assertEqual(
                result["target_model_config_context_len"], support.TARGET_CONTEXT_LEN
            )
            self.assertNotEqual(
                support.DRAFT_CONTEXT_LENS[self.ALGORITHM], support.TARGET_CONTEXT_LEN
            )
            self.assertEqual(
                result["draft"]["model_config_context_len"],
                result["target_model_config_context_len"],
            )
            self.assertEqual(
                result["draft"]["context_length"], support.TARGET_CONTEXT_LEN
            )

    def test_the_users_json_model_override_args_reach_both_models(self):
        for variant in _VARIANTS:
            result = self.result(variant)
            self.assertEqual(result["target_model_rms_norm_eps"], 1e-05)
            self.assertEqual(
                result["draft"]["json_model_override_args"],
                support.USER_JSON_MODEL_OVERRIDE_ARGS,
            )


# --------------------------------------------------------------------------- #
# EAGLE
# --------------------------------------------------------------------------- #


@pytest.mark.regression
class TestEagleDraftLeavesTheTargetConfigAlone(
    _LeavesTheTargetAlone, _TokenMapLeavesTheUserOverrideAlone, CustomTestCase
):
    ALGORITHM = "EAGLE"


class TestEagleRealConstruction(_RealPathSanity, CustomTestCase):
    ALGORITHM = "EAGLE"


class TestEagleAdaptiveRealConstruction(_CaseAccess, CustomTestCase):
    """Adaptive speculative decoding writes its step counts where the
    target's attention backend reads them (model_runner.server_args) while it
    builds a runtime state per step count, and puts them back. A fix that only
    handed the draft a copy would build every target backend with the resolved
    counts. Sanity, not regression: 0.5.16 shares one instance, so it passes."""

    ALGORITHM = "EAGLE"

    @classmethod
    def setUpClass(cls):
        cls.results = {"adaptive": _case(cls.ALGORITHM, "adaptive")}

    def test_each_adaptive_state_builds_the_target_backend_for_its_own_steps(self):
        result = self.result("adaptive")
        self.assertIsNone(result["stopped_at"], result["stopped_at"])
        states = result["adaptive_states"]
        self.assertIsNotNone(states, "no adaptive controller was built")
        self.assertGreaterEqual(
            len({s["speculative_num_steps"] for s in states}), 2, states
        )
        for state in states:
            self.assertEqual(state["target_backend"], "TritonAttnBackend", state)
            self.assertEqual(
                state["target_backend_num_steps"], state["speculative_num_steps"], state
            )
            self.assertEqual(
                state["target_backend_num_draft_tokens"],
                state["speculative_num_draft_tokens"],
                state,
            )

    def test_adaptive_construction_puts_the_targets_step_counts_back(self):
        resolved = self.snapshot("adaptive", "target", "target_built")
        self.assertEqual(resolved["speculative_num_steps"], 3)
        for view in ("target", "published"):
            end = self.snapshot("adaptive", view, "scheduler_ready")
            for field in (
                "speculative_num_steps",
                "speculative_num_draft_tokens",
                "cuda_graph_bs_decode",
                "disable_cuda_graph",
            ):
                self.assertEqual(end[field], resolved[field], f"{view}.{field}")
            changes = support.draft_step_changes(self.result("adaptive"), view)
            self.assertEqual(changes.get("cuda_graphs"), {}, view)


# --------------------------------------------------------------------------- #
# EAGLE3
# --------------------------------------------------------------------------- #


@pytest.mark.regression
class TestEagle3DraftLeavesTheTargetConfigAlone(_LeavesTheTargetAlone, CustomTestCase):
    ALGORITHM = "EAGLE3"


class TestEagle3RealConstruction(
    _RealPathSanity, _TokenMapLeavesTheUserOverrideAlone, CustomTestCase
):
    # EAGLE3 ignores --speculative-token-map (its checkpoint carries d2t), so
    # on 0.5.16 too the user's override survives and the later draft steps
    # write nothing: sanity here, not regression.
    ALGORITHM = "EAGLE3"


# --------------------------------------------------------------------------- #
# STANDALONE
# --------------------------------------------------------------------------- #


@pytest.mark.regression
class TestStandaloneDraftLeavesTheTargetConfigAlone(
    _LeavesTheTargetAlone, _TokenMapLeavesTheUserOverrideAlone, CustomTestCase
):
    ALGORITHM = "STANDALONE"


class TestStandaloneRealConstruction(_RealPathSanity, CustomTestCase):
    ALGORITHM = "STANDALONE"


# --------------------------------------------------------------------------- #
# FROZEN_KV_MTP
# --------------------------------------------------------------------------- #


@pytest.mark.regression
class TestFrozenKVMTPDraftLeavesTheTargetConfigAlone(
    _LeavesTheTargetAlone, CustomTestCase
):
    ALGORITHM = "FROZEN_KV_MTP"


class TestFrozenKVMTPRealConstruction(
    _RealPathSanity, _TokenMapLeavesTheUserOverrideAlone, CustomTestCase
):
    # FrozenKVMTPDraftWorker never reads --speculative-token-map: sanity here.
    ALGORITHM = "FROZEN_KV_MTP"


if __name__ == "__main__":
    unittest.main()

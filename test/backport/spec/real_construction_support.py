"""Real CPU construction of a speculative-decoding scheduler, for tests and demos.

This module takes the tiny local models of ``test/backport/e2e/tiny_models.py``
(a Llama target and EAGLE, EAGLE3, STANDALONE and FROZEN_KV_MTP drafts, with
real safetensors weights in bf16 and different context lengths) and runs, in a
process of its own per case, the real scheduler construction of sglang 0.5.16
on CPU:

    prepare_server_args([...launcher argv...])   # the launcher's own entry point
    Scheduler(server_args, port_args, ...)        # real __init__
      -> init_model_worker()
         -> init_tp_model_worker()        # target TpModelWorker, weights from files
         -> maybe_init_draft_worker()     # real draft worker, weights from files
         -> init_memory_pools()           # target pool, then draft pool
         -> init_all_attention_backends() # target, then draft
         -> init_all_cuda_graphs()        # disabled on CPU: no capture
      -> ... rest of Scheduler.__init__

Nothing in the model-loading path is replaced. The scheduler is a subclass that
only wraps the construction steps above to take snapshots of the target's
``ServerArgs`` and of the published config (``get_server_args()``) before and
after every step (the wrapped methods run unchanged).

What is not stock (see ``_install_kernel_stand_ins`` and
``CPU_CONSTRUCTION_ENV``/``CPU_CONSTRUCTION_ARGS``):

* a stand-in ``vllm._custom_ops`` module, installed in
  ``sys.modules`` by the case subprocess before sglang is imported; it is
  declared, with the end-to-end tests' other CPU stand-ins, in
  ``test/backport/e2e/cpu_serving.py`` (``install_vllm_custom_ops_stand_in``);
* ``SGLANG_USE_HND_KVCACHE=1`` (a stock sglang switch) so that the KV pools can
  be allocated on CPU, and ``TRITON_INTERPRET=1`` (Triton's own) for v0.5.14,
  whose pools run a Triton warm-up in either layout;
* a no-op ``torch.cuda.synchronize`` (called before v0.5.16 when the draft
  takes the target's embedding and head), declared with the other stand-ins
  (``install_cuda_synchronize_stand_in``);
* ``--speculative-draft-attention-backend triton`` (a stock flag) so that the
  draft's attention-backend objects can be constructed on CPU.

``run_cases`` starts one subprocess that imports sglang once (most of a case's
cost on CPU: about 8 s of the 9) and forks a fresh process per case from that
state, so that every case starts with sglang imported and nothing constructed
or published, and shares nothing with the others; each case is bounded by a
timeout. ``run_case`` runs one.

Run ``python3 real_construction_support.py ALGORITHM [--draft-load-format dummy]
[--token-map] [--adaptive] [--pythonpath DIR]`` to print one case's result as
JSON (``summary(result)`` condenses it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List, Optional

# --------------------------------------------------------------------------- #
# Tiny models (written by test/backport/e2e/tiny_models.py)
# --------------------------------------------------------------------------- #

# The folder of the CPU serving support this module shares: the tiny models
# and the vllm._custom_ops stand-in. On sys.path here and in every case
# subprocess (which runs this file).
_E2E_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"
)
if _E2E_DIR not in sys.path:
    sys.path.insert(0, _E2E_DIR)

import tiny_models  # noqa: E402  # isort: skip  (from _E2E_DIR, on sys.path)

# Re-exported: the tests read these as support.NAME.
from tiny_models import (  # noqa: E402,F401  # isort: skip
    DRAFT_CONTEXT_LENS,
    PROBE_PARAMS,
    TARGET_CONTEXT_LEN,
)

# sglang's default dtype for these configs ("auto": the files' torch_dtype).
MODEL_DTYPE = "bfloat16"

# The models the cases use.
MODELS = ("target", "EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP", "token_map")

# A user's own override on the target (applies to the draft's ModelConfig too,
# which is stock behaviour); rms_norm_eps in the files is 1e-6.
USER_JSON_MODEL_OVERRIDE_ARGS = '{"rms_norm_eps": 1e-05}'

ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP")


def build_tiny_models(root: str) -> Dict[str, str]:
    """Write the cases' tiny models (``tiny_models.write_tiny_models``, in
    bf16) and the hot-token map under ``root``; return their paths."""
    return tiny_models.write_tiny_models(root, dtype=MODEL_DTYPE, names=MODELS)


# --------------------------------------------------------------------------- #
# What it takes to construct on this CPU (declared in this one place)
# --------------------------------------------------------------------------- #

# Environment of every case subprocess.
CPU_CONSTRUCTION_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # sglang's test harness setting (sglang.test.test_utils turns it on): a
    # bare assignment to a resolved ServerArgs field raises.
    "SGLANG_STRICT_CONFIG_MUTATION": "1",
    # Stock sglang switch. With speculative decoding on, the default NHD KV pool
    # (MHATokenToKVPool._init_kv_copy_and_warmup) *runs* a Triton copy kernel
    # at allocation, and Triton has no CPU driver; the HND layout skips that
    # warm-up, so the target and draft pools can be allocated on CPU.
    "SGLANG_USE_HND_KVCACHE": "1",
    # Triton's own switch: v0.5.14's pools run that warm-up in either layout,
    # and under the interpreter it runs on CPU tensors (set before triton is
    # imported: the case runner's environment).
    "TRITON_INTERPRET": "1",
}

# Launcher flags of every case, besides the model and speculative flags.
CPU_CONSTRUCTION_ARGS = [
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--sampling-backend", "pytorch",
    "--disable-cuda-graph",
    "--skip-tokenizer-init",
    # Small KV pools (otherwise sized from free host memory: gigabytes).
    "--max-total-tokens", "1024",
    # Stock flag. The draft's multi-step attention backends
    # (speculative/draft_utils.py DraftBackendFactory) have no torch_native
    # entry; the Triton ones can be *constructed* on CPU (never run here).
    "--speculative-draft-attention-backend", "triton",
]  # fmt: skip


def _install_kernel_stand_ins() -> None:
    """Install the two test doubles of this module: ``vllm._custom_ops`` and,
    on a plain CPU, a no-op ``torch.cuda.synchronize``.

    They are declared, with what they replace and why, beside the other CPU
    stand-ins in ``test/backport/e2e/cpu_serving.py``
    (``install_vllm_custom_ops_stand_in``, ``install_cuda_synchronize_stand_in``);
    on this construction path the first is imported by
    ``RotaryEmbedding.__init__`` and never called, the second is called by
    v0.5.14's and v0.5.15's ``LlamaForCausalLM.set_embed_and_head``. Only called
    inside a case subprocess, before sglang is imported; never a .pth file or
    sitecustomize.
    """
    import cpu_serving  # test/backport/e2e, on sys.path (above)

    cpu_serving.install_vllm_custom_ops_stand_in()
    cpu_serving.install_cuda_synchronize_stand_in()


def case_argv(
    algorithm: str,
    models: Dict[str, str],
    draft_load_format: Optional[str] = None,
    token_map: bool = False,
    json_model_override_args: Optional[str] = USER_JSON_MODEL_OVERRIDE_ARGS,
    adaptive: bool = False,
) -> List[str]:
    """The launcher argv of one case (what a user would pass to sglang serve).

    ``adaptive`` adds --speculative-adaptive (steps 3, one of the default
    config's candidate steps) and puts the target on the Triton attention
    backend, whose constructor records the step counts it was built for
    (layers/attention/triton_backend.py reads model_runner.server_args): each
    adaptive runtime state builds its own target backend, so this shows which
    counts reached the target's config (constructed only, never run).
    """
    argv = ["--model-path", models["target"]] + list(CPU_CONSTRUCTION_ARGS)
    num_steps = 3 if adaptive else 2
    argv += [
        "--speculative-algorithm", algorithm,
        "--speculative-draft-model-path", models[algorithm],
        "--speculative-num-steps", str(num_steps),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(num_steps + 1),
    ]  # fmt: skip
    if adaptive:
        argv[argv.index("--attention-backend") + 1] = "triton"
        argv += ["--speculative-adaptive"]
    if json_model_override_args is not None:
        argv += ["--json-model-override-args", json_model_override_args]
    if draft_load_format is not None:
        argv += ["--speculative-draft-load-format", draft_load_format]
    if token_map:
        argv += ["--speculative-token-map", models["token_map"]]
    return argv


# --------------------------------------------------------------------------- #
# Snapshot helpers (JSON-able)
# --------------------------------------------------------------------------- #

# Construction steps in order. A "draft step" must not change the target's
# config; it is compared with the snapshot taken just before it.
STAGES = [
    "target_built",  # Scheduler.init_tp_model_worker returned
    "draft_built",  # Scheduler.maybe_init_draft_worker returned  (draft step)
    "target_pool",  # Scheduler.init_target_memory_pool returned
    "pools",  # Scheduler.init_memory_pools returned             (draft step)
    "target_attention_backends",  # tp_worker.init_attention_backends returned
    "attention_backends",  # Scheduler.init_all_attention_backends returned (draft step)
    "target_cuda_graphs",  # tp_worker.init_cuda_graphs returned
    "cuda_graphs",  # Scheduler.init_all_cuda_graphs returned   (draft step)
    "scheduler_ready",  # Scheduler.__init__ returned
]
DRAFT_STEPS = {
    "draft_built": "target_built",
    "pools": "target_pool",
    "attention_backends": "target_attention_backends",
    "cuda_graphs": "target_cuda_graphs",
}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def public_fields(server_args) -> Dict[str, Any]:
    """Every public field of a ServerArgs (dataclass fields and any other
    public instance attribute), as JSON-able values."""
    import dataclasses
    import functools

    cls = type(server_args)
    names = {f.name for f in dataclasses.fields(server_args)}
    names.update(
        # Instance attributes, less values cached by a cached_property (derived
        # on first read, not configuration).
        name
        for name in vars(server_args)
        if not isinstance(getattr(cls, name, None), functools.cached_property)
    )
    return {
        name: _jsonable(getattr(server_args, name))
        for name in sorted(names)
        if not name.startswith("_")
    }


def changed_fields(before: Dict[str, Any], after: Dict[str, Any]) -> Dict[str, list]:
    """{field: [before, after]} for every field whose value differs."""
    missing = object()
    out = {}
    for name in sorted(set(before) | set(after)):
        b, a = before.get(name, missing), after.get(name, missing)
        if b != a:
            out[name] = [
                "<absent>" if b is missing else b,
                "<absent>" if a is missing else a,
            ]
    return out


def _override_log(server_args) -> List[list]:
    log = list(getattr(server_args, "_resolved_overrides", None) or [])
    log += list(getattr(server_args, "_runtime_mutations", None) or [])
    return [[source, _jsonable(fields)] for source, fields in log]


def draft_step_changes(result: dict, view: str = "target") -> Dict[str, dict]:
    """For every draft step reached: the fields of ``view`` ("target" or
    "published") that the step changed, compared with the snapshot taken just
    before it. Empty dicts mean the draft step left that config alone."""
    snaps = result[view]
    out = {}
    for step, before in DRAFT_STEPS.items():
        if step in snaps and before in snaps:
            if snaps[before] is None or snaps[step] is None:
                out[step] = {"<published slot>": [snaps[before], snaps[step]]}
            else:
                out[step] = changed_fields(snaps[before], snaps[step])
    return out


KEY_FIELDS = ("context_length", "load_format", "json_model_override_args")


def summary(result: dict) -> dict:
    """The facts a reader compares between an unpatched and a patched run."""
    stages = result.get("stages") or []
    last = stages[-1] if stages else None
    target = result.get("target", {})
    draft = result.get("draft") or {}
    reload = result.get("reload") or {}
    return {
        "algorithm": result.get("algorithm"),
        "sglang": ("patched" if result.get("patched") else "unpatched")
        + f" ({os.path.dirname(result.get('sglang_file', '?'))})",
        "construction_reached": last,
        "stopped_with": (result.get("stopped_at") or {}).get("error"),
        "target_before_draft": {
            k: target.get("target_built", {}).get(k) for k in KEY_FIELDS
        },
        "target_at_end": {k: target.get(last, {}).get(k) for k in KEY_FIELDS},
        "target_changed_by_draft_steps": {
            k: v for k, v in draft_step_changes(result, "target").items() if v
        },
        "published_changed_by_draft_steps": {
            k: v for k, v in draft_step_changes(result, "published").items() if v
        },
        "published_is_target_after_draft": result.get("published_is_target", {}).get(
            "draft_built"
        ),
        "published_while_the_draft_model_loads": result.get("during_draft_load"),
        "draft_received": {
            "own_server_args": (
                None if not draft else not draft["server_args_is_target"]
            ),
            **{k: draft.get(k) for k in KEY_FIELDS},
            "model_config_context_len": draft.get("model_config_context_len"),
        },
        "weights_match_files": {
            "target": result.get("weights", {}).get("target_matches_file"),
            "draft": result.get("weights", {}).get("draft_matches_file"),
        },
        "target_reload_after_draft": {
            "load_format_used": reload.get("load_format"),
            "success": reload.get("success"),
            "target_weights_from_files": reload.get("target_matches_file_after"),
        },
    }


# --------------------------------------------------------------------------- #
# The case, run inside its own subprocess
# --------------------------------------------------------------------------- #


def _file_tensor(model_dir: str, name: str):
    from safetensors.torch import load_file

    return load_file(os.path.join(model_dir, "model.safetensors"))[name]


def _param_matches_file(model, param_name: str, model_dir: str, file_name: str):
    import torch

    param = dict(model.named_parameters())[param_name].detach()
    expected = _file_tensor(model_dir, file_name).to(param.dtype)
    return bool(param.shape == expected.shape and torch.equal(param.cpu(), expected))


def _draft_runners(spec_worker) -> list:
    inner = spec_worker.draft_worker
    if hasattr(inner, "draft_runners"):
        return list(inner.draft_runners)
    if hasattr(inner, "model_runner"):
        return [inner.model_runner]
    # Before v0.5.16 the draft wrapper holds its TpModelWorker's runner.
    return [inner.draft_runner]


def _draft_load_observer(scheduler, result):
    """A sys.setprofile function recording, at the first call of
    ``ModelRunner.load_model`` on a draft runner, the published config and
    the capture flag. Observation only: nothing is replaced or skipped."""
    from draft_isolation_harness import capture_flag, published_slot

    from sglang.srt.model_executor.model_runner import ModelRunner

    load_model_code = ModelRunner.load_model.__code__

    def profiler(frame, event, arg):
        if event != "call" or frame.f_code is not load_model_code:
            return
        runner = frame.f_locals.get("self")
        if not getattr(runner, "is_draft_worker", False):
            return
        if "during_draft_load" in result:
            return
        pub = published_slot()
        result["during_draft_load"] = {
            "published_is_target": pub is scheduler.server_args,
            "published_is_draft_runner_args": pub is runner.server_args,
            "published": (
                None if pub is None else {k: getattr(pub, k) for k in KEY_FIELDS}
            ),
            "draft_runner_args": {
                k: getattr(runner.server_args, k) for k in KEY_FIELDS
            },
            "capture_enable_torch_compile": bool(capture_flag()),
        }

    return profiler


def _adaptive_states(instances) -> Optional[List[dict]]:
    """Per adaptive runtime state: its step counts and the ones its target
    attention backend was constructed with (None without --speculative-adaptive)."""
    spec_worker = getattr(instances[0], "draft_worker", None) if instances else None
    controller = getattr(spec_worker, "adaptive_controller", None)
    if controller is None:
        return None
    states = []
    for _steps, state in sorted(controller._states.items()):
        backend = state.target_attn_backend
        states.append(
            {
                "speculative_num_steps": state.speculative_num_steps,
                "speculative_num_draft_tokens": state.speculative_num_draft_tokens,
                "target_backend": type(backend).__name__,
                "target_backend_num_steps": getattr(
                    backend, "speculative_num_steps", None
                ),
                "target_backend_num_draft_tokens": getattr(
                    backend, "num_draft_tokens", None
                ),
            }
        )
    return states


def _run_case_here(spec: dict) -> dict:
    """Body of a case process (forked by ``_cases_main`` after ``_preimport``)."""
    _install_kernel_stand_ins()  # installed already: a no-op

    from draft_isolation_harness import capture_flag, published_slot

    import sglang
    import sglang.srt.server_args as server_args_module
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.server_args import (
        PortArgs,
        get_global_server_args,
        prepare_server_args,
    )

    algorithm = spec["algorithm"]
    models = spec["models"]
    result: dict = {
        "algorithm": algorithm,
        "argv": spec["argv"],
        "sglang_file": sglang.__file__,
        "patched": hasattr(server_args_module, "draft_server_args_copy"),
        "stages": [],
        "stopped_at": None,
        "target": {},
        "published": {},
        "published_is_target": {},
        "capture_enable_torch_compile": {},
        "draft": None,
        "weights": {},
        "reload": None,
    }

    server_args = prepare_server_args(spec["argv"])
    result["user_json_model_override_args"] = spec.get("json_model_override_args")
    result["target"]["resolved"] = public_fields(server_args)

    def snapshot(stage: str, scheduler) -> None:
        target = scheduler.server_args
        result["stages"].append(stage)
        result["target"][stage] = public_fields(target)
        pub = published_slot()
        result["published"][stage] = None if pub is None else public_fields(pub)
        result["published_is_target"][stage] = pub is target
        # Seeded from the published object by RuntimeContext.set_server_args
        # (None before v0.5.15, which has no flags).
        result["capture_enable_torch_compile"][stage] = bool(capture_flag())

    instances: list = []  # the scheduler, also when __init__ stops early

    class ObservedScheduler(Scheduler):
        """The real Scheduler; the steps below run unchanged and are only
        wrapped to take snapshots after each one (and before the draft)."""

        def init_tp_model_worker(self):
            instances.append(self)
            super().init_tp_model_worker()
            snapshot("target_built", self)
            tp_worker = self.tp_worker
            for method, stage in (
                ("init_attention_backends", "target_attention_backends"),
                ("init_cuda_graphs", "target_cuda_graphs"),
            ):
                real = getattr(tp_worker, method)

                def observed(*args, _real=real, _stage=stage, **kwargs):
                    out = _real(*args, **kwargs)
                    snapshot(_stage, self)
                    return out

                # Instance attribute on the real target worker: calls through.
                setattr(tp_worker, method, observed)

        def maybe_init_draft_worker(self):
            # Observe (replace nothing) what is published when the draft's
            # ModelRunner.load_model starts: the model code it runs reads
            # get_server_args(). A profile hook sees the call and its frame.
            profiler = _draft_load_observer(self, result)
            sys.setprofile(profiler)
            try:
                super().maybe_init_draft_worker()
            finally:
                sys.setprofile(None)
            snapshot("draft_built", self)
            record_draft(self)

        def init_target_memory_pool(self):
            super().init_target_memory_pool()
            snapshot("target_pool", self)

        def init_memory_pools(self):
            super().init_memory_pools()
            snapshot("pools", self)

        def init_all_attention_backends(self):
            super().init_all_attention_backends()
            snapshot("attention_backends", self)

        def init_all_cuda_graphs(self):
            super().init_all_cuda_graphs()
            snapshot("cuda_graphs", self)

    def record_draft(scheduler) -> None:
        target_runner = scheduler.tp_worker.model_runner
        runners = _draft_runners(scheduler.draft_worker)
        runner = runners[0]
        draft_args = runner.server_args
        result["draft"] = {
            "worker_class": type(scheduler.draft_worker).__name__,
            "num_runners": len(runners),
            "server_args_is_target": draft_args is scheduler.server_args,
            "spec_worker_server_args_is_target": (
                scheduler.draft_worker.server_args is scheduler.server_args
            ),
            "context_length": draft_args.context_length,
            "load_format": draft_args.load_format,
            "json_model_override_args": draft_args.json_model_override_args,
            "model_config_context_len": runner.model_config.context_len,
            "load_config_format": str(getattr(runner.load_config, "load_format", None)),
            "model_class": type(runner.model).__name__,
        }
        result["target_model_config_context_len"] = (
            target_runner.model_config.context_len
        )
        result["target_model_rms_norm_eps"] = getattr(
            target_runner.model_config.hf_config, "rms_norm_eps", None
        )
        t_param, t_file = PROBE_PARAMS["target"]
        d_param, d_file = PROBE_PARAMS[algorithm]
        result["weights"] = {
            "target_param": t_param,
            "target_matches_file": _param_matches_file(
                target_runner.model, t_param, models["target"], t_file
            ),
            "draft_param": d_param,
            "draft_matches_file": _param_matches_file(
                runner.model, d_param, models[algorithm], d_file
            ),
        }

    port_args = PortArgs.init_new(server_args)
    try:
        scheduler = ObservedScheduler(
            server_args,
            port_args,
            gpu_id=0,
            tp_rank=0,
            moe_ep_rank=0,
            pp_rank=0,
            attn_cp_rank=0,
            moe_dp_rank=0,
            dp_rank=None,
        )
        snapshot("scheduler_ready", scheduler)
    except BaseException as e:  # reported, not swallowed
        result["stopped_at"] = {
            "after": result["stages"][-1] if result["stages"] else None,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-6000:],
        }

    result["target_override_log"] = _override_log(server_args)
    result["adaptive_states"] = _adaptive_states(instances)

    # The target's own weight reload path, with the config the process holds,
    # the way EPLB calls it (eplb/eplb_manager.py: update_weights_from_disk(
    # get_server_args().model_path, get_server_args().load_format)). Scramble
    # a target weight first so that only a real reload from the files restores it.
    if "draft_built" in result["stages"]:
        try:
            import torch

            target_runner = instances[0].tp_worker.model_runner
            t_param, t_file = PROBE_PARAMS["target"]
            param = dict(target_runner.model.named_parameters())[t_param]
            with torch.no_grad():
                param.fill_(0.5)
            held = get_global_server_args()
            # ModelRunner's own method before v0.5.16.
            updater = getattr(target_runner, "weight_updater", target_runner)
            ok, message = updater.update_weights_from_disk(
                held.model_path, held.load_format
            )
            result["reload"] = {
                "model_path": held.model_path,
                "load_format": held.load_format,
                "success": bool(ok),
                "message": message,
                "target_matches_file_after": _param_matches_file(
                    target_runner.model, t_param, models["target"], t_file
                ),
            }
        except BaseException as e:  # reported in the result
            result["reload"] = {
                "success": False,
                "message": f"reload raised {type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-4000:],
                "target_matches_file_after": False,
            }
    return result


def _preimport() -> None:
    """What every case imports, imported once by the process that forks the
    cases (``_cases_main``): the stand-in first, then sglang's scheduler and
    the modules ``_run_case_here`` reads. Nothing is constructed or run."""
    _install_kernel_stand_ins()

    # Imported only to be in memory before the cases fork.
    import sglang  # noqa: F401  (see above)
    import sglang.srt.managers.scheduler  # noqa: F401  (see above)
    import sglang.srt.model_executor.model_runner  # noqa: F401  (see above)
    import sglang.srt.runtime_context  # noqa: F401  (see above)
    import sglang.srt.server_args  # noqa: F401  (see above)


def _write_result(spec: dict, result: dict) -> None:
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)


def _remove_own_shm_files() -> None:
    """Remove the /dev/shm files this process holds open: the scheduler's load
    snapshot (``/dev/shm/sglang_loads_<instance>.shm``), which sglang never
    removes and os._exit leaves behind."""
    import cpu_serving  # test/backport/e2e, on sys.path (above)

    for path in cpu_serving._shm_files([os.getpid()]):
        try:
            os.unlink(path)
        except OSError:
            pass


def _run_forked_case(spec: dict) -> int:
    """Fork one case process, wait for it (bounded by ``spec["timeout"]``),
    return its exit status. The child writes its result and its output
    (stdout and stderr, to ``spec["log_path"]``) and leaves with os._exit:
    scheduler threads (watchdog, zmq) are not torn down."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the case process
        try:
            log = os.open(spec["log_path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.chdir(spec["case_dir"])
            try:
                result = _run_case_here(spec)
            except BaseException as e:  # reported in the result
                result = {
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-6000:],
                }
            _write_result(spec, result)
            _remove_own_shm_files()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    deadline = time.monotonic() + spec["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)


def _cases_main(spec_paths: List[str]) -> None:
    """The case runner: import sglang once, then run every case in a process
    of its own, forked from this one, one after the other. Each case process
    starts from the same state (sglang imported, nothing constructed, nothing
    published) and shares nothing with the others."""
    specs = []
    for path in spec_paths:
        with open(path) as f:
            specs.append(json.load(f))
    try:
        _preimport()
    except BaseException as e:  # reported in the result
        error = {
            "error": f"importing sglang failed: {type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-6000:],
        }
        for spec in specs:
            _write_result(spec, error)
        os._exit(0)
    for spec in specs:
        returncode = _run_forked_case(spec)
        print(f"case {spec['name']}: exit status {returncode}", flush=True)
        with open(spec["returncode_path"], "w") as f:
            f.write(str(returncode))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# --------------------------------------------------------------------------- #
# Driver (parent side)
# --------------------------------------------------------------------------- #


def run_cases(
    cases: Dict[str, dict],
    python_path: Optional[str] = None,
    models: Optional[Dict[str, str]] = None,
    timeout: float = 600,
) -> Dict[str, dict]:
    """Run named cases, each in a process of its own, and return {name:
    result} (JSON-able).

    ``cases`` maps a name to the keyword arguments of ``case_argv`` past the
    models (``algorithm``, ``draft_load_format``, ``token_map``,
    ``json_model_override_args``, ``adaptive``). One subprocess imports
    sglang once and forks a fresh process per case from that state (the
    import is most of a case's cost on CPU); ``timeout`` bounds each case.
    ``python_path`` is prepended to PYTHONPATH of the subprocess (e.g. a
    directory holding an unpatched ``sglang`` package); None runs the sglang
    the interpreter imports. ``models`` comes from ``build_tiny_models``; when
    None the models are built into a temporary directory for this call.
    A result holds the target's public ServerArgs fields at every stage
    (``result["target"][stage]``), the published config's (``result["published"]``),
    what the draft received (``result["draft"]``), weight checks
    (``result["weights"]``) and the EPLB-style reload (``result["reload"]``).
    """
    with tempfile.TemporaryDirectory(prefix="sgl-real-construction-") as tmp:
        if models is None:
            models = build_tiny_models(os.path.join(tmp, "models"))
        spec_paths = []
        specs = {}
        for i, (name, options) in enumerate(cases.items()):
            options = dict(options)
            algorithm = options.pop("algorithm").upper()
            if algorithm not in ALGORITHMS:
                raise ValueError(f"algorithm must be one of {ALGORITHMS}")
            options.setdefault(
                "json_model_override_args", USER_JSON_MODEL_OVERRIDE_ARGS
            )
            case_dir = os.path.join(tmp, f"case-{i}")
            os.makedirs(case_dir)
            spec = {
                "name": name,
                "algorithm": algorithm,
                "models": models,
                "argv": case_argv(algorithm, models, **options),
                "json_model_override_args": options["json_model_override_args"],
                "case_dir": case_dir,
                "result_path": os.path.join(case_dir, "result.json"),
                "returncode_path": os.path.join(case_dir, "returncode"),
                "log_path": os.path.join(case_dir, "output.log"),
                "timeout": timeout,
            }
            spec_path = os.path.join(case_dir, "spec.json")
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            spec_paths.append(spec_path)
            specs[name] = spec

        env = dict(os.environ)
        env.update(CPU_CONSTRUCTION_ENV)
        # Absolute entries: the subprocess runs in a temporary directory.
        entries = [python_path] if python_path else []
        entries += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if entries:
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in entries)
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--case-specs", *spec_paths],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Importing sglang, then every case.
            timeout=300 + timeout * len(specs),
        )
        results = {}
        for name, spec in specs.items():
            output = ""
            if os.path.exists(spec["log_path"]):
                with open(spec["log_path"], errors="replace") as f:
                    output = f.read()
            if not os.path.exists(spec["result_path"]):
                raise RuntimeError(
                    f"case {name} produced no result (case runner rc="
                    f"{proc.returncode}); case output tail:\n{output[-4000:]}\n"
                    f"runner output tail:\n{proc.stdout[-3000:]}"
                )
            with open(spec["result_path"]) as f:
                result = json.load(f)
            returncode = None
            if os.path.exists(spec["returncode_path"]):
                with open(spec["returncode_path"]) as f:
                    returncode = int(f.read())
            result["returncode"] = returncode
            result["output_tail"] = output[-3000:]
            results[name] = result
        return results


def run_case(
    algorithm: str,
    draft_load_format: Optional[str] = None,
    token_map: bool = False,
    python_path: Optional[str] = None,
    models: Optional[Dict[str, str]] = None,
    json_model_override_args: Optional[str] = USER_JSON_MODEL_OVERRIDE_ARGS,
    adaptive: bool = False,
    timeout: float = 600,
) -> dict:
    """``run_cases`` of this one case: its result."""
    case = dict(
        algorithm=algorithm,
        draft_load_format=draft_load_format,
        token_map=token_map,
        json_model_override_args=json_model_override_args,
        adaptive=adaptive,
    )
    return run_cases({"case": case}, python_path, models, timeout)["case"]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", nargs="?", choices=ALGORITHMS)
    parser.add_argument("--draft-load-format", default=None)
    parser.add_argument("--token-map", action="store_true")
    parser.add_argument("--adaptive", action="store_true")
    parser.add_argument("--pythonpath", default=None)
    parser.add_argument("--case-specs", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case_specs:
        _cases_main(args.case_specs)
        return
    if not args.algorithm:
        parser.error("algorithm is required")
    result = run_case(
        args.algorithm,
        draft_load_format=args.draft_load_format,
        token_map=args.token_map,
        adaptive=args.adaptive,
        python_path=args.pythonpath,
    )
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

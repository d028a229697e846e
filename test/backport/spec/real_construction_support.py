"""Real CPU construction of a speculative-decoding scheduler, for tests and demos.

This module builds tiny local models (a Llama target and EAGLE, EAGLE3,
STANDALONE and FROZEN_KV_MTP drafts, with real safetensors weights and
different context lengths) and runs, in a fresh subprocess per case, the real
scheduler construction of sglang 0.5.16 on CPU:

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

* a stand-in ``vllm._custom_ops`` module (the only test double), installed in
  ``sys.modules`` by the case subprocess before sglang is imported; it is
  declared, with the end-to-end tests' other CPU stand-ins, in
  ``test/backport/e2e/cpu_serving.py`` (``install_vllm_custom_ops_stand_in``);
* ``SGLANG_USE_HND_KVCACHE=1`` (a stock sglang switch) so that the KV pools can
  be allocated on CPU;
* ``--speculative-draft-attention-backend triton`` (a stock flag) so that the
  draft's attention-backend objects can be constructed on CPU.

Run ``python3 real_construction_support.py ALGORITHM [--draft-load-format dummy]
[--token-map] [--adaptive] [--pythonpath DIR]`` to print one case's result as
JSON (``summary(result)`` condenses it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from typing import Any, Dict, List, Optional

# --------------------------------------------------------------------------- #
# Tiny models
# --------------------------------------------------------------------------- #

VOCAB_SIZE = 256
HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 128
NUM_HEADS = 2
HEAD_DIM = 32
DTYPE = "bfloat16"

# Context lengths written into the configs: every draft differs from the target
# (and is longer, so that sglang accepts the target's shorter length for the
# draft without SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN).
TARGET_CONTEXT_LEN = 512
DRAFT_CONTEXT_LENS = {
    "EAGLE": 4096,
    "EAGLE3": 2048,
    "STANDALONE": 1024,
    "FROZEN_KV_MTP": 1536,
}

# A user's own override on the target (applies to the draft's ModelConfig too,
# which is stock behaviour); rms_norm_eps in the files is 1e-6.
USER_JSON_MODEL_OVERRIDE_ARGS = '{"rms_norm_eps": 1e-05}'

# Hot-token map for --speculative-token-map (EAGLE and STANDALONE read it).
TOKEN_MAP_SIZE = 128

ALGORITHMS = ("EAGLE", "EAGLE3", "STANDALONE", "FROZEN_KV_MTP")

# For each model: (parameter name in the sglang model, tensor name in the file).
# Parameters owned by that model only (never shared between target and draft).
PROBE_PARAMS = {
    "target": (
        "model.layers.1.self_attn.o_proj.weight",
        "model.layers.1.self_attn.o_proj.weight",
    ),
    "EAGLE": ("model.fc.weight", "fc.weight"),
    "EAGLE3": ("model.fc.weight", "fc.weight"),
    "STANDALONE": (
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
    ),
    "FROZEN_KV_MTP": (
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
    ),
}


def _config(architecture: str, num_layers: int, context_len: int, **extra) -> dict:
    config = {
        "architectures": [architecture],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": num_layers,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": context_len,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": DTYPE,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(extra)
    return config


def _decoder_layer(prefix, gen, qkv_in=HIDDEN_SIZE, input_layernorm=True):
    import torch

    def rand(*shape):
        return torch.randn(*shape, generator=gen)

    attn_out = NUM_HEADS * HEAD_DIM
    weights = {
        f"{prefix}.self_attn.q_proj.weight": rand(attn_out, qkv_in),
        f"{prefix}.self_attn.k_proj.weight": rand(attn_out, qkv_in),
        f"{prefix}.self_attn.v_proj.weight": rand(attn_out, qkv_in),
        f"{prefix}.self_attn.o_proj.weight": rand(HIDDEN_SIZE, attn_out),
        f"{prefix}.mlp.gate_proj.weight": rand(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}.mlp.up_proj.weight": rand(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}.mlp.down_proj.weight": rand(HIDDEN_SIZE, INTERMEDIATE_SIZE),
        f"{prefix}.post_attention_layernorm.weight": 1 + 0.1 * rand(HIDDEN_SIZE),
    }
    if input_layernorm:
        weights[f"{prefix}.input_layernorm.weight"] = 1 + 0.1 * rand(HIDDEN_SIZE)
    return weights


def _write_model(path: str, config: dict, weights: dict) -> str:
    import torch
    from safetensors.torch import save_file

    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    dtype = getattr(torch, DTYPE)
    save_file(
        {
            k: (v if v.dtype in (torch.int64, torch.bool) else v.to(dtype)).contiguous()
            for k, v in weights.items()
        },
        os.path.join(path, "model.safetensors"),
    )
    return path


def _write_plain_llama(path: str, num_layers: int, context_len: int, seed) -> str:
    """A plain LlamaForCausalLM with random weights (HF checkpoint naming)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    weights = {
        "model.embed_tokens.weight": torch.randn(
            VOCAB_SIZE, HIDDEN_SIZE, generator=gen
        ),
        "model.norm.weight": 1 + 0.1 * torch.randn(HIDDEN_SIZE, generator=gen),
        "lm_head.weight": torch.randn(VOCAB_SIZE, HIDDEN_SIZE, generator=gen),
    }
    for i in range(num_layers):
        weights.update(_decoder_layer(f"model.layers.{i}", gen))
    return _write_model(
        path, _config("LlamaForCausalLM", num_layers, context_len), weights
    )


def build_tiny_models(root: str) -> Dict[str, str]:
    """Write the tiny models (config.json + model.safetensors) and a token map
    under ``root``; return their paths. Deterministic; no hub, no network."""
    import torch

    paths = {}

    paths["target"] = _write_plain_llama(
        os.path.join(root, "target"), 2, TARGET_CONTEXT_LEN, seed=1000
    )

    # EAGLE (v1) draft, EAGLE checkpoint naming: no "model." prefix, layer 0
    # without input_layernorm, fc over [embeds, target hidden].
    gen = torch.Generator().manual_seed(2000)
    weights = {
        "embed_tokens.weight": torch.randn(VOCAB_SIZE, HIDDEN_SIZE, generator=gen),
        "fc.weight": torch.randn(HIDDEN_SIZE, 2 * HIDDEN_SIZE, generator=gen),
        "lm_head.weight": torch.randn(VOCAB_SIZE, HIDDEN_SIZE, generator=gen),
    }
    weights.update(_decoder_layer("layers.0", gen, input_layernorm=False))
    paths["EAGLE"] = _write_model(
        os.path.join(root, "eagle"),
        _config("LlamaForCausalLMEagle", 1, DRAFT_CONTEXT_LENS["EAGLE"]),
        weights,
    )

    # EAGLE3 draft: one "midlayer" over [embeds, hidden] (2x input), fc over
    # three aux hidden states, reduced draft vocab with a d2t map.
    gen = torch.Generator().manual_seed(3000)
    draft_vocab = VOCAB_SIZE // 2
    hot_ids = torch.arange(0, VOCAB_SIZE, 2)
    weights = {
        "fc.weight": torch.randn(HIDDEN_SIZE, 3 * HIDDEN_SIZE, generator=gen),
        "norm.weight": 1 + 0.1 * torch.randn(HIDDEN_SIZE, generator=gen),
        "lm_head.weight": torch.randn(draft_vocab, HIDDEN_SIZE, generator=gen),
        "midlayer.hidden_norm.weight": 1
        + 0.1 * torch.randn(HIDDEN_SIZE, generator=gen),
        "d2t": (hot_ids - torch.arange(draft_vocab)).to(torch.int64),
        "t2d": torch.zeros(VOCAB_SIZE, dtype=torch.bool).index_fill_(0, hot_ids, True),
    }
    weights.update(_decoder_layer("midlayer", gen, qkv_in=2 * HIDDEN_SIZE))
    paths["EAGLE3"] = _write_model(
        os.path.join(root, "eagle3"),
        _config(
            "LlamaForCausalLMEagle3",
            1,
            DRAFT_CONTEXT_LENS["EAGLE3"],
            draft_vocab_size=draft_vocab,
        ),
        weights,
    )

    # STANDALONE draft: a plain, smaller Llama.
    paths["STANDALONE"] = _write_plain_llama(
        os.path.join(root, "standalone"), 1, DRAFT_CONTEXT_LENS["STANDALONE"], 4000
    )

    # FROZEN_KV_MTP draft: its worker (FrozenKVMTPDraftWorker) takes any
    # causal LM; production drafts are Gemma-4 assistants, a plain Llama is
    # what can be built here. Its own weights and context length.
    paths["FROZEN_KV_MTP"] = _write_plain_llama(
        os.path.join(root, "frozen_kv_mtp"),
        1,
        DRAFT_CONTEXT_LENS["FROZEN_KV_MTP"],
        5000,
    )

    paths["token_map"] = os.path.join(root, "hot_token_map.pt")
    torch.save(list(range(TOKEN_MAP_SIZE)), paths["token_map"])
    return paths


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
    """Install the one test double of this module: ``vllm._custom_ops``.

    It is declared, with what it replaces and why, beside the other CPU
    stand-ins in ``test/backport/e2e/cpu_serving.py``
    (``install_vllm_custom_ops_stand_in``); on this construction path it is
    imported by ``RotaryEmbedding.__init__`` and never called. Only called
    inside a case subprocess, before sglang is imported; never a .pth file or
    sitecustomize.
    """
    e2e = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "e2e"
    )
    if e2e not in sys.path:
        sys.path.insert(0, e2e)
    import cpu_serving

    cpu_serving.install_vllm_custom_ops_stand_in()


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
    return [inner.model_runner]


def _draft_load_observer(scheduler, result, published, get_context):
    """A sys.setprofile function recording, at the first call of
    ``ModelRunner.load_model`` on a draft runner, the published config and
    the capture flag. Observation only: nothing is replaced or skipped."""
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
        pub = published()
        result["during_draft_load"] = {
            "published_is_target": pub is scheduler.server_args,
            "published_is_draft_runner_args": pub is runner.server_args,
            "published": (
                None if pub is None else {k: getattr(pub, k) for k in KEY_FIELDS}
            ),
            "draft_runner_args": {
                k: getattr(runner.server_args, k) for k in KEY_FIELDS
            },
            "capture_enable_torch_compile": bool(
                get_context().flags.capture.enable_torch_compile
            ),
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
    for steps, state in sorted(controller._states.items()):
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
    """Body of the case subprocess."""
    _install_kernel_stand_ins()

    import sglang
    import sglang.srt.server_args as server_args_module
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.runtime_context import get_context, get_server_args
    from sglang.srt.server_args import PortArgs, prepare_server_args

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

    def published():
        # The raw slot: None when nothing is published (get_server_args raises).
        return getattr(get_context(), "_server_args", None)

    def snapshot(stage: str, scheduler) -> None:
        target = scheduler.server_args
        result["stages"].append(stage)
        result["target"][stage] = public_fields(target)
        pub = published()
        result["published"][stage] = None if pub is None else public_fields(pub)
        result["published_is_target"][stage] = pub is target
        # Seeded from the published object by RuntimeContext.set_server_args.
        result["capture_enable_torch_compile"][stage] = bool(
            get_context().flags.capture.enable_torch_compile
        )

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
            profiler = _draft_load_observer(self, result, published, get_context)
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
    except BaseException as e:  # noqa: BLE001 - reported, not swallowed
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
            held = get_server_args()
            ok, message = target_runner.weight_updater.update_weights_from_disk(
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
        except BaseException as e:  # noqa: BLE001
            result["reload"] = {
                "success": False,
                "message": f"reload raised {type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-4000:],
                "target_matches_file_after": False,
            }
    return result


def _case_main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    try:
        result = _run_case_here(spec)
    except BaseException as e:  # noqa: BLE001
        result = {
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-6000:],
        }
    with open(spec["result_path"], "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    # Scheduler threads (watchdog, zmq) are not torn down: leave at once.
    os._exit(0)


# --------------------------------------------------------------------------- #
# Driver (parent side)
# --------------------------------------------------------------------------- #


def run_case(
    algorithm: str,
    draft_load_format: Optional[str] = None,
    token_map: bool = False,
    python_path: Optional[str] = None,
    models: Optional[Dict[str, str]] = None,
    json_model_override_args: Optional[str] = USER_JSON_MODEL_OVERRIDE_ARGS,
    adaptive: bool = False,
    timeout: float = 600,
    log_path: Optional[str] = None,
) -> dict:
    """Run one case in a fresh subprocess and return its result (JSON-able).

    ``python_path`` is prepended to PYTHONPATH of the subprocess (e.g. a
    directory holding an unpatched ``sglang`` package); None runs the sglang
    the interpreter imports. ``models`` comes from ``build_tiny_models``; when
    None the models are built into a temporary directory for this call.
    The result holds the target's public ServerArgs fields at every stage
    (``result["target"][stage]``), the published config's (``result["published"]``),
    what the draft received (``result["draft"]``), weight checks
    (``result["weights"]``) and the EPLB-style reload (``result["reload"]``).
    """
    algorithm = algorithm.upper()
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}")
    with tempfile.TemporaryDirectory(prefix="sgl-real-construction-") as tmp:
        if models is None:
            models = build_tiny_models(os.path.join(tmp, "models"))
        argv = case_argv(
            algorithm,
            models,
            draft_load_format,
            token_map,
            json_model_override_args,
            adaptive,
        )
        spec = {
            "algorithm": algorithm,
            "models": models,
            "argv": argv,
            "json_model_override_args": json_model_override_args,
            "result_path": os.path.join(tmp, "result.json"),
        }
        spec_path = os.path.join(tmp, "spec.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)

        env = dict(os.environ)
        env.update(CPU_CONSTRUCTION_ENV)
        # Absolute entries: the subprocess runs in a temporary directory.
        entries = [python_path] if python_path else []
        entries += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if entries:
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in entries)
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--case-spec", spec_path],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        if log_path:
            with open(log_path, "w") as f:
                f.write(proc.stdout)
        if not os.path.exists(spec["result_path"]):
            raise RuntimeError(
                f"case {algorithm} subprocess produced no result "
                f"(rc={proc.returncode}); output tail:\n{proc.stdout[-6000:]}"
            )
        with open(spec["result_path"]) as f:
            result = json.load(f)
        result["returncode"] = proc.returncode
        result["output_tail"] = proc.stdout[-3000:]
        return result


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("algorithm", nargs="?", choices=ALGORITHMS)
    parser.add_argument("--draft-load-format", default=None)
    parser.add_argument("--token-map", action="store_true")
    parser.add_argument("--adaptive", action="store_true")
    parser.add_argument("--pythonpath", default=None)
    parser.add_argument("--case-spec", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case_spec:
        _case_main(args.case_spec)
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

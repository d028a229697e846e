"""The tiny local models of this repository's real-construction tests,
end-to-end tests, demo and benchmark: the one place that writes them.

Every model is a small Llama (vocabulary 256, hidden size 64, two heads of 32)
written as ``config.json`` + ``model.safetensors`` with random weights from a
fixed seed: deterministic, no hub, no network, a few hundred KB each. The
target and every draft have different context lengths, and every draft's is
longer than the target's (sglang then accepts the target's shorter length for
the draft without ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN``).

``write_tiny_models(root, dtype=...)`` writes them under ``root`` and returns
{name: path}:

* ``target``: a two-layer ``LlamaForCausalLM``;
* ``target_other_weights``: the same architecture with other weights (the
  end-to-end weight reload);
* ``EAGLE``: an EAGLE (v1) draft, EAGLE's file naming (no ``model.`` prefix),
  one decoder layer without ``input_layernorm`` and an ``fc`` over [token
  embedding, target hidden state];
* ``EAGLE3``: one ``midlayer`` over [embedding, hidden] (twice the input), an
  ``fc`` over three auxiliary hidden states, a reduced draft vocabulary (every
  second token) with its ``d2t`` / ``t2d`` maps;
* ``STANDALONE``: the target's architecture, its own weights and context
  length (the end-to-end reload turns it into the target);
* ``FROZEN_KV_MTP``: a one-layer plain Llama (its worker takes any causal LM;
  production drafters are Gemma-4 assistants);
* ``token_map``: a hot-token map for ``--speculative-token-map`` (a ``torch.save``
  of the first ``TOKEN_MAP_SIZE`` token ids).

The weights are N(0, WEIGHT_STD²) and the norms ones, as HF initialises them
with ``initializer_range=0.5``: large enough that greedy logits
are well separated (HF's default, 0.02, gives near-ties), small enough that
attention is not a hard argmax that float rounding flips between the draft's
and the target's kernels (with std 1, a STANDALONE draft holding the target's
own weights is rarely accepted on CPU). ``dtype`` is the dtype of the
files and of the configs' ``torch_dtype``: real construction uses sglang's
default (``bfloat16``); the servers use ``float32`` (Triton's interpreter has
no bf16 for the multi-step draft decode).

This file sits beside ``cpu_serving.py`` because every user already imports
from this folder: the end-to-end tests (their own folder), the demo and the
benchmark (they put this folder on ``sys.path`` for ``cpu_serving``) and
``test/backport/spec/real_construction_support.py`` (for the
``vllm._custom_ops`` stand-in). Not shipped to forks.
"""

from __future__ import annotations

import json
import os
from typing import Dict, Iterable

VOCAB_SIZE = 256
HIDDEN_SIZE = 64
INTERMEDIATE_SIZE = 128
NUM_HEADS = 2
HEAD_DIM = 32

# Context lengths written into the configs (max_position_embeddings).
TARGET_CONTEXT_LEN = 512
DRAFT_CONTEXT_LENS = {
    "EAGLE": 4096,
    "EAGLE3": 2048,
    "STANDALONE": 1024,
    "FROZEN_KV_MTP": 1536,
}

# Standard deviation of every random weight matrix and embedding.
WEIGHT_STD = 0.5

# Hot-token map for --speculative-token-map (EAGLE and STANDALONE read it).
TOKEN_MAP_SIZE = 128

# For each model: (parameter name in the sglang model, tensor name in the
# file) of a parameter owned by that model only (never shared between target
# and draft): the real-construction tests compare it with the file.
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

# {name: (directory or file under root, seed)}; the order of write_tiny_models.
_LAYOUT = {
    "target": ("target", 1000),
    "target_other_weights": ("target-other-weights", 1001),
    "EAGLE": ("eagle", 2000),
    "EAGLE3": ("eagle3", 3000),
    "STANDALONE": ("standalone", 4000),
    "FROZEN_KV_MTP": ("frozen_kv_mtp", 5000),
    "token_map": ("hot_token_map.pt", None),
}
MODELS = tuple(_LAYOUT)


def llama_config(
    architecture: str,
    num_layers: int,
    context_len: int,
    dtype: str,
    **extra,
) -> dict:
    """A tiny Llama ``config.json`` (as a dict); ``extra`` keys are added."""
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
        "torch_dtype": dtype,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(extra)
    return config


def write_model(path: str, config: dict, weights: dict) -> str:
    """Write ``config.json`` and ``model.safetensors`` under ``path``; floating
    tensors are stored in the config's ``torch_dtype`` (integer and bool maps
    as they are). Returns ``path``."""
    import torch
    from safetensors.torch import save_file

    dtype = getattr(torch, config["torch_dtype"])
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    save_file(
        {
            k: (v.to(dtype) if v.is_floating_point() else v).contiguous()
            for k, v in weights.items()
        },
        os.path.join(path, "model.safetensors"),
    )
    return path


def _weight(gen, *shape):
    """A random weight matrix (or embedding)."""
    import torch

    return WEIGHT_STD * torch.randn(*shape, generator=gen)


def _norm(gen, size):
    """An RMSNorm weight: ones, as HF initialises it. (With random norms
    near 1, a STANDALONE draft reloaded with the target's weights from disk
    is accepted less than half the time on CPU.)"""
    import torch

    return torch.ones(size)


def _decoder_layer(prefix, gen, qkv_in=HIDDEN_SIZE, input_layernorm=True) -> dict:
    def weight(*shape):
        return _weight(gen, *shape)

    attn_out = NUM_HEADS * HEAD_DIM
    weights = {
        f"{prefix}.self_attn.q_proj.weight": weight(attn_out, qkv_in),
        f"{prefix}.self_attn.k_proj.weight": weight(attn_out, qkv_in),
        f"{prefix}.self_attn.v_proj.weight": weight(attn_out, qkv_in),
        f"{prefix}.self_attn.o_proj.weight": weight(HIDDEN_SIZE, attn_out),
        f"{prefix}.mlp.gate_proj.weight": weight(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}.mlp.up_proj.weight": weight(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}.mlp.down_proj.weight": weight(HIDDEN_SIZE, INTERMEDIATE_SIZE),
        f"{prefix}.post_attention_layernorm.weight": _norm(gen, HIDDEN_SIZE),
    }
    if input_layernorm:
        weights[f"{prefix}.input_layernorm.weight"] = _norm(gen, HIDDEN_SIZE)
    return weights


def write_plain_llama(
    path: str, num_layers: int, context_len: int, seed: int, dtype: str
) -> str:
    """A plain ``LlamaForCausalLM`` (HF checkpoint naming)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    weights = {
        "model.embed_tokens.weight": _weight(gen, VOCAB_SIZE, HIDDEN_SIZE),
        "model.norm.weight": _norm(gen, HIDDEN_SIZE),
        "lm_head.weight": _weight(gen, VOCAB_SIZE, HIDDEN_SIZE),
    }
    for i in range(num_layers):
        weights.update(_decoder_layer(f"model.layers.{i}", gen))
    return write_model(
        path, llama_config("LlamaForCausalLM", num_layers, context_len, dtype), weights
    )


def write_eagle_draft(path: str, context_len: int, seed: int, dtype: str) -> str:
    """An EAGLE (v1) draft: no ``model.`` prefix, layer 0 without
    ``input_layernorm``, ``fc`` (with its bias) over [embeds, target hidden]."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    weights = {
        "embed_tokens.weight": _weight(gen, VOCAB_SIZE, HIDDEN_SIZE),
        "fc.weight": _weight(gen, HIDDEN_SIZE, 2 * HIDDEN_SIZE),
        "lm_head.weight": _weight(gen, VOCAB_SIZE, HIDDEN_SIZE),
    }
    weights.update(_decoder_layer("layers.0", gen, input_layernorm=False))
    weights["fc.bias"] = torch.zeros(HIDDEN_SIZE)
    return write_model(
        path, llama_config("LlamaForCausalLMEagle", 1, context_len, dtype), weights
    )


def write_eagle3_draft(path: str, context_len: int, seed: int, dtype: str) -> str:
    """An EAGLE3 draft: one ``midlayer`` over [embeds, hidden], ``fc`` over
    three aux hidden states, draft vocabulary = every second token (``d2t``)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    draft_vocab = VOCAB_SIZE // 2
    hot_ids = torch.arange(0, VOCAB_SIZE, 2)
    weights = {
        "fc.weight": _weight(gen, HIDDEN_SIZE, 3 * HIDDEN_SIZE),
        "norm.weight": _norm(gen, HIDDEN_SIZE),
        "lm_head.weight": _weight(gen, draft_vocab, HIDDEN_SIZE),
        "midlayer.hidden_norm.weight": _norm(gen, HIDDEN_SIZE),
        "d2t": (hot_ids - torch.arange(draft_vocab)).to(torch.int64),
        "t2d": torch.zeros(VOCAB_SIZE, dtype=torch.bool).index_fill_(0, hot_ids, True),
    }
    weights.update(_decoder_layer("midlayer", gen, qkv_in=2 * HIDDEN_SIZE))
    config = llama_config(
        "LlamaForCausalLMEagle3", 1, context_len, dtype, draft_vocab_size=draft_vocab
    )
    return write_model(path, config, weights)


def write_token_map(path: str) -> str:
    import torch

    torch.save(list(range(TOKEN_MAP_SIZE)), path)
    return path


def write_tiny_models(
    root: str, dtype: str = "bfloat16", names: Iterable[str] = MODELS
) -> Dict[str, str]:
    """Write the models ``names`` (default: all, see the module docstring)
    under ``root`` in ``dtype``; return {name: path}."""
    names = list(names)
    unknown = sorted(set(names) - set(_LAYOUT))
    if unknown:
        raise ValueError(f"unknown tiny models {unknown}; known: {MODELS}")
    paths = {}
    for name in MODELS:
        if name not in names:
            continue
        entry, seed = _LAYOUT[name]
        path = os.path.join(root, entry)
        if name in ("target", "target_other_weights"):
            paths[name] = write_plain_llama(path, 2, TARGET_CONTEXT_LEN, seed, dtype)
        elif name == "EAGLE":
            paths[name] = write_eagle_draft(path, DRAFT_CONTEXT_LENS[name], seed, dtype)
        elif name == "EAGLE3":
            paths[name] = write_eagle3_draft(
                path, DRAFT_CONTEXT_LENS[name], seed, dtype
            )
        elif name == "STANDALONE":
            paths[name] = write_plain_llama(
                path, 2, DRAFT_CONTEXT_LENS[name], seed, dtype
            )
        elif name == "FROZEN_KV_MTP":
            paths[name] = write_plain_llama(
                path, 1, DRAFT_CONTEXT_LENS[name], seed, dtype
            )
        else:  # token_map
            os.makedirs(root, exist_ok=True)
            paths[name] = write_token_map(path)
    return paths

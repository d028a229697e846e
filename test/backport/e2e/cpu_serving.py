"""Serve a real sglang 0.5.16 server on a plain CPU: the one declared place for
what that takes (settings, kernel stand-ins, launcher) and for running such a
server from a test or a demo.

What is not stock, all of it here:

* Settings (``serving_env``, ``serving_args``). ``TRITON_INTERPRET=1`` is
  Triton's own switch: Triton has no CPU driver, and under its interpreter
  every ``@triton.jit`` kernel runs on CPU tensors (it must be in the
  environment before triton is imported, so it is set for the server process
  and inherited by its children). ``SGLANG_USE_HND_KVCACHE=0`` (the Triton
  attention kernels reject the HND layout), ``--attention-backend triton``
  (torch_native cannot run the target's verify pass), ``--dtype float32`` (the
  interpreter has no bf16 for the multi-step draft decode),
  ``--device cpu --disable-cuda-graph --sampling-backend pytorch``, small KV
  pools, ``TORCHDYNAMO_DISABLE=1`` (torch's switch: sglang's few
  ``@torch.compile`` helpers run eagerly instead of being compiled by
  inductor at every server start). On a CUDA machine none of these is used:
  the server runs stock.

* Kernel stand-ins, installed only on a plain CPU (no CUDA, HIP, MUSA, XPU or
  NPU device, and not sglang's CPU engine, ``SGLANG_USE_CPU_ENGINE=1``, which
  needs the AMX ``sgl_kernel`` build). Each routes a call that has no plain-CPU
  branch in 0.5.16 to sglang's own implementation; nothing in sglang is edited:

  - ``vllm._custom_ops`` (a module): ``RotaryEmbedding.__init__``
    (``layers/rotary_embedding/base.py``) imports ``rotary_embedding`` from it
    when the platform is neither CUDA nor HIP nor the CPU engine. On a plain
    CPU the layer then runs ``forward_native``, so the stand-in is never
    called (it raises if it is). vllm has only CUDA wheels.
  - ``speculative/eagle_utils.py: build_tree_kernel_efficient`` falls through
    to ``sgl_build_tree_kernel_efficient``, a name imported only from the CUDA
    ``sgl_kernel`` (a NameError here). The stand-in defines that module global
    as sglang's Triton implementation, ``sgl_build_tree_kernel_triton`` (the
    XPU branch).
  - ``speculative/eagle_utils.py: verify_tree_greedy_func`` matches no branch
    and returns its output buffers unfilled. The stand-in routes it to
    ``verify_tree_greedy_triton`` (the XPU branch).
  - ``kernels/ops/speculative/cache_locs.py: assign_extend_cache_locs_func``
    matches no branch and returns None. The stand-in runs the function's own
    CUDA/XPU branch: the ``assign_extend_cache_locs`` Triton kernel.
  - ``torch.cuda.synchronize`` (v0.5.14 and the v0.5.15 line only, where
    ``LlamaForCausalLM.set_embed_and_head`` calls it with no device check)
    is a no-op: a plain CPU has no device to wait for.

* The launcher: ``python cpu_serving.py ARGS`` runs ``sglang.launch_server``
  with ARGS, as ``python -m sglang.launch_server ARGS`` does. The scheduler and
  detokenizer are ``spawn`` children, which import this file again as their
  ``__mp_main__``; the stand-ins are installed at that import, so every process
  of the server has them. Importing this module under its own name (a test, the
  demo) installs nothing.

``ServerProcess`` starts such a server on 127.0.0.1 at a free port in its own
process group, waits for ``/health`` with a bound, sends requests that each
have a timeout, and stops the whole group by its pid.
"""

from __future__ import annotations

import atexit
import http.client
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional

LAUNCHER = os.path.abspath(__file__)

# The dtype the servers' tiny models are written in (``tiny_models``, this
# folder): Triton's interpreter has no bf16 for the multi-step draft decode.
MODEL_DTYPE = "float32"

# Speculative settings that worked on CPU (one token per step, three steps).
SPEC_ARGS = [
    "--speculative-eagle-topk", "1",
    "--speculative-num-steps", "3",
    "--speculative-num-draft-tokens", "4",
]  # fmt: skip

_COMMON_ARGS = [
    "--host", "127.0.0.1",
    "--skip-tokenizer-init",
    # Small KV pools (otherwise sized from free memory: gigabytes).
    "--max-total-tokens", "1024",
    "--mem-fraction-static", "0.5",
    # The same dummy draft weights at every launch.
    "--random-seed", "0",
]  # fmt: skip

_PLAIN_CPU_ARGS = [
    "--device", "cpu",
    "--attention-backend", "triton",
    "--dtype", "float32",
    "--disable-cuda-graph",
    "--sampling-backend", "pytorch",
]  # fmt: skip

_PLAIN_CPU_ENV = {
    "TRITON_INTERPRET": "1",
    "SGLANG_USE_HND_KVCACHE": "0",
    # torch's own switch: the few @torch.compile helpers sglang runs on this
    # path (spec_utils, sampler, rotary utils) run eagerly. Compiling them on
    # CPU (inductor, C++) takes most of sglang's own warm-up request: 25-30 s
    # of every server start with a warm cache, longer with a cold one.
    "TORCHDYNAMO_DISABLE": "1",
}

_COMMON_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


# A server that only starts and reports its config: no warm-up request and a
# /health that answers without generating a token (two stock switches). The
# releases before v0.5.16 run no speculative request on this CPU (v0.5.14 has
# no Triton tree kernels to stand in), so their servers here only show what
# the scheduler holds.
CONFIG_ONLY_ARGS = ["--skip-server-warmup"]
CONFIG_ONLY_ENV = {"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}


def plain_cpu() -> bool:
    """True where sglang 0.5.16 has no kernels for the speculative path: no
    CUDA, HIP, MUSA, XPU or NPU device and not sglang's CPU engine (the same
    checks as ``sglang.srt.utils.is_cuda`` and the others, on torch alone, so
    that a parent can ask before any sglang import)."""
    import torch

    if torch.cuda.is_available() or torch.version.hip is not None:
        return False
    if getattr(torch.version, "musa", None) is not None:
        return False
    for device in ("xpu", "npu"):
        module = getattr(torch, device, None)
        if module is not None and module.is_available():
            return False
    return os.environ.get("SGLANG_USE_CPU_ENGINE", "0") != "1"


def serving_env() -> Dict[str, str]:
    """Environment additions for a server process on this platform."""
    env = dict(_COMMON_ENV)
    if plain_cpu():
        env.update(_PLAIN_CPU_ENV)
    return env


def serving_args() -> List[str]:
    """Launcher flags besides the model and speculative ones."""
    args = list(_COMMON_ARGS)
    if plain_cpu():
        args += _PLAIN_CPU_ARGS
    return args


def server_env(pythonpath: Optional[str] = None) -> Dict[str, str]:
    """The environment of a server process: this one's, the settings of
    ``serving_env``, and ``pythonpath`` (if given) first on PYTHONPATH, every
    entry made absolute (the server runs in a directory of its own)."""
    env = dict(os.environ)
    env.update(serving_env())
    entries = [pythonpath] if pythonpath else []
    entries += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if entries:
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in entries)
    return env


# --------------------------------------------------------------------------- #
# Launcher argv
# --------------------------------------------------------------------------- #


def speculative_argv(models: Dict[str, str], algorithm: Optional[str], *extra):
    """Launcher argv for the target alone (``algorithm=None``) or with a
    draft of ``algorithm``; ``extra`` flags are appended. ``models`` is what
    ``tiny_models.write_tiny_models`` (this folder) returns."""
    argv = ["--model-path", models["target"]]
    if algorithm is not None:
        argv += [
            "--speculative-algorithm", algorithm,
            "--speculative-draft-model-path", models[algorithm],
            *SPEC_ARGS,
        ]  # fmt: skip
    return argv + list(extra)


# --------------------------------------------------------------------------- #
# Stand-ins
# --------------------------------------------------------------------------- #


def install_vllm_custom_ops_stand_in() -> bool:
    """Install the stand-in ``vllm._custom_ops`` where it is needed: a plain
    CPU without an importable vllm. Returns whether it is installed.

    Import chain that needs it (sglang 0.5.16, no CUDA device, not the
    ``SGLANG_USE_CPU_ENGINE`` path): ``TpModelWorker`` -> ``ModelRunner.load_model``
    -> ``LlamaForCausalLM.__init__`` -> ``get_rope`` -> ``RotaryEmbedding.__init__``
    (``layers/rotary_embedding/base.py`` ~117): ``from vllm._custom_ops import
    rotary_embedding``, stored as ``fallback_rotary_embedding``; the layer's
    forward on a plain CPU is ``forward_native``, which never calls it. The
    stock alternative (``SGLANG_USE_CPU_ENGINE=1``) imports the CPU
    ``sgl_kernel`` build unguarded, which needs Intel AMX and is not installed
    here. The model registry also imports e.g. ``awq_dequantize`` from it for
    models not used here: that import fails and sglang skips those models, as
    it does for any missing optional kernel. Call this before sglang builds a
    model; in a process of its own (it edits ``sys.modules``).
    """
    import importlib.util
    import types

    if not plain_cpu():
        return False
    if "vllm" in sys.modules:
        if getattr(sys.modules["vllm"], "__cpu_serving_stand_in__", False):
            return True
        raise RuntimeError("a real vllm is already imported; no stand-in needed")
    if importlib.util.find_spec("vllm") is not None:
        return False

    def rotary_embedding(*args, **kwargs):
        raise RuntimeError(
            "test stand-in vllm._custom_ops.rotary_embedding was called; on a "
            "plain CPU sglang's RotaryEmbedding runs forward_native instead"
        )

    vllm = types.ModuleType("vllm")
    vllm.__path__ = []  # a package, so "vllm._custom_ops" resolves
    vllm.__doc__ = "test stand-in (test/backport/e2e/cpu_serving.py)"
    vllm.__cpu_serving_stand_in__ = True
    custom_ops = types.ModuleType("vllm._custom_ops")
    custom_ops.rotary_embedding = rotary_embedding
    vllm._custom_ops = custom_ops
    sys.modules["vllm"] = vllm
    sys.modules["vllm._custom_ops"] = custom_ops
    return True


def install_speculative_kernel_stand_ins() -> bool:
    """Route the three speculative functions without a plain-CPU branch to
    sglang's own Triton implementations (see the module docstring). Only on a
    plain CPU; returns whether they were installed."""
    if not plain_cpu():
        return False
    if importlib.util.find_spec("sglang.kernels") is None:
        # Before v0.5.16 these functions live elsewhere (v0.5.14 has no Triton
        # tree kernels at all); the servers of those lines here only start
        # and report their config (--skip-server-warmup), they run no request.
        return False
    import torch

    import sglang.kernels.ops.speculative.cache_locs as cache_locs
    import sglang.srt.speculative.eagle_utils as eagle_utils
    from sglang.srt.utils import next_power_of_2

    # build_tree_kernel_efficient's last branch calls this module global.
    eagle_utils.sgl_build_tree_kernel_efficient = (
        eagle_utils.sgl_build_tree_kernel_triton
    )

    def verify_tree_greedy_func(
        predicts, accept_index, accept_token_num, topk=-1, **tree
    ):
        # Called with keywords only (eagle_utils); fills the three buffers.
        eagle_utils.verify_tree_greedy_triton(
            predicts=predicts,
            accept_index=accept_index,
            accept_token_num=accept_token_num,
            **tree,
        )
        return predicts, accept_index, accept_token_num

    # Its caller (eagle_utils) looks it up as a module global at call time.
    eagle_utils.verify_tree_greedy_func = verify_tree_greedy_func

    def assign_extend_cache_locs_func(
        req_pool_indices,
        req_to_token,
        start_offset,
        end_offset,
        batch_size,
        draft_token_num,
        device,
    ):
        out_cache_loc = torch.empty(
            (batch_size * draft_token_num,), dtype=torch.int64, device=device
        )
        cache_locs.assign_extend_cache_locs[(batch_size,)](
            req_pool_indices,
            req_to_token,
            start_offset,
            end_offset,
            out_cache_loc,
            req_to_token.shape[1],
            next_power_of_2(batch_size),
        )
        return out_cache_loc

    # Imported from cache_locs inside eagle_prepare_for_verify at call time.
    cache_locs.assign_extend_cache_locs_func = assign_extend_cache_locs_func
    return True


def install_cuda_synchronize_stand_in() -> bool:
    """Make ``torch.cuda.synchronize`` a no-op on a plain CPU, where there is
    no device to wait for. Before v0.5.16, ``LlamaForCausalLM.set_embed_and_head``
    (``models/llama.py``, which EAGLE's draft runs when it takes the target's
    embedding and head) calls it on every platform but XPU; in a forked or
    spawned process without CUDA it raises. Returns whether it is installed."""
    if not plain_cpu():
        return False
    import torch

    def synchronize(device=None):
        return None

    torch.cuda.synchronize = synchronize
    return True


def install_stand_ins() -> List[str]:
    """Every stand-in this platform needs (none on a CUDA machine); returns
    the names of those installed."""
    installed = []
    if os.environ.get(OLDER_RELEASE_SWITCH) is not None:
        installed += install_older_release_stand_ins()
    if install_vllm_custom_ops_stand_in():
        installed.append("vllm._custom_ops")
    if install_cuda_synchronize_stand_in():
        installed.append("torch.cuda.synchronize")
    if install_speculative_kernel_stand_ins():
        installed.append("speculative-kernels")
    return installed


# --------------------------------------------------------------------------- #
# The releases before v0.5.14 (scripts/dev/serve_older_releases.py only)
# --------------------------------------------------------------------------- #

# What serving a release from v0.5.6 to v0.5.13 config-only on this CPU takes
# beyond the above. None of it reaches the servers of v0.5.14 on: only
# ``older_release_server`` adds these flags and PYTHONPATH entries, and sets
# OLDER_RELEASE_SWITCH, without which no process installs these stand-ins.
#
# * ``--disable-piecewise-cuda-graph``, a stock flag, where the release has it
#   (v0.5.10 to v0.5.13). Those releases capture piecewise CUDA graphs by
#   default and turn that off for a CPU only under sglang's CPU engine; on a
#   plain CPU the target's ModelRunner fails: "AttributeError: module
#   'torch.cpu' has no attribute 'graph_pool_handle'"
#   (piecewise_cuda_graph_runner.py). v0.5.6 to v0.5.9 capture them only with
#   --enable-piecewise-cuda-graph.
# * ``test/backport/stubs/`` on PYTHONPATH after the package, for the releases
#   before v0.5.13, which import sgl_kernel at module level (see
#   stubs/stand_in.py: sgl_kernel and vllm's activation module as MagicMocks).
# * Stand-ins (``OLDER_RELEASE_STAND_INS``), each where the release's own
#   source needs it (``older_release_stand_ins``); the server's processes
#   install them before sglang builds anything (``install_stand_ins``).

OLDER_RELEASE_SWITCH = "CPU_SERVING_OLDER_RELEASE"
STUBS = os.path.join(os.path.dirname(os.path.dirname(LAUNCHER)), "stubs")
# The first release that imports without the stubs' sgl_kernel.
_NO_STUBS_FROM = (0, 5, 13)


def _version_key(release: str):
    """v0.5.12.post1 -> (0, 5, 12, 1)."""
    return tuple(
        int(part) for part in release.lstrip("v").replace("post", "").split(".")
    )


def _release_source(package_root: str, path: str) -> str:
    with open(os.path.join(package_root, "sglang", path), encoding="utf-8") as fh:
        return fh.read()


def older_release_args(package_root: str) -> List[str]:
    """Launcher flags an older release's server needs on this CPU besides
    ``serving_args`` (``package_root``: the folder holding its ``sglang``)."""
    if not plain_cpu():
        return []
    if '"--disable-piecewise-cuda-graph"' in _release_source(
        package_root, "srt/server_args.py"
    ):
        return ["--disable-piecewise-cuda-graph"]
    return []


def older_release_stand_ins(package_root: str, stubs: bool) -> List[str]:
    """The names (keys of ``OLDER_RELEASE_STAND_INS``) of the stand-ins the
    release in ``package_root`` needs on this CPU, from its own source;
    ``stubs``: whether the stubs' vllm is on its PYTHONPATH."""
    if not plain_cpu():
        return []
    names = []
    if stubs:
        names.append("vllm._custom_ops")
        layernorm = _release_source(package_root, "srt/layers/layernorm.py")
        if "from vllm.model_executor.layers.layernorm import" in layernorm:
            names.append("vllm.model_executor.layers.layernorm")
    torchao = _release_source(package_root, "srt/layers/torchao_utils.py")
    imported = torchao.find("from torchao.quantization import")
    checked = torchao.find('torchao_config == ""')
    if 0 <= imported < checked and importlib.util.find_spec("torchao") is None:
        names.append("apply_torchao_config_to_model")
    return names


def older_release_server(
    argv: List[str], package_root: str, release: str, keep_log: bool = False
) -> "ServerProcess":
    """A config-only server of ``release`` (v0.5.6 to v0.5.13) from
    ``package_root`` (an unpacked release or a fork's ``python/``), with what
    it needs on this CPU (above). Start it and stop it as any ServerProcess."""
    stubs = plain_cpu() and _version_key(release) < _NO_STUBS_FROM
    env = {OLDER_RELEASE_SWITCH: ",".join(older_release_stand_ins(package_root, stubs))}
    if stubs:
        entries = [package_root, STUBS]
        entries += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in entries)
    return ServerProcess(
        list(argv) + older_release_args(package_root),
        package_root,
        keep_log=keep_log,
        config_only=True,
        env=env,
    )


def _server_info_starts_the_reply_loop(package_root: str) -> bool:
    """Whether the release's ``TokenizerManager.get_internal_state`` starts
    the tokenizer manager's reply loop itself (v0.5.10 on)."""
    for name in ("tokenizer_control_mixin", "tokenizer_communicator_mixin"):
        path = os.path.join(package_root, "sglang", "srt", "managers", name + ".py")
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
        start = source.find("async def get_internal_state(")
        if start >= 0:
            end = source.find("\n    async def ", start + 1)
            return "self.auto_create_handle_loop()" in source[start:end]
    return True


def older_release_server_info(server: "ServerProcess") -> dict:
    """``/server_info`` of an ``older_release_server``.

    On v0.5.6 to v0.5.9, ``TokenizerManager.get_internal_state`` (what
    ``/server_info`` awaits) does not start the tokenizer manager's reply
    loop (``auto_create_handle_loop``); every other request to the scheduler
    does, and the first, sglang's warm-up request, always did. A config-only
    server has sent none, so the scheduler's reply is never read and
    ``/server_info`` never answers (v0.5.10 added the call). Where the
    release lacks it, one read-only request whose handler starts the loop
    goes first: ``/get_weights_by_name`` of the target's final norm, one
    value."""
    if not _server_info_starts_the_reply_loop(server.pythonpath):
        server._ok(
            "POST",
            "/get_weights_by_name",
            {"name": "model.norm.weight", "truncate_size": 1},
            timeout=60,
        )
    return server.server_info()


def _raising(name: str):
    def stand_in(*args, **kwargs):
        raise RuntimeError(
            f"test stand-in {name} was called (test/backport/e2e/cpu_serving.py); "
            "an older release's config-only server on a plain CPU never calls it"
        )

    stand_in.__name__ = name.rsplit(".", 1)[-1]
    return stand_in


def _stand_in_module(name: str, **attributes):
    import types

    module = types.ModuleType(name)
    module.__doc__ = "test stand-in (test/backport/e2e/cpu_serving.py)"
    module.__dict__.update(attributes)
    sys.modules[name] = module
    return module


def _stubs_vllm():
    """The stubs' vllm package, imported (``older_release_server`` puts it on
    PYTHONPATH for these releases; a real vllm is refused)."""
    import vllm

    where = os.path.dirname(os.path.dirname(os.path.abspath(vllm.__file__ or "")))
    if where != os.path.abspath(STUBS):
        raise RuntimeError(f"a vllm other than the stubs' is imported: {vllm}")
    return vllm


def _vllm_custom_ops_beside_the_stubs():
    """With the stubs on PYTHONPATH a ``vllm`` imports (the stubs' package:
    vllm's activation module and nothing else), so
    ``install_vllm_custom_ops_stand_in`` would step aside and
    ``RotaryEmbedding.__init__`` fail: "ModuleNotFoundError: No module named
    'vllm._custom_ops'". The same stand-in goes beside the stubs' package:
    ``rotary_embedding``, which raises if called (on a plain CPU the layer
    runs ``forward_native``). ``install_vllm_custom_ops_stand_in``, next,
    takes it as its own and reports it."""
    vllm = _stubs_vllm()
    name = "vllm._custom_ops.rotary_embedding"
    vllm._custom_ops = _stand_in_module(
        "vllm._custom_ops", rotary_embedding=_raising(name)
    )
    vllm.__cpu_serving_stand_in__ = True


def _vllm_layernorm_as_sglangs_own():
    """v0.5.6 and v0.5.7's ``layers/layernorm.py`` end, on a CPU without AMX,
    with ``from vllm.model_executor.layers.layernorm import GemmaRMSNorm,
    RMSNorm``, which replaces sglang's own two classes with vllm's. The stubs
    have no such module (every model that imports ``layernorm`` then fails to
    import: "No module named 'vllm.model_executor.layers.layernorm'", and
    LlamaForCausalLM falls back to the Transformers backend). The stand-in
    answers both names with the classes ``layernorm.py`` defined above that
    line, so the import rebinds each to itself: sglang's own RMSNorm and
    GemmaRMSNorm, as on a CUDA machine, where the line does not run."""

    def own(name):
        if name in ("RMSNorm", "GemmaRMSNorm"):
            return getattr(sys.modules["sglang.srt.layers.layernorm"], name)
        raise AttributeError(name)

    _stubs_vllm()
    _stand_in_module("vllm.model_executor.layers.layernorm", __getattr__=own)


def _empty_torchao_config_first():
    """v0.5.6 to v0.5.8's ``apply_torchao_config_to_model``
    (``layers/torchao_utils.py``), which ``ModelRunner.load_model`` calls on
    every model, imports torchao before it returns on an empty
    ``--torchao-config``; torchao is not installed here: "ModuleNotFoundError:
    No module named 'torchao'". The stand-in returns the model on an empty
    config first, as v0.5.9 on do, and calls the release's function
    otherwise. A torchao module would not do: transformers asks
    ``importlib.util.find_spec("torchao")`` whether torchao is there.
    ``torchao_utils`` imports only torch; ``model_runner.py`` and
    ``model_loader/loader.py`` take the function from it after this."""
    import sglang.srt.layers.torchao_utils as torchao_utils

    release = torchao_utils.apply_torchao_config_to_model

    def apply_torchao_config_to_model(model, torchao_config, *args, **kwargs):
        if torchao_config == "" or torchao_config is None:
            return model
        return release(model, torchao_config, *args, **kwargs)

    torchao_utils.apply_torchao_config_to_model = apply_torchao_config_to_model


OLDER_RELEASE_STAND_INS = {
    "vllm._custom_ops": _vllm_custom_ops_beside_the_stubs,
    "vllm.model_executor.layers.layernorm": _vllm_layernorm_as_sglangs_own,
    "apply_torchao_config_to_model": _empty_torchao_config_first,
}


def install_older_release_stand_ins() -> List[str]:
    """Install the stand-ins OLDER_RELEASE_SWITCH names (set only by
    ``older_release_server``); returns the names to report. Called before
    ``install_vllm_custom_ops_stand_in``."""
    names = [n for n in os.environ.get(OLDER_RELEASE_SWITCH, "").split(",") if n]
    for name in names:
        OLDER_RELEASE_STAND_INS[name]()
    # install_vllm_custom_ops_stand_in reports the vllm._custom_ops one.
    return [name for name in names if name != "vllm._custom_ops"]


# --------------------------------------------------------------------------- #
# A server process
# --------------------------------------------------------------------------- #

_REPORT = "cpu_serving: "
_running: "set[ServerProcess]" = set()


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    """A free port below Linux's default ephemeral range (32768-60999). A port
    from bind(0) is an ephemeral one, and the server binds its HTTP port last:
    by then sglang's own get_free_port() (torch.distributed's port) or a local
    end of one of its connections may have taken it ("address already in use",
    and a server that never gets ready)."""
    for port in random.sample(range(20000, 32000), 100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ServerError("no free port in 20000-31999 on 127.0.0.1")


def _shm_files(pids: List[int]) -> List[str]:
    """The /dev/shm files these processes hold open (sglang's load snapshot,
    ``/dev/shm/sglang_loads_<instance>.shm``, is never removed by sglang)."""
    paths = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/dev/shm/sglang_"):
                paths.add(target)
    return sorted(paths)


def _group_members(pgid: int) -> List[int]:
    """Live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # pid (comm) state ppid pgrp ...; comm may hold spaces.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def _decoded(body: bytes):
    """A reply's JSON, or its text where it is not JSON (``/flush_cache``)."""
    try:
        return json.loads(body or b"null")
    except ValueError:
        return body.decode(errors="replace")


class ServerProcess:
    """A real ``sglang.launch_server`` in its own process group.

    ``pythonpath`` is put first on PYTHONPATH of the server and so of its
    spawn children (e.g. a directory holding the unpatched sglang); without it
    the server inherits this process's PYTHONPATH. ``config_only`` starts it
    with CONFIG_ONLY_ARGS and CONFIG_ONLY_ENV. Use as a context manager,
    or call ``start`` and ``wait_ready`` and always ``stop``.
    """

    def __init__(
        self,
        argv: List[str],
        pythonpath: Optional[str] = None,
        keep_log: bool = False,
        config_only: bool = False,
        env: Optional[Dict[str, str]] = None,
    ):
        self.port = free_port()
        self.argv = list(argv) + serving_args() + ["--port", str(self.port)]
        if config_only:
            self.argv += CONFIG_ONLY_ARGS
        self.config_only = config_only
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.pythonpath = pythonpath
        # The server's own TMPDIR: sglang leaves its IPC sockets there; removed
        # at stop with the log (unless keep_log) and the /dev/shm files the
        # server held.
        self.tmpdir = tempfile.mkdtemp(prefix="sglang-server-")
        self.log_path = os.path.join(self.tmpdir, "server.log")
        self.keep_log = keep_log
        self.proc: Optional[subprocess.Popen] = None
        self._log = None
        # Added to the server's environment last (``older_release_server``).
        self.env = dict(env or {})

    # -- lifecycle ---------------------------------------------------------- #

    def start(self) -> "ServerProcess":
        env = server_env(self.pythonpath)
        if self.config_only:
            env.update(CONFIG_ONLY_ENV)
        env.update(self.env)
        env["TMPDIR"] = self.tmpdir
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, LAUNCHER, *self.argv],
            env=env,
            cwd=self.tmpdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as one
        )
        _running.add(self)
        return self

    def wait_ready(self, timeout: float = 240, poll: float = 0.5) -> float:
        """Wait until ``/health`` answers 200 (after sglang's own warm-up
        request), asking every ``poll`` seconds; return the seconds since
        ``start``."""
        started = time.monotonic()
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(
                    f"server exited with {self.proc.returncode} before it was "
                    f"ready; log tail:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(poll)
        raise ServerError(
            f"server not ready after {timeout:.0f} s; log tail:\n{self.log_tail()}"
        )

    def stop(self, grace: float = 15) -> None:
        """Stop the server by its pid and then its whole process group:
        SIGTERM to the launcher (sglang's own shutdown, which ends its
        children), SIGKILL to the group for anything left after ``grace``
        seconds. Raises if a process of the group is still alive afterwards."""
        if self.proc is None:
            return
        _running.discard(self)
        pgid = self.proc.pid  # start_new_session: the group id is its pid
        shm_files = _shm_files(_group_members(pgid))
        try:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self._log.close()
        # Again until the group is empty: a process forked while the signal
        # went out (sglang's shutdown starts helpers) did not get it.
        deadline = time.monotonic() + 10
        while True:
            left = _group_members(pgid)
            if not left:
                break
            if time.monotonic() > deadline:
                raise ServerError(f"server processes still running: {left}")
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            time.sleep(0.2)
        for path in shm_files:
            if os.path.exists(path):
                os.unlink(path)
        self._remove_tmpdir()

    def _remove_tmpdir(self) -> None:
        for name in os.listdir(self.tmpdir):
            path = os.path.join(self.tmpdir, name)
            if path == self.log_path and self.keep_log:
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        if not self.keep_log:
            os.rmdir(self.tmpdir)

    def __enter__(self) -> "ServerProcess":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_tail(self, chars: int = 4000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return "(no log)"

    def reported_processes(self) -> Dict[int, Dict[str, str]]:
        """{pid: {"sglang": package dir, "stand-ins": names or "none"}} for
        every process of the server that ran this launcher (the launcher and
        its spawn children), as each reported it at start."""
        reported = {}
        with open(self.log_path, errors="replace") as f:
            for line in f:
                if line.startswith(_REPORT):
                    fields = dict(
                        item.split("=", 1) for item in line[len(_REPORT) :].split()
                    )
                    reported[int(fields.pop("pid"))] = fields
        return reported

    # -- requests (each with a timeout) ------------------------------------- #

    def request(self, method: str, path: str, payload=None, timeout: float = 120):
        """(status, decoded JSON body) of one request. A request the server
        never answers (refused, dropped, timed out) raises ServerError with
        the tail of the server's log, which says why."""
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, _decoded(r.read())
        except urllib.error.HTTPError as e:
            return e.code, _decoded(e.read())
        except (OSError, http.client.HTTPException) as e:
            # URLError, RemoteDisconnected, a timeout: no answer at all.
            raise ServerError(
                f"{method} {path} got no answer ({type(e).__name__}: {e}); "
                f"server log tail:\n{self.log_tail()}"
            ) from e

    def _ok(self, method: str, path: str, payload=None, timeout: float = 120):
        status, body = self.request(method, path, payload, timeout)
        if status != 200:
            raise ServerError(
                f"{method} {path} answered {status}: {body}; "
                f"server log tail:\n{self.log_tail()}"
            )
        return body

    def generate(self, input_ids: List[int], max_new_tokens: int) -> dict:
        """Greedy ``/generate`` of token ids; the reply (``output_ids``,
        ``meta_info``)."""
        return self._ok(
            "POST",
            "/generate",
            {
                "input_ids": input_ids,
                "sampling_params": {
                    "temperature": 0,
                    "max_new_tokens": max_new_tokens,
                    "ignore_eos": True,
                },
            },
        )

    def server_info(self) -> dict:
        """``/server_info``: the top level is the HTTP process's copy of the
        config; ``internal_states[0]`` is the scheduler's published config."""
        return self._ok("GET", "/server_info", timeout=60)

    def update_weights_from_disk(self, model_path: str) -> dict:
        """``/update_weights_from_disk`` (no load format: the server picks it),
        sent once the scheduler is idle.

        The reload ends with a cache flush that sglang asserts succeeded, and
        a flush fails while the scheduler still holds the request that just
        finished (it drops it only when it builds its next batch). A reload
        sent the moment a ``/generate`` reply arrives can get there first when
        the scheduler waits for a busy CPU; the assertion then ends the
        scheduler, whose SIGQUIT ends the HTTP process, and the reload gets no
        answer (sgl-project/sglang#14062). ``/flush_cache`` with a timeout
        answers once the scheduler is idle."""
        status, body = self.request("POST", "/flush_cache?timeout=60", timeout=90)
        if status != 200:
            raise ServerError(f"/flush_cache answered {status}: {body}")
        status, body = self.request(
            "POST", "/update_weights_from_disk", {"model_path": model_path}
        )
        if not isinstance(body, dict):
            raise ServerError(f"/update_weights_from_disk answered {status}: {body}")
        return body


@atexit.register
def _stop_left_servers() -> None:
    # A run interrupted between start and stop (Ctrl-C) leaves nothing behind.
    for server in list(_running):
        try:
            server.stop(grace=5)
        except Exception:  # best effort at exit
            pass


def _report_process() -> None:
    import sglang

    installed = install_stand_ins()
    print(
        f"{_REPORT}pid={os.getpid()} "
        f"sglang={os.path.dirname(os.path.abspath(sglang.__file__))} "
        f"stand-ins={','.join(installed) or 'none'}",
        flush=True,
    )


def main() -> None:
    """The launcher: run sglang.launch_server with this process's arguments."""
    import runpy

    sys.argv = ["sglang.launch_server", *sys.argv[1:]]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=False)


if __name__ in ("__main__", "__mp_main__"):
    # The launcher process and, re-importing this file, each spawn child.
    _report_process()

if __name__ == "__main__":
    main()

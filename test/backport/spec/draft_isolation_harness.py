"""Drive the real speculative draft worker of each algorithm through the real
``Scheduler.maybe_init_draft_worker`` on CPU, with only the draft's model
loading stubbed, and report what happened to the target's ``ServerArgs``.

Everything up to the draft ``TpModelWorker`` is the real sglang code: the
scheduler hand-off, ``SpeculativeAlgorithm.create_worker``, the spec worker's
``__init__`` and its draft-worker wrapper (``EagleDraftWorker``,
``build_draft_tp_worker``, ...). The draft ``TpModelWorker`` is replaced by a
recorder that notes the ``ServerArgs`` it was handed and the process-wide
published config at that moment, then raises ``_DraftBuilt`` to stop the
construction (building the rest needs a real model and a GPU).

The same code drives each release line a series serves (v0.5.14, the
v0.5.15 line, v0.5.16): what differs between them is looked up where it is
used (``ServerArgs.override`` from v0.5.16 on; the published slot on
``get_context()`` from v0.5.15 on, a module global of ``server_args`` in
v0.5.14; DSPARK from v0.5.16 on), never from a version string.

Used by ``test_draft_worker_matrix.py``; ``run_algorithm`` returns plain data.
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import traceback
from contextlib import ExitStack
from copy import deepcopy
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional
from unittest import mock

# Context lengths differ so a draft value leaking onto the target is visible.
TARGET_CONTEXT_LEN = 4096
DRAFT_CONTEXT_LEN = 1024
VOCAB_SIZE = 256
DRAFT_LOAD_FORMAT = "dummy"

PLUGIN_ALGORITHM = "DRAFT_ISOLATION_PLUGIN"

# Fields always reported, whether or not they changed.
REPORTED_FIELDS = ("context_length", "load_format", "json_model_override_args")

# Every place a spec worker builds its draft TpModelWorker, under the name it
# is imported as there. All of them a release has are stubbed at once, so a
# draft built through any of them is recorded; each case names the one it
# expects. DFLASH builds its own before v0.5.16, through
# draft_worker_common.build_draft_tp_worker (also DSPARK's) from v0.5.16 on.
_EAGLE_SITE = "sglang.srt.speculative.eagle_worker_v2.TpModelWorker"
_STANDALONE_SITE = "sglang.srt.speculative.standalone_worker_v2.TpModelWorker"
_MULTI_LAYER_SITE = "sglang.srt.speculative.multi_layer_eagle_worker_v2.TpModelWorker"
_FROZEN_KV_SITE = "sglang.srt.speculative.frozen_kv_mtp_worker_v2.TpModelWorker"
DFLASH_OWN_SITE = "sglang.srt.speculative.dflash_worker_v2.TpModelWorker"
_DRAFT_COMMON_SITE = "sglang.srt.speculative.draft_worker_common.TpModelWorker"
_TP_WORKER_SITE = "sglang.srt.managers.tp_worker.TpModelWorker"
DRAFT_TP_WORKER_SITES = (
    _EAGLE_SITE,
    _STANDALONE_SITE,
    _MULTI_LAYER_SITE,
    _FROZEN_KV_SITE,
    DFLASH_OWN_SITE,
    _DRAFT_COMMON_SITE,
    _TP_WORKER_SITE,
)


def _site_exists(site: str) -> bool:
    """Whether this release has ``site``: a module that holds that name."""
    module_name, name = site.rsplit(".", 1)
    if importlib.util.find_spec(module_name) is None:
        return False
    return hasattr(importlib.import_module(module_name), name)


def draft_tp_worker_sites():
    """The sites of DRAFT_TP_WORKER_SITES this release has."""
    return tuple(site for site in DRAFT_TP_WORKER_SITES if _site_exists(site))


def _dflash_site() -> str:
    """Where DFLASH builds its draft TpModelWorker on this release."""
    if _site_exists(_DRAFT_COMMON_SITE):
        return _DRAFT_COMMON_SITE
    return DFLASH_OWN_SITE


def has_algorithm(name: str) -> bool:
    """Whether this release has algorithm ``name`` (a key of CASES)."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return name != "DSPARK" or hasattr(SpeculativeAlgorithm, "DSPARK")


@dataclasses.dataclass(frozen=True)
class AlgorithmCase:
    name: str
    worker_class: str
    # Where the draft TpModelWorker is constructed for this algorithm (a
    # function of no arguments where that depends on the release).
    stub_site: Any
    build: Callable[[Optional[str]], Any]
    how: str


# --------------------------------------------------------------------------
# Tiny model config dirs
# --------------------------------------------------------------------------

_MODEL_DIRS: Dict[str, str] = {}


def _write_llama_config(path: str, architecture: str, context_len: int) -> str:
    from transformers import LlamaConfig

    LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=context_len,
        architectures=[architecture],
    ).save_pretrained(path)
    return path


def model_dirs() -> Dict[str, str]:
    """Config-only model dirs (no weights), written once per process."""
    if not _MODEL_DIRS:
        root = tempfile.mkdtemp(prefix="draft_isolation_")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        for key, arch, ctx in (
            ("target", "LlamaForCausalLM", TARGET_CONTEXT_LEN),
            ("eagle", "LlamaForCausalLMEagle", DRAFT_CONTEXT_LEN),
            ("eagle3", "LlamaForCausalLMEagle3", DRAFT_CONTEXT_LEN),
            ("plain", "LlamaForCausalLM", DRAFT_CONTEXT_LEN),
        ):
            _MODEL_DIRS[key] = _write_llama_config(os.path.join(root, key), arch, ctx)
    return _MODEL_DIRS


# --------------------------------------------------------------------------
# Config builders: a resolved target ServerArgs per algorithm
# --------------------------------------------------------------------------


def _resolve(
    algorithm: str, draft: str, draft_load_format: Optional[str], **extra
) -> Any:
    from sglang.srt.server_args import ServerArgs

    kwargs = dict(
        model_path=model_dirs()["target"],
        device="cpu",
        skip_tokenizer_init=True,
        attention_backend="torch_native",
        speculative_algorithm=algorithm,
        speculative_draft_model_path=model_dirs()[draft],
        speculative_num_steps=2,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=3,
        speculative_draft_load_format=draft_load_format,
    )
    kwargs.update(extra)
    return ServerArgs(**kwargs)


def _build_eagle(draft_load_format):
    return _resolve("EAGLE", "eagle", draft_load_format)


def _build_eagle3(draft_load_format):
    return _resolve("EAGLE3", "eagle3", draft_load_format)


def _build_standalone(draft_load_format):
    return _resolve("STANDALONE", "plain", draft_load_format)


def _build_multi_layer_eagle(draft_load_format):
    return _resolve("EAGLE", "eagle", draft_load_format, enable_multi_layer_eagle=True)


def _build_frozen_kv_mtp(draft_load_format):
    return _resolve("FROZEN_KV_MTP", "plain", draft_load_format)


def _build_dflash_family(algorithm: str, draft_load_format, **block_size):
    # DFLASH and DSPARK refuse to resolve off CUDA (their arg hooks check
    # device.startswith("cuda") first). So resolve the same target and draft
    # as a CPU-resolvable algorithm (STANDALONE), then switch the algorithm
    # (through ServerArgs.override where the release has it, by assignment
    # before v0.5.16) and set what their hooks would have set:
    # num_steps = topk = 1 and num_draft_tokens = the verify block
    # (DFLASH: block_size; DSPARK: gamma + 1). max_running_requests=48 and
    # enable_mixed_chunk=False already match from the STANDALONE resolution.
    server_args = _resolve(
        "STANDALONE",
        "plain",
        draft_load_format,
        speculative_num_steps=1,
        speculative_num_draft_tokens=2,
    )
    fields = dict(
        speculative_algorithm=algorithm,
        speculative_num_steps=1,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        **block_size,
    )
    if hasattr(server_args, "override"):
        server_args.override("test.draft_isolation_harness", **fields)
    else:
        for name, value in fields.items():
            setattr(server_args, name, value)
    return server_args


def _build_dflash(draft_load_format):
    return _build_dflash_family(
        "DFLASH", draft_load_format, speculative_dflash_block_size=4
    )


def _build_dspark(draft_load_format):
    return _build_dflash_family(
        "DSPARK", draft_load_format, speculative_dspark_block_size=3
    )


def _build_plugin(draft_load_format):
    # Needs the plugin registered (see _registered_plugin): ServerArgs
    # resolution looks the algorithm name up.
    return _resolve(PLUGIN_ALGORITHM, "plain", draft_load_format)


CASES: Dict[str, AlgorithmCase] = {
    case.name: case
    for case in (
        AlgorithmCase(
            "EAGLE",
            "EAGLEWorkerV2",
            _EAGLE_SITE,
            _build_eagle,
            "resolved on CPU; draft LlamaForCausalLMEagle",
        ),
        AlgorithmCase(
            "EAGLE3",
            "EAGLEWorkerV2",
            _EAGLE_SITE,
            _build_eagle3,
            "resolved on CPU; draft LlamaForCausalLMEagle3",
        ),
        AlgorithmCase(
            "STANDALONE",
            "StandaloneWorkerV2",
            _STANDALONE_SITE,
            _build_standalone,
            "resolved on CPU; draft plain LlamaForCausalLM",
        ),
        AlgorithmCase(
            "MULTI_LAYER_EAGLE",
            "MultiLayerEagleWorkerV2",
            _MULTI_LAYER_SITE,
            _build_multi_layer_eagle,
            "EAGLE + enable_multi_layer_eagle, resolved on CPU",
        ),
        AlgorithmCase(
            "FROZEN_KV_MTP",
            "FrozenKVMTPWorkerV2",
            _FROZEN_KV_SITE,
            _build_frozen_kv_mtp,
            "resolved on CPU; draft plain LlamaForCausalLM",
        ),
        AlgorithmCase(
            "DFLASH",
            "DFlashWorkerV2",
            _dflash_site,
            _build_dflash,
            "STANDALONE resolved on CPU, then override(speculative_algorithm="
            "'DFLASH', steps=1, topk=1, block 4): DFLASH refuses non-CUDA",
        ),
        AlgorithmCase(
            "DSPARK",
            "DSparkWorkerV2",
            _DRAFT_COMMON_SITE,
            _build_dspark,
            "STANDALONE resolved on CPU, then override(speculative_algorithm="
            "'DSPARK', steps=1, topk=1, gamma 3): DSPARK refuses non-CUDA",
        ),
        AlgorithmCase(
            "PLUGIN",
            "_PluginDraftWorker",
            _TP_WORKER_SITE,
            _build_plugin,
            f"plugin {PLUGIN_ALGORITHM!r} registered with "
            "SpeculativeAlgorithm.register, resolved on CPU",
        ),
    )
}
ALGORITHMS = tuple(CASES)


def build_target_server_args(name: str, draft_load_format: Optional[str] = "dummy"):
    """A resolved target ServerArgs for algorithm ``name`` (a key of CASES).
    For PLUGIN, call inside ``registered_plugin()``."""
    return CASES[name].build(draft_load_format)


# --------------------------------------------------------------------------
# The registered plugin algorithm
# --------------------------------------------------------------------------


class _PluginDraftWorker:
    """A plugin spec worker: builds its draft TpModelWorker the way an
    out-of-tree worker would, from ``sglang.srt.managers.tp_worker``."""

    record: Dict[str, Any] = {}

    def __init__(self, server_args, target_worker, **parallel):
        # ``parallel``: the ranks and port the scheduler hands every spec
        # worker (gpu_id, ps, nccl_port from v0.5.16 on; each rank before).
        from sglang.srt.managers import tp_worker

        _PluginDraftWorker.record["worker_args"] = server_args
        _PluginDraftWorker.record["worker_published"] = published_slot()
        self.server_args = server_args
        self.target_worker = target_worker
        self.draft_worker = tp_worker.TpModelWorker(
            server_args=server_args, is_draft_worker=True, **parallel
        )


def _plugin_factory(server_args):
    _PluginDraftWorker.record["factory_args"] = server_args
    _PluginDraftWorker.record["factory_published"] = published_slot()
    return _PluginDraftWorker


class registered_plugin:
    """Registers PLUGIN_ALGORITHM for the scope, unregisters on exit."""

    def __enter__(self):
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        _PluginDraftWorker.record = {}
        SpeculativeAlgorithm.register(PLUGIN_ALGORITHM, supports_overlap=True)(
            _plugin_factory
        )
        return _PluginDraftWorker.record

    def __exit__(self, *exc):
        # 0.5.16 has no public unregister; drop the registry entry directly.
        from sglang.srt.speculative import spec_registry

        spec_registry._REGISTRY.pop(PLUGIN_ALGORITHM, None)


# --------------------------------------------------------------------------
# Fake scheduler and target worker
# --------------------------------------------------------------------------


class FakeTargetWorker:
    """Stands in for the target TpModelWorker: what the scheduler and the
    spec workers read of the target before the draft TpModelWorker is built
    (model_runner.model_config.context_len / vocab_size, model_config,
    device, get_memory_pool for FROZEN_KV_MTP, and before v0.5.15 its
    model_runner.memory_pool_config.max_running_requests)."""

    def __init__(self, server_args, context_len: int = TARGET_CONTEXT_LEN):
        self.server_args = server_args
        self.model_config = SimpleNamespace(
            context_len=context_len, vocab_size=VOCAB_SIZE
        )
        self.model_runner = SimpleNamespace(
            model_config=self.model_config,
            server_args=server_args,
            memory_pool_config=SimpleNamespace(
                max_running_requests=server_args.max_running_requests
            ),
        )
        self.device = server_args.device

    def get_memory_pool(self):
        return None, None


def make_scheduler(server_args, spec_algorithm=None, tp_worker=None):
    """A Scheduler with only what ``maybe_init_draft_worker`` reads."""
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    scheduler = Scheduler.__new__(Scheduler)
    scheduler.server_args = server_args
    scheduler.spec_algorithm = (
        spec_algorithm
        if spec_algorithm is not None
        else SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
    )
    # One rank of one: every size 1, every rank (and the GPU id) 0.
    scheduler.ps = ParallelState(
        **{
            field.name: 1 if field.name.endswith("_size") else 0
            for field in dataclasses.fields(ParallelState)
        }
    )
    scheduler.nccl_port = 29500
    scheduler.tp_worker = tp_worker or FakeTargetWorker(server_args)
    return scheduler


# --------------------------------------------------------------------------
# Published-slot helpers
# --------------------------------------------------------------------------


def published_slot():
    """The raw published slot (None when empty; get_server_args() raises):
    on ``get_context()`` from v0.5.15 on, a module global before."""
    from sglang.srt import server_args as server_args_module
    from sglang.srt.runtime_context import get_context

    ctx = get_context()
    if hasattr(ctx, "_server_args"):
        return ctx._server_args
    return server_args_module._global_server_args


def capture_flag() -> Optional[bool]:
    """The published capture flag (None before v0.5.15, which has no flags)."""
    from sglang.srt.runtime_context import get_context

    ctx = get_context()
    if not hasattr(ctx, "flags"):
        return None
    return ctx.flags.capture.enable_torch_compile


class published_target:
    """Publish ``server_args`` as the scheduler process does
    (set_global_server_args_for_scheduler); on exit put back the raw slot,
    even an empty one, and the capture flag."""

    def __init__(self, server_args):
        self.server_args = server_args

    def __enter__(self):
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        self._saved = (published_slot(), capture_flag())
        set_global_server_args_for_scheduler(self.server_args)
        return self.server_args

    def __exit__(self, *exc):
        from sglang.srt import server_args as server_args_module
        from sglang.srt.runtime_context import get_context

        ctx = get_context()
        published, capture = self._saved
        if hasattr(ctx, "_server_args"):
            ctx._server_args = published
            ctx.flags.capture.enable_torch_compile = capture
        else:
            server_args_module._global_server_args = published


# --------------------------------------------------------------------------
# The draft TpModelWorker stub
# --------------------------------------------------------------------------


class _DraftBuilt(Exception):
    """Raised by the stub once the draft TpModelWorker was reached."""


@dataclasses.dataclass
class DraftConstruction:
    site: str
    server_args: Any
    published: Any
    capture_flag: bool
    kwargs: Dict[str, Any]


def _make_recorder(site: str, records: List[DraftConstruction]):
    class _RecordingTpModelWorker:
        # A plain __init__ so FrozenKVMTPDraftWorker's explicit
        # ``TpModelWorker.__init__(self, ...)`` is recorded too.
        def __init__(self, *args, server_args=None, **kwargs):
            records.append(
                DraftConstruction(
                    site=site,
                    server_args=server_args,
                    published=published_slot(),
                    capture_flag=capture_flag(),
                    kwargs=dict(kwargs),
                )
            )
            raise _DraftBuilt(site)

    _RecordingTpModelWorker.__qualname__ = f"RecordingTpModelWorker[{site}]"
    return _RecordingTpModelWorker


class stubbed_draft_tp_worker:
    """Replace the draft TpModelWorker at every construction site; the
    entered value is the list of recorded constructions."""

    def __enter__(self) -> List[DraftConstruction]:
        self.records: List[DraftConstruction] = []
        self._stack = ExitStack()
        for site in draft_tp_worker_sites():
            self._stack.enter_context(
                mock.patch(site, _make_recorder(site, self.records))
            )
        return self.records

    def __exit__(self, *exc):
        self._stack.close()


# --------------------------------------------------------------------------
# Snapshots and JSON
# --------------------------------------------------------------------------


def public_fields(server_args) -> Dict[str, Any]:
    """{name: value} of every public dataclass field, deep-copied so an
    in-place change of a mutable value shows up too."""
    snapshot = {}
    for f in dataclasses.fields(server_args):
        if f.name.startswith("_"):
            continue
        value = getattr(server_args, f.name)
        try:
            value = deepcopy(value)
        except Exception:
            pass
        snapshot[f.name] = value
    return snapshot


def changed_fields(before: Dict[str, Any], after: Dict[str, Any]) -> List[str]:
    return sorted(
        name
        for name in before.keys() | after.keys()
        if name not in before or name not in after or before[name] != after[name]
    )


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def _fields_of(server_args, names) -> Optional[Dict[str, Any]]:
    if server_args is None:
        return None
    return {name: _jsonable(getattr(server_args, name, None)) for name in names}


# --------------------------------------------------------------------------
# run_algorithm
# --------------------------------------------------------------------------


def run_algorithm(name: str, draft_load_format: Optional[str] = "dummy") -> dict:
    """Build algorithm ``name``'s draft through Scheduler.maybe_init_draft_worker
    and report (JSON-able):

    - target_before / target_after: REPORTED_FIELDS plus every public field
      that changed; target_changed_fields names the changed ones;
    - published_after_is_target / published_after: the published config
      once maybe_init_draft_worker returned;
    - draft: what the draft TpModelWorker was handed (is_target, fields) and
      what was published while it was built;
    - plugin (PLUGIN only): what the factory and the worker received;
    - error: a traceback if construction failed before the draft
      TpModelWorker was reached (then draft is None).
    """
    case = CASES[name]
    with ExitStack() as stack:
        plugin_record = (
            stack.enter_context(registered_plugin()) if name == "PLUGIN" else None
        )
        target = case.build(draft_load_format)
        scheduler = make_scheduler(target)
        stack.enter_context(published_target(target))
        records = stack.enter_context(stubbed_draft_tp_worker())

        expected_site = case.stub_site
        if callable(expected_site):
            expected_site = expected_site()
        before = public_fields(target)
        capture_before = capture_flag()
        error = None
        try:
            scheduler.maybe_init_draft_worker()
        except _DraftBuilt:
            pass
        except Exception:
            error = traceback.format_exc()
        else:
            error = "maybe_init_draft_worker returned without building a draft"
        after = public_fields(target)
        published_after = published_slot()
        capture_after = capture_flag()

        changed = changed_fields(before, after)
        reported = list(REPORTED_FIELDS) + [
            f for f in changed if f not in REPORTED_FIELDS
        ]
        result = {
            "algorithm": name,
            "speculative_algorithm": target.speculative_algorithm,
            "worker_class": case.worker_class,
            "how_built": case.how,
            "expected_stub_site": expected_site,
            "draft_load_format": draft_load_format,
            "target_context_len": TARGET_CONTEXT_LEN,
            "target_before": {f: _jsonable(before.get(f)) for f in reported},
            "target_after": {f: _jsonable(after.get(f)) for f in reported},
            "target_changed_fields": changed,
            "published_after_is_target": published_after is target,
            "published_after": _fields_of(published_after, REPORTED_FIELDS),
            "capture_flag_before": capture_before,
            "capture_flag_after": capture_after,
            "error": error,
            "draft": None,
            "plugin": None,
        }
        if records:
            if len(records) > 1:
                # _DraftBuilt stops construction at the first one.
                result["error"] = f"{len(records)} draft TpModelWorkers built"
            rec = records[0]
            result["draft"] = {
                "site": rec.site,
                "is_target": rec.server_args is target,
                "fields": _fields_of(rec.server_args, REPORTED_FIELDS),
                "published_during_is_draft": rec.published is rec.server_args,
                "published_during_is_target": rec.published is target,
                "published_during": _fields_of(rec.published, REPORTED_FIELDS),
                "capture_flag_during": rec.capture_flag,
            }
        elif error is None:
            result["error"] = "the draft TpModelWorker was never constructed"
        if plugin_record is not None:
            factory_args = plugin_record.get("factory_args")
            worker_args = plugin_record.get("worker_args")
            result["plugin"] = {
                "factory_called": "factory_args" in plugin_record,
                "worker_called": "worker_args" in plugin_record,
                "factory_args_is_worker_args": factory_args is worker_args,
                "factory_args_is_target": factory_args is target,
                "worker_args_is_target": worker_args is target,
                "published_in_factory_is_factory_args": (
                    plugin_record.get("factory_published") is factory_args
                ),
                "published_in_worker_is_worker_args": (
                    plugin_record.get("worker_published") is worker_args
                ),
            }
    return result

"""What the release under test has, for ``test_beyond_the_shipped_tests.py``.

The lab runs on every release with a series, each time with that line's
shipped file (``test_draft_server_args``) first on the import path, so it must
be imported before this module: on the lines that stub ``sgl_kernel`` it does
so before anything imports ``sglang.srt``. Every fact here is looked up where
it is used (a module, a class, a method, a field), never from a version
string, and each says on which releases it holds.
"""

import dataclasses
import functools
import importlib
import importlib.util
import inspect
from contextlib import ExitStack, contextmanager
from traceback import walk_stack
from types import SimpleNamespace
from unittest import mock

from sglang.srt import server_args as server_args_module
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm


def module(name):
    """The module ``name``, or None where the release has none. A module that
    raises NameError on import counts as none: v0.5.9 to v0.5.12's
    multi_layer_eagle_worker, whose worker the scheduler cannot build either."""
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:  # nor its package
        return None
    try:
        return importlib.import_module(name)
    except NameError:
        return None


def speculative(name):
    return module(f"sglang.srt.speculative.{name}")


_runtime_context = module("sglang.srt.runtime_context")
_overrides = module("sglang.srt.arg_groups.overrides")
_spec_registry = speculative("spec_registry")
_draft_worker_common = speculative("draft_worker_common")
_load_model_utils = module(
    "sglang.srt.model_executor.model_runner_components.load_model_utils"
)

# The published config is on the runtime context from v0.5.15 on; before, it
# is server_args.py's module global, which every ModelRunner, a draft's too,
# publishes its config to, with its MLA-ness on it (v0.5.15's publishes the
# target's only).
PUBLISHED_ON_THE_CONTEXT = hasattr(_runtime_context, "get_server_args")
RUNNER_PUBLISHES = not PUBLISHED_ON_THE_CONTEXT
# Load-time overrides are declared from v0.5.15 on, and assigned before.
DECLARES = hasattr(_overrides, "declare_load_time_override")
# The scope's capture flag (v0.5.15 on), and v0.5.15's recorded runtime
# overrides, which its scope keeps and restores.
HAS_FLAGS = PUBLISHED_ON_THE_CONTEXT and hasattr(
    _runtime_context.get_context(), "flags"
)
RECORDS_RUNTIME_OVERRIDES = PUBLISHED_ON_THE_CONTEXT and hasattr(
    _runtime_context.get_context(), "_runtime_overrides"
)
# DFLASH and DSPARK build their draft through build_draft_tp_worker, in a
# scope of its own (v0.5.16).
BUILDS_DRAFT_TP_WORKERS = hasattr(_draft_worker_common, "build_draft_tp_worker")
# Up to v0.5.7 the scheduler reaches the draft's load format without an
# algorithm; from v0.5.8 maybe_init_draft_worker returns before it.
BUILDER_SEES_NO_ALGORITHM = not hasattr(Scheduler, "maybe_init_draft_worker")


def _runner_uses(name):
    """Whether ModelRunner's code (its mixins' too) uses ``name``."""
    from sglang.srt.model_executor.model_runner import ModelRunner

    return any(
        name in inspect.getsource(cls)
        for cls in ModelRunner.__mro__
        if cls.__module__.startswith("sglang.")
    )


# The target's ModelRunner writes the draft's memory pool size onto its config
# before the draft is built, v0.5.9 and before; v0.5.10 hands it over as
# memory_pool_config.
DRAFT_RUNNER_CACHE_SIZE = _runner_uses("draft_runner_cache_size")
# v0.5.16's target resolves the mamba cache size (in its KV cache
# configurator) and the GDN prefill kernel (while its backends are built)
# after the draft's copy was made; before, each runner resolves its own or
# ServerArgs does, before the copy.
SIZES_POOLS_IN_A_CONFIGURATOR = (
    module("sglang.srt.mem_cache.kv_cache_configurator") is not None
)
RESOLVES_LINEAR_ATTN_KERNELS_LATE = hasattr(
    module("sglang.srt.layers.attention.linear.gdn_backend"),
    "maybe_set_default_flashinfer_gdn_prefill",
)


def published():
    """The published config (get_server_args, get_global_server_args)."""
    if PUBLISHED_ON_THE_CONTEXT:
        return _runtime_context.get_server_args()
    return server_args_module.get_global_server_args()


def context():
    """The runtime context (v0.5.15 on)."""
    return _runtime_context.get_context()


def set_fields(server_args, **fields):
    """Set fields as the release allows: v0.5.16's published config refuses
    bare writes and takes ``override``."""
    if hasattr(server_args, "override"):
        server_args.override("test.lab", **fields)
    else:
        for name, value in fields.items():
            setattr(server_args, name, value)


def resolve_on_the_target(target, **fields):
    """As the target's ModelRunner does while it loads: declared where the
    release declares load-time overrides, assigned before."""
    if DECLARES:
        _overrides.declare_load_time_override("test.target_load", fields)
    else:
        set_fields(target, **fields)


def declare_in_the_draft(**fields):
    """As a draft model's code does while it loads (v0.5.15 on)."""
    _overrides.declare_load_time_override("test.draft_model", fields)


def publish_as_a_model_runner(server_args, use_mla_backend):
    """As every ModelRunner.__init__ does where RUNNER_PUBLISHES."""
    server_args_module.set_global_server_args_for_scheduler(server_args)
    server_args_module.get_global_server_args().use_mla_backend = use_mla_backend


def publishing_patches():
    """What makes the draft's copy and publishes a config, as
    mock.patch.object arguments: the scope and the setter are RuntimeContext
    methods from v0.5.15 on, functions of server_args.py before (the release
    as released has no scope and no copy: patch them with ``create``)."""
    if PUBLISHED_ON_THE_CONTEXT:
        owner, setter = _runtime_context.RuntimeContext, "set_server_args"
    else:
        owner, setter = server_args_module, "set_global_server_args_for_scheduler"
    return [
        (owner, "scoped_server_args"),
        (owner, setter),
        (server_args_module, "draft_server_args_copy"),
    ]


class EmptySlot:
    """A published slot that holds nothing, and the scope on it: a context of
    its own from v0.5.15 on, the module slot emptied before."""

    def __init__(self):
        if PUBLISHED_ON_THE_CONTEXT:
            self.context = _runtime_context.RuntimeContext(
                _runtime_context.ParallelContext()
            )
        else:
            server_args_module.set_global_server_args_for_scheduler(None)

    def scope(self, server_args):
        if PUBLISHED_ON_THE_CONTEXT:
            return self.context.scoped_server_args(server_args)
        return server_args_module.scoped_server_args(server_args)

    def read(self):
        """The slot's config; ValueError when it holds none."""
        if PUBLISHED_ON_THE_CONTEXT:
            return self.context.server_args
        return server_args_module.get_global_server_args()


def load_format(server_args):
    """The load format of the LoadConfig a ModelRunner builds from
    ``server_args``: build_load_config from v0.5.16, LoadConfig before."""
    if hasattr(_load_model_utils, "build_load_config"):
        return _load_model_utils.build_load_config(
            server_args=server_args,
            tp_rank=0,
            remote_instance_weight_transporter_engine=None,
            remote_instance_weight_transporter_session_id="",
            draft_model_idx=None,
        ).load_format
    from sglang.srt.configs.load_config import LoadConfig

    return LoadConfig(load_format=server_args.load_format).load_format


@contextmanager
def recording_algorithm(worker_class):
    """A plugin algorithm whose worker is ``worker_class``, registered the
    release's way: a spec_registry CustomSpecAlgo whose factory is handed the
    config (v0.5.12 on); the one factory, SpeculativeAlgorithm.create_worker,
    stood in for, under EAGLE (v0.5.8 to v0.5.11); a registered worker class,
    which no factory hands a config (before)."""

    def factory(server_args):
        return worker_class

    if hasattr(_spec_registry, "CustomSpecAlgo"):
        yield _spec_registry.CustomSpecAlgo(
            "BEYOND_THE_SHIPPED_TESTS", factory, supports_overlap=True
        )
    elif hasattr(SpeculativeAlgorithm, "create_worker"):
        with mock.patch.object(
            SpeculativeAlgorithm,
            "create_worker",
            lambda self, server_args: factory(server_args),
        ):
            yield SpeculativeAlgorithm.EAGLE
    else:
        from sglang.srt.speculative.spec_info import register_speculative_algorithm

        yield register_speculative_algorithm(
            "BEYOND_THE_SHIPPED_TESTS", worker_class, override_worker=True
        )


def build_draft_tp_worker(server_args, context_len):
    """DFLASH's and DSPARK's build_draft_tp_worker, single rank (v0.5.16)."""
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState

    return _draft_worker_common.build_draft_tp_worker(
        server_args=server_args,
        gpu_id=0,
        # Every size 1, every rank 0.
        ps=ParallelState(
            **{
                field.name: 1 if field.name.endswith("_size") else 0
                for field in dataclasses.fields(ParallelState)
            }
        ),
        nccl_port=12345,
        target_model_config=SimpleNamespace(context_len=context_len),
        algo_label="DFLASH",
    )


# --------------------------------------------------------------------------
# The draft workers each release builds
# --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class DraftWorker:
    module: str
    name: str
    algorithm: str  # the SpeculativeAlgorithm the scheduler is handed
    fields: dict  # what the target's config selects it with

    @property
    def cls(self):
        return getattr(speculative(self.module), self.name, None)


_V2 = dict(disable_overlap_schedule=False)
_V1 = dict(disable_overlap_schedule=True)
# Every draft worker of EAGLE, STANDALONE, multi-layer EAGLE, FROZEN_KV_MTP
# and DFLASH that some release builds: v2 with the overlap scheduler, v1
# without. DFLASH resolves only on CUDA, so its target is EAGLE's and the
# scheduler is handed DFLASH, as a DFLASH server's is.
CANDIDATES = (
    DraftWorker("eagle_worker_v2", "EAGLEWorkerV2", "EAGLE", _V2),
    DraftWorker("eagle_worker", "EAGLEWorker", "EAGLE", _V1),
    DraftWorker(
        "standalone_worker_v2",
        "StandaloneWorkerV2",
        "STANDALONE",
        dict(speculative_algorithm="STANDALONE", **_V2),
    ),
    DraftWorker(
        "standalone_worker",
        "StandaloneWorker",
        "STANDALONE",
        dict(speculative_algorithm="STANDALONE", **_V1),
    ),
    DraftWorker(
        "multi_layer_eagle_worker_v2",
        "MultiLayerEagleWorkerV2",
        "EAGLE",
        dict(enable_multi_layer_eagle=True, **_V2),
    ),
    DraftWorker(
        "multi_layer_eagle_worker",
        "MultiLayerEagleWorker",
        "EAGLE",
        dict(enable_multi_layer_eagle=True, **_V1),
    ),
    DraftWorker(
        "frozen_kv_mtp_worker_v2",
        "FrozenKVMTPWorkerV2",
        "FROZEN_KV_MTP",
        dict(speculative_algorithm="FROZEN_KV_MTP", **_V2),
    ),
    DraftWorker(
        "frozen_kv_mtp_worker",
        "FrozenKVMTPWorker",
        "FROZEN_KV_MTP",
        dict(speculative_algorithm="FROZEN_KV_MTP", **_V1),
    ),
    DraftWorker("dflash_worker_v2", "DFlashWorkerV2", "DFLASH", _V2),
    DraftWorker("dflash_worker", "DFlashWorker", "DFLASH", _V1),
)


def _picked_by_the_scheduler(worker):
    """Whether the release builds ``worker`` for its fields: what its
    SpeculativeAlgorithm.create_worker returns (v0.5.8 on; ValueError where it
    refuses the overlap scheduler); before, the module's worker is built by
    hand or through the registry whenever it imports."""
    if not hasattr(SpeculativeAlgorithm, worker.algorithm):
        return False
    algorithm = getattr(SpeculativeAlgorithm, worker.algorithm)
    if not hasattr(algorithm, "create_worker"):
        return True
    config = SimpleNamespace(
        **dict(dict(enable_multi_layer_eagle=False), **worker.fields)
    )
    try:
        return algorithm.create_worker(config) is worker.cls
    except ValueError:
        return False


# The draft workers this release builds.
DRAFT_WORKERS = tuple(
    worker
    for worker in CANDIDATES
    if worker.cls is not None and _picked_by_the_scheduler(worker)
)
EAGLE_WORKERS = tuple(
    worker
    for worker in DRAFT_WORKERS
    if worker.name in ("EAGLEWorkerV2", "EAGLEWorker")
)
# Adaptive speculative decoding's workers: the v1 EAGLEWorker on v0.5.11, both
# on v0.5.12, EAGLEWorkerV2 from v0.5.13.
ADAPTIVE_WORKERS = tuple(
    worker for worker in EAGLE_WORKERS if hasattr(worker.cls, "_override_worker_state")
)


def builds_adaptive_states_in_its_constructor(worker):
    """Up to v0.5.13 the worker's constructor builds a state per candidate
    step; from v0.5.14 its init_cuda_graphs does, after the draft is built."""
    return "init_states(" in inspect.getsource(worker.cls.__init__)


# --------------------------------------------------------------------------
# Stand-ins for the draft's TpModelWorker
# --------------------------------------------------------------------------


def _handed_config(args, kwargs):
    # Handed by keyword, or first (FrozenKVMTPDraftWorker's, v0.5.6's).
    return kwargs["server_args"] if "server_args" in kwargs else args[0]


def stop_at_the_draft_tp_model_worker(built, stop):
    """Stand in for TpModelWorker.__init__, which the v2 workers build their
    draft with and the v1 workers (a TpModelWorker) inherit: note the config
    it is handed, the published one and the files of the code that builds it;
    then, where RUNNER_PUBLISHES, publish its config as an MLA draft's
    ModelRunner does first thing, and raise ``stop``."""

    def record(worker, *args, **kwargs):
        server_args = _handed_config(args, kwargs)
        frames = walk_stack(inspect.currentframe())
        built.update(
            server_args=server_args,
            published=published(),
            built_in={frame.f_code.co_filename for frame, _ in frames},
        )
        if RUNNER_PUBLISHES:
            publish_as_a_model_runner(server_args, use_mla_backend=True)
        raise stop()

    return mock.patch.object(TpModelWorker, "__init__", record)


def _load_draft_model(worker, *args, use_mla_backend=False, **kwargs):
    server_args = _handed_config(args, kwargs)
    if RUNNER_PUBLISHES:
        publish_as_a_model_runner(server_args, use_mla_backend)
    worker.server_args = server_args
    worker.tokenizer = None
    worker.model_config = SimpleNamespace(
        hf_config=SimpleNamespace(architectures=["LlamaForCausalLMEagle"]),
        # As the draft's ModelConfig takes --json-model-override-args.
        model_override_args=server_args.json_model_override_args,
        vocab_size=256,
    )
    # What TpModelWorker.model_runner returns.
    worker._model_runner = SimpleNamespace(
        server_args=server_args,
        model_config=worker.model_config,
        model=mock.Mock(name="draft_model"),
        use_mla_backend=use_mla_backend,
        tp_group=None,
        attn_backend=None,
        draft_attn_backend=None,
        init_attention_backends=lambda: None,
        canary_manager=None,  # no KV canary (v0.5.13 on)
    )
    worker.model_runner_list = [worker._model_runner]


# The draft's attention backends, by the MLA-ness they are built for.
DRAFT_BACKENDS = {
    "flashinfer_backend.FlashInferMultiStepDraftBackend": "mha",
    "flashinfer_backend.FlashInferAttnBackend": "mha",
    "flashinfer_mla_backend.FlashInferMLAMultiStepDraftBackend": "mla",
    "flashinfer_mla_backend.FlashInferMLAAttnBackend": "mla",
}


@contextmanager
def loaded_draft_model(worker, draft_mla=False):
    """Build ``worker`` whole on a loaded draft TpModelWorker stand-in (MLA
    or not), its attention backends standing in by the MLA-ness they are
    built for and no GPU memory to measure."""
    with ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(
                TpModelWorker,
                "__init__",
                functools.partialmethod(_load_draft_model, use_mla_backend=draft_mla),
            )
        )
        for name, kind in DRAFT_BACKENDS.items():
            stack.enter_context(
                mock.patch(f"sglang.srt.layers.attention.{name}", return_value=kind)
            )
        worker_module = speculative(worker.module)
        if hasattr(worker_module, "get_available_gpu_memory"):
            stack.enter_context(
                mock.patch.object(
                    worker_module, "get_available_gpu_memory", return_value=0.0
                )
            )
        yield

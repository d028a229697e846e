"""The ways the fix can break, as source edits in a patched fork of each line.

Issue 48 names six ways, and the shipped tests must fail for each of them on
every line. Each is a ``Breakage``: text of the fix, found exactly once in
one file of the fork (the ``series`` branch of ``release_forks.shared_fork``),
replaced by the text that breaks it. Where the fix lives on each line (its
patches 0001 and 0002):

- the copy, ``draft_server_args_copy()``, is in ``server_args.py`` on every
  line; it assigns the draft's fields up to v0.5.15.post1 and overrides them
  on v0.5.16, which records overrides;
- the scope that publishes it is ``scoped_server_args()`` next to the global
  it sets in ``server_args.py`` up to v0.5.14, and
  ``RuntimeContext.scoped_server_args`` in ``runtime_context.py`` on
  v0.5.15.post1 and v0.5.16;
- the copy is handed over by the Scheduler method that builds the draft
  (``release_forks.draft_builder``): to the algorithm's worker factory
  (``create_worker(server_args)``, from v0.5.8) and to the worker it returns;
  on v0.5.7 to the registry's ``create_draft_worker`` and to the two
  multi-layer EAGLE workers the scheduler builds itself; on v0.5.6.x to
  ``create_draft_worker`` alone.
"""

from typing import NamedTuple

SERVER_ARGS = "python/sglang/srt/server_args.py"
RUNTIME_CONTEXT = "python/sglang/srt/runtime_context.py"
SCHEDULER = "python/sglang/srt/managers/scheduler.py"

# The six ways, in issue 48's words.
COPY_IS_THE_TARGET = "the copy is the target itself"
NO_CONTEXT_LENGTH = "the copy lacks the target's context length"
NO_DRAFT_LOAD_FORMAT = "the copy lacks the draft load format"
HANDED_THE_TARGET = "the worker factory or the worker is handed the target's config"
NOT_PUBLISHED = "the scope does not publish the copy"
NOT_PUT_BACK = "the scope does not put back what was published before"
WAYS = (
    COPY_IS_THE_TARGET,
    NO_CONTEXT_LENGTH,
    NO_DRAFT_LOAD_FORMAT,
    HANDED_THE_TARGET,
    NOT_PUBLISHED,
    NOT_PUT_BACK,
)


class Breakage(NamedTuple):
    """One way the fix breaks: ``old``, once in ``path``, becomes ``new``."""

    way: str
    path: str
    old: str
    new: str
    # For HANDED_THE_TARGET, the one that is: the worker factory or a worker.
    handed_to: str = ""

    @property
    def name(self):
        if self.handed_to:
            return f"the {self.handed_to} is handed the target's config"
        return self.way


# draft_server_args_copy() up to v0.5.15.post1.
COPY_ASSIGNS = (
    Breakage(
        COPY_IS_THE_TARGET,
        SERVER_ARGS,
        "    draft_server_args = deepcopy(server_args)\n",
        "    draft_server_args = server_args\n",
    ),
    Breakage(
        NO_CONTEXT_LENGTH,
        SERVER_ARGS,
        "    draft_server_args.context_length = target_model_config.context_len\n",
        "",
    ),
    Breakage(
        NO_DRAFT_LOAD_FORMAT,
        SERVER_ARGS,
        """\
    if server_args.speculative_draft_load_format is not None:
        draft_server_args.load_format = server_args.speculative_draft_load_format
""",
        "",
    ),
)

# draft_server_args_copy() on v0.5.16.
COPY_OVERRIDES = (
    Breakage(
        COPY_IS_THE_TARGET,
        SERVER_ARGS,
        "    draft_server_args = deepcopy(server_args)\n",
        "    draft_server_args = server_args\n",
    ),
    Breakage(
        NO_CONTEXT_LENGTH,
        SERVER_ARGS,
        "    draft_fields = dict(context_length=target_model_config.context_len)\n",
        "    draft_fields = dict()\n",
    ),
    Breakage(
        NO_DRAFT_LOAD_FORMAT,
        SERVER_ARGS,
        """\
    if server_args.speculative_draft_load_format is not None:
        draft_fields["load_format"] = server_args.speculative_draft_load_format
""",
        "",
    ),
)

# _ScopedServerArgs in server_args.py, up to v0.5.14.
SCOPE_OF_THE_GLOBAL = (
    Breakage(
        NOT_PUBLISHED,
        SERVER_ARGS,
        "        _global_server_args = self.server_args\n",
        "",
    ),
    Breakage(
        NOT_PUT_BACK,
        SERVER_ARGS,
        "        _global_server_args = self.previous\n",
        "",
    ),
)

# RuntimeContext.scoped_server_args on v0.5.15.post1, which also resolves the
# draft's flags and keeps the recorded runtime overrides.
SCOPE_OF_THE_CONTEXT_V0_5_15 = (
    Breakage(
        NOT_PUBLISHED,
        RUNTIME_CONTEXT,
        """\
            self._server_args = server_args
            yield server_args
""",
        """\
            yield server_args
""",
    ),
    Breakage(
        NOT_PUT_BACK,
        RUNTIME_CONTEXT,
        """\
            self._server_args, self.flags, self._runtime_overrides = previous
""",
        """\
            _, self.flags, self._runtime_overrides = previous
""",
    ),
)

# RuntimeContext.scoped_server_args on v0.5.16.
SCOPE_OF_THE_CONTEXT = (
    Breakage(
        NOT_PUBLISHED,
        RUNTIME_CONTEXT,
        "        self.set_server_args(server_args)\n",
        "",
    ),
    Breakage(
        NOT_PUT_BACK,
        RUNTIME_CONTEXT,
        "            self._server_args = previous\n",
        "",
    ),
)

# The worker's keyword arguments, from v0.5.7.
HANDED_TO_THE_WORKER = Breakage(
    HANDED_THE_TARGET,
    SCHEDULER,
    """\
        draft_worker_kwargs = dict(
            server_args=self.draft_server_args,
""",
    """\
        draft_worker_kwargs = dict(
            server_args=self.server_args,
""",
    handed_to="worker",
)

# Scheduler.maybe_init_draft_worker, from v0.5.8: the factory, then the worker.
HANDED_TO_THE_FACTORY_AND_THE_WORKER = (
    Breakage(
        HANDED_THE_TARGET,
        SCHEDULER,
        "create_worker(self.draft_server_args)",
        "create_worker(self.server_args)",
        handed_to="worker factory",
    ),
    HANDED_TO_THE_WORKER,
)


def _multi_layer_eagle_worker(worker_class):
    """init_model_worker on v0.5.7 builds the multi-layer EAGLE workers itself."""
    old = f"""\
                    self.draft_worker = {worker_class}(
                        gpu_id=self.gpu_id,
                        tp_rank=self.tp_rank,
                        moe_ep_rank=self.moe_ep_rank,
                        server_args=self.draft_server_args,
"""
    new = old.replace("self.draft_server_args", "self.server_args")
    return Breakage(HANDED_THE_TARGET, SCHEDULER, old, new, handed_to=worker_class)


HANDED_OVER_V0_5_7 = (
    HANDED_TO_THE_WORKER,
    _multi_layer_eagle_worker("MultiLayerEagleWorkerV2"),
    _multi_layer_eagle_worker("MultiLayerEagleWorker"),
)

# Scheduler.__init__ on v0.5.6.x, whose target's config is its argument.
HANDED_OVER_V0_5_6 = (
    Breakage(
        HANDED_THE_TARGET,
        SCHEDULER,
        "            server_args=self.draft_server_args,\n",
        "            server_args=server_args,\n",
        handed_to="worker",
    ),
)

# v0.5.8.post1 to v0.5.14: the copy and the scope in server_args.py, the
# hand-off in Scheduler.maybe_init_draft_worker.
IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER = (
    *COPY_ASSIGNS,
    *HANDED_TO_THE_FACTORY_AND_THE_WORKER,
    *SCOPE_OF_THE_GLOBAL,
)

# Each series (its folder under patches/, the release it is named after).
BREAKAGES = {
    "v0.5.16": (
        *COPY_OVERRIDES,
        *HANDED_TO_THE_FACTORY_AND_THE_WORKER,
        *SCOPE_OF_THE_CONTEXT,
    ),
    "v0.5.15.post1": (
        *COPY_ASSIGNS,
        *HANDED_TO_THE_FACTORY_AND_THE_WORKER,
        *SCOPE_OF_THE_CONTEXT_V0_5_15,
    ),
    "v0.5.14": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.13.post1": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.12.post1": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.11": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.10.post1": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.9": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.8.post1": IN_SERVER_ARGS_AND_MAYBE_INIT_DRAFT_WORKER,
    "v0.5.7": (*COPY_ASSIGNS, *HANDED_OVER_V0_5_7, *SCOPE_OF_THE_GLOBAL),
    "v0.5.6.post2": (*COPY_ASSIGNS, *HANDED_OVER_V0_5_6, *SCOPE_OF_THE_GLOBAL),
}

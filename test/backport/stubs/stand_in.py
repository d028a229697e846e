"""Stand-in packages for importing an older sglang release in this repository's
venv, which has neither of its CUDA-only dependencies (not shipped).

sglang 0.5.6 to 0.5.12.post1 import ``sgl_kernel`` at module level on the way
to the scheduler and the speculative workers (``layers/moe/.../deep_gemm.py``,
``mem_cache/memory_pool_host.py``), and 0.5.6 to 0.5.7 import
``vllm.model_executor.layers.activation`` on a CPU without AMX
(``layers/activation.py``). Their CUDA wheels do not install here. Put this
folder on ``PYTHONPATH`` and both import: every name of ``sgl_kernel`` and of
any of its submodules is a ``MagicMock``, as upstream's own
``maybe_stub_sgl_kernel()`` of 0.5.10 and later does, and so is every name of
that one vllm module. Every other vllm module is missing, as without vllm:
the releases' optional ``from vllm import _custom_ops`` still fail and take
their fallbacks. They make the modules importable; no kernel of theirs can
run.
"""

import importlib.abc
import importlib.machinery
import sys
from unittest.mock import MagicMock


def any_name(name):
    """Every attribute a stand-in module is asked for."""
    if name.startswith("__"):
        raise AttributeError(name)
    return MagicMock(name=name)


def no_name(name):
    """Every attribute of a module that only leads to a stand-in module."""
    raise AttributeError(name)


class StandInLoader(importlib.abc.Loader):
    def __init__(self, names):
        self.names = names

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = self.names


class StandInFinder(importlib.abc.MetaPathFinder):
    """Finds the submodules of ``package`` as stand-ins: all of them, or only
    ``modules`` (dotted names) and the packages on the way to them."""

    def __init__(self, package, modules):
        self.prefix = package + "."
        self.modules = modules

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(self.prefix):
            return None
        names = any_name
        if self.modules:
            if fullname not in self.modules:
                if not any(m.startswith(fullname + ".") for m in self.modules):
                    return None
                names = no_name
        return importlib.machinery.ModuleSpec(
            fullname, StandInLoader(names), is_package=True
        )


def stand_in_for(package, modules=()):
    """Make the submodules of ``package`` (the package being imported) stand-ins,
    all of them or only ``modules``; returns the package's ``__getattr__``."""
    sys.meta_path.insert(0, StandInFinder(package, modules))
    if modules:
        return no_name
    return any_name

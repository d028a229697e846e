"""Stand-in packages for importing an older sglang release in this repository's
venv, which has neither of its CUDA-only dependencies (not shipped).

sglang 0.5.6 to 0.5.12.post1 import ``sgl_kernel`` at module level on the way
to the scheduler and the speculative workers (``layers/moe/.../deep_gemm.py``,
``mem_cache/memory_pool_host.py``), and 0.5.6 to 0.5.7 import
``vllm.model_executor.layers.activation`` on a CPU without AMX
(``layers/activation.py``). Their CUDA wheels do not install here. Put this
folder on ``PYTHONPATH`` and both import: every name of the package and of any
of its submodules is a ``MagicMock``, as upstream's own
``maybe_stub_sgl_kernel()`` of 0.5.10 and later does for ``sgl_kernel``. They
make the modules importable; no kernel of theirs can run.
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


class StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = any_name


class StandInFinder(importlib.abc.MetaPathFinder):
    """Finds every submodule of ``package`` as a stand-in."""

    def __init__(self, package):
        self.prefix = package + "."

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(self.prefix):
            return None
        return importlib.machinery.ModuleSpec(
            fullname, StandInLoader(), is_package=True
        )


def stand_in_for(package):
    """Make the package being imported, ``package``, and its submodules stand-ins."""
    sys.meta_path.insert(0, StandInFinder(package))
    return any_name

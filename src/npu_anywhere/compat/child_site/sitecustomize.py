"""Started by every Python process under ``npu-anywhere run`` (this folder is on PYTHONPATH).

A script that starts more Python processes -- ``multiprocessing`` with the spawn or forkserver
start method, ``torch.multiprocessing.spawn``, ``torchrun`` workers, ``subprocess.run([sys.
executable, ...])`` -- gives them a fresh interpreter without the shim.  Python imports the
first ``sitecustomize`` on ``sys.path`` at start-up, so this one arms a finder there: the first
``import torch_npu`` (or ``cann_ops_transformer``) of the child calls ``npu_anywhere.install()``
and then answers the import with the shim's module.  A child that never imports them (a compile
worker, a pip call) pays for a finder and nothing else: no torch import.

The environment's own ``sitecustomize`` (the next one on ``sys.path``), if any, still runs.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TRIGGERS = ("torch_npu", "cann_ops_transformer")
_HERE = os.path.dirname(os.path.abspath(__file__))


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Installs the shim at the first import of a shimmed package; inert afterwards."""

    def __init__(self):
        self.done = False

    def find_spec(self, fullname, path=None, target=None):
        if self.done or fullname.split(".", 1)[0] not in _TRIGGERS:
            return None
        self.done = True        # before install(): it imports torch, which may probe these
        import npu_anywhere
        npu_anywhere.install()
        module = sys.modules.get(fullname)
        if module is None:      # a real package is installed, or a submodule the shim
            return None         # provides through its own finder
        # importlib loads a name already in sys.modules again through that module's own
        # __spec__, whose loader (compat.register_module's) answers with the module itself.
        return module.__spec__


def _chain_next_sitecustomize():
    """Run the ``sitecustomize`` this one shadows, as Python would have without us: the first
    one on ``sys.path`` after this folder (never one before it, so that two copies of this
    folder on the path cannot run each other in a loop)."""
    entries = [os.path.abspath(entry or os.curdir) for entry in sys.path]
    after = entries.index(_HERE) + 1 if _HERE in entries else len(entries)
    for entry in entries[after:]:
        if entry == _HERE:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


if os.environ.get("NPU_ANYWHERE_SHIM_CHILDREN") == "1":
    sys.meta_path.insert(0, _InstallOnImport())
_chain_next_sitecustomize()

"""Teach Dynamo ``Tensor.is_npu``, as it knows ``Tensor.is_cuda``.

Dynamo answers ``t.is_cuda`` of a traced tensor from its device (``TensorVariable.
method_attr_is_cuda``); a Python property it cannot see through on intermediate tensors, so
``if t.is_npu:`` inside a compiled region would break the graph.  The same answer for
``is_npu`` is added to ``TensorVariable`` -- when Dynamo is first imported, not at install:
importing it costs about a second that a script which never compiles should not pay.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from .device import local_device

_TARGET = "torch._dynamo.variables.tensor"


def _method_attr_is_npu(self, tx):
    from torch._dynamo.variables.base import VariableTracker

    if self.device is not None:
        return VariableTracker.build(tx, self.device.type == local_device().type)
    return None


def _patch(module) -> None:
    if not hasattr(module.TensorVariable, "method_attr_is_npu"):
        module.TensorVariable.method_attr_is_npu = _method_attr_is_npu


class _Finder(importlib.abc.MetaPathFinder):
    """Patches the Dynamo module right after it is executed, then steps aside."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _patch(module)
        spec.loader.exec_module = exec_and_patch
        return spec


_finder = _Finder()


def enable() -> None:
    module = sys.modules.get(_TARGET)
    if module is not None:
        _patch(module)
    elif _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def disable() -> None:
    if _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    module = sys.modules.get(_TARGET)
    if module is not None and module.TensorVariable.__dict__.get("method_attr_is_npu") is \
            _method_attr_is_npu:
        del module.TensorVariable.method_attr_is_npu

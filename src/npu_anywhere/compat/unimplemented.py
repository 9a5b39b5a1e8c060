"""Documented ops that npu_anywhere does not implement yet: honest to feature detection.

``hasattr(torch_npu, "npu_x")`` is False for such an op, so code that probes for an NPU fast
path takes its fallback, while a direct call ``torch_npu.npu_x(...)`` (or ``torch.ops.npu.npu_x``)
fails with a message naming the op as not implemented.  Both come from one exception,
:class:`NotImplementedOpError`, which is an AttributeError (what ``hasattr`` and ``getattr(m,
name, default)`` catch) and a NotImplementedError (what callers expect from a missing feature).

What is implemented is looked up when the name is asked for (the op registries of
:mod:`npu_anywhere.ops` and torch's operator namespaces), so ops registered after
``install()`` are found.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import torch


class NotImplementedOpError(AttributeError, NotImplementedError):
    """An op the torch_npu / CANN docs describe, not implemented by npu_anywhere yet."""


@functools.lru_cache(maxsize=None)
def documented_ops() -> dict[str, dict]:
    """Every op of the specification, by name (from data/seed_ops.json)."""
    text = resources.files("npu_anywhere").joinpath("data/seed_ops.json").read_text("utf-8")
    return {entry["name"]: entry for entry in json.loads(text)}


def error(qualified: str) -> NotImplementedOpError:
    name = qualified.rsplit(".", 1)[-1]
    return NotImplementedOpError(f"{qualified} is documented but not implemented by "
                                 "npu_anywhere yet", name=name)


def is_documented(name: str, apis: set[str]) -> bool:
    entry = documented_ops().get(name)
    return entry is not None and entry["api"] in apis


# -- torch.ops.<namespace>.<documented but missing op> ----------------------------------------

class _DocumentedOpNamespace(torch._ops._OpNamespace):
    """torch.ops.npu (or .cann_ops_transformer) whose missing documented ops say so."""

    _npu_anywhere_apis: set[str] = set()

    def __getattr__(self, op_name: str):
        try:
            return super().__getattr__(op_name)
        except AttributeError:
            if not op_name.startswith("__") and is_documented(op_name, self._npu_anywhere_apis):
                raise error(f"torch.ops.{self.name}.{op_name}") from None
            raise


_hooked: dict[str, type] = {}


def hook_torch_ops(namespace: str, apis: set[str]) -> None:
    """Give ``torch.ops.<namespace>`` the not-implemented message (undo with unhook)."""
    ns = getattr(torch.ops, namespace)
    if namespace in _hooked:
        return
    cls = type(f"DocumentedOpNamespace_{namespace}", (_DocumentedOpNamespace,),
               {"_npu_anywhere_apis": set(apis)})
    _hooked[namespace] = type(ns)
    ns.__class__ = cls


def unhook_torch_ops() -> None:
    for namespace, original in list(_hooked.items()):
        getattr(torch.ops, namespace).__class__ = original
        del _hooked[namespace]

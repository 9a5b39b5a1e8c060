"""``torch.ops.custom.<op>``: the namespace the DSA ops' docs give their prototypes in.

Seed 004 writes four ops as ``custom.npu_lightning_indexer(...)``,
``custom.npu_quant_lightning_indexer``, ``custom.npu_sparse_flash_attention`` and
``custom.npu_kv_quant_sparse_flash_attention``: on the NPU they come from the CANN custom-ops
package, registered under ``torch.ops.custom``, and serving code calls them there
(``torch.ops.custom.npu_sparse_flash_attention(query=..., ...)``).  Each is defined here with the
``npu`` op's schema as a CompositeImplicitAutograd forward to ``torch.ops.npu.<op>``, so eager
calls, FakeTensor, torch.compile and autograd behave exactly as through ``torch.ops.npu``.

Not defined when a real torch_npu is installed: its custom-ops package owns the namespace.
"""

from __future__ import annotations

import torch

from . import library
from .compat.unimplemented import documented_ops

NAMESPACE = "custom"
_lib: torch.library.Library | None = None


def custom_op_names() -> list[str]:
    """The documented ops whose API is ``custom`` (seed 004's ``custom.<op>`` prototypes)."""
    return sorted(name for name, entry in documented_ops().items() if entry["api"] == "custom")


def _forward(op: "library.NpuOp"):
    def forward(*args, **kwargs):
        return op.overload(*args, **kwargs)
    forward.__name__ = f"custom_{op.name}"
    return forward


def register() -> list[str]:
    """Define ``custom::<op>`` for every implemented custom op (idempotent); returns their names."""
    global _lib
    if library.REAL_TORCH_NPU:
        return []
    names = [n for n in custom_op_names() if n in library.REGISTRY]
    if _lib is None:
        _lib = torch.library.Library(NAMESPACE, "FRAGMENT")
        for name in names:
            op = library.REGISTRY[name]
            _lib.define(op.schema)
            _lib.impl(op.key, _forward(op), "CompositeImplicitAutograd")
    return names

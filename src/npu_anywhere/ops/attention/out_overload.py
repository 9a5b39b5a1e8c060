"""The ``.out`` overloads of the FIA ops (``npu_fused_infer_attention_score.out``, ``_v2.out``).

Each is built by :func:`npu_anywhere.library.define_out` (a void op
``npu_anywhere::_<op>_out`` that checks the call and writes, behind the public ``.out``
overload with op-plugin's schema, so that ``torch.compile`` can functionalize it).  What is
FIA-specific lives here: ``attention_out`` must have exactly the shape and dtype the call
produces, and ``softmax_lse`` is written only when the lse is requested and the tensor is shaped
like it (the page calls it reserved, and its example passes a [1] tensor).
"""

from __future__ import annotations

from typing import Callable

from ... import checks
from ...library import NpuOp, define_out as _define_out


def _split(kwargs: dict) -> tuple:
    kwargs = dict(kwargs)
    kwargs.pop("workspace", None)
    return kwargs.pop("attention_out"), kwargs.pop("softmax_lse"), kwargs


def define_out(op: str, args_schema: str, namespace: str, *, plan: Callable,
               compute: Callable) -> NpuOp:
    """Define ``<namespace>::<op>.out`` (and its internal void op); return the public overload.

    ``plan(query, key, value, **kwargs) -> OutputPlan`` checks a call (op kwargs only);
    ``compute(query, key, value, **kwargs) -> (attention_out, softmax_lse)`` runs it.
    """
    from .formatting import empty_outputs

    def check(query, key, value, **kwargs):
        attention_out, _lse, rest = _split(kwargs)
        expected, _ = empty_outputs(query, plan(query, key, value, **rest))
        checks.expect(tuple(attention_out.shape) == tuple(expected.shape)
                      and attention_out.dtype == expected.dtype, op, "attention_out",
                      lambda: f"shape {tuple(expected.shape)} and dtype {expected.dtype}",
                      lambda: f"{tuple(attention_out.shape)} {attention_out.dtype}", RuntimeError)

    def write(query, key, value, **kwargs):
        attention_out, softmax_lse, rest = _split(kwargs)
        out, lse = compute(query, key, value, **rest)
        attention_out.copy_(out)
        if lse.numel() and tuple(softmax_lse.shape) == tuple(lse.shape):
            softmax_lse.copy_(lse)

    tail = "Tensor? workspace=None, Tensor(a!) attention_out, Tensor(b!) softmax_lse"
    _internal, public = _define_out(
        f"{op}.out({args_schema}, {tail}) -> (Tensor(a!), Tensor(b!))", check=check,
        reference=write, no_grad=f"{op} is inference-only", namespace=namespace)
    return public

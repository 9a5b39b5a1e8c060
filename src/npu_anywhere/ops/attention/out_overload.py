"""The ``.out`` overloads of the FIA ops (``npu_fused_infer_attention_score.out``, ``_v2.out``).

Each is two ops, the shape ``library.define_inplace`` uses for in-place ops, so that
``torch.compile`` can functionalize it (an op returning aliases of its mutated inputs cannot be
auto-functionalized): a void op ``npu_anywhere::_<op>_out`` that checks the call and writes
``attention_out`` (and ``softmax_lse`` when the lse is requested and the tensor is shaped like
it -- the page calls it reserved, and its example passes a [1] tensor), and the public ``.out``
overload with op-plugin's schema as a CompositeImplicitAutograd wrapper returning the two tensors.
"""

from __future__ import annotations

from typing import Callable

import torch

from ... import checks
from ...library import INTERNAL_NS, NpuOp, OpInfo, _library


def _split(kwargs: dict) -> tuple:
    kwargs = dict(kwargs)
    kwargs.pop("workspace", None)
    return kwargs.pop("attention_out"), kwargs.pop("softmax_lse"), kwargs


def define_out(op: str, args_schema: str, namespace: str, *, plan: Callable, compute: Callable):
    """Define ``<namespace>::<op>.out`` and its internal void op; return the public overload.

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
    internal = NpuOp(f"_{op}_out({args_schema}, {tail}) -> ()", namespace=INTERNAL_NS,
                     check=check, reference=write, fake=lambda *a, **k: None,
                     metadata_check=True, info=OpInfo(api="internal", public=False))
    internal.forbid_autograd(f"{op} is inference-only", public_name=f"{op}.out")

    def composite(query, key, value, **kwargs):
        internal(query, key, value, **kwargs)
        return kwargs["attention_out"], kwargs["softmax_lse"]

    lib = _library(namespace)
    lib.define(f"{op}.out({args_schema}, {tail}) -> (Tensor(a!), Tensor(b!))")
    lib.impl(f"{op}.out", composite, "CompositeImplicitAutograd")
    return getattr(getattr(torch.ops, namespace), op).out

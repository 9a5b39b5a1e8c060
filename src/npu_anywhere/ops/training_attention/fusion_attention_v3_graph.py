"""The graph-capture helpers of the v3 ``.out`` overloads (op-plugin ``op_plugin_functions.yaml``,
``FlashAttentionKernelNpuOpApi.cpp``)::

    _npu_fusion_attention_v3_infer_output(query, key, value, head_num, input_layout)
        -> (attention_score, softmax_max, softmax_sum)
    _npu_fusion_attention_grad_v3_infer_output(query, key, value, pse=None, sink=None)
        -> (dq, dk, dv, dpse, dsink)
    _npu_fusion_attention_v3_get_max_workspace(<npu_fusion_attention_v3's arguments>)
    _npu_fusion_attention_grad_v3_get_max_workspace(<npu_fusion_attention_grad_v3's arguments>)

ACL-graph code allocates the ``.out`` tensors with the first two and a workspace with the
others, then captures ``npu_fusion_attention_v3.out(..., workspace=ws, ...)``.  The shapes are
the kernel's (``infer_fa_v3_attention_score_shape`` / ``infer_fa_v3_softmax_stats_shape``:
attention like query with value's head size, statistics ``[T, N, 8]`` for TND and
``[B, head_num, S, 8]`` otherwise, float32 -- float64 for a float64 query, which only this
emulation accepts; ``dpse`` / ``dsink`` empty without pse / sink).  The tensors come back zeroed
(the NPU's are uninitialized).  The emulation needs no workspace: the workspace queries, which
on the NPU size it for TND calls with lengths (the only ones they accept), return one byte.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import fusion_attention_v3 as v3

INFER_OP = "_npu_fusion_attention_v3_infer_output"
GRAD_INFER_OP = "_npu_fusion_attention_grad_v3_infer_output"
WORKSPACE_OP = "_npu_fusion_attention_v3_get_max_workspace"
GRAD_WORKSPACE_OP = "_npu_fusion_attention_grad_v3_get_max_workspace"

INFER_SCHEMA = (f"{INFER_OP}(Tensor query, Tensor key, Tensor value, int head_num, "
                "str input_layout) -> (Tensor, Tensor, Tensor)")
GRAD_INFER_SCHEMA = (f"{GRAD_INFER_OP}(Tensor query, Tensor key, Tensor value, "
                     "Tensor? pse=None, Tensor? sink=None) -> (Tensor, Tensor, Tensor, Tensor, "
                     "Tensor)")
WORKSPACE_SCHEMA = (
    f"{WORKSPACE_OP}(Tensor query, Tensor key, Tensor value, int head_num, str input_layout, "
    "Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, float scale=1., "
    "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
    "int inner_precise=0, int[]? prefix=None, Tensor? actual_seq_qlen=None, "
    "Tensor? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
    "bool sync=False, str softmax_layout=\"\", Tensor? sink=None) -> Tensor")
GRAD_WORKSPACE_SCHEMA = (
    f"{GRAD_WORKSPACE_OP}(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
    "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
    "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, "
    "Tensor? attention_in=None, float scale_value=1., float keep_prob=1., "
    "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, "
    "Tensor? seed=None, Tensor? offset=None, int[]? prefix=None, Tensor? actual_seq_qlen=None, "
    "Tensor? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
    "bool sync=False, str softmax_layout=\"\", Tensor? sink=None) -> Tensor")
_LAYOUTS = ("BSH", "SBH", "BNSD", "BSND", "TND")
_DIMS = {"BSH": 3, "SBH": 3, "BNSD": 4, "BSND": 4, "TND": 3}


def check_infer_output(query, key, value, head_num, input_layout) -> None:
    op = v3.OP
    layout = input_layout.upper()
    checks.expect(layout in _LAYOUTS, op, "input_layout", f"one of {list(_LAYOUTS)}",
                  repr(input_layout), ValueError)
    checks.expect(head_num > 0, op, "head_num", "> 0", repr(head_num), ValueError)
    for name, t in (("query", query), ("key", key), ("value", value)):
        checks.expect(t.dim() == _DIMS[layout], op, name,
                      f"{_DIMS[layout]} dims for layout {layout}",
                      lambda t=t: f"shape {tuple(t.shape)}")


def _attention_shape(query, key, value, head_num, layout) -> tuple:
    if layout in ("BSH", "SBH"):
        d = query.shape[2] // head_num
        groups = key.shape[2] // d if d else 0
        d_value = value.shape[2] // groups if groups else d
        return (*query.shape[:2], head_num * d_value)
    return (*query.shape[:-1], value.shape[-1])


def _stats_shape(query, head_num, layout) -> tuple:
    if layout == "TND":
        return (query.shape[0], query.shape[1], 8)
    batch, seq = {"BSH": (0, 1), "SBH": (1, 0), "BNSD": (0, 2), "BSND": (0, 1)}[layout]
    return (query.shape[batch], head_num, query.shape[seq], 8)


def infer_output_reference(query, key, value, head_num, input_layout):
    layout = input_layout.upper()
    stat = torch.float64 if query.dtype == torch.float64 else torch.float32
    stats = _stats_shape(query, head_num, layout)
    return (query.new_zeros(_attention_shape(query, key, value, head_num, layout)),
            query.new_zeros(stats, dtype=stat), query.new_zeros(stats, dtype=stat))


def check_grad_infer_output(query, key, value, pse=None, sink=None) -> None:
    pass     # any tensors: the outputs copy their shapes


def grad_infer_output_reference(query, key, value, pse=None, sink=None):
    dpse = query.new_zeros(0) if pse is None else pse.new_zeros(pse.shape)
    dsink = (key.new_zeros(0, dtype=torch.float32) if sink is None
             else sink.new_zeros(sink.shape, dtype=torch.float32))
    return (query.new_zeros(query.shape), key.new_zeros(key.shape), value.new_zeros(value.shape),
            dpse, dsink)


def _expect_tnd_lengths(op, input_layout, qlen, kvlen) -> None:
    checks.expect(input_layout.upper() == "TND", op, "input_layout",
                  "'TND' (a workspace is sized for TND calls only)", repr(input_layout),
                  ValueError)
    for name, t in (("actual_seq_qlen", qlen), ("actual_seq_kvlen", kvlen)):
        checks.expect(t is not None and t.numel() > 0, op, name,
                      "a tensor of cumulative lengths (a workspace is sized for them)",
                      "None or empty", ValueError)


def check_workspace(*args, **kwargs) -> None:
    v3.check_fusion_attention_v3(*args, **kwargs)
    a = v3._forward_args(args, kwargs)
    _expect_tnd_lengths(v3.OP, a["input_layout"], a["actual_seq_qlen"], a["actual_seq_kvlen"])


def workspace_reference(query, *args, **kwargs):
    return query.new_zeros(1, dtype=torch.uint8)


def check_grad_workspace(query, key, value, dy, head_num, input_layout, **kwargs) -> None:
    v3.check_fusion_attention_grad_v3(query, key, value, dy, head_num, input_layout, **kwargs)
    _expect_tnd_lengths(v3.GRAD_OP, input_layout, kwargs.get("actual_seq_qlen"),
                        kwargs.get("actual_seq_kvlen"))


def _define(schema, check, reference, why):
    op = NpuOp(schema, namespace=TORCH_NPU_NS, check=check, reference=reference,
               info=OpInfo(api="torch_npu"))
    op.forbid_autograd(why)
    return op


infer_output_op = _define(INFER_SCHEMA, check_infer_output, infer_output_reference,
                          "an output-shape query has no gradient")
grad_infer_output_op = _define(GRAD_INFER_SCHEMA, check_grad_infer_output,
                               grad_infer_output_reference,
                               "an output-shape query has no gradient")
workspace_op = _define(WORKSPACE_SCHEMA, check_workspace, workspace_reference,
                       "a workspace query has no gradient")
grad_workspace_op = _define(GRAD_WORKSPACE_SCHEMA, check_grad_workspace, workspace_reference,
                            "a workspace query has no gradient")


def _npu_fusion_attention_v3_infer_output(query, key, value, head_num, input_layout):
    """Zeroed ``(attention_score, softmax_max, softmax_sum)`` shaped as
    :func:`npu_fusion_attention_v3` returns them, for its ``.out`` overload."""
    return infer_output_op(query, key, value, head_num, input_layout)


def _npu_fusion_attention_grad_v3_infer_output(query, key, value, pse=None, sink=None):
    """Zeroed ``(dq, dk, dv, dpse, dsink)`` for :func:`npu_fusion_attention_grad_v3`'s ``.out``
    overload (dpse / dsink empty without pse / sink; dsink float32)."""
    return grad_infer_output_op(query, key, value, pse, sink)


def _npu_fusion_attention_v3_get_max_workspace(*args, **kwargs):
    """A workspace for ``npu_fusion_attention_v3.out`` (TND with lengths only; one byte here:
    the emulation needs none)."""
    return workspace_op(*args, **kwargs)


def _npu_fusion_attention_grad_v3_get_max_workspace(*args, **kwargs):
    """A workspace for ``npu_fusion_attention_grad_v3.out`` (TND with lengths only)."""
    return grad_workspace_op(*args, **kwargs)


TORCH_NPU_FUNCTIONS = {
    INFER_OP: _npu_fusion_attention_v3_infer_output,
    GRAD_INFER_OP: _npu_fusion_attention_grad_v3_infer_output,
    WORKSPACE_OP: _npu_fusion_attention_v3_get_max_workspace,
    GRAD_WORKSPACE_OP: _npu_fusion_attention_grad_v3_get_max_workspace,
}

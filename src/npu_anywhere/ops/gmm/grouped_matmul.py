"""torch_npu.npu_grouped_matmul: many matmuls in one call (MoE expert GEMMs).

Formulas (seed 004, op-plugin ``docs/zh/custom_APIs/torch_npu/torch_npu-npu_grouped_matmul.md``)::

    float:       y_i = x_i @ weight_i + bias_i
    per-channel: y_i = (x_i @ weight_i + bias_i) * scale_i + offset_i     (int8 x and weight)
    per-token:   y_i = act((x_i @ weight_i + bias_i) * scale_i * per_token_scale_i)
    antiquant:   y_i = x_i @ ((weight_i + antiquant_offset_i) * antiquant_scale_i) + bias_i
    A4W4 / A8W4: y_i = x_i @ (weight_i * scale_i) * per_token_scale_i   (int4 weight: .lowbit)

Shapes follow op-plugin's meta registration (``op_plugin/python/meta/_meta_registrations.py``)
and ``GroupedMatmulKernelNpuOpApi.cpp``; numerics follow op-plugin's CPU golden
(``test/test_custom_ops/test_npu_grouped_matmul.py``): see :mod:`.compute`.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import compute, grouping, lowbit, problem
from .grouping import Segment
from .list_overload import define_list_overload
from .problem import OP

SCHEMA = ("npu_grouped_matmul(Tensor[] x, Tensor[] weight, *, Tensor[]? bias=None, "
          "Tensor[]? scale=None, Tensor[]? offset=None, Tensor[]? antiquant_scale=None, "
          "Tensor[]? antiquant_offset=None, Tensor[]? per_token_scale=None, "
          "Tensor? group_list=None, Tensor[]? activation_input=None, "
          "Tensor[]? activation_quant_scale=None, Tensor[]? activation_quant_offset=None, "
          "int? split_item=0, int? group_type=None, int? group_list_type=0, int? act_type=0, "
          "int[]? tuning_config=None, int? output_dtype=None, int? x_dtype=None, "
          "int? weight_dtype=None, int? scale_dtype=None, int? per_token_scale_dtype=None) "
          "-> Tensor[]")


def check_grouped_matmul(*args, **kwargs) -> None:
    problem.check(*args, **kwargs)


def _out_n(weight, single_weight: bool, e: int) -> int:
    w = weight[0] if single_weight else weight[e]
    return problem._n_of(w)


def grouped_matmul_fake(x, weight, *, group_list=None, split_item=0, **kwargs):
    """Output metadata only (the shapes never depend on group_list's values)."""
    p = problem.check(x, weight, group_list=group_list, split_item=split_item, **kwargs)
    x0 = x[0]
    if p.group_type == -1:
        return [xi.new_empty((*xi.shape[:-1], _out_n(weight, False, i)), dtype=p.out_dtype)
                for i, xi in enumerate(x)]
    if p.group_type == 0:
        m = sum(xi.shape[0] for xi in x)
        return [x0.new_empty((m, _out_n(weight, p.single_weight, 0)), dtype=p.out_dtype)]
    e, m, n = group_list.shape[0], x0.shape[0], weight[0].shape[1]
    if p.split_item in (2, 3):
        return [x0.new_empty((e, m, n), dtype=p.out_dtype)]
    return [x0.new_empty((m, n), dtype=p.out_dtype) for _ in range(e)]


def _m_segments(x, group_list, group_list_type, n_experts) -> list[Segment]:
    m = sum(xi.shape[0] for xi in x)
    if len(x) > 1:
        sizes = [xi.shape[0] for xi in x]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        segs = [Segment(i, starts[i], sizes[i]) for i in range(len(sizes))]
        if group_list is not None:
            given = grouping.segments(OP, group_list, group_list_type, m, n_experts, "m")
            checks.expect([s.length for s in given] == sizes, OP, "group_list",
                          lambda: f"the row counts of the x tensors ({sizes})",
                          lambda: [s.length for s in given], ValueError)
        return segs
    return grouping.segments(OP, group_list, group_list_type, m, n_experts, "m")


def grouped_matmul_reference(x, weight, *, bias=None, scale=None, offset=None,
                             antiquant_scale=None, antiquant_offset=None, per_token_scale=None,
                             group_list=None, activation_input=None, activation_quant_scale=None,
                             activation_quant_offset=None, split_item=0, group_type=None,
                             group_list_type=0, act_type=0, tuning_config=None,
                             output_dtype=None, x_dtype=None, weight_dtype=None,
                             scale_dtype=None, per_token_scale_dtype=None):
    p = problem.check(x, weight, bias, scale, offset, antiquant_scale, antiquant_offset,
                      per_token_scale, group_list, activation_input, activation_quant_scale,
                      activation_quant_offset, split_item, group_type, group_list_type,
                      act_type, tuning_config, output_dtype, x_dtype, weight_dtype,
                      scale_dtype, per_token_scale_dtype)
    act_type = act_type or 0
    group_list_type = group_list_type or 0
    if p.group_type == 2:
        segs = grouping.segments(OP, group_list, group_list_type, x[0].shape[1],
                                 group_list.shape[0], "k")
        return compute.k_groups(x[0], weight[0], segs, p.out_dtype, p.split_item in (2, 3))
    single = p.single_weight
    w, b = compute.Params(weight, single), compute.Params(bias, single)
    aq = None
    if p.kind == "antiquant":
        aq = (compute.Params(antiquant_scale, single),
              compute.Params(antiquant_offset, single), p.int4)
    if p.group_type == -1:
        outs = []
        for i, xi in enumerate(x):
            x2 = xi.reshape(-1, xi.shape[-1])
            seg = [Segment(i, 0, x2.shape[0])]
            n = _out_n(weight, False, i)
            y = _run(p, x2, seg, w, b, scale, per_token_scale and per_token_scale[i],
                     aq, n, act_type, single)
            outs.append(y.reshape(*xi.shape[:-1], n))
        return outs
    segs = _m_segments(x, group_list, p.group_list_type, p.n_experts)
    n = _out_n(weight, single, 0)
    if len({xi.shape[1] for xi in x}) > 1:
        # x tensors of different k (one per weight): one matmul each, the rows stacked.
        outs = [_run(p, xi, [Segment(i, 0, xi.shape[0])], w, b, scale,
                     None if per_token_scale is None else per_token_scale[i], aq, n,
                     act_type, single) for i, xi in enumerate(x)]
        return [torch.cat(outs)]
    x2 = x[0] if len(x) == 1 else torch.cat(list(x))
    pts = None
    if per_token_scale is not None:
        pts = per_token_scale[0] if len(x) == 1 else torch.cat(list(per_token_scale))
    if p.kind in lowbit.KINDS:
        return [lowbit.groups(p.kind, x2, segs, w, b, compute.Params(scale, single),
                              compute.Params(offset, single), pts, n, p.out_dtype)]
    return [_run(p, x2, segs, w, b, scale, pts, aq, n, act_type, single)]


def _run(p, x2, segs, w, b, scale, pts, aq, n, act_type, single):
    if p.kind == "quant":
        return compute.quant_groups(x2, segs, w, b, compute.Params(scale, single), pts, n,
                                    p.out_dtype, act_type)
    return compute.float_groups(x2, segs, w, b, n, p.out_dtype, antiquant=aq)


grouped_matmul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_grouped_matmul,
                          reference=grouped_matmul_reference, fake=grouped_matmul_fake,
                          info=OpInfo(api="torch_npu"))
# op-plugin's derivatives.yaml has no entry for npu_grouped_matmul: training code (MindSpeed,
# verl) wraps it in its own autograd.Function, calling it again with group_type=2 for dW.
grouped_matmul_op.forbid_autograd(
    "npu_grouped_matmul has no backward in torch_npu; wrap it in an autograd.Function")
# ``npu_grouped_matmul.List``: ``int[]? group_list`` (cumulative offsets), the form the
# dispatcher picks for a list of ints; it converts its arguments and calls the op above.
grouped_matmul_list_op = define_list_overload(grouped_matmul_op)


def _as_list(value):
    if value is None or isinstance(value, (list, tuple)):
        return None if value is None else list(value)
    return [value]


def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
                       antiquant_offset=None, per_token_scale=None, group_list=None,
                       activation_input=None, activation_quant_scale=None,
                       activation_quant_offset=None, split_item=0, group_type=None,
                       group_list_type=0, act_type=0, tuning_config=None, output_dtype=None,
                       x_dtype=None, weight_dtype=None, scale_dtype=None,
                       per_token_scale_dtype=None):
    """Grouped matmul: ``y_i = x_i @ weight_i (+ bias_i)``, optionally (anti)quantized.

    Formulas::

        float:       y_i = x_i @ weight_i + bias_i
        per-channel: y_i = (x_i @ weight_i + bias_i) * scale_i + offset_i   (int8 in)
        per-token:   y_i = act((x_i @ weight_i + bias_i) * scale_i * per_token_scale_i)
        float bias:  y_i = act((x_i @ weight_i) * scale_i [* per_token_scale_i] + bias_i)
        antiquant:   y_i = x_i @ ((weight_i + antiquant_offset_i) * antiquant_scale_i) + bias_i
        A4W4:        y_i = x_i @ (weight_i * scale_i) * per_token_scale_i      (int4 x, weight)
        A8W4:        y_i = ((x_i - 8) @ weight_i * scale_i + bias_i) * per_token_scale_i

    int4 x and weight are int32 tensors packing 8 values each along the last dim
    (npu_quantize with torch.quint4x2, npu_convert_weight_to_int4pack); an NZ weight
    (npu_format_cast 29) holds the same values.  The A4W4 / A8W4 rules and rounding steps are
    in ``npu_anywhere.ops.gmm.lowbit``.

    Parameters
    ----------
    x, weight : list of Tensor (a single Tensor is taken as a one-element list)
        Left and right matrices; float16 / bfloat16 / float32 (float64 outside strict mode),
        int8 (quant, with int8 weight) or float16/bfloat16 x with int8 or packed-int4 int32
        weight (antiquant; n = 8 x the int32 weight's last dim).  Up to 128 tensors each.
        ``weight`` is E tensors ``[k, n]`` or one ``[E, k, n]``; transposed (column-major)
        weights are read as they are.
    bias : list of Tensor, optional
        Per group ``[n]`` (or one ``[E, n]``): float16 for float16 x, float32 for bfloat16 /
        float32 x; int32 for int8 x (added to the int32 accumulator), or with a float32 /
        bfloat16 scale a float bias added after dequantization (formulas 2-2 / 3-2:
        ``y = act(acc * scale [* per_token_scale] + bias)`` in float32): bfloat16 or float32
        for bfloat16 output, float16 or float32 for float16 output (Ascend 950's rule; strict
        A2 / A3 take only bfloat16, with per_token_scale).
    scale : list of Tensor, optional
        int8 x only, per channel ``[n]`` / ``[E, n]``: int64 words from npu_trans_quant_param
        (int8 output, ``offset`` packed inside), or bfloat16 / float32 (bfloat16 / float16
        output).  Without it int8 x gives the int32 accumulator (``output_dtype=torch.int32``).
    offset : list of Tensor, optional
        None, except for asymmetric A8W4: float32 ``[E, 1, n]`` (``antiquant_offset * scale``).
    activation_input, activation_quant_scale, activation_quant_offset : None
        Reserved (only None is accepted, as documented).
    antiquant_scale, antiquant_offset : list of Tensor, optional
        x's dtype; per channel ``[n]`` / ``[E, n]`` or, for int4, per group ``[G, n]`` /
        ``[E, G, n]`` (G divides k).
    per_token_scale : list of Tensor, optional
        float32 ``[m]`` per x tensor: per-token quantization (with a float ``scale``).
    group_list : Tensor or list of int, optional
        int64.  A list of ints calls the ``npu_grouped_matmul.List`` overload (as the
        dispatcher does): cumulative row offsets of one 2-D x, with 2-D weights, no
        per_token_scale, and group_type / group_list_type / act_type left None (or at the
        values the split mode implies); see :mod:`.list_overload`.
    split_item : int, default 0
        0/1: one output per group; 2/3: a single output.
    group_type : {-1, 0, 2}
        -1 no grouping (x_i @ weight_i), 0 groups on m (rows of x), 2 groups on k (the
        weight-gradient form ``([x.T], [dy], split_item=3, group_type=2)`` -> ``[E, h, n]``).
    group_list_type : {0, 1, 2}, default 0
        0 cumsum, 1 group sizes, 2 ``[E, 2]`` ``[group_index, size]`` rows (int8, m-axis).
    act_type : {0, 1, 2, 4, 5}, default 0
        none / relu / gelu_tanh / fast_gelu / silu; per-token quantization only.
    tuning_config : list of int, optional
        A tiling hint; accepted and ignored.
    output_dtype : torch.dtype, optional
        None: x's dtype (int8 for int8 x with an int64 scale).
    x_dtype, weight_dtype, scale_dtype, per_token_scale_dtype : None
        The hifloat8 / mxfp4 overrides are not emulated (NotImplementedError).

    Returns
    -------
    list of Tensor
        split_item 0/1: one tensor per group (group_type -1: ``x_i.shape[:-1] + (n_i,)``;
        group_type 2: ``[m, n]`` each); 2/3: one tensor (``[sum m, n]``, or ``[E, m, n]`` for
        group_type 2).

    Constraints
    -----------
    group_type -1 takes split_item 0/1 and no group_list; 0 takes split_item 2/3 and a
    group_list unless x is a list (one tensor per group); 2 takes float x and weight.
    group_list values: non-negative sizes, a non-decreasing cumsum, covering at most the
    grouped axis (checked before anything is computed).  Strict mode: A2, A3 and Atlas
    inference (310P: float16, group_type 0, one 3-D weight with n a multiple of 16).

    Notes
    -----
    Rows past the last group (group_list covering fewer than m rows) come out as zeros (the
    NPU leaves them unwritten); an empty k-group gives a zero matrix.  No autograd: torch_npu
    registers no backward (requesting a gradient raises).  Numerics: op-plugin's golden
    (float32 accumulation; int8 with exact int32 accumulation, float32 dequantization, int8
    output rounded half to even and saturated).

    Examples
    --------
    >>> x = torch.randn(10, 16)
    >>> w = torch.randn(3, 16, 8)
    >>> counts = torch.tensor([4, 0, 6])
    >>> y, = npu_anywhere.npu_grouped_matmul([x], [w], group_list=counts, split_item=2,
    ...                                      group_type=0, group_list_type=1)
    >>> y.shape
    torch.Size([10, 8])
    """
    x, weight = _as_list(x), _as_list(weight)
    bias, scale, offset = _as_list(bias), _as_list(scale), _as_list(offset)
    antiquant_scale, antiquant_offset = _as_list(antiquant_scale), _as_list(antiquant_offset)
    per_token_scale = _as_list(per_token_scale)
    common = dict(bias=bias, scale=scale, offset=offset, antiquant_scale=antiquant_scale,
                  antiquant_offset=antiquant_offset, per_token_scale=per_token_scale,
                  group_list=group_list, activation_input=_as_list(activation_input),
                  activation_quant_scale=_as_list(activation_quant_scale),
                  activation_quant_offset=_as_list(activation_quant_offset),
                  split_item=split_item, group_type=group_type,
                  group_list_type=group_list_type, act_type=act_type, output_dtype=output_dtype)
    later = dict(tuning_config=tuning_config, x_dtype=x_dtype, weight_dtype=weight_dtype,
                 scale_dtype=scale_dtype, per_token_scale_dtype=per_token_scale_dtype)
    if isinstance(group_list, (list, tuple)):
        # The dispatcher's choice for a list of ints: the .List overload, whose schema has
        # none of the later parameters (passing one is torch's unknown-keyword error there).
        common.update({k: v for k, v in later.items() if v is not None})
        return grouped_matmul_list_op(x, weight, **common)
    return grouped_matmul_op(x, weight, **common, **later)


TORCH_NPU_FUNCTIONS = {"npu_grouped_matmul": npu_grouped_matmul}

"""torch_npu.npu_moe_gating_top_k and npu_moe_gating_top_k_backward.

Group-limited expert routing (DeepSeek-V3 style).  Formula (seed 004; op-plugin
docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_gating_top_k.md and its golden
test/test_custom_ops/test_npu_moe_gating_topk.py)::

    norm  = softmax(x, -1)  (norm_type 0)   |   sigmoid(x)  (norm_type 1)
    score = norm + bias                       # bias only steers the choice
    groups of E / group_count experts; group score = max (mode 0) or sum of the top 2 (mode 1)
    keep the k_group best groups; expert_idx = the k best scores among the kept experts
    hash mode (input_ids, tid2eid given): expert_idx[n] = tid2eid[input_ids[n]] instead
    y = norm[expert_idx]
    y = y / (sum(y) + eps)                    # sigmoid only
    y = y * routed_scaling_factor

Precision and order follow the Ascend C kernel (hicann/ops-transformer
moe/moe_gating_top_k/op_kernel/moe_gating_top_k_generalized.h and _without_group.h): x and bias
are cast to float32; softmax is ``exp(x - max) * (1 / sum)``; the sums, the division and the
scaling run in float32 and ``y`` is rounded to x's dtype once.  Ranking (groups and experts) is
a stable descending sort: equal scores keep the lower index first, as the golden's
``argsort(-v, kind='stable')`` does.

Backward (op-plugin derivatives.yaml: ``x: npu_moe_gating_top_k_backward(result2, grad,
result1, renorm, norm_type, routed_scaling_factor, eps)``), sigmoid mode only: with
``s = x_norm[expert_idx]``, ``S = sum(s) + eps`` and ``g = routed_scaling_factor * grad_y``::

    d s_j = g_j / S - sum_i(g_i s_i) / S^2           # scattered (added) to column expert_idx_j
    grad_x = d s * x_norm * (1 - x_norm)             # sigmoid'(x) from its output
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled, cpu_top_k
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float, stable_top_k

OP = "npu_moe_gating_top_k"
SCHEMA = ("npu_moe_gating_top_k(Tensor x, int k, *, Tensor? bias=None, Tensor? input_ids=None, "
          "Tensor? tid2eid=None, int k_group=1, int group_count=1, int group_select_mode=0, "
          "int renorm=0, int norm_type=0, bool out_flag=False, float routed_scaling_factor=1.0, "
          "float eps=1e-20) -> (Tensor, Tensor, Tensor)")
GRAD_OP = "npu_moe_gating_top_k_backward"
GRAD_SCHEMA = ("npu_moe_gating_top_k_backward(Tensor x_norm, Tensor grad_y, Tensor expertIdx, *, "
               "int renorm=0, int norm_type=0, float routed_scaling_factor=1.0, "
               "float eps=1e-20) -> Tensor")

# Seed 004 and op-plugin's doc list A2 and A3 (the kernel also builds for 950 with
# out_flag=False only; the torch_npu doc does not list it).
_SUPPORTED = frozenset({Product.A2, Product.A3})
_MAX_EXPERTS = 2048
_ALIGN = 32
_SOFTMAX, _SIGMOID = 0, 1
_INDEX_DTYPES = (torch.int32, torch.int64)


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _check_groups(x, k, k_group, group_count, group_select_mode, strict: bool) -> None:
    experts = x.shape[1]
    checks.expect(group_count > 0, OP, "group_count", "> 0", repr(group_count), ValueError)
    checks.expect(experts % group_count == 0, OP, "group_count",
                  lambda: f"a divisor of x.size(-1) = {experts}", repr(group_count), ValueError)
    per_group = experts // group_count
    # The doc asks for more than 2 experts per group; the kernel's tiling
    # (moe_gating_top_k_tiling.cpp) asks for 1, and 2 for the top-2 sum of mode 1.  Default
    # mode takes what the kernel runs; strict mode holds the doc's word.
    least = 3 if strict else (2 if group_select_mode == 1 else 1)
    checks.expect(per_group >= least, OP, "group_count",
                  lambda: f"to leave at least {least} experts per group (x.size(-1) / "
                          f"group_count = {experts} / {group_count})",
                  repr(group_count), ValueError)
    grouped = group_count not in (1, experts) and k_group != group_count
    if strict or grouped:
        # Every group is padded to 32 experts on chip; the kernel checks it only when groups
        # are really selected, the doc always.
        checks.expect(_align(per_group) * group_count <= _MAX_EXPERTS, OP, "group_count",
                      lambda: f"with align32(x.size(-1) / group_count) * group_count <= "
                              f"{_MAX_EXPERTS}",
                      lambda: f"{group_count} ({_align(per_group)} * {group_count})",
                      ValueError)
    checks.expect(1 <= k_group <= group_count, OP, "k_group",
                  lambda: f"in [1, group_count] = [1, {group_count}]", repr(k_group), ValueError)
    checks.expect(1 <= k <= per_group * k_group, OP, "k",
                  lambda: f"in [1, x.size(-1) / group_count * k_group] = "
                          f"[1, {per_group * k_group}]", repr(k), ValueError)


def check_gating_top_k(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1,
                       group_count=1, group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
                       routed_scaling_factor=1.0, eps=1e-20):
    expect_float(OP, "x", x)
    checks.expect_dim(x, 2, OP, "x")
    experts = x.shape[1]
    checks.expect(experts <= _MAX_EXPERTS, OP, "x", f"at most {_MAX_EXPERTS} experts (last dim)",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    if bias is not None:
        checks.expect_dim(bias, 1, OP, "bias")
        checks.expect(bias.shape[0] == experts, OP, "bias",
                      lambda: f"the shape (x.size(-1),) = ({experts},)",
                      lambda: f"shape {tuple(bias.shape)}", RuntimeError)
        checks.expect_same_dtype({"x": x, "bias": bias}, OP)
        checks.expect_same_device({"x": x, "bias": bias}, OP)
    checks.expect_one_of(group_select_mode, (0, 1), OP, "group_select_mode")
    checks.expect(renorm == 0, OP, "renorm", "0 (norm, then top-k: the only mode supported)",
                  repr(renorm), ValueError)
    checks.expect_one_of(norm_type, (_SOFTMAX, _SIGMOID), OP, "norm_type")
    product = targets.expect_supported(OP, _SUPPORTED)
    _check_groups(x, k, k_group, group_count, group_select_mode, product is not None)
    checks.expect((input_ids is None) == (tid2eid is None), OP, "input_ids",
                  "given together with tid2eid (both or neither)",
                  lambda: "input_ids" if tid2eid is None else "tid2eid alone", ValueError)
    if input_ids is not None:
        checks.expect_dtype(input_ids, _INDEX_DTYPES, OP, "input_ids")
        checks.expect_dim(input_ids, 1, OP, "input_ids")
        checks.expect(input_ids.shape[0] == x.shape[0], OP, "input_ids",
                      lambda: f"the shape (x.size(0),) = ({x.shape[0]},)",
                      lambda: f"shape {tuple(input_ids.shape)}", RuntimeError)
        checks.expect_dtype(tid2eid, _INDEX_DTYPES, OP, "tid2eid")
        checks.expect_dim(tid2eid, 2, OP, "tid2eid")
        checks.expect(tid2eid.shape[1] == k, OP, "tid2eid", lambda: f"a last dim equal to k = {k}",
                      lambda: f"shape {tuple(tid2eid.shape)}", RuntimeError)
        checks.expect_same_device({"x": x, "input_ids": input_ids, "tid2eid": tid2eid}, OP)


def check_gating_top_k_backward(x_norm, grad_y, expertIdx, *, renorm=0, norm_type=0,
                                routed_scaling_factor=1.0, eps=1e-20):
    op = GRAD_OP
    allowed = (torch.float32,) if targets.current() is not None else (torch.float32, torch.float64)
    checks.expect_dtype(x_norm, allowed, op, "x_norm")
    checks.expect_dim(x_norm, 2, op, "x_norm")
    experts = x_norm.shape[1]
    checks.expect(2 <= experts <= _MAX_EXPERTS, op, "x_norm",
                  f"a last dim (experts) in [2, {_MAX_EXPERTS}]",
                  lambda: f"shape {tuple(x_norm.shape)}", ValueError)
    expect_float(op, "grad_y", grad_y)
    checks.expect_dim(grad_y, 2, op, "grad_y")
    checks.expect(grad_y.shape[0] == x_norm.shape[0] and 1 <= grad_y.shape[1] <= experts, op,
                  "grad_y", lambda: f"the shape (x_norm.size(0), K) with 1 <= K <= {experts}",
                  lambda: f"shape {tuple(grad_y.shape)}", RuntimeError)
    checks.expect_dtype(expertIdx, (torch.int32,), op, "expertIdx")
    checks.expect(tuple(expertIdx.shape) == tuple(grad_y.shape), op, "expertIdx",
                  lambda: f"grad_y's shape {tuple(grad_y.shape)}",
                  lambda: f"shape {tuple(expertIdx.shape)}", RuntimeError)
    checks.expect_same_device({"x_norm": x_norm, "grad_y": grad_y, "expertIdx": expertIdx}, op)
    checks.expect_one_of(renorm, (0, 1), op, "renorm")
    checks.expect(norm_type == _SIGMOID, op, "norm_type",
                  "1 (sigmoid: the only mode the backward supports)", repr(norm_type), ValueError)
    targets.expect_supported(op, _SUPPORTED)


# -- reference -------------------------------------------------------------------------------

def _norm(x: torch.Tensor, norm_type: int) -> torch.Tensor:
    xf = x.to(compute_dtype(x.dtype))
    if norm_type == _SIGMOID:
        return torch.sigmoid(xf)
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return e * torch.reciprocal(e.sum(dim=-1, keepdim=True))     # the kernel's Muls(1 / sum)


def _sum_of_top2(grouped: torch.Tensor) -> torch.Tensor:
    """Largest plus second largest along -1 (a repeated maximum counts twice).

    Two max reductions and a mask: about 3x quicker on CPU than ``topk(2)`` over rows of a few
    dozen, whose per-row cost dominates.
    """
    first = grouped.amax(dim=-1, keepdim=True)
    is_first = grouped == first
    rest = grouped.masked_fill(is_first, float("-inf")).amax(dim=-1)
    first = first.squeeze(-1)
    return first + torch.where(is_first.sum(dim=-1) >= 2, first, rest)


def _top_k_in_best_groups(score, k, k_group, group_count, group_select_mode, rank=stable_top_k):
    """Expert ids of the k best scores inside the k_group best groups (int64, ``(rows, k)``);
    ``rank`` is the stable top-k used (the reference's, or the C++ kernel's)."""
    rows, experts = score.shape
    per_group = experts // group_count
    grouped = score.view(rows, group_count, per_group)
    if group_select_mode == 0:
        group_score = grouped.amax(dim=-1)
    else:
        group_score = _sum_of_top2(grouped)
    _, best = rank(group_score, k_group)
    # Rank only the kept groups' experts (half the work of masking the others with -inf on
    # DeepSeek-V3's 4 of 8).  Kept in ascending group order, their concatenation lists experts
    # by id, so its stable ranking breaks ties exactly as a ranking of all experts would.
    best = torch.sort(best, dim=-1).values
    kept = grouped.gather(1, best.unsqueeze(-1).expand(rows, k_group, per_group))
    _, pos = rank(kept.reshape(rows, k_group * per_group), k)
    return best.gather(1, pos // per_group) * per_group + pos % per_group


def gating_top_k_reference(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1,
                           group_count=1, group_select_mode=0, renorm=0, norm_type=0,
                           out_flag=False, routed_scaling_factor=1.0, eps=1e-20):
    return _gating(x, k, bias, input_ids, tid2eid, k_group, group_count, group_select_mode,
                   norm_type, routed_scaling_factor, eps, stable_top_k)


def _gating(x, k, bias, input_ids, tid2eid, k_group, group_count, group_select_mode, norm_type,
            routed_scaling_factor, eps, rank):
    norm = _norm(x, norm_type)
    score = norm if bias is None else norm + bias.to(norm.dtype)
    if input_ids is not None:
        # Hash mode: each token's table row is its expert list; no ranking (nor bias) applies.
        # Ids outside the table (or experts outside [0, E)) raise in the lookups.
        idx = tid2eid.index_select(0, input_ids.to(torch.int64)).to(torch.int64)
    # One expert per group (mode 0) or every group kept: the group step changes nothing.
    elif 1 < group_count < x.shape[1] and k_group < group_count:
        idx = _top_k_in_best_groups(score, k, k_group, group_count, group_select_mode, rank)
    else:
        idx = rank(score, k)[1]
    y = norm.gather(1, idx)
    if norm_type == _SIGMOID:
        y = y / (y.sum(dim=-1, keepdim=True) + eps)
    y = y * routed_scaling_factor
    # normOut: float32 (float64 kept for float64 inputs, so gradcheck sees full precision).
    # The NPU writes it only when out_flag is set; it is always filled here, since the
    # backward reads it.
    norm_out = norm if norm.dtype == torch.float64 else norm.to(torch.float32)
    return y.to(x.dtype), idx.to(torch.int32), norm_out.contiguous()


def gating_top_k_backward_reference(x_norm, grad_y, expertIdx, *, renorm=0, norm_type=0,
                                    routed_scaling_factor=1.0, eps=1e-20):
    ct = torch.float64 if torch.float64 in (x_norm.dtype, grad_y.dtype) else torch.float32
    s_all = x_norm.to(ct)
    idx = expertIdx.long()
    s = s_all.gather(1, idx)
    total = s.sum(dim=-1, keepdim=True) + eps
    g = grad_y.to(ct) * routed_scaling_factor
    dot = (g * s).sum(dim=-1, keepdim=True)
    d_slot = g / total - dot / (total * total)
    d_norm = torch.zeros_like(s_all).scatter_add_(1, idx, d_slot)
    return (d_norm * s_all * (1 - s_all)).to(grad_y.dtype)


gating_top_k_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gating_top_k,
                        reference=gating_top_k_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
gating_top_k_backward_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_gating_top_k_backward,
                                 reference=gating_top_k_backward_reference, metadata_check=True,
                                 info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    # inputs: every schema argument in order (x, k, bias, input_ids, tid2eid, k_group,
    # group_count, group_select_mode, renorm, norm_type, out_flag, routed_scaling_factor, eps).
    renorm, norm_type, _, scale, eps = inputs[8:]
    ctx.args = dict(renorm=renorm, norm_type=norm_type, routed_scaling_factor=scale, eps=eps)
    ctx.n_inputs = len(inputs)
    # derivatives.yaml: output_differentiability [true, false, false]; x only (not bias).
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(output[2], output[1])


def _backward(ctx, grad_y, grad_idx, grad_norm):
    norm_out, expert_idx = ctx.saved_tensors
    grad_x = None
    if grad_y is not None:
        grad_x = gating_top_k_backward_op(norm_out, grad_y.contiguous(), expert_idx, **ctx.args)
    return (grad_x,) + (None,) * (ctx.n_inputs - 1)


gating_top_k_op.set_autograd(setup_context=_setup_context, backward=_backward)


def _gating_key(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
                routed_scaling_factor=1.0, eps=1e-20):
    return (x.dtype, x.shape[-1], k, None if bias is None else bias.dtype, k_group, group_count,
            group_select_mode, norm_type, x.device.type,
            None if input_ids is None else (input_ids.dtype, tid2eid.dtype))


# On the CPU the rankings (most of the time: two ATen topk calls per token) run in the C++
# stable top-k, the rest is the reference's own ATen calls, so the outputs are bit-identical.
def _cpp_rank(values, k):
    top, idx = cpu_top_k.top_k(values, k)
    return top, idx.to(torch.int64)


def _cpp_supports(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                  group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
                  routed_scaling_factor=1.0, eps=1e-20):
    if input_ids is not None:
        return "hash mode ranks nothing"
    if x.dtype == torch.float64:
        return "float64 scores"
    if k_group > cpu_top_k.MAX_K:
        return f"k_group above {cpu_top_k.MAX_K}"
    return cpu_top_k.supports(x, k)


def _cpp_gating(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                group_select_mode=0, renorm=0, norm_type=0, out_flag=False,
                routed_scaling_factor=1.0, eps=1e-20):
    return _gating(x, k, bias, input_ids, tid2eid, k_group, group_count, group_select_mode,
                   norm_type, routed_scaling_factor, eps, _cpp_rank)


CPP_PROVIDER = "cpp_top_k"
gating_top_k_op.add_provider(CPP_PROVIDER, _cpp_gating, _cpp_supports)

# Elsewhere (CUDA): the norm, the bias and the group scores fused; the rankings ATen's topk.
compiled.register(gating_top_k_op, key=_gating_key)


def npu_moe_gating_top_k(x, k, *, bias=None, input_ids=None, tid2eid=None, k_group=1,
                         group_count=1, group_select_mode=0, renorm=0, norm_type=0,
                         out_flag=False, routed_scaling_factor=1.0, eps=1e-20):
    """Group-limited top-k routing: norm, bias-steered group and expert choice, renormalisation.

    Formula (seed 004; op-plugin's doc and golden)::

        norm  = softmax(x)  (norm_type=0)  or  sigmoid(x)  (norm_type=1)
        score = norm + bias
        group score = max (group_select_mode=0) or sum of the 2 largest (=1) of each group of
                      E / group_count experts;  keep the k_group best groups
        expert_idx  = top-k of score over the kept experts   (ties: lower index first)
                      hash mode: expert_idx[n] = tid2eid[input_ids[n]]
        y = norm[expert_idx];  sigmoid: y = y / (sum(y) + eps);  y = y * routed_scaling_factor

    Parameters
    ----------
    x : Tensor
        ``(rows, E)``, float16, bfloat16 or float32 (float64 outside strict mode),
        ``E <= 2048``; may be non-contiguous.
    k : int
        Experts per row, ``1 <= k <= E / group_count * k_group``.
    bias : Tensor, optional
        ``(E,)``, x's dtype; added to the scores used for choosing only.
    input_ids, tid2eid : Tensor, optional
        The hash mode, both or neither: ``input_ids`` ``(rows,)`` token ids and ``tid2eid``
        ``(vocab, k)`` expert ids, int32 or int64, may be non-contiguous.  Then
        ``expert_idx[n] = tid2eid[input_ids[n]]`` replaces the ranking (bias and groups play
        no part) and ``y`` is computed from those experts as above.
    k_group : int
        Groups kept, ``1 <= k_group <= group_count``.
    group_count : int
        Groups, a divisor of ``E``.
    group_select_mode : {0, 1}
        Group score: 0 the group's max, 1 the sum of its two largest scores.
    renorm : int
        Only 0 (norm, then top-k).
    norm_type : {0, 1}
        0 softmax, 1 sigmoid.
    out_flag : bool
        Whether the NPU writes ``norm_out``.
    routed_scaling_factor, eps : float
        Scale of ``y``; the sigmoid renormalisation's ``eps``.

    Returns
    -------
    (y, expert_idx, norm_out) : ``y`` ``(rows, k)`` in x's dtype; ``expert_idx`` ``(rows, k)``
    int32; ``norm_out`` ``(rows, E)`` float32 (float64 for float64 ``x``), the norm.

    Constraints
    -----------
    ``E / group_count`` at least 1 (2 for ``group_select_mode=1``) and, when groups are really
    selected (``1 < group_count < E`` and ``k_group < group_count``),
    ``align32(E / group_count) * group_count <= 2048``: the kernel's tiling rules.  Strict mode
    (A2, A3) holds the doc's wording instead: more than 2 experts per group and the aligned
    product <= 2048 always.

    Notes
    -----
    Numerics follow the Ascend C kernel (moe_gating_top_k_generalized.h): float32 compute,
    softmax as ``exp(x - max) * (1 / sum)``, one rounding of ``y``.  The softmax mode is not
    renormalised (the doc's formula divides by the sum for sigmoid only).  The NPU leaves
    ``norm_out`` unwritten when ``out_flag`` is False; here it always holds the norm, which the
    backward reads.  The hash mode follows Huawei's hash kernel and its golden
    (hicann/cann-recipes-infer ops/ascendc/src/moe_gating_top_k_hash/op_kernel/
    moe_gating_top_k_hash_without_group.h ``SelectExpertIdxByHash``, examples/
    test_npu_moe_gating_top_k.py): the ids are copied from the table row, then gathered from the
    norm without bias.  That kernel reads the table only in its ungrouped tilings
    (``group_count`` 1 or E, or every group kept); the doc's formula, followed here, lets the
    table replace the group and expert choice whatever the grouping.  Differentiable in ``y``
    w.r.t. ``x`` through :func:`npu_moe_gating_top_k_backward`, which supports the sigmoid mode
    only (a softmax gradient raises there); ``bias`` gets no gradient, as in derivatives.yaml.

    Examples
    --------
    >>> x = torch.rand(16, 256, dtype=torch.float16) * 2
    >>> bias = torch.rand(256, dtype=torch.float16) * 2
    >>> y, idx, _ = npu_anywhere.npu_moe_gating_top_k(x, 1, bias=bias, k_group=4,
    ...     group_count=8, group_select_mode=1, norm_type=1)
    """
    return gating_top_k_op(x, k, bias=bias, input_ids=input_ids, tid2eid=tid2eid,
                           k_group=k_group, group_count=group_count,
                           group_select_mode=group_select_mode, renorm=renorm,
                           norm_type=norm_type, out_flag=out_flag,
                           routed_scaling_factor=routed_scaling_factor, eps=eps)


def npu_moe_gating_top_k_backward(x_norm, grad_y, expertIdx, *, renorm=0, norm_type=0,
                                  routed_scaling_factor=1.0, eps=1e-20):
    """Gradient of :func:`npu_moe_gating_top_k`'s ``y`` w.r.t. ``x``, sigmoid mode.

    Formula (the derivative of ``y = r * s / (sum(s) + eps)``, ``s = sigmoid(x)[expertIdx]``)::

        S = sum_j x_norm[expertIdx_j] + eps;  g = r * grad_y
        d s_j  = g_j / S - sum_i(g_i s_i) / S^2      # added into column expertIdx_j
        grad_x = d s * x_norm * (1 - x_norm)

    Parameters
    ----------
    x_norm : Tensor
        ``(M, N)`` float32 (float64 outside strict mode), the forward's ``norm_out``;
        ``2 <= N <= 2048``.
    grad_y : Tensor
        ``(M, K)``, float16, bfloat16 or float32, ``1 <= K <= N``.
    expertIdx : Tensor
        ``(M, K)`` int32, the forward's ``expert_idx``; values in ``[0, N)`` (not checked: data).
    renorm : {0, 1}
        Reserved; the sigmoid mode always renormalises.
    norm_type : int
        Must be 1 (sigmoid).
    routed_scaling_factor, eps : float
        As in the forward.

    Returns
    -------
    grad_x : Tensor ``(M, N)`` in grad_y's dtype (computed in float32, rounded once).

    Notes
    -----
    No kernel source is published; this is the exact derivative, as op-plugin's test
    (test_npu_moe_gating_top_k_backward.py) checks it against float64 autograd.  A repeated
    id in a row (possible only for hand-made ``expertIdx``) accumulates both slots' gradients.
    """
    return gating_top_k_backward_op(x_norm, grad_y, expertIdx, renorm=renorm, norm_type=norm_type,
                                    routed_scaling_factor=routed_scaling_factor, eps=eps)


TORCH_NPU_FUNCTIONS = {
    OP: npu_moe_gating_top_k,
    GRAD_OP: npu_moe_gating_top_k_backward,
}

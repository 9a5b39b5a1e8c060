"""torch_npu.npu_moe_init_routing_v2.

Formula (seed 004 and op-plugin docs/zh/custom_APIs; op-plugin
test/test_custom_ops/test_npu_moe_init_routing_v2.py ``cpu_op_exec`` is the golden followed)::

    key = expert_idx.flat;  key[key < expert_start] = INT32_MAX        # out of range sorts last
    sorted_key, perm = stable sort(key)                  # ties by flat position n * K + k
    valid = #{expert_start <= expert_idx < expert_end}
    dropless (drop_pad_mode 0):
        expanded_x[i] = x[perm[i] // K]                  i < min(rows, valid)
        row_idx_type 0: expanded_row_idx[perm[i]] = i (i < valid), -1 elsewhere
        row_idx_type 1: expanded_row_idx = perm
    drop / pad (drop_pad_mode 1), capacity C, output (expert_num, C, H):
        rank = i - first position of sorted_key[i];  kept = valid and rank < C
        expanded_x[e, rank] = x[perm[i] // K];  expanded_row_idx[perm[i]] = e * C + rank or -1
    expert token counts over [expert_start, expert_end) (before the capacity cut):
        type 1 count, type 0 cumsum, type 2 (expert_num, 2) pairs (expert id, count) for the
        non-zero counts, packed at the head and followed by zeros
    quant_mode -1: no quantisation; expanded_scale = scale[perm[i] // K] when scale is given
    quant_mode  0 (static): int8(clip(rint(fp16(fp16(x) * fp16(scale)) + fp16(offset))));
        expanded_scale is 1-D float32 with one element per expanded_x row (rows of expanded_x
        dropless, expert_num * expert_capacity with drop / pad), zeros here: the shape the
        NPU's eager op allocates (op-plugin op_plugin/ops/opapi/MoeInitRoutingV2KernelNpuOpApi.cpp,
        ``expanded_scale_len`` in its last branch; the kernel writes no scale in this mode).
        op-plugin's meta (python/meta/_meta_registrations.py) says 0-d here; eager is followed
        so that compiled and eager graphs agree (the fake kernel traces this reference).
    quant_mode  1 (dynamic): v = x (* scale[e - expert_start] or scale[0]);
        expanded_scale = max|v| / 127;  expanded_x = int8(round_half_even(v / expanded_scale))
    quant_mode 2 / 3 (MXFP8 RoundScale, float8_e5m2 / float8_e4m3fn): blocks of 32 along H,
        shared_exp = max(floor(log2 max|block|) - emax, -127) (emax 15 / 8),
        expanded_x = saturate(round_half_even(x / 2**shared_exp)) on the float8 grid,
        expanded_scale = float8_e8m0 2**shared_exp, (rows, CeilAlign(CeilDiv(H, 32), 2))
        (the op-plugin page's ``simplified_mx_quantize`` golden; :mod:`..quant.mx`)

Rows past the valid ones (and empty capacity slots) are zero here; the NPU leaves them
undefined.  Output shapes depend on metadata only (op-plugin's meta function), never on values.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..quant import core as qcore
from ..quant import mx
from ._routing import FLOAT_DTYPES, expect_int32_ids, stable_sort

OP = "npu_moe_init_routing_v2"
SCHEMA = ("npu_moe_init_routing_v2(Tensor x, Tensor expert_idx, *, Tensor? scale=None, "
          "Tensor? offset=None, int active_num=-1, int expert_capacity=-1, int expert_num=-1, "
          "int drop_pad_mode=0, int expert_tokens_num_type=0, bool expert_tokens_num_flag=False, "
          "int quant_mode=-1, int[2] active_expert_range=[], int row_idx_type=0, "
          "int? x_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_INT32_MAX = 2 ** 31 - 1
_MAX_EXPERTS = 10240
_MAX_EXPERTS_KEY_VALUE = 5120
_INT8 = qcore.format_of(torch.int8)
# The MXFP8 RoundScale modes: the element format of expanded_x.
_MX_MODES = {2: mx.FORMATS["float8_e5m2"], 3: mx.FORMATS["float8_e4m3fn"]}
# The page's other modes: HIF8 (6, 7, 8), MXFP4 (9), FP8 per-block (11, 12), INT4 (13),
# MXFP8 with an amax clamp (16, 17); the page gives no golden for them.
_NOT_EMULATED_QUANT_MODES = (6, 7, 8, 9, 11, 12, 13, 16, 17)


def _expert_range(active_expert_range, expert_num) -> tuple[int, int]:
    if active_expert_range is None or len(active_expert_range) == 0:
        return 0, expert_num
    return int(active_expert_range[0]), int(active_expert_range[1])


def check_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1,
                          expert_capacity=-1, expert_num=-1, drop_pad_mode=0,
                          expert_tokens_num_type=0, expert_tokens_num_flag=False, quant_mode=-1,
                          active_expert_range=(), row_idx_type=0, x_dtype=None):
    op = OP
    float_ok = FLOAT_DTYPES + ((torch.float64,) if targets.current() is None else ())
    checks.expect_dtype(x, float_ok + (torch.int8,), op, "x")
    checks.expect_dim(x, 2, op, "x")
    expect_int32_ids(op, "expert_idx", expert_idx)
    checks.expect(expert_idx.shape[0] == x.shape[0], op, "expert_idx",
                  lambda: f"x.size(0) = {x.shape[0]} rows", lambda: f"{expert_idx.shape[0]} rows",
                  RuntimeError)
    checks.expect_one_of(drop_pad_mode, (0, 1), op, "drop_pad_mode")
    checks.expect_one_of(expert_tokens_num_type, (0, 1, 2), op, "expert_tokens_num_type")
    checks.expect_one_of(row_idx_type, (0, 1), op, "row_idx_type")
    # op-plugin rejects this pair before anything else: int4 output has its own mode.
    checks.expect(not (quant_mode == 1 and x_dtype == dtypes.INT4), op, "quant_mode",
                  "13 for an int4 x_dtype (int4 dynamic quantization uses quant_mode=13; "
                  "quant_mode=1 is int8 only)", repr(quant_mode), RuntimeError)
    if quant_mode in _NOT_EMULATED_QUANT_MODES:
        checks.expect(False, op, "quant_mode", "-1, 0, 1, 2 or 3 (the HIF8 / MXFP4 / FP8 "
                      "per-block / INT4 / amax-clamped MXFP8 modes are not emulated)",
                      repr(quant_mode), NotImplementedError)
    checks.expect_one_of(quant_mode, (-1, 0, 1, 2, 3), op, "quant_mode")
    checks.expect(x_dtype is None, op, "x_dtype", "None (hifloat8 / int4 inputs are not "
                  "emulated)", repr(x_dtype), NotImplementedError)
    limit = _MAX_EXPERTS_KEY_VALUE if expert_tokens_num_type == 2 else _MAX_EXPERTS
    checks.expect(0 < expert_num <= limit, op, "expert_num", f"in (0, {limit}]",
                  repr(expert_num), ValueError)
    if active_expert_range is not None and len(active_expert_range) != 0:
        checks.expect(len(active_expert_range) == 2, op, "active_expert_range",
                      "[expert_start, expert_end]", repr(list(active_expert_range)), ValueError)
        start, end = _expert_range(active_expert_range, expert_num)
        checks.expect(0 <= start < end <= expert_num, op, "active_expert_range",
                      lambda: f"0 <= expert_start < expert_end <= expert_num ({expert_num})",
                      repr(list(active_expert_range)), ValueError)
    checks.expect(active_num >= -1, op, "active_num", ">= 0 (or -1: every row)",
                  repr(active_num), ValueError)
    if drop_pad_mode == 1:
        checks.expect(expert_capacity > 0, op, "expert_capacity", "> 0 when drop_pad_mode is 1",
                      repr(expert_capacity), ValueError)
        checks.expect(expert_tokens_num_type in (0, 1), op, "expert_tokens_num_type",
                      "0 or 1 when drop_pad_mode is 1", repr(expert_tokens_num_type), ValueError)
        checks.expect(row_idx_type == 0, op, "row_idx_type", "0 when drop_pad_mode is 1",
                      repr(row_idx_type), ValueError)
    if x.dtype == torch.int8:
        checks.expect(quant_mode == -1, op, "quant_mode", "-1 for an int8 x (it cannot be "
                      "quantized again)", repr(quant_mode), ValueError)
    _check_scale(op, x, scale, offset, quant_mode, expert_num, active_expert_range)
    checks.expect_same_device({"x": x, "expert_idx": expert_idx}, op)
    targets.expect_supported(op, _SUPPORTED)


def _check_scale(op, x, scale, offset, quant_mode, expert_num, active_expert_range):
    rows, hidden = x.shape
    for name, t in (("scale", scale), ("offset", offset)):
        if t is not None:
            checks.expect_dtype(t, (torch.float32,), op, name)
            checks.expect_same_device({"x": x, name: t}, op)
    if rows == 0:
        # op-plugin returns the empty outputs (zero counts) before the kernel reads scale or
        # offset, so their shapes are not checked for an empty x.
        return
    if quant_mode == -1:
        checks.expect(offset is None, op, "offset", "None when quant_mode is -1", "a tensor",
                      ValueError)
        if scale is not None:
            checks.expect(tuple(scale.shape) == (rows,), op, "scale",
                          lambda: f"shape (NUM_ROWS,) = ({rows},) when quant_mode is -1",
                          lambda: f"shape {tuple(scale.shape)}", RuntimeError)
    elif quant_mode in _MX_MODES:
        for name, t in (("scale", scale), ("offset", offset)):
            checks.expect(t is None, op, name, "None when quant_mode is 2 or 3 (MXFP8)",
                          "a tensor", ValueError)
    elif quant_mode == 0:
        checks.expect(scale is not None, op, "scale", "a (1,) tensor when quant_mode is 0",
                      "None", ValueError)
        checks.expect(tuple(scale.shape) == (1,), op, "scale", "shape (1,) when quant_mode is 0",
                      lambda: f"shape {tuple(scale.shape)}", RuntimeError)
        if offset is not None:
            checks.expect(tuple(offset.shape) == (1,), op, "offset",
                          "shape (1,) when quant_mode is 0",
                          lambda: f"shape {tuple(offset.shape)}", RuntimeError)
    else:
        checks.expect(offset is None, op, "offset", "None when quant_mode is 1", "a tensor",
                      ValueError)
        if scale is not None:
            start, end = _expert_range(active_expert_range, expert_num)
            ok = (scale.dim() == 2 and scale.shape[1] == hidden
                  and scale.shape[0] in (1, end - start))
            checks.expect(ok, op, "scale", lambda: f"shape (1, H) or (expert_end - expert_start, H)"
                          f" = ({end - start}, {hidden}) when quant_mode is 1",
                          lambda: f"shape {tuple(scale.shape)}", RuntimeError)


def _counts(expert_idx, start, end):
    """Tokens per expert in [start, end) (int64), without a data-dependent size."""
    flat = expert_idx.reshape(-1).to(torch.int64)
    span = end - start
    in_range = (flat >= start) & (flat < end)
    bins = torch.where(in_range, flat - start, span)          # out of range: a spare bin
    counts = torch.zeros(span + 1, dtype=torch.int64, device=flat.device)
    counts.scatter_add_(0, bins, torch.ones_like(bins))
    return counts[:span]


def _key_value(counts, start, expert_num):
    span = counts.numel()
    nonzero = counts > 0
    # Non-zero experts first, in id order (a stable sort of the "is empty" flag).
    _, order = torch.sort((~nonzero).to(torch.int8), stable=True)
    ids = torch.arange(start, start + span, dtype=torch.int64, device=counts.device)[order]
    kept = nonzero[order]
    pairs = torch.stack((torch.where(kept, ids, 0), torch.where(kept, counts[order], 0)), dim=1)
    out = torch.zeros(expert_num, 2, dtype=torch.int64, device=counts.device)
    out[:span] = pairs
    return out


def _quantize(rows_x, quant_mode, scale, offset, row_experts, start):
    """Quantize gathered rows; returns (int8 rows, per-row scale or None)."""
    if quant_mode == 0:
        # Static: the golden computes in float16, rounding after the product and the sum.
        h = rows_x.to(torch.float16) * scale.to(torch.float16)[0]
        if offset is not None:
            h = h + offset.to(torch.float16)[0]
        return qcore.saturate_int(qcore.round_values(h.to(torch.float32)), _INT8), None
    v = rows_x.to(torch.float32)
    if scale is not None:
        if scale.shape[0] == 1:
            v = v * scale
        else:
            which = (row_experts - start).clamp(0, scale.shape[0] - 1)
            v = v * scale.index_select(0, which)
    row_scale = v.abs().amax(dim=-1, keepdim=True) / 127.0
    q = qcore.saturate_int(qcore.round_values(v / row_scale), _INT8)
    return q, row_scale.squeeze(-1)


def _mx_quantize(rows_x, quant_mode):
    """MXFP8 RoundScale rows: (float8 rows, float8_e8m0fnu scales (rows, even block count)).

    The golden clamps the shared exponent at -127 and still scales such a block (code 0 keeps
    the reciprocal 2**127); only an all-zero block is zeros (``code0_zeros=False``).
    """
    q, codes = mx.quantize(rows_x, _MX_MODES[quant_mode], scale_alg=0, code0_zeros=False)
    codes = codes.reshape(rows_x.shape[0], -1)
    return q, codes.view(torch.float8_e8m0fnu)


def init_routing_v2_reference(x, expert_idx, *, scale=None, offset=None, active_num=-1,
                              expert_capacity=-1, expert_num=-1, drop_pad_mode=0,
                              expert_tokens_num_type=0, expert_tokens_num_flag=False,
                              quant_mode=-1, active_expert_range=(), row_idx_type=0,
                              x_dtype=None):
    rows, k = expert_idx.shape
    hidden = x.shape[1]
    total = rows * k
    dev = x.device
    if rows == 0:              # nothing is read from scale / offset (unchecked when x is empty)
        scale = torch.ones(1, dtype=torch.float32, device=dev) if quant_mode == 0 else None
        offset = None
    start, end = _expert_range(active_expert_range, expert_num)
    key = expert_idx.reshape(-1).to(torch.int64)
    key = torch.where(key < start, _INT32_MAX, key)
    sorted_key, perm = stable_sort(key)
    pos = torch.arange(total, dtype=torch.int64, device=dev)
    valid_sorted = (sorted_key >= start) & (sorted_key < end)   # a prefix of the sorted order

    counts = _counts(expert_idx, start, end)
    if not expert_tokens_num_flag:
        tokens = torch.zeros((), dtype=torch.int64, device=dev)
    elif expert_tokens_num_type == 1:
        tokens = counts
    elif expert_tokens_num_type == 0:
        tokens = counts.cumsum(0)
    else:
        tokens = _key_value(counts, start, expert_num)

    if drop_pad_mode == 0:
        n_out = total if active_num <= 0 else min(active_num, total)
        if row_idx_type == 1:
            expanded_row_idx = perm.to(torch.int32)
        else:
            expanded_row_idx = torch.full((total,), -1, dtype=torch.int64, device=dev)
            expanded_row_idx[perm] = torch.where(valid_sorted, pos, -1)
            expanded_row_idx = expanded_row_idx.to(torch.int32)
        keep = valid_sorted[:n_out].unsqueeze(-1)
        source = perm[:n_out] // k
        gathered = x.index_select(0, source)
        if quant_mode in _MX_MODES:           # rows not routed quantize to zeros, code 0
            q, codes = _mx_quantize(gathered.masked_fill_(~keep, 0), quant_mode)
            return q, expanded_row_idx, tokens, codes
        if quant_mode == -1:
            expanded_x = gathered.masked_fill_(~keep, 0)    # gathered is ours: no second copy
            if scale is not None:
                expanded_scale = scale.index_select(0, source).masked_fill(~keep[:, 0], 0)
            else:
                expanded_scale = torch.zeros(n_out, dtype=torch.float32, device=dev)
        else:
            q, row_scale = _quantize(gathered, quant_mode, scale, offset, sorted_key[:n_out], start)
            expanded_x = q.masked_fill_(~keep, 0)
            if row_scale is None:             # static quant: one (unwritten) float per row
                expanded_scale = torch.zeros(n_out, dtype=torch.float32, device=dev)
            else:
                expanded_scale = row_scale.masked_fill(~keep[:, 0], 0)
        return expanded_x, expanded_row_idx, tokens, expanded_scale

    # drop / pad: slot e * C + rank in an (expert_num * C) buffer; a spare last slot takes the
    # dropped rows so that every write has a target and none needs a data-dependent size.
    capacity = expert_capacity
    slots = expert_num * capacity
    first = torch.searchsorted(sorted_key, sorted_key, right=False)
    rank = pos - first
    kept = valid_sorted & (rank < capacity)
    slot = torch.where(kept, sorted_key * capacity + rank, slots)
    expanded_row_idx = torch.full((total,), -1, dtype=torch.int64, device=dev)
    expanded_row_idx[perm] = torch.where(kept, slot, -1)
    source = perm // k
    gathered = x.index_select(0, source)
    row_scale = None
    if quant_mode in (0, 1):
        gathered, row_scale = _quantize(gathered, quant_mode, scale, offset, sorted_key, start)
    buf = torch.zeros(slots + 1, hidden, dtype=gathered.dtype, device=dev)
    buf.index_copy_(0, slot, gathered)
    if quant_mode in _MX_MODES:               # empty slots quantize to zeros, code 0
        q, codes = _mx_quantize(buf[:slots], quant_mode)
        return (q.view(expert_num, capacity, hidden), expanded_row_idx.to(torch.int32), tokens,
                codes)
    expanded_x = buf[:slots].view(expert_num, capacity, hidden)
    if quant_mode == 0:                       # static quant: one (unwritten) float per slot
        expanded_scale = torch.zeros(slots, dtype=torch.float32, device=dev)
    else:
        per_row = row_scale if row_scale is not None else (
            scale.index_select(0, source) if scale is not None else None)
        sbuf = torch.zeros(slots + 1, dtype=torch.float32, device=dev)
        if per_row is not None:
            sbuf.index_copy_(0, slot, per_row.to(torch.float32))
        expanded_scale = sbuf[:slots]
    return expanded_x, expanded_row_idx.to(torch.int32), tokens, expanded_scale


init_routing_v2_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_init_routing_v2,
                           reference=init_routing_v2_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
init_routing_v2_op.forbid_autograd("torch_npu defines no backward for it")


def npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1,
                            expert_capacity=-1, expert_num=-1, drop_pad_mode=0,
                            expert_tokens_num_type=0, expert_tokens_num_flag=False,
                            quant_mode=-1, active_expert_range=(), row_idx_type=0,
                            x_dtype=None):
    """MoE routing: sort tokens by expert (dropless or capacity-padded), count, optionally quantize.

    Formula: see the module docstring (stable sort of the flattened ``expert_idx``; ties by
    flat position ``n * K + k``; experts outside ``active_expert_range`` are not routed).

    Parameters
    ----------
    x : Tensor
        ``(NUM_ROWS, H)``: float16, bfloat16, float32 or int8 (int8 only with quant_mode -1).
    expert_idx : Tensor
        ``(NUM_ROWS, K)`` int32.
    scale, offset : Tensor, optional (float32)
        quant_mode -1: ``scale`` ``(NUM_ROWS,)`` is gathered into ``expanded_scale``;
        0: ``scale`` and ``offset`` ``(1,)``; 1: ``scale`` ``(1, H)`` or
        ``(expert_end - expert_start, H)``, multiplied in before the dynamic quantisation.
    active_num : int
        ``expanded_x`` rows when dropless: ``NUM_ROWS*K`` if ``<= 0``, else
        ``min(active_num, NUM_ROWS*K)``.
    expert_capacity : int
        Tokens per expert when ``drop_pad_mode`` is 1.
    expert_num : int
        ``(0, 10240]`` (``(0, 5120]`` for key-value counts).
    drop_pad_mode : {0, 1}
        0 dropless; 1 drop / pad to ``(expert_num, expert_capacity, H)``.
    expert_tokens_num_type : {0, 1, 2}
        0 cumsum, 1 count, 2 key-value ``(expert_num, 2)``.
    expert_tokens_num_flag : bool
        Whether the counts are returned (a 0-dim tensor otherwise, as op-plugin's meta).
    quant_mode : {-1, 0, 1, 2, 3}
        -1 none, 0 static int8, 1 dynamic int8 (per row), 2 / 3 MXFP8 RoundScale to
        float8_e5m2 / float8_e4m3fn (blocks of 32 along H; ``scale`` and ``offset`` None).
    active_expert_range : [expert_start, expert_end]
        Defaults to ``[0, expert_num]``.
    row_idx_type : {0, 1}
        0 gather index (``expanded_row_idx[src] = dst``, -1 for rows not routed); 1 scatter
        index (``expanded_row_idx[dst] = src``).

    Returns
    -------
    (expanded_x, expanded_row_idx int32 (NUM_ROWS*K,), expert_tokens int64, expanded_scale
    float32 ``(rows of expanded_x,)`` (``(expert_num * expert_capacity,)`` with drop / pad; for
    static quant too, zeros, as the NPU's eager op allocates it; op-plugin's meta says 0-d);
    quant_mode 2 / 3: float8_e8m0fnu ``(rows of expanded_x, CeilAlign(CeilDiv(H, 32), 2))``, a
    padding block's code 0)

    Constraints
    -----------
    drop_pad_mode 1 needs ``expert_capacity > 0``, ``row_idx_type`` 0 and count/cumsum
    counts.  Strict mode: A2 and A3.

    Notes
    -----
    Seed 004 says only dropless, count/key-value and quant -1/1 are supported; op-plugin's newer
    docs and golden define drop/pad, cumsum and static quant, implemented here.  Counts in drop
    mode are taken before the capacity cut (the golden's ``bincount``).  Invalid rows and empty
    slots are zero (undefined on the NPU).  The HIF8 (6, 7, 8), MXFP4 (9), FP8 per-block (11,
    12), INT4 (13) and amax-clamped MXFP8 (16, 17) quant modes raise NotImplementedError (the
    page gives no golden for them).  Inference only.
    """
    return init_routing_v2_op(x, expert_idx, scale=scale, offset=offset, active_num=active_num,
                              expert_capacity=expert_capacity, expert_num=expert_num,
                              drop_pad_mode=drop_pad_mode,
                              expert_tokens_num_type=expert_tokens_num_type,
                              expert_tokens_num_flag=expert_tokens_num_flag,
                              quant_mode=quant_mode,
                              active_expert_range=list(active_expert_range or []),
                              row_idx_type=row_idx_type, x_dtype=x_dtype)


TORCH_NPU_FUNCTIONS = {OP: npu_moe_init_routing_v2}

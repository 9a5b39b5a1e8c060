"""torch_npu.npu_ring_attention_update: ring attention's merge of two FlashAttention results.

Formula (seed 004 "npu_ring_attention_update"; hicann/ops-transformer
attention/ring_attention_update/docs/aclnnRingAttentionUpdateV2.md)::

    softmax_max = max(prev_softmax_max, cur_softmax_max)
    softmax_sum = prev_softmax_sum * exp(prev_softmax_max - softmax_max)
                + cur_softmax_sum * exp(cur_softmax_max - softmax_max)
    attn_out    = prev_attn_out * exp(prev_softmax_max - softmax_max) * prev_softmax_sum / softmax_sum
                + cur_attn_out * exp(cur_softmax_max - softmax_max) * cur_softmax_sum / softmax_sum

Layouts.  ``input_layout="SBH"``: attention ``[S, B, H]`` (``H = N * D``), softmax tensors
``[B, N, S, 8]``.  ``input_layout="TND"``: attention ``[T, N, D]``, softmax tensors ``[T, N, 8]``
in one of two memory orders chosen by ``input_softmax_layout``: ``"TND"`` -- element
``[t, n]`` is token t's head n; ``""`` or ``"SBH"`` (the V1 order) -- each sequence's block of
``len_b * N`` rows, starting at row ``actual_seq_qlen[b] * N``, is laid out head-major
(``[N, len_b, 8]``), the order FlashAttention's varlen softmax outputs use.  In every layout the
eight values of the last axis are copies; ``softmax_max``/``softmax_sum`` are computed on all
eight and the attention scale reads lane 0.

Numerics follow the Ascend C kernels (ring_attention_update_kernel.h for SBH,
ring_attention_update_tnd.h for TND): in float32, ``s_prev = exp(prev_max - max) * prev_sum``,
``s_cur`` likewise, ``sum = s_prev + s_cur``, the factors ``s_prev / sum`` and ``s_cur / sum``,
``attn_out = float32(prev) * f_prev + float32(cur) * f_cur`` rounded once to the attention dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_ring_attention_update"
SCHEMA = ("npu_ring_attention_update(Tensor prev_attn_out, Tensor prev_softmax_max, "
          "Tensor prev_softmax_sum, Tensor cur_attn_out, Tensor cur_softmax_max, "
          "Tensor cur_softmax_sum, *, Tensor? actual_seq_qlen=None, str input_layout=\"SBH\", "
          "str input_softmax_layout=\"\") -> (Tensor, Tensor, Tensor)")

# Seed 004: 950PR/950DT, A3, A2.
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
LANES = 8                # softmax tensors carry each value 8 times (one 32-byte block)
TND_HEAD_DIM_ALIGN = 64  # aclnnRingAttentionUpdateV2: TND needs D % 64 == 0, N <= 256, D <= 768
TND_MAX_HEADS = 256
TND_MAX_HEAD_DIM = 768

_SOFTMAX_NAMES = ("prev_softmax_max", "prev_softmax_sum", "cur_softmax_max", "cur_softmax_sum")


def _floats(documented: tuple) -> tuple:
    return documented if targets.current() is not None else documented + (torch.float64,)


def check_ring_attention_update(prev_attn_out, prev_softmax_max, prev_softmax_sum, cur_attn_out,
                                cur_softmax_max, cur_softmax_sum, *, actual_seq_qlen=None,
                                input_layout="SBH", input_softmax_layout=""):
    op = OP
    targets.expect_supported(op, _SUPPORTED)
    checks.expect_one_of(input_layout, ("SBH", "TND"), op, "input_layout")
    checks.expect_one_of(input_softmax_layout, ("", "SBH", "TND"), op, "input_softmax_layout")
    checks.expect_dtype(prev_attn_out, _floats(FLOATING), op, "prev_attn_out")
    checks.expect_same_dtype({"prev_attn_out": prev_attn_out, "cur_attn_out": cur_attn_out}, op)
    checks.expect(cur_attn_out.shape == prev_attn_out.shape, op, "cur_attn_out",
                  lambda: f"the shape of prev_attn_out {tuple(prev_attn_out.shape)}",
                  lambda: f"shape {tuple(cur_attn_out.shape)}", RuntimeError)
    checks.expect(prev_attn_out.dim() == 3, op, "prev_attn_out",
                  lambda: f"a 3-D tensor ({'[S, B, H]' if input_layout == 'SBH' else '[T, N, D]'})",
                  lambda: f"shape {tuple(prev_attn_out.shape)}", ValueError)
    softmax = dict(zip(_SOFTMAX_NAMES, (prev_softmax_max, prev_softmax_sum, cur_softmax_max,
                                        cur_softmax_sum)))
    sm_dtypes = _floats((torch.float32,))
    for name, t in softmax.items():
        checks.expect_dtype(t, sm_dtypes, op, name)
        checks.expect(t.shape == prev_softmax_max.shape, op, name,
                      lambda: f"the shape of prev_softmax_max {tuple(prev_softmax_max.shape)}",
                      lambda: f"shape {tuple(t.shape)}", RuntimeError)
    checks.expect_same_device({"prev_attn_out": prev_attn_out, "cur_attn_out": cur_attn_out,
                               **softmax}, op)
    sm = prev_softmax_max
    checks.expect(sm.dim() > 0 and sm.shape[-1] == LANES, op, "prev_softmax_max",
                  f"a last dim of {LANES} (each value repeated {LANES} times)",
                  lambda: f"shape {tuple(sm.shape)}", ValueError)
    if input_layout == "SBH":
        _check_sbh(op, prev_attn_out, sm)
    else:
        _check_tnd(op, prev_attn_out, sm, actual_seq_qlen)
    if actual_seq_qlen is not None:
        checks.expect_dtype(actual_seq_qlen, (torch.int64,), op, "actual_seq_qlen")
        checks.expect(actual_seq_qlen.dim() == 1, op, "actual_seq_qlen", "a 1-D tensor",
                      lambda: f"shape {tuple(actual_seq_qlen.shape)}", ValueError)


def _check_sbh(op, attn, sm):
    checks.expect(sm.dim() == 4, op, "prev_softmax_max",
                  "a 4-D tensor [B, N, S, 8] when input_layout is 'SBH'",
                  lambda: f"shape {tuple(sm.shape)}", ValueError)
    s, b, h = attn.shape
    checks.expect(sm.shape[0] == b and sm.shape[2] == s, op, "prev_softmax_max",
                  lambda: f"shape [B, N, S, 8] with B={b} and S={s} from prev_attn_out [S, B, H]",
                  lambda: f"shape {tuple(sm.shape)}", RuntimeError)
    n = sm.shape[1]
    checks.expect(n > 0 and h % n == 0, op, "prev_attn_out",
                  lambda: f"a hidden size H divisible by the head count N={n} of the softmax tensors",
                  lambda: f"shape {tuple(attn.shape)}", RuntimeError)


def _check_tnd(op, attn, sm, actual_seq_qlen):
    checks.expect(actual_seq_qlen is not None, op, "actual_seq_qlen",
                  "a tensor when input_layout is 'TND'", "None", ValueError)
    checks.expect(sm.dim() == 3, op, "prev_softmax_max",
                  "a 3-D tensor [T, N, 8] when input_layout is 'TND'",
                  lambda: f"shape {tuple(sm.shape)}", ValueError)
    t, n, d = attn.shape
    checks.expect(tuple(sm.shape[:2]) == (t, n), op, "prev_softmax_max",
                  lambda: f"shape [T, N, 8] with T={t} and N={n} from prev_attn_out [T, N, D]",
                  lambda: f"shape {tuple(sm.shape)}", RuntimeError)
    checks.expect(d % TND_HEAD_DIM_ALIGN == 0 and 0 < d <= TND_MAX_HEAD_DIM, op, "prev_attn_out",
                  f"a head dim D that is a multiple of {TND_HEAD_DIM_ALIGN} and at most "
                  f"{TND_MAX_HEAD_DIM} when input_layout is 'TND'",
                  lambda: f"shape {tuple(attn.shape)}", ValueError)
    checks.expect(n <= TND_MAX_HEADS, op, "prev_attn_out",
                  f"at most {TND_MAX_HEADS} heads when input_layout is 'TND'",
                  lambda: f"shape {tuple(attn.shape)}", ValueError)


def _expect_cumulative(cu: torch.Tensor, total: int) -> None:
    """``actual_seq_qlen`` values: 0, then non-decreasing, ending at T (eager only: data)."""
    values = cu.tolist()
    ok = len(values) >= 2 and values[0] == 0 and values[-1] == total and all(
        a <= b for a, b in zip(values, values[1:]))
    checks.expect(ok, OP, "actual_seq_qlen",
                  lambda: f"cumulative query lengths starting at 0, non-decreasing, ending at "
                  f"T={total}", lambda: f"{values}", ValueError)


def _head_major_rows(cu: torch.Tensor, tokens: int, heads: int) -> torch.Tensor:
    """Row of the V1 softmax order holding (token t, head n), as a [T, N] index tensor.

    Sequence b (tokens ``cu[b] <= t < cu[b+1]``) stores its rows head-major from row
    ``cu[b] * N``: (t, n) sits at ``cu[b] * N + n * len_b + (t - cu[b])``.
    """
    t = torch.arange(tokens, device=cu.device)
    b = torch.searchsorted(cu[1:], t, right=True)
    start = cu[b]
    length = cu[b + 1] - start
    n = torch.arange(heads, device=cu.device)
    return (start * heads + (t - start)).unsqueeze(1) + n.unsqueeze(0) * length.unsqueeze(1)


def _merge(prev, cur, pm, ps, cm, cs, ct):
    """The kernel's float32 steps on matching [..., 8] softmax and [..., D] attention views."""
    pm, ps, cm, cs = (x.to(ct) for x in (pm, ps, cm, cs))
    new_max = torch.maximum(pm, cm)
    s_prev = torch.exp(pm - new_max) * ps
    s_cur = torch.exp(cm - new_max) * cs
    new_sum = s_prev + s_cur
    f_prev = (s_prev / new_sum)[..., :1]
    f_cur = (s_cur / new_sum)[..., :1]
    out = prev.to(ct) * f_prev + cur.to(ct) * f_cur
    return out, new_max, new_sum


def ring_attention_update_reference(prev_attn_out, prev_softmax_max, prev_softmax_sum,
                                    cur_attn_out, cur_softmax_max, cur_softmax_sum, *,
                                    actual_seq_qlen=None, input_layout="SBH",
                                    input_softmax_layout=""):
    ct = torch.float64 if prev_attn_out.dtype == torch.float64 else torch.float32
    sm = (prev_softmax_max, prev_softmax_sum, cur_softmax_max, cur_softmax_sum)
    if input_layout == "SBH":
        s, b, h = prev_attn_out.shape
        n = prev_softmax_max.shape[1]
        # [S, B, N, D] attention against softmax [B, N, S, 8] -> [S, B, N, 8]
        views = [x.permute(2, 0, 1, 3) for x in sm]
        prev = prev_attn_out.reshape(s, b, n, h // n)
        cur = cur_attn_out.reshape(s, b, n, h // n)
        out, new_max, new_sum = _merge(prev, cur, *views, ct)
        return (out.reshape(s, b, h).to(prev_attn_out.dtype),
                new_max.permute(1, 2, 0, 3).to(prev_softmax_max.dtype),
                new_sum.permute(1, 2, 0, 3).to(prev_softmax_max.dtype))
    if input_softmax_layout == "TND":
        out, new_max, new_sum = _merge(prev_attn_out, cur_attn_out, *sm, ct)
        return (out.to(prev_attn_out.dtype), new_max.to(prev_softmax_max.dtype),
                new_sum.to(prev_softmax_max.dtype))
    t, n, _ = prev_attn_out.shape
    _expect_cumulative(actual_seq_qlen, t)
    rows = _head_major_rows(actual_seq_qlen, t, n)                    # [T, N]
    views = [x.reshape(t * n, LANES)[rows] for x in sm]               # token-major [T, N, 8]
    out, new_max, new_sum = _merge(prev_attn_out, cur_attn_out, *views, ct)
    flat = rows.reshape(-1)
    back_max = torch.empty((t * n, LANES), dtype=ct, device=flat.device)
    back_sum = torch.empty_like(back_max)
    back_max[flat] = new_max.reshape(t * n, LANES)
    back_sum[flat] = new_sum.reshape(t * n, LANES)
    shape = prev_softmax_max.shape
    return (out.to(prev_attn_out.dtype), back_max.reshape(shape).to(prev_softmax_max.dtype),
            back_sum.reshape(shape).to(prev_softmax_max.dtype))


def _fake(prev_attn_out, prev_softmax_max, prev_softmax_sum, cur_attn_out, cur_softmax_max,
          cur_softmax_sum, *, actual_seq_qlen=None, input_layout="SBH", input_softmax_layout=""):
    # The V1 TND order reads actual_seq_qlen's values; the outputs' metadata does not.
    return (torch.empty_like(prev_attn_out, memory_format=torch.contiguous_format),
            torch.empty_like(prev_softmax_max, memory_format=torch.contiguous_format),
            torch.empty_like(prev_softmax_sum, memory_format=torch.contiguous_format))


ring_attention_update_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_ring_attention_update,
                                 reference=ring_attention_update_reference, fake=_fake,
                                 metadata_check=True, info=OpInfo(api="torch_npu"))
ring_attention_update_op.forbid_autograd(
    "torch_npu defines no backward for npu_ring_attention_update")


def npu_ring_attention_update(prev_attn_out, prev_softmax_max, prev_softmax_sum, cur_attn_out,
                              cur_softmax_max, cur_softmax_sum, *, actual_seq_qlen=None,
                              input_layout="SBH", input_softmax_layout=""):
    """Merge two FlashAttention partial results by their softmax max and sum (ring attention).

    Formula (aclnnRingAttentionUpdateV2)::

        softmax_max = max(prev_max, cur_max)
        softmax_sum = prev_sum * exp(prev_max - softmax_max) + cur_sum * exp(cur_max - softmax_max)
        attn_out    = prev_attn_out * exp(prev_max - softmax_max) * prev_sum / softmax_sum
                    + cur_attn_out  * exp(cur_max  - softmax_max) * cur_sum  / softmax_sum

    Parameters
    ----------
    prev_attn_out, cur_attn_out : Tensor
        float16, bfloat16 or float32 (float64 outside strict mode), one shape and dtype:
        ``[S, B, H]`` for ``input_layout="SBH"``, ``[T, N, D]`` for ``"TND"`` (D a multiple of 64,
        at most 768; N at most 256).
    prev_softmax_max, prev_softmax_sum, cur_softmax_max, cur_softmax_sum : Tensor
        float32, one shape: ``[B, N, S, 8]`` for SBH (``H = N * D``), ``[T, N, 8]`` for TND; the
        eight values of the last axis are copies.
    actual_seq_qlen : Tensor, optional
        int64 cumulative query lengths ``[0, len_0, len_0 + len_1, ..., T]``; required for TND.
    input_layout : {"SBH", "TND"}, default "SBH"
    input_softmax_layout : {"", "SBH", "TND"}, default ""
        TND only: ``"TND"`` -- the softmax tensors are token-major like the attention; ``""`` /
        ``"SBH"`` -- each sequence's block is head-major (``[N, len_b, 8]`` from row
        ``actual_seq_qlen[b] * N``), the V1 order.

    Returns
    -------
    (attn_out, softmax_max, softmax_sum)
        ``attn_out`` in ``prev_attn_out``'s shape and dtype (float32 math, rounded once); the
        float32 max and sum in the softmax tensors' shape and order.

    Constraints
    -----------
    Strict mode: A2, A3 and 950.

    Notes
    -----
    The attention factor uses lane 0 of each 8-lane group (the doc requires the lanes equal).
    In the V1 TND order the values of ``actual_seq_qlen`` are checked (they locate the rows);
    in the "TND" order the merge is per token and they are not read.  No backward.

    Examples
    --------
    >>> prev = torch.randn(4, 2, 32, dtype=torch.float16)
    >>> cur = torch.randn(4, 2, 32, dtype=torch.float16)
    >>> stat = lambda: torch.rand(2, 2, 4, 1).repeat(1, 1, 1, 8)
    >>> out, m, s = npu_anywhere.npu_ring_attention_update(prev, stat(), stat(), cur, stat(), stat())
    >>> out.shape, m.shape
    (torch.Size([4, 2, 32]), torch.Size([2, 2, 4, 8]))
    """
    return ring_attention_update_op(prev_attn_out, prev_softmax_max, prev_softmax_sum,
                                    cur_attn_out, cur_softmax_max, cur_softmax_sum,
                                    actual_seq_qlen=actual_seq_qlen, input_layout=input_layout,
                                    input_softmax_layout=input_softmax_layout)


TORCH_NPU_FUNCTIONS = {"npu_ring_attention_update": npu_ring_attention_update}

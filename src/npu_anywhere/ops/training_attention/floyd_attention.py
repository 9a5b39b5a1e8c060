"""torch_npu.npu_fused_floyd_attention and npu_fused_floyd_attention_backward (FloydAttention).

Formula (seed 004; hicann/ops-transformer attention/fused_floyd_attention/README.md)::

    P             = Softmax(Mask(scale * (query_ik key_ij^T + query_ik key_jk^T), atten_mask))
    attention_out = P value_ij + P value_jk

with the node axes spelled out (query ``[B, H, M, N, D]``, key_ij / value_ij ``[B, H, M, K, D]``,
key_jk / value_jk ``[B, H, K, N, D]``, atten_mask ``[B, 1, M, 1, K]``)::

    s[b,h,m,n,k]   = scale * (q[b,h,m,n] . k_ij[b,h,m,k] + q[b,h,m,n] . k_jk[b,h,k,n])
    out[b,h,m,n]   = sum_k P[b,h,m,n,k] (v_ij[b,h,m,k] + v_jk[b,h,k,n])

Schemas from op-plugin's ``op_plugin_functions.yaml``, output shapes from its meta functions,
the backward from ``derivatives.yaml``.  Numerics follow the kernel
(ops-transformer attention/fused_floyd_attention/op_kernel/fused_floyd_attention_s1s2_bn2gs1.h,
a flash-attention pipeline): float32 scores; a masked score becomes the lowest float32
(NEGATIVE_MIN_VAULE_FP32, as the op's golden adds it, so a fully masked row averages all K
values rather than giving NaN); the unnormalised ``exp(s - max)`` rounded to the input dtype
(its stage-1 buffer) enters both value products, accumulated in float32 and divided by the
row sum at the end (Bmm2ResultDiv); one rounding of the output.  The max is the row's final
max (the kernel rescales online past 1024 keys: a difference of one rounding of P).

The references below are the oracle; calls run the ``strided_bmm`` provider of
:mod:`.floyd_fast` (the same roundings, without the references' score-sized layout copies).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import floyd_fast

OP = "npu_fused_floyd_attention"
GRAD_OP = "npu_fused_floyd_attention_backward"
SCHEMA = (
    "npu_fused_floyd_attention(Tensor query_ik, Tensor key_ij, Tensor value_ij, Tensor key_jk, "
    "Tensor value_jk, *, Tensor? atten_mask=None, float scale_value=1.) "
    "-> (Tensor, Tensor, Tensor)")
GRAD_SCHEMA = (
    "npu_fused_floyd_attention_backward(Tensor grad_output, Tensor query_ik, Tensor key_ij, "
    "Tensor value_ij, Tensor key_jk, Tensor value_jk, Tensor attention_out, Tensor softmax_max, "
    "Tensor softmax_sum, *, Tensor? atten_mask=None, float scale_value=1.) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")

SUPPORTED = frozenset({Product.A2, Product.A3})
FLOATS = (torch.float16, torch.bfloat16)
MASK_DTYPES = (torch.bool, torch.uint8)
MASKED = torch.finfo(torch.float32).min       # the golden's 0xFF7FFFFF
SCORE_BUDGET = 1 << 22
FAST_PROVIDER = "strided_bmm"
# seed 004 limits (every product); strict mode adds the kernel README's alignment rules.
LIMITS = {"B": 2048, "H": 256, "M": 1 << 20, "N": 1 << 20, "K": 1 << 20}
D_RANGE = (32, 256)
STRICT_D = (32, 64, 128)
# The README names query's axes [B, H, N, M, D]: its N (16-aligned) is axis 2, M here.
STRICT_ALIGN = {"M": 16, "N": 128, "K": 128}


def _shape_of(t):
    return lambda: f"shape {tuple(t.shape)}"


def check_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk, value_jk, *,
                                atten_mask=None, scale_value=1.0, op=OP):
    product = targets.expect_supported(op, SUPPORTED)
    tensors = {"query_ik": query_ik, "key_ij": key_ij, "value_ij": value_ij, "key_jk": key_jk,
               "value_jk": value_jk}
    for name, t in tensors.items():
        checks.expect(t.dim() == 5, op, name, "a 5-D tensor", _shape_of(t), ValueError)
    allowed = FLOATS if product is not None else FLOATS + (torch.float64,)
    checks.expect_dtype(query_ik, allowed, op, "query_ik")
    checks.expect_same_dtype(tensors, op)
    checks.expect_same_device(tensors, op)
    b, h, m, n, d = query_ik.shape
    k = key_ij.shape[3]
    want_ij, want_jk = (b, h, m, k, d), (b, h, k, n, d)
    for name, t, want in (("key_ij", key_ij, want_ij), ("value_ij", value_ij, want_ij),
                          ("key_jk", key_jk, want_jk), ("value_jk", value_jk, want_jk)):
        checks.expect(tuple(t.shape) == want, op, name,
                      lambda want=want: f"shape {list(want)} (from query_ik [B, H, M, N, D] and "
                                        f"key_ij's K)", _shape_of(t), RuntimeError)
    sizes = {"B": b, "H": h, "M": m, "N": n, "K": k}
    for axis, value in sizes.items():
        checks.expect(1 <= value <= LIMITS[axis], op, "query_ik" if axis != "K" else "key_ij",
                      lambda axis=axis: f"{axis} in [1, {LIMITS[axis]}]", value, ValueError)
    checks.expect(D_RANGE[0] <= d <= D_RANGE[1], op, "query_ik",
                  f"a head dim D in [{D_RANGE[0]}, {D_RANGE[1]}]", d, ValueError)
    if product is not None:
        checks.expect(d in STRICT_D, op, "query_ik", f"a head dim D in {list(STRICT_D)}", d,
                      ValueError)
        for axis, value in (("M", m), ("N", n), ("K", k)):
            align = STRICT_ALIGN[axis]
            checks.expect(value >= align and value % align == 0, op,
                          "key_ij" if axis == "K" else "query_ik",
                          lambda axis=axis, align=align: f"{axis} a multiple of {align} "
                          f"(at least {align})", value, ValueError)
    if atten_mask is not None:
        checks.expect_dtype(atten_mask, MASK_DTYPES, op, "atten_mask")
        checks.expect(atten_mask.dim() == 5 and atten_mask.shape[0] == b
                      and atten_mask.shape[1] in (1, h) and atten_mask.shape[2] in (1, m)
                      and atten_mask.shape[3] == 1 and atten_mask.shape[4] == k, op,
                      "atten_mask", lambda: f"shape [{b}, 1, {m}, 1, {k}]", _shape_of(atten_mask),
                      RuntimeError)
        checks.expect_same_device({"query_ik": query_ik, "atten_mask": atten_mask}, op)
    return b, h, m, n, k, d


def _mask_rows(mask, i0: int, i1: int):
    """Rows ``i0:i1`` of the mask's M axis (a mask broadcast over M serves every block)."""
    if mask is None or mask.shape[2] == 1:
        return mask
    return mask[:, :, i0:i1]


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _step(h: int, m: int, n: int, k: int, b: int) -> int:
    return max(1, min(m, SCORE_BUDGET // max(1, b * h * n * k)))


class _PivotPath:
    """key_jk / value_jk laid out once per call for the products that batch over n.

    ``t`` ``[B,H,N,D,K]`` multiplies from the right (scores, ``dO v^T``); ``nk`` ``[B,H,N,K,D]``
    is what ``P`` multiplies (outputs, ``dS k``).  Made contiguous once instead of in every
    row block."""

    def __init__(self, x: torch.Tensor, ct: torch.dtype):
        x = x.to(ct)
        self.t = x.permute(0, 1, 3, 4, 2).contiguous()
        self.nk = x.transpose(2, 3).contiguous()


def _scores(q, k_ij, k_jk: _PivotPath, mask, scale):
    """``[B, H, m, N, K]`` scaled, masked scores of a block of ``m`` rows (compute dtype)."""
    s = torch.matmul(q, k_ij.transpose(-1, -2))                                # [B,H,m,N,K]
    # the k_jk term batches over n: [B,H,N,m,D] @ [B,H,N,D,K] -> [B,H,N,m,K]
    s2 = torch.matmul(q.transpose(2, 3), k_jk.t)
    s = s.add_(s2.transpose(2, 3)).mul_(scale)
    if mask is not None:
        s = s.masked_fill_(mask.bool(), MASKED)
    return s


def _pv(p, v_ij, v_jk: _PivotPath):
    """``P v_ij + P v_jk`` for a block of rows (``p`` ``[B,H,m,N,K]``)."""
    o2 = torch.matmul(p.transpose(2, 3), v_jk.nk)                              # [B,H,N,m,D]
    return torch.matmul(p, v_ij).add_(o2.transpose(2, 3))


def fused_floyd_attention_reference(query_ik, key_ij, value_ij, key_jk, value_jk, *,
                                    atten_mask=None, scale_value=1.0):
    b, h, m, n, k, d = check_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk,
                                                   value_jk, atten_mask=atten_mask)
    dtype, ct = query_ik.dtype, _compute_dtype(query_ik.dtype)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    k_jk, v_jk = _PivotPath(key_jk, ct), _PivotPath(value_jk, ct)
    out = torch.empty(query_ik.shape, dtype=dtype, device=query_ik.device)
    smax = torch.empty(b, h, m, n, dtype=stat_dtype, device=query_ik.device)
    ssum = torch.empty_like(smax)
    step = _step(h, m, n, k, b)
    for i0 in range(0, m, step):
        i1 = min(m, i0 + step)
        mask = _mask_rows(atten_mask, i0, i1)
        s = _scores(query_ik[:, :, i0:i1].to(ct), key_ij[:, :, i0:i1].to(ct), k_jk, mask,
                    float(scale_value))
        mx = s.amax(-1, keepdim=True)
        e = s.sub_(mx).exp_()
        sm = e.sum(-1, keepdim=True)
        if dtype != ct:          # the unnormalised exp enters the value products rounded
            e = e.to(dtype).to(ct)
        out[:, :, i0:i1] = (_pv(e, value_ij[:, :, i0:i1].to(ct), v_jk) / sm).to(dtype)
        smax[:, :, i0:i1] = mx[..., 0]
        ssum[:, :, i0:i1] = sm[..., 0]
    expand = lambda x: x.unsqueeze(-1).expand(b, h, m, n, 8).contiguous()   # noqa: E731
    return expand(smax), expand(ssum), out


def _forward_fake(query_ik, key_ij, value_ij, key_jk, value_jk, *, atten_mask=None,
                  scale_value=1.0):
    check_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk, value_jk,
                                atten_mask=atten_mask)
    stat_dtype = torch.float64 if query_ik.dtype == torch.float64 else torch.float32
    stat = query_ik.new_empty((*query_ik.shape[:4], 8), dtype=stat_dtype)
    return stat, torch.empty_like(stat), query_ik.new_empty(query_ik.shape)


fused_floyd_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_fused_floyd_attention,
                                 reference=fused_floyd_attention_reference, fake=_forward_fake,
                                 metadata_check=True, info=OpInfo(api="torch_npu"))


def _fast_forward(query_ik, key_ij, value_ij, key_jk, value_jk, *, atten_mask=None,
                  scale_value=1.0):
    b, h, m, n, k, _ = check_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk,
                                                   value_jk, atten_mask=atten_mask)
    ct = _compute_dtype(query_ik.dtype)
    return floyd_fast.forward(query_ik, key_ij, value_ij, key_jk, value_jk,
                              lambda i0, i1: _mask_rows(atten_mask, i0, i1), float(scale_value),
                              _step(h, m, n, k, b), MASKED, ct, ct)


# Same arithmetic as the reference without its score-sized layout copies (see floyd_fast).
fused_floyd_attention_op.add_provider(FAST_PROVIDER, _fast_forward)


# -- backward ----------------------------------------------------------------------------------

def check_fused_floyd_attention_backward(grad_output, query_ik, key_ij, value_ij, key_jk,
                                         value_jk, attention_out, softmax_max, softmax_sum, *,
                                         atten_mask=None, scale_value=1.0):
    sizes = check_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk, value_jk,
                                        atten_mask=atten_mask, op=GRAD_OP)
    for name, t in (("grad_output", grad_output), ("attention_out", attention_out)):
        checks.expect(t.shape == query_ik.shape, GRAD_OP, name,
                      lambda: f"the shape of query_ik {tuple(query_ik.shape)}", _shape_of(t),
                      RuntimeError)
        checks.expect(t.dtype == query_ik.dtype, GRAD_OP, name,
                      lambda: f"the dtype of query_ik ({query_ik.dtype})", lambda t=t: t.dtype,
                      TypeError)
    want = [*query_ik.shape[:4], 8]
    for name, t in (("softmax_max", softmax_max), ("softmax_sum", softmax_sum)):
        checks.expect(list(t.shape) == want, GRAD_OP, name,
                      lambda: f"shape {want} (the forward's statistics)", _shape_of(t),
                      RuntimeError)
        checks.expect(t.is_floating_point(), GRAD_OP, name, "a float32 tensor",
                      lambda t=t: t.dtype, TypeError)
    return sizes


def fused_floyd_attention_backward_reference(grad_output, query_ik, key_ij, value_ij, key_jk,
                                             value_jk, attention_out, softmax_max, softmax_sum,
                                             *, atten_mask=None, scale_value=1.0):
    """Float32 arithmetic with P recomputed from the forward's max and sum::

        D  = rowsum(dO * out);   dP = dO (v_ij + v_jk)^T;   dS = P * (dP - D)
        dq = scale dS (k_ij + k_jk);   dk_ij = scale sum_n dS q;   dk_jk = scale sum_m dS q
        dv_ij = sum_n P dO;            dv_jk = sum_m P dO
    """
    b, h, m, n, k, d = check_fused_floyd_attention_backward(
        grad_output, query_ik, key_ij, value_ij, key_jk, value_jk, attention_out, softmax_max,
        softmax_sum, atten_mask=atten_mask)
    ct = _compute_dtype(query_ik.dtype)
    scale = float(scale_value)
    k_jk, v_jk = _PivotPath(key_jk, ct), _PivotPath(value_jk, ct)
    dq = torch.empty(query_ik.shape, dtype=ct, device=query_ik.device)
    dk_ij = torch.empty(key_ij.shape, dtype=ct, device=query_ik.device)
    dv_ij = torch.empty(value_ij.shape, dtype=ct, device=query_ik.device)
    dk_jk = torch.zeros_like(k_jk.nk)                  # [B,H,N,K,D]: transposed at the end
    dv_jk = torch.zeros_like(v_jk.nk)
    step = _step(h, m, n, k, b)
    for i0 in range(0, m, step):
        i1 = min(m, i0 + step)
        mask = _mask_rows(atten_mask, i0, i1)
        q = query_ik[:, :, i0:i1].to(ct)
        kij, vij = key_ij[:, :, i0:i1].to(ct), value_ij[:, :, i0:i1].to(ct)
        do = grad_output[:, :, i0:i1].to(ct)
        s = _scores(q, kij, k_jk, mask, scale)
        mx = softmax_max[:, :, i0:i1, :, :1].to(ct)
        sm = softmax_sum[:, :, i0:i1, :, :1].to(ct)
        p = torch.exp(s - mx) / sm                                              # [B,H,m,N,K]
        big_d = (do * attention_out[:, :, i0:i1].to(ct)).sum(-1, keepdim=True)  # [B,H,m,N,1]
        dp = torch.matmul(do, vij.transpose(-1, -2)).add_(
            torch.matmul(do.transpose(2, 3), v_jk.t).transpose(2, 3))
        ds = p * (dp - big_d)
        dq[:, :, i0:i1] = _pv(ds, kij, k_jk) * scale
        dk_ij[:, :, i0:i1] = torch.matmul(ds.transpose(-1, -2), q) * scale      # [B,H,m,K,D]
        dv_ij[:, :, i0:i1] = torch.matmul(p.transpose(-1, -2), do)
        # sum over the rows m of this block: [B,H,N,K,m] @ [B,H,N,m,D] -> [B,H,N,K,D]
        dk_jk += torch.matmul(ds.permute(0, 1, 3, 4, 2), q.transpose(2, 3)) * scale
        dv_jk += torch.matmul(p.permute(0, 1, 3, 4, 2), do.transpose(2, 3))
    dtype = query_ik.dtype
    return (dq.to(dtype), dk_ij.to(dtype), dv_ij.to(dtype),
            dk_jk.transpose(2, 3).to(dtype).contiguous(),
            dv_jk.transpose(2, 3).to(dtype).contiguous())


def _backward_fake(grad_output, query_ik, key_ij, value_ij, key_jk, value_jk, attention_out,
                   softmax_max, softmax_sum, *, atten_mask=None, scale_value=1.0):
    check_fused_floyd_attention_backward(grad_output, query_ik, key_ij, value_ij, key_jk,
                                         value_jk, attention_out, softmax_max, softmax_sum,
                                         atten_mask=atten_mask)
    return tuple(t.new_empty(t.shape) for t in (query_ik, key_ij, value_ij, key_jk, value_jk))


fused_floyd_attention_backward_op = NpuOp(
    GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_fused_floyd_attention_backward,
    reference=fused_floyd_attention_backward_reference, fake=_backward_fake,
    metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _fast_backward(grad_output, query_ik, key_ij, value_ij, key_jk, value_jk, attention_out,
                   softmax_max, softmax_sum, *, atten_mask=None, scale_value=1.0):
    b, h, m, n, k, _ = check_fused_floyd_attention_backward(
        grad_output, query_ik, key_ij, value_ij, key_jk, value_jk, attention_out, softmax_max,
        softmax_sum, atten_mask=atten_mask)
    return floyd_fast.backward(grad_output, query_ik, key_ij, value_ij, key_jk, value_jk,
                               attention_out, softmax_max, softmax_sum,
                               lambda i0, i1: _mask_rows(atten_mask, i0, i1), float(scale_value),
                               _step(h, m, n, k, b), MASKED, _compute_dtype(query_ik.dtype))


fused_floyd_attention_backward_op.add_provider(FAST_PROVIDER, _fast_backward)


# -- autograd (derivatives.yaml: the five inputs; softmax_max / softmax_sum not differentiable)

def _setup_context(ctx, inputs, output):
    q, kij, vij, kjk, vjk, mask, scale = inputs
    smax, ssum, out = output
    ctx.mark_non_differentiable(smax, ssum)
    ctx.scale = scale
    ctx.save_for_backward(q, kij, vij, kjk, vjk, mask, out, smax, ssum)


def _backward(ctx, _g_max, _g_sum, grad_out):
    q, kij, vij, kjk, vjk, mask, out, smax, ssum = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    grads = fused_floyd_attention_backward_op(grad_out, q, kij, vij, kjk, vjk, out, smax, ssum,
                                              atten_mask=mask, scale_value=ctx.scale)
    return (*grads, None, None)


fused_floyd_attention_op.set_autograd(setup_context=_setup_context, backward=_backward)


# -- Python functions --------------------------------------------------------------------------

def npu_fused_floyd_attention(query_ik, key_ij, value_ij, key_jk, value_jk, *, atten_mask=None,
                              scale_value=1.0):
    """FloydAttention: attention over a pivot axis K through two key / value paths.

    Formula (seed 004)::

        P             = Softmax(Mask(scale * (query_ik key_ij^T + query_ik key_jk^T), atten_mask))
        attention_out = P value_ij + P value_jk

    i.e. ``s[b,h,m,n,k] = scale * q[b,h,m,n] . (k_ij[b,h,m,k] + k_jk[b,h,k,n])``, the softmax
    over ``k``, and ``out[b,h,m,n] = sum_k P (v_ij[b,h,m,k] + v_jk[b,h,k,n])``.

    Parameters
    ----------
    query_ik : Tensor
        ``[B, H, M, N, D]``, float16 or bfloat16 (float64 outside strict mode).
    key_ij, value_ij : Tensor
        ``[B, H, M, K, D]``, query_ik's dtype.
    key_jk, value_jk : Tensor
        ``[B, H, K, N, D]``, query_ik's dtype.
    atten_mask : Tensor, optional
        bool / uint8 ``[B, 1, M, 1, K]`` (H in place of the 1, or 1 in place of M, broadcast
        too); True (1) masks the position out.
    scale_value : float
        The score scale, usually ``D ** -0.5``.

    Returns
    -------
    (softmax_max, softmax_sum, attention_out)
        The row max of the masked scaled scores and the sum of ``exp(s - max)``, float32
        ``[B, H, M, N, 8]`` (8 equal copies); attention_out in query_ik's shape and dtype.

    Constraints
    -----------
    Seed 004: B <= 2K, H <= 256, M, N, K <= 1M, D in [32, 256].  Strict mode (Atlas A2 / A3,
    from the kernel README): no float64, D in {32, 64, 128}, M a multiple of 16, N and K
    multiples of 128.

    Notes
    -----
    A masked score becomes the lowest float32 (as the kernel's golden adds), so a fully masked
    row averages all K values.  float64 inputs give float64 statistics.  Differentiable in all
    five inputs through :func:`npu_fused_floyd_attention_backward`.

    Examples
    --------
    >>> q = torch.randn(1, 1, 16, 256, 64, dtype=torch.bfloat16)
    >>> k1 = v1 = torch.randn(1, 1, 16, 256, 64, dtype=torch.bfloat16)
    >>> k2 = v2 = torch.randn(1, 1, 256, 256, 64, dtype=torch.bfloat16)
    >>> mask = torch.randint(0, 2, [1, 1, 16, 1, 256]).bool()
    >>> smax, ssum, out = npu_anywhere.npu_fused_floyd_attention(
    ...     q, k1, v1, k2, v2, atten_mask=mask, scale_value=0.125)
    """
    return fused_floyd_attention_op(query_ik, key_ij, value_ij, key_jk, value_jk,
                                    atten_mask=atten_mask, scale_value=scale_value)


def npu_fused_floyd_attention_backward(grad_output, query_ik, key_ij, value_ij, key_jk,
                                       value_jk, attention_out, softmax_max, softmax_sum, *,
                                       atten_mask=None, scale_value=1.0):
    """Gradient of :func:`npu_fused_floyd_attention` from its output and statistics.

    Formula (P = exp(s - softmax_max) / softmax_sum recomputed)::

        D     = rowsum(dO * attention_out);   dS = P * (dO (v_ij + v_jk)^T - D)
        dq    = scale dS (k_ij + k_jk)
        dk_ij = scale sum_n dS q;   dk_jk = scale sum_m dS q
        dv_ij = sum_n P dO;         dv_jk = sum_m P dO

    Returns ``(d_query_ik, d_key_ij, d_value_ij, d_key_jk, d_value_jk)`` in the inputs' shapes
    and dtype (float32 arithmetic, one rounding each).
    """
    return fused_floyd_attention_backward_op(grad_output, query_ik, key_ij, value_ij, key_jk,
                                             value_jk, attention_out, softmax_max, softmax_sum,
                                             atten_mask=atten_mask, scale_value=scale_value)


TORCH_NPU_FUNCTIONS = {
    OP: npu_fused_floyd_attention,
    GRAD_OP: npu_fused_floyd_attention_backward,
}

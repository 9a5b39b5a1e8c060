"""torch_npu.npu_mhc_pre and npu_mhc_pre_backward (mHC pre-mixing).

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_mhc_pre.md; the precision order
of the CPU golden in test/test_custom_ops/test_npu_mhc_pre.py, which the NPU kernel is judged
by): with ``x`` flattened to ``[T, nD]`` in float32,

    inv_rms = 1 / sqrt(mean(x ** 2) + norm_eps)                  # RmsNorm of the raw x
    h_mix   = (x * gamma) @ phi.T                                # gamma before the GEMM
    pre, post, res = split(h_mix * inv_rms, [n, n, n * n])       # the RmsNorm is delayed
    h_pre   = sigmoid(alpha[0] * pre + bias[:n]) + hc_eps
    h_post  = 2 * sigmoid(alpha[1] * post + bias[n:2n])
    h_res   = alpha[2] * res + bias[2n:]                         # [n, n], no Sinkhorn yet
    h_in    = sum_j h_pre[j] * x[j]                              # rounded to x's dtype once

With a 2-element ``alpha`` (``phi`` of ``2n`` rows) there is no residual part and ``h_res`` is a
one-element zero tensor (op-plugin op_plugin/ops/opapi/MhcPreNpuOpapi.cpp sizes it ``[1]``).
``inner_precise=1`` rounds both GEMM operands to HF32 first (10 mantissa bits, round half away
from zero), as the same test golden does.

The backward follows the manual derivation of test/test_custom_ops/test_npu_mhc_pre_backward.py
step by step (output shapes from MhcPreBackwardNpuOpapi.cpp): the sigmoid gradients are taken
from the saved ``h_pre`` (minus ``hc_eps``) and ``h_post``, the RmsNorm gradient from the saved
``inv_rms`` and ``h_mix``, and ``grad_x_post`` (the post op's x-gradient) is added to ``grad_x``.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import _common

OP = "npu_mhc_pre"
SCHEMA = ("npu_mhc_pre(Tensor x, Tensor phi, Tensor alpha, Tensor bias, *, Tensor? gamma=None, "
          "float norm_eps=1e-6, float hc_eps=1e-6, int out_flag=0, int inner_precise=0) "
          "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_mhc_pre_backward"
BACKWARD_SCHEMA = (
    "npu_mhc_pre_backward(Tensor x, Tensor phi, Tensor alpha, Tensor grad_h_in, "
    "Tensor grad_h_post, Tensor grad_h_res, Tensor inv_rms, Tensor h_mix, Tensor h_pre, "
    "Tensor h_post, Tensor? gamma=None, float hc_eps=1e-6, Tensor? grad_x_post=None) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")

MAX_D = 16384


def _mix_rows(n: int, with_res: bool) -> int:
    return n * n + 2 * n if with_res else 2 * n


def _check_x(op, x):
    _common.expect_dtype(op, "x", x, _common.HALF_TYPES)
    _common.expect_dims(op, "x", x, (3, 4))
    n, d = x.shape[-2], x.shape[-1]
    _common.expect_stream_count(op, "x", n)
    checks.expect(1 <= d <= MAX_D and d % 16 == 0, op, "x", "D (its last size) a multiple of 16 "
                  f"in [16, {MAX_D}]", d, ValueError)


def _check_phi_alpha(op, x, phi, alpha):
    n, d = x.shape[-2], x.shape[-1]
    _common.expect_dtype(op, "alpha", alpha, _common.FLOAT32)
    checks.expect(alpha.dim() == 1 and alpha.shape[0] in (2, 3), op, "alpha",
                  "a 1-D tensor of 3 (pre, post, res) or 2 (pre, post) scales",
                  lambda: f"shape {list(alpha.shape)}", ValueError)
    rows = _mix_rows(n, alpha.shape[0] == 3)
    _common.expect_dtype(op, "phi", phi, _common.FLOAT32)
    _common.expect_shape(op, "phi", phi, (rows, n * d),
                         f"[n*n + 2n, nD] (or [2n, nD] with 2 alphas) for n = {n}, D = {d}")
    return rows


def check_mhc_pre(x, phi, alpha, bias, *, gamma=None, norm_eps=1e-6, hc_eps=1e-6, out_flag=0,
                  inner_precise=0):
    _check_x(OP, x)
    _common.expect_nonempty(OP, {"x": x, "phi": phi, "alpha": alpha, "bias": bias})
    rows = _check_phi_alpha(OP, x, phi, alpha)
    _common.expect_dtype(OP, "bias", bias, _common.FLOAT32)
    _common.expect_shape(OP, "bias", bias, (rows,), "[phi.size(0)]")
    if gamma is not None:
        _common.expect_dtype(OP, "gamma", gamma, _common.FLOAT32)
        _common.expect_shape(OP, "gamma", gamma, x.shape[-2:], "[n, D] of x")
    _common.expect_flag(OP, "out_flag", out_flag)
    _common.expect_flag(OP, "inner_precise", inner_precise)
    _common.expect_devices(OP, {"x": x, "phi": phi, "alpha": alpha, "bias": bias,
                                "gamma": gamma})
    targets.expect_supported(OP, _common.SUPPORTED)


def _hf32(t: torch.Tensor) -> torch.Tensor:
    """Round float32 to HF32: keep 10 mantissa bits, the dropped half rounded away from zero
    (on the bit pattern, so the sign rides along)."""
    if t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    bits = (((bits >> 12) + 1) >> 1) << 13
    return bits.view(torch.float32)


def _flat(x, ct):
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1]).to(ct)


def mhc_pre_reference(x, phi, alpha, bias, *, gamma=None, norm_eps=1e-6, hc_eps=1e-6,
                      out_flag=0, inner_precise=0):
    ct = _common.compute_dtype(x.dtype)
    n = x.shape[-2]
    flat = _flat(x, ct)                                            # [..., nD]
    inv_rms = torch.rsqrt(flat.square().mean(-1) + norm_eps)      # [...]
    lhs = flat * gamma.reshape(-1).to(ct) if gamma is not None else flat
    rhs = phi.to(ct)
    if inner_precise == 1:
        lhs, rhs = _hf32(lhs), _hf32(rhs)
    h_mix = torch.matmul(lhs, rhs.t())                            # [..., rows]
    scaled = h_mix * inv_rms.unsqueeze(-1)
    alpha, bias = alpha.to(ct), bias.to(ct)
    h_pre = torch.sigmoid(scaled[..., :n] * alpha[0] + bias[:n]) + hc_eps
    h_post = 2 * torch.sigmoid(scaled[..., n:2 * n] * alpha[1] + bias[n:2 * n])
    if alpha.shape[0] == 3:
        h_res = (scaled[..., 2 * n:] * alpha[2] + bias[2 * n:]).unflatten(-1, (n, n))
    else:
        h_res = x.new_zeros((1,), dtype=ct)
    h_in = (h_pre.unsqueeze(-1) * x.to(ct)).sum(-2).to(x.dtype)
    # out_flag=0 leaves the last three undefined on the NPU; they are always filled here (they
    # cost nothing more) so that autograd, which needs them, works whatever the flag.
    return h_in, h_post, h_res, inv_rms, h_mix, h_pre


def check_mhc_pre_backward(x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix,
                           h_pre, h_post, gamma=None, hc_eps=1e-6, grad_x_post=None):
    op = BACKWARD_OP
    _check_x(op, x)
    _common.expect_nonempty(op, {"x": x, "phi": phi, "alpha": alpha, "grad_h_in": grad_h_in,
                                 "grad_h_post": grad_h_post, "grad_h_res": grad_h_res,
                                 "inv_rms": inv_rms, "h_mix": h_mix, "h_pre": h_pre,
                                 "h_post": h_post})
    rows = _check_phi_alpha(op, x, phi, alpha)
    lead, n, d = tuple(x.shape[:-2]), x.shape[-2], x.shape[-1]
    _common.expect_dtype(op, "grad_h_in", grad_h_in, tuple({x.dtype, torch.float32}))
    _common.expect_shape(op, "grad_h_in", grad_h_in, lead + (d,), "of h_in")
    for name, t, shape, what in (("grad_h_post", grad_h_post, lead + (n,), "of h_post"),
                                 ("inv_rms", inv_rms, lead, "of x without [n, D]"),
                                 ("h_mix", h_mix, lead + (rows,), "of x's tokens by phi.size(0)"),
                                 ("h_pre", h_pre, lead + (n,), "of h_post"),
                                 ("h_post", h_post, lead + (n,), "of x's tokens by n")):
        _common.expect_dtype(op, name, t, _common.FLOAT32)
        _common.expect_shape(op, name, t, shape, what)
    _common.expect_dtype(op, "grad_h_res", grad_h_res, _common.FLOAT32)
    if alpha.shape[0] == 3:     # without a residual part the gradient of h_res is unused
        _common.expect_shape(op, "grad_h_res", grad_h_res, lead + (n, n), "of h_res")
    if gamma is not None:
        _common.expect_dtype(op, "gamma", gamma, _common.FLOAT32)
        _common.expect_shape(op, "gamma", gamma, (n, d), "[n, D] of x")
    if grad_x_post is not None:
        _common.expect_dtype(op, "grad_x_post", grad_x_post, (x.dtype,))
        _common.expect_shape(op, "grad_x_post", grad_x_post, x.shape, "of x")
    _common.expect_devices(op, {"x": x, "phi": phi, "alpha": alpha, "grad_h_in": grad_h_in,
                                "grad_h_post": grad_h_post, "grad_h_res": grad_h_res,
                                "inv_rms": inv_rms, "h_mix": h_mix, "h_pre": h_pre,
                                "h_post": h_post, "gamma": gamma, "grad_x_post": grad_x_post})
    targets.expect_supported(op, _common.SUPPORTED)


def mhc_pre_backward_reference(x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix,
                               h_pre, h_post, gamma=None, hc_eps=1e-6, grad_x_post=None):
    ct = _common.compute_dtype(x.dtype)
    n, d = x.shape[-2], x.shape[-1]
    with_res = alpha.shape[0] == 3
    xf = x.to(ct)
    flat = xf.flatten(-2)                                          # [..., nD]
    alpha, inv = alpha.to(ct), inv_rms.to(ct).unsqueeze(-1)
    h_pre, h_post, h_mix = h_pre.to(ct), h_post.to(ct), h_mix.to(ct)

    # Through h_in = sum_j h_pre[j] x[j] and the two sigmoids (from their saved outputs).
    d_pre = (grad_h_in.to(ct).unsqueeze(-2) * xf).sum(-1)         # [..., n]
    sig_pre = h_pre - hc_eps
    d_pre2 = d_pre * sig_pre * (1 - sig_pre)
    d_post2 = grad_h_post.to(ct) * h_post * (1 - h_post / 2)
    parts = [alpha[0] * d_pre2, alpha[1] * d_post2]
    if with_res:
        d_res = grad_h_res.to(ct).flatten(-2)                      # [..., n*n]
        parts.append(alpha[2] * d_res)
    d_scaled = torch.cat(parts, -1)                                # d(h_mix * inv_rms)
    d_mix = d_scaled * inv                                         # d(h_mix)

    # The GEMM h_mix = (x * gamma) @ phi.T.
    tokens = d_mix.reshape(-1, d_mix.shape[-1])
    lhs = flat * gamma.reshape(-1).to(ct) if gamma is not None else flat
    grad_phi = tokens.t() @ lhs.reshape(-1, n * d)
    d_lhs = d_mix @ phi.to(ct)                                     # [..., nD]

    scaled = h_mix * inv
    sums = [(d_pre2 * scaled[..., :n]).sum(), (d_post2 * scaled[..., n:2 * n]).sum()]
    bias_parts = [d_pre2, d_post2]
    if with_res:
        sums.append((d_res * scaled[..., 2 * n:]).sum())
        bias_parts.append(d_res)
    grad_alpha = torch.stack(sums)
    grad_bias = torch.cat(bias_parts, -1).reshape(-1, phi.shape[0]).sum(0)

    # The delayed RmsNorm: d inv_rms / d x = -inv_rms^3 x / nD.
    d_inv = (d_scaled * h_mix).sum(-1, keepdim=True)
    grad_flat = -(d_inv * inv.pow(3) / (n * d)) * flat
    grad_x = grad_flat.unflatten(-1, (n, d)) + h_pre.unsqueeze(-1) * grad_h_in.to(ct).unsqueeze(-2)
    if gamma is not None:
        grad_gamma = (flat * d_lhs).reshape(-1, n * d).sum(0).reshape(n, d)
        grad_x = grad_x + (d_lhs * gamma.reshape(-1).to(ct)).unflatten(-1, (n, d))
    else:
        grad_gamma = x.new_zeros((n, d), dtype=ct)
        grad_x = grad_x + d_lhs.unflatten(-1, (n, d))
    if grad_x_post is not None:
        grad_x = grad_x + grad_x_post.to(ct)
    return grad_x.to(x.dtype), grad_phi, grad_alpha, grad_bias, grad_gamma


mhc_pre_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_mhc_pre,
                   reference=mhc_pre_reference, metadata_check=True,
                   info=OpInfo(api="torch_npu",
                               notes=["inv_rms/h_mix/h_pre are filled even when out_flag=0"]))
mhc_pre_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                            check=check_mhc_pre_backward, reference=mhc_pre_backward_reference,
                            metadata_check=True, info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, phi, alpha, bias, gamma, _norm_eps, hc_eps, _out_flag, _inner = inputs
    h_in, h_post, h_res, inv_rms, h_mix, h_pre = output
    ctx.save_for_backward(x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post)
    ctx.mark_non_differentiable(inv_rms, h_mix, h_pre)   # derivatives.yaml: false for these
    ctx.hc_eps = hc_eps
    ctx.metas = [(t.shape, t.dtype) for t in (h_in, h_post, h_res)]
    ctx.has_gamma = gamma is not None


def _backward(ctx, g_in, g_post, g_res, *_unused):
    # derivatives.yaml: npu_mhc_pre_backward(x, phi, alpha, grads[0..2], inv_rms, h_mix, h_pre,
    # h_post, gamma, hc_eps, None); an unused output's gradient arrives undefined.
    x, phi, alpha, gamma, inv_rms, h_mix, h_pre, h_post = ctx.saved_tensors
    grads = []
    for g, (shape, dtype) in zip((g_in, g_post, g_res), ctx.metas):
        grads.append(g if g is not None else x.new_zeros(shape, dtype=dtype))
    if alpha.shape[0] != 3:        # no residual part: the [1] h_res takes no gradient
        grads[2] = x.new_zeros((1,), dtype=h_post.dtype)
    dx, dphi, dalpha, dbias, dgamma = mhc_pre_backward_op(
        x, phi, alpha, *grads, inv_rms, h_mix, h_pre, h_post, gamma, ctx.hc_eps, None)
    return (dx, dphi, dalpha, dbias, dgamma if ctx.has_gamma else None,
            None, None, None, None)


mhc_pre_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_mhc_pre(x, phi, alpha, bias, *, gamma=None, norm_eps=1e-6, hc_eps=1e-6, out_flag=0,
                inner_precise=0):
    """mHC pre-mixing: RmsNorm-scaled projections H_pre / H_post / H_res and the layer input.

    Formula (torch_npu-npu_mhc_pre.md; precision order of op-plugin's CPU golden)::

        x'     = RmsNorm(x) * gamma,  RmsNorm(x) = x / sqrt(mean(x ** 2) + norm_eps)
        H_pre  = sigmoid(alpha_pre  * (x' phi_pre)  + b_pre) + hc_eps
        H_post = 2 * sigmoid(alpha_post * (x' phi_post) + b_post)
        H_res  = alpha_res * (x' phi_res) + b_res
        h_in   = sum_j H_pre[j] * x[j]

    The RmsNorm is applied after the GEMM: ``h_mix = (x * gamma) @ phi.T`` (float32), then
    scaled by ``inv_rms``.

    Parameters
    ----------
    x : Tensor
        ``[B, S, n, D]`` or ``[T, n, D]``, bfloat16 or float16 (float64 outside strict mode);
        n in {4, 6, 8}, D a multiple of 16 up to 16384.
    phi : Tensor
        float32 ``[n*n + 2n, nD]`` (rows W_pre, W_post, W_res) or ``[2n, nD]``.
    alpha : Tensor
        float32 ``[3]`` (pre, post, res) or ``[2]`` (no residual part).
    bias : Tensor
        float32 ``[phi.size(0)]``.
    gamma : Tensor, optional
        float32 ``[n, D]`` RmsNorm scale (none: 1).
    norm_eps, hc_eps : float
        RmsNorm epsilon and the constant added to H_pre after its sigmoid.
    out_flag : int
        1 asks for ``inv_rms``, ``h_mix`` and ``h_pre`` too (see Notes).
    inner_precise : int
        0: float32 GEMM; 1: both GEMM operands rounded to HF32 first.

    Returns
    -------
    (h_in, h_post, h_res, inv_rms, h_mix, h_pre)
        ``h_in`` ``[..., D]`` in x's dtype; float32 ``h_post [..., n]``, ``h_res [..., n, n]``
        (``[1]`` zeros with two alphas), ``inv_rms [...]``, ``h_mix [..., phi.size(0)]``,
        ``h_pre [..., n]``.

    Constraints
    -----------
    Ascend 950 only (strict mode).

    Notes
    -----
    With ``out_flag=0`` the NPU leaves the last three outputs undefined; they are always
    computed here, which also lets autograd (derivatives.yaml feeds them to
    :func:`npu_mhc_pre_backward`) work with either flag.  Gradients flow from ``h_in``,
    ``h_post`` and ``h_res`` into x, phi, alpha, bias and gamma.

    Examples
    --------
    >>> T, n, D = 8, 4, 32
    >>> outs = npu_anywhere.npu_mhc_pre(torch.randn(T, n, D).bfloat16(), torch.randn(24, n * D),
    ...                                 torch.ones(3), torch.zeros(24), out_flag=1)
    >>> [tuple(o.shape) for o in outs]
    [(8, 32), (8, 4), (8, 4, 4), (8,), (8, 24), (8, 4)]
    """
    return mhc_pre_op(x, phi, alpha, bias, gamma=gamma, norm_eps=norm_eps, hc_eps=hc_eps,
                      out_flag=out_flag, inner_precise=inner_precise)


def npu_mhc_pre_backward(x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix, h_pre,
                         h_post, gamma=None, hc_eps=1e-6, grad_x_post=None):
    """Gradients of :func:`npu_mhc_pre` from its saved outputs.

    Returns ``(grad_x, grad_phi, grad_alpha, grad_bias, grad_gamma)``: ``grad_x`` in x's dtype
    (plus ``grad_x_post``, the post op's gradient of x, when given), the others float32 with the
    shapes of phi, alpha, ``[phi.size(0)]`` and ``[n, D]`` (zeros without gamma).  Steps of
    op-plugin's test_npu_mhc_pre_backward.py golden: sigmoid gradients from ``h_pre - hc_eps``
    and ``h_post``, the GEMM transposed, the delayed RmsNorm through ``inv_rms`` and ``h_mix``.
    With two alphas (no residual part) ``grad_h_res`` is ignored; the NPU host code sizes the
    outputs for three, which is the documented case.
    """
    return mhc_pre_backward_op(x, phi, alpha, grad_h_in, grad_h_post, grad_h_res, inv_rms, h_mix,
                               h_pre, h_post, gamma, hc_eps, grad_x_post)


TORCH_NPU_FUNCTIONS = {OP: npu_mhc_pre, BACKWARD_OP: npu_mhc_pre_backward}

"""torch_npu.npu_rotary_mul and npu_rotary_mul_backward.

Formula (seed 004, ``npu_rotary_mul``)::

    half:        x1, x2 = chunk(input, 2, -1);  x_new = cat(-x2, x1)
    interleave:  x_new = (-x[1], x[0], -x[3], x[2], ...)
    rotate:      x_new = input @ rotate           (any rotary_mode; rotate is (D, D))
    output = r1 * input + r2 * x_new

Precision: float16/bfloat16 inputs are computed in float32 and rounded once to the input dtype.
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...kernels import compiled
from ...params import accept_alias
from ...targets import Product
from .rotation import (compute_dtype, partner, prepare, reduce_to, rope, rotate as rotate_pairs,
                       signed)

OP = "npu_rotary_mul"
SCHEMA = ("npu_rotary_mul(Tensor self, Tensor r1, Tensor r2, str rotary_mode='half', "
          "Tensor? rotate=None) -> Tensor")
BACKWARD_OP = "npu_rotary_mul_backward"
BACKWARD_SCHEMA = ("npu_rotary_mul_backward(Tensor grad, Tensor self, Tensor r1, Tensor r2, "
                   "str rotary_mode='half') -> (Tensor, Tensor, Tensor)")

MODES = ("half", "interleave")

# r1/r2 broadcast patterns of the doc, as "dim i of r1 equals dim i of input" flags for the
# three leading dims (the layout is not passed, so any layout's pattern is accepted).
_HALF_PATTERNS = {
    (False, False, True), (True, False, True), (True, True, True),     # BNSD: 11SD B1SD BNSD
    (False, True, False), (True, True, False),                          # BSND: 1S1D BS1D (BSND)
    (True, False, False),                                               # SBND: S11D SB1D (SBND)
}
_INTERLEAVE_PATTERNS = {(False, False, True), (False, True, False), (True, False, False)}
# jit_compile=False path (A2/A3 training) and jit_compile=True path (910, A2, 310P inference).
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE})


def _check_cos_sin(op: str, x: torch.Tensor, name: str, t: torch.Tensor) -> None:
    checks.expect_dim(t, 4, op, name)
    checks.expect(t.shape[-1] == x.shape[-1], op, name,
                  lambda: f"the same last dim (D) as input ({x.shape[-1]})", lambda: tuple(t.shape))
    fits = all(t.shape[i] == 1 or t.shape[i] == x.shape[i] for i in range(3))
    checks.expect(fits, op, name,
                  lambda: f"a shape broadcastable to input {tuple(x.shape)} without growing it",
                  lambda: tuple(t.shape))


def _check_strict(op: str, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor,
                  rotary_mode: str) -> None:
    product = targets.expect_supported(op, _SUPPORTED)
    if product is None:
        return
    d = x.shape[-1]
    if product in (Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE):
        # Only the jit_compile=True kernel exists there: half mode, D == 128.
        checks.expect(rotary_mode == "half", op, "rotary_mode",
                      lambda: f"'half' on {product.value}", repr(rotary_mode), ValueError)
        checks.expect(d == 128, op, "input", lambda: f"D == 128 on {product.value}", d, ValueError)
        if product == Product.ATLAS_INFERENCE:
            checks.expect(x.dtype != torch.bfloat16, op, "input",
                          "a dtype other than bfloat16 on 310P", "bfloat16", TypeError)
    else:
        checks.expect(d < 896, op, "input", lambda: f"D < 896 on {product.value}", d, ValueError)
    patterns = _HALF_PATTERNS if rotary_mode == "half" else _INTERLEAVE_PATTERNS
    for name, t in (("r1", r1), ("r2", r2)):
        ok = any(all((t.shape[i] == x.shape[i]) if keep else (t.shape[i] == 1)
                     for i, keep in enumerate(p)) for p in patterns)
        checks.expect(ok, op, name,
                      lambda: f"one of the documented {rotary_mode}-mode broadcast patterns on "
                      f"{product.value} (e.g. 11SD, 1S1D, S11D)", lambda t=t: tuple(t.shape),
                      ValueError)


def _check_common(op: str, x: torch.Tensor, r1: torch.Tensor, r2: torch.Tensor,
                  rotary_mode: str, grad: Optional[torch.Tensor] = None,
                  rotate: Optional[torch.Tensor] = None) -> None:
    checks.expect_one_of(rotary_mode, MODES, op, "rotary_mode")
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    named = {"input": x, "r1": r1, "r2": r2}
    if grad is not None:
        named = {"grad": grad, **named}
    if rotate is not None:
        named["rotate"] = rotate
    # Mixed float dtypes are accepted: op-plugin casts r1, r2 (and grad) to the input's dtype
    # before the kernel, and the doc's own examples pass a bfloat16 rotate with float32 input.
    for name, t in named.items():
        checks.expect_dtype(t, allowed, op, name)
    checks.expect_same_device(named, op)
    checks.expect_dim(x, 4, op, "input")
    d = x.shape[-1]
    checks.expect(d % 2 == 0, op, "input", "a last dim (D) divisible by 2", d, ValueError)
    _check_cos_sin(op, x, "r1", r1)
    _check_cos_sin(op, x, "r2", r2)
    if grad is not None:
        checks.expect(grad.shape == x.shape, op, "grad", lambda: f"the shape of input {tuple(x.shape)}",
                      lambda: tuple(grad.shape))
    if rotate is not None:
        checks.expect(rotate.dim() == 2 and rotate.shape[0] == d and rotate.shape[1] == d, op,
                      "rotate", lambda: f"a ({d}, {d}) matrix", lambda: tuple(rotate.shape))
    _check_strict(op, x, r1, r2, rotary_mode)


def check_rotary_mul(self, r1, r2, rotary_mode="half", rotate=None):
    _check_common(OP, self, r1, r2, rotary_mode, rotate=rotate)


def check_rotary_mul_backward(grad, self, r1, r2, rotary_mode="half"):
    _check_common(BACKWARD_OP, self, r1, r2, rotary_mode, grad=grad)


def rotary_mul_reference(self, r1, r2, rotary_mode="half", rotate=None):
    # r1/r2 of another dtype are first rounded to the input's dtype, as op-plugin does.
    r1, r2 = r1.to(self.dtype), r2.to(self.dtype)
    if rotate is None:
        return rope(self, *prepare(r1, r2, rotary_mode, self.dtype), rotary_mode)
    ct = compute_dtype(self.dtype)
    x = self.to(ct)
    return torch.addcmul(x * r1.to(ct), x @ rotate.to(ct), r2.to(ct)).to(self.dtype)


def rotary_mul_backward_reference(grad, self, r1, r2, rotary_mode="half"):
    """d input = g*r1 + rotate^T(g*r2);  d r1 = sum(g*input);  d r2 = sum(g*rotate(input))."""
    ct = compute_dtype(self.dtype)
    # Other dtypes are rounded to the input's dtype first, as op-plugin does.
    g, x = grad.to(self.dtype).to(ct), self.to(ct)
    cos, sin = r1.to(self.dtype).to(ct), r2.to(self.dtype).to(ct)
    dx = g * cos + partner(g * signed(sin, rotary_mode), rotary_mode)
    dr1 = reduce_to(g * x, r1.shape)
    dr2 = reduce_to(g * rotate_pairs(x, rotary_mode), r2.shape)
    return dx.to(self.dtype), dr1.to(self.dtype), dr2.to(self.dtype)


def _rotate_matrix_backward(grad, x, r1, r2, rotate):
    """Exact gradients of ``r1*x + r2*(x @ rotate)`` w.r.t. x, r1 and r2."""
    ct = compute_dtype(x.dtype)
    g, xc, cos, sin, m = grad.to(ct), x.to(ct), r1.to(ct), r2.to(ct), rotate.to(ct)
    dx = g * cos + (g * sin) @ m.transpose(0, 1)
    dr1 = reduce_to(g * xc, r1.shape)
    dr2 = reduce_to(g * (xc @ m), r2.shape)
    return dx.to(x.dtype), dr1.to(x.dtype), dr2.to(x.dtype)


rotary_mul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_rotary_mul,
                      reference=rotary_mul_reference, metadata_check=True,
                      info=OpInfo(api="torch_npu"))
rotary_mul_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_rotary_mul_backward,
                               reference=rotary_mul_backward_reference, metadata_check=True,
                               info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, r1, r2, rotary_mode, rotate = inputs
    ctx.rotary_mode = rotary_mode
    ctx.save_for_backward(x, r1, r2, rotate)


def _backward(ctx, grad):
    x, r1, r2, rotate = ctx.saved_tensors
    if not any(ctx.needs_input_grad[:3]):
        return None, None, None, None, None
    if rotate is None:
        dx, dr1, dr2 = rotary_mul_backward_op(grad, x, r1, r2, ctx.rotary_mode)
    else:
        # The NPU's backward ignores `rotate` (derivatives.yaml passes only rotary_mode), which is
        # exact only for the standard half/interleave matrices; we differentiate the real formula.
        dx, dr1, dr2 = _rotate_matrix_backward(grad, x, r1, r2, rotate)
    need = ctx.needs_input_grad
    return (dx if need[0] else None, dr1 if need[1] else None, dr2 if need[2] else None,
            None, None)


rotary_mul_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_rotary_mul(input=None, r1=None, r2=None, rotary_mode="half", rotate=None, **kwargs):
    """Rotary position embedding: ``r1 * input + r2 * rotate(input)``.

    Formula (seed 004)::

        half:        x1, x2 = chunk(input, 2, -1);  x_new = cat((-x2, x1), -1)
        interleave:  x_new = stack((-input[..., 1::2], input[..., ::2]), -1).flatten(-2)
        rotate:      x_new = input @ rotate
        output = r1 * input + r2 * x_new

    Parameters
    ----------
    input : Tensor
        4-D (BNSD, BSND or SBND), float16, bfloat16 or float32 (float64 also accepted outside
        strict mode).  ``self=`` (op-plugin's name) is accepted as an alias.
    r1, r2 : Tensor
        cos and sin, 4-D, any of the float dtypes (rounded to input's dtype first, as
        op-plugin casts them), broadcastable to ``input`` (documented patterns: BNSD input
        with 11SD/B1SD/BNSD, BSND with 1S1D/BS1D/BSND, SBND with S11D/SB1D/SBND; interleave
        mode documents only 11SD/1S1D/S11D).  Values in [-1, 1].
    rotary_mode : {'half', 'interleave'}
    rotate : Tensor, optional
        (D, D) matrix of any of the float dtypes above (the doc's examples pair a bfloat16
        rotate with float32 input); when given ``x_new = input @ rotate`` for either mode,
        computed in float32.  Not differentiable.

    Returns
    -------
    Tensor
        Same shape and dtype as ``input``; computed in float32 and rounded once.

    Constraints
    -----------
    D even.  Strict mode: A2/A3 (jit_compile=False) need D < 896 and the documented r1/r2
    patterns; Atlas training (910) and inference (310P) products only have the
    jit_compile=True kernel: half mode, D == 128 (and no bfloat16 on 310P).  B, N < 1000
    limits depend on the layout, which the op does not receive, so they are not checked.

    Notes
    -----
    Autograd gives input, r1 and r2 gradients (r1/r2 summed over their broadcast dims) through
    ``npu_rotary_mul_backward``.  With ``rotate`` the NPU's backward still uses the fixed
    half/interleave rotation; we differentiate ``input @ rotate`` exactly instead.

    Examples
    --------
    >>> x = torch.rand(2, 2, 5, 128)
    >>> r1 = torch.rand(1, 2, 1, 128); r2 = torch.rand(1, 2, 1, 128)
    >>> npu_anywhere.npu_rotary_mul(x, r1, r2).shape
    torch.Size([2, 2, 5, 128])
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return rotary_mul_op(input, r1, r2, rotary_mode, rotate)


def npu_rotary_mul_backward(grad, input=None, r1=None, r2=None, rotary_mode="half", **kwargs):
    """Gradients of :func:`npu_rotary_mul` (without ``rotate``): ``(d_input, d_r1, d_r2)``.

    Formula::

        d_input = grad * r1 + rotate^T(grad * r2)      (rotate^T = -rotate)
        d_r1    = sum over r1's broadcast dims of grad * input
        d_r2    = sum over r2's broadcast dims of grad * rotate(input)

    All three have the input dtype (grad, r1 and r2 of other dtypes are rounded to it first);
    d_r1/d_r2 have the shapes of r1/r2.
    """
    if kwargs:
        input = accept_alias(BACKWARD_OP, "input", input, "self", kwargs)
    return rotary_mul_backward_op(grad, input, r1, r2, rotary_mode)



# -- fast providers --------------------------------------------------------------------------

compiled.register(
    rotary_mul_op,
    key=lambda self, r1, r2, rotary_mode="half", rotate=None:
        (rotary_mode, self.dtype, r1.dtype, self.device.type, rotate is None))
compiled.register(
    rotary_mul_backward_op,
    key=lambda grad, self, r1, r2, rotary_mode="half": (rotary_mode, self.dtype, self.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_rotary_mul": npu_rotary_mul,
    "npu_rotary_mul_backward": npu_rotary_mul_backward,
}

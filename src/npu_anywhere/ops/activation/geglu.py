"""torch_npu.npu_geglu and npu_geglu_grad.

Formula (aclnnGeGluV3, hicann/ops-nn activation/ge_glu_v2/docs/aclnnGeGluV3.md)::

    A, B = chunk(self, 2, dim)                     # left and right halves
    activate_left=False:  gelu = Gelu(B);  out = A * gelu      (the default)
    activate_left=True:   gelu = Gelu(A);  out = gelu * B
    Gelu: approximate=0 erf form, approximate=1 tanh form

Precision (hicann/ops-nn activation/ge_glu_v2/op_kernel/ge_glu_v2_*_align.h): bfloat16 and
float32 compute Gelu and the product in float32 and round each output once; float16 rounds
Gelu to float16 first and multiplies the float16 values (so ``out = fp16(x * fp16(gelu))``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels import compiled
from ...kernels.compiled import CompiledProvider
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import GELU_MODES, compute_dtype, gelu, gelu_derivative, glu_halves

OP = "npu_geglu"
SCHEMA = ("npu_geglu(Tensor self, int dim=-1, int approximate=1, bool activate_left=False) "
          "-> (Tensor, Tensor)")
GRAD_OP = "npu_geglu_grad"
GRAD_SCHEMA = ("npu_geglu_grad(Tensor grad_output, Tensor self, Tensor gelu, int dim=-1, "
               "int approximate=1, bool activate_left=False) -> Tensor")

# aclnnGeGlu / aclnnGeGluV3 (and their backward): 950, A3, A2 and Atlas inference (310P);
# not the Atlas training series (910).  910/310P: float and float16 only.
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE, Product.ASCEND_950})


def _check_input(op: str, x: torch.Tensor, dim: int, approximate: int) -> int:
    _common.expect_float(op, "self", x)
    # aclnnGeGlu documents 0-D inputs (dim in [-1, 0]) but a scalar cannot be cut in two.
    _common.expect_rank(op, "self", x, 1, 8)
    d = _common.expect_split_dim(op, "self", x, dim)
    checks.expect(approximate in GELU_MODES, op, "approximate",
                  "0 (erf form, 'none') or 1 (tanh form)", repr(approximate), ValueError)
    product = targets.expect_supported(op, _SUPPORTED)
    _common.expect_no_bf16_on(op, "self", x, product, {Product.ATLAS_INFERENCE})
    return d


def check_geglu(self, dim=-1, approximate=1, activate_left=False):
    _check_input(OP, self, dim, approximate)


def check_geglu_grad(grad_output, self, gelu, dim=-1, approximate=1, activate_left=False):
    op = GRAD_OP
    _common.expect_float(op, "grad_output", grad_output)
    _common.expect_float(op, "gelu", gelu)
    d = _check_input(op, self, dim, approximate)
    named = {"self": self, "grad_output": grad_output, "gelu": gelu}
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    _common.expect_halved(op, "grad_output", grad_output, "self", self, d)
    _common.expect_halved(op, "gelu", gelu, "self", self, d)
    _check_grad_strict(op, approximate)


def _check_grad_strict(op: str, approximate: int) -> None:
    # aclnnGeGluV3Backward: "Atlas 推理系列产品只支持1('tanh')".
    if targets.current() == Product.ATLAS_INFERENCE:
        checks.expect(approximate == 1, op, "approximate",
                      "1 (tanh form) on 310P (its backward supports only the tanh form)",
                      repr(approximate), ValueError)


def _gate_and_linear(x, dim, activate_left):
    first, second = glu_halves(x, dim)
    return (first, second) if activate_left else (second, first)


def geglu_reference(self, dim=-1, approximate=1, activate_left=False):
    gate, linear = _gate_and_linear(self, dim, activate_left)
    ct = compute_dtype(self.dtype)
    g = gelu(gate.to(ct), GELU_MODES[approximate])
    if self.dtype == torch.float16:
        g16 = g.to(torch.float16)
        return linear * g16, g16          # fp16 product of fp16 values: rounded once more
    return (linear.to(ct) * g).to(self.dtype), g.to(self.dtype)


def geglu_grad_reference(grad_output, self, gelu, dim=-1, approximate=1, activate_left=False):
    """d gate = g * linear * Gelu'(gate);  d linear = g * gelu (the given forward output)."""
    gate, linear = _gate_and_linear(self, dim, activate_left)
    ct = compute_dtype(self.dtype)
    g = grad_output.to(ct)
    d_gate = g * linear.to(ct) * gelu_derivative(gate.to(ct), GELU_MODES[approximate])
    d_linear = g * gelu.to(ct)
    parts = (d_gate, d_linear) if activate_left else (d_linear, d_gate)
    return torch.cat(parts, dim).to(self.dtype)


geglu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_geglu, reference=geglu_reference,
                 metadata_check=True, info=OpInfo(api="torch_npu"))
geglu_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_geglu_grad,
                      reference=geglu_grad_reference, metadata_check=True,
                      info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, dim, approximate, activate_left = inputs
    _check_grad_strict(f"{OP} (autograd)", approximate)
    ctx.args = (dim, approximate, activate_left)
    # derivatives.yaml: output_differentiability [true, false]; the backward reads result1.
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(x, output[1])


def _backward(ctx, grad_out, grad_gelu):
    x, gelu_out = ctx.saved_tensors
    if grad_out is None:
        return None, None, None, None
    return geglu_grad_op(grad_out, x, gelu_out, *ctx.args), None, None, None


geglu_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_geglu(self=None, dim=-1, approximate=1, activate_left=False, **kwargs):
    """GeGLU: one half of ``self`` through GELU, times the other half; also returns the GELU.

    Formula (aclnnGeGluV3; A, B = the left and right halves of ``self`` along ``dim``)::

        activate_left=False (default):  gelu = Gelu(B);   out = A * gelu
        activate_left=True:             gelu = Gelu(A);   out = gelu * B
        approximate=0:  Gelu(x) = 0.5 x (1 + erf(x / sqrt(2)))
        approximate=1:  Gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

    Parameters
    ----------
    self : Tensor
        1-D to 8-D, float16, bfloat16 or float32 (float64 also accepted outside strict mode),
        even along ``dim``.  ``input=`` is accepted as an alias.
    dim : int, default -1
        The axis cut in two, in ``[-self.dim(), self.dim() - 1]``.
    approximate : {0, 1}, default 1
        0: erf form ('none'); 1: tanh form.
    activate_left : bool, default False
        Which half goes through GELU: the right one by default, the left one when True.  Not in
        seed 004's prototype; op-plugin's schema has it.

    Returns
    -------
    (out, gelu) : Tensors of ``self``'s shape with ``dim`` halved and ``self``'s dtype.

    Constraints
    -----------
    Strict mode: A2, A3, Atlas inference (310P) and 950 (aclnnGeGlu); no bfloat16 on 310P
    (seed 004: bfloat16 "Atlas A2 训练系列产品支持"); the 310P backward supports only
    ``approximate=1``, so requesting a gradient with ``approximate=0`` there raises.

    Notes
    -----
    Seed 004 does not say which half is activated; aclnnGeGluV3's doc (hicann/ops-nn
    activation/ge_glu_v2/docs/aclnnGeGluV3.md: "false表示对右边做activate") and its golden
    (tests/assets/golden.py: ``x, gate = chunk(...)`` unless activate_left) settle it: the right
    half by default.  Precision follows the Ascend C kernel (ge_glu_v2_fp16_align.h): float16
    rounds ``gelu`` to float16 before the product; other dtypes round once.  Differentiable in
    ``out`` through ``npu_geglu_grad`` (derivatives.yaml); ``gelu`` is not differentiable.

    Examples
    --------
    >>> x = torch.rand(24, 16, 2560, dtype=torch.float16) * 4 - 2
    >>> y, y_gelu = npu_anywhere.npu_geglu(x, dim=-1, approximate=1)
    >>> y.shape
    torch.Size([24, 16, 1280])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return geglu_op(self, dim, approximate, activate_left)


def npu_geglu_grad(grad_output, self=None, gelu=None, dim=-1, approximate=1,
                   activate_left=False, **kwargs):
    """Gradient of :func:`npu_geglu`'s ``out`` w.r.t. ``self`` (aclnnGeGluV3Backward).

    Formula (gate: the activated half, linear: the other one)::

        d gate   = grad_output * linear * Gelu'(gate)
        d linear = grad_output * gelu          # ``gelu``: npu_geglu's second output
        result   = the two halves put back in place along ``dim``

    ``grad_output`` and ``gelu`` have ``self``'s shape with ``dim`` halved; all three share a
    dtype; the result has ``self``'s shape and dtype (computed in float32, rounded once).
    Strict 310P: ``approximate`` must be 1.
    """
    if kwargs:
        self = accept_alias(GRAD_OP, "self", self, "input", kwargs)
    return geglu_grad_op(grad_output, self, gelu, dim, approximate, activate_left)


# -- fast providers --------------------------------------------------------------------------

def _geglu_key(self, dim=-1, approximate=1, activate_left=False):
    return (dim, self.shape[dim], approximate, activate_left, self.dtype, self.device.type)


_geglu_compiled = CompiledProvider(geglu_reference, _geglu_key)


def _geglu_compiled_supports(self, dim=-1, approximate=1, activate_left=False):
    if self.dtype == torch.float16:
        # Inductor drops a float16 round trip inside a fused kernel (emulate_precision_casts is
        # off), which would skip the kernel's rounding of gelu before the product.
        return "float16 rounds gelu before the product; a fused kernel would not"
    return _geglu_compiled.supports(self, dim, approximate, activate_left)


geglu_op.add_provider(CompiledProvider.name, _geglu_compiled.run, _geglu_compiled_supports)
compiled.register(geglu_grad_op,
                  key=lambda grad_output, self, gelu, dim=-1, approximate=1, activate_left=False:
                  (dim, self.shape[dim], approximate, activate_left, self.dtype,
                   self.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_geglu": npu_geglu,
    "npu_geglu_grad": npu_geglu_grad,
}

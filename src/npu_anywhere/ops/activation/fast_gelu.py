"""torch_npu.npu_fast_gelu, torch_npu.fast_gelu and npu_fast_gelu_backward.

Formulas (seed 004, ``npu_fast_gelu``; both equal ``x * sigmoid(1.702 x)`` and differ only in
rounding)::

    formula 1 (Atlas training 910 / Atlas inference 310P):
        fast_gelu(x) = x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))
    formula 2 (Atlas A2 / A3):
        fast_gelu(x) = x / (1 + exp(-1.702 x))

Formula 2 is used by default; formula 1 under strict mode for 910 or 310P.  Seed 004 prints
formula 1 as ``exp(0.851 x (x - |x|))``: the extra ``x`` is a doc defect (the TBE kernel
fast_gelu.py computes ``vexp(vmuls(x - |x|, 0.851))``, MindSpore's FastGeLU and CANN's FastGelu
doc write ``exp(0.851 (x - |x|))``; with the extra ``x`` the function would grow like
``exp(1.702 x^2)`` for negative x).

Precision: float16/bfloat16 computed in float32 and rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...kernels.compiled import CompiledProvider
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import compute_dtype

OP = "npu_fast_gelu"
SCHEMA = "npu_fast_gelu(Tensor self) -> Tensor"
FAST_GELU_OP = "fast_gelu"
FAST_GELU_SCHEMA = "fast_gelu(Tensor self) -> Tensor"
BACKWARD_OP = "npu_fast_gelu_backward"
BACKWARD_SCHEMA = "npu_fast_gelu_backward(Tensor grad, Tensor self) -> Tensor"

ALPHA = 1.702
HALF_ALPHA = 0.851
MAX_DIMS = 8
# op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fast_gelu.md and
# (beta)torch_npu-fast_gelu.md: Atlas training, Atlas inference, A2, A3; the 950 from hicann/ops-nn
# activation/fast_gelu/docs/aclnnFastGelu.md (float16/float32/bfloat16, formula 2) and
# activation/fast_gelu_grad/docs/aclnnFastGeluBackward.md, which the op-plugin kernels call.
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})
FORMULA_1_PRODUCTS = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE})


def formula() -> int:
    """1 under strict mode for Atlas training (910) / inference (310P), else 2 (A2/A3)."""
    return 1 if targets.current() in FORMULA_1_PRODUCTS else 2


def _check_input(op: str, name: str, x: torch.Tensor, *, bf16_documented: bool = True) -> None:
    _common.expect_float(op, name, x)
    checks.expect(x.dim() <= MAX_DIMS, op, name, f"a tensor with at most {MAX_DIMS} dims",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    product = targets.expect_supported(op, _SUPPORTED)
    no_bf16 = FORMULA_1_PRODUCTS if bf16_documented else _SUPPORTED
    _common.expect_no_bf16_on(op, name, x, product, no_bf16)


def check_npu_fast_gelu(self):
    _check_input(OP, "self", self)


def check_fast_gelu(self):
    # The fast_gelu page documents float16/float32 only; op-plugin's fast_gelu calls
    # npu_fast_gelu, so default mode accepts what npu_fast_gelu accepts.
    _check_input(FAST_GELU_OP, "self", self, bf16_documented=False)


def check_npu_fast_gelu_backward(grad, self):
    op = BACKWARD_OP
    _common.expect_float(op, "grad", grad)
    _check_input(op, "self", self)
    checks.expect_same_dtype({"self": self, "grad": grad}, op)
    checks.expect_same_device({"self": self, "grad": grad}, op)
    _common.expect_same_shape(op, "grad", grad, "self", self)


# -- math --------------------------------------------------------------------------------------

def fast_gelu_formula_1(x: torch.Tensor) -> torch.Tensor:
    ax = x.abs()
    return x / (1 + torch.exp(-ALPHA * ax)) * torch.exp(HALF_ALPHA * (x - ax))


def fast_gelu_formula_2(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + torch.exp(-ALPHA * x))


def fast_gelu_derivative_1(x: torch.Tensor) -> torch.Tensor:
    """d/dx of formula 1, overflow-free: (e + 1.702 x e + exp(1.702 (x - |x|))) / (1 + e)^2
    with e = exp(-1.702 |x|)."""
    ax = x.abs()
    e = torch.exp(-ALPHA * ax)
    return (e + ALPHA * x * e + torch.exp(ALPHA * (x - ax))) / ((1 + e) * (1 + e))


def fast_gelu_derivative_2(x: torch.Tensor) -> torch.Tensor:
    """d/dx of formula 2: s + 1.702 x s (1 - s) with s = sigmoid(1.702 x)."""
    s = torch.sigmoid(ALPHA * x)
    return s + ALPHA * x * s * (1 - s)


def _forward_1(self):
    return fast_gelu_formula_1(self.to(compute_dtype(self.dtype))).to(self.dtype)


def _forward_2(self):
    return fast_gelu_formula_2(self.to(compute_dtype(self.dtype))).to(self.dtype)


def _backward_1(grad, self):
    ct = compute_dtype(self.dtype)
    return (grad.to(ct) * fast_gelu_derivative_1(self.to(ct))).to(self.dtype)


def _backward_2(grad, self):
    ct = compute_dtype(self.dtype)
    return (grad.to(ct) * fast_gelu_derivative_2(self.to(ct))).to(self.dtype)


def fast_gelu_reference(self):
    return _forward_1(self) if formula() == 1 else _forward_2(self)


def fast_gelu_backward_reference(grad, self):
    return _backward_1(grad, self) if formula() == 1 else _backward_2(grad, self)


npu_fast_gelu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_npu_fast_gelu,
                         reference=fast_gelu_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu"))
fast_gelu_op = NpuOp(FAST_GELU_SCHEMA, namespace=TORCH_NPU_NS, check=check_fast_gelu,
                     reference=fast_gelu_reference, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
npu_fast_gelu_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_npu_fast_gelu_backward,
                                  reference=fast_gelu_backward_reference, metadata_check=True,
                                  info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return npu_fast_gelu_backward_op(grad, x)


npu_fast_gelu_op.set_autograd(setup_context=_setup_context, backward=_backward)
fast_gelu_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_fast_gelu(input=None, **kwargs):
    """Fast GELU, elementwise: ``x * sigmoid(1.702 x)`` in the product's formula.

    Formula (seed 004)::

        A2 / A3 (default):        fast_gelu(x) = x / (1 + exp(-1.702 x))
        910 / 310P (strict mode): fast_gelu(x) = x / (1 + exp(-1.702 |x|)) * exp(0.851 (x - |x|))

    Parameters
    ----------
    input : Tensor
        Any shape up to 8 dims (non-contiguous and empty tensors accepted), float16, float32 or
        bfloat16 (float64 accepted outside strict mode).  ``self=`` (op-plugin's name) is
        accepted as an alias.

    Returns
    -------
    Tensor
        Same shape and dtype; computed in float32 and rounded once.

    Constraints
    -----------
    Strict mode: Atlas training (910), Atlas inference (310P), A2, A3 (op-plugin docs) and the
    950 (ops-nn aclnnFastGelu.md, formula 2); no bfloat16 on 910/310P.

    Notes
    -----
    The two formulas are the same function; they differ by rounding (and at ``x = +inf``, where
    formula 1 gives NaN).  Under ``npu_anywhere.strict("910")`` or ``strict("310P")`` formula 1
    is evaluated, otherwise formula 2.  Seed 004 prints formula 1 with an extra ``x`` in the
    second exponent (``0.851x(x-|x|)``); that is a doc defect: the TBE kernel (fast_gelu.py)
    computes ``exp(0.851 (x - |x|))``, as MindSpore's FastGeLU doc writes it.  The 910/310P TBE
    kernel computes float16 inputs in float16; we compute them in float32.  Differentiable
    through ``npu_fast_gelu_backward`` (derivatives.yaml).

    Examples
    --------
    >>> x = torch.rand(4, 2048, 16, 128)
    >>> npu_anywhere.npu_fast_gelu(x).shape
    torch.Size([4, 2048, 16, 128])
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return npu_fast_gelu_op(input)


def fast_gelu(self=None, **kwargs):
    """``torch_npu.fast_gelu``: the same computation as :func:`npu_fast_gelu`.

    Parameters
    ----------
    self : Tensor
        float16 or float32 (the documented dtypes; bfloat16 is accepted outside strict mode
        because op-plugin's ``fast_gelu`` calls ``npu_fast_gelu``; float64 outside strict mode).
        ``input=`` is accepted as an alias.

    Returns
    -------
    Tensor of the same shape and dtype.  Works under FakeTensor, as documented.

    Examples
    --------
    >>> x = torch.tensor([0.5991, 0.4094])
    >>> npu_anywhere.fast_gelu(x)
    tensor([0.4403, 0.2733])
    """
    if kwargs:
        self = accept_alias(FAST_GELU_OP, "self", self, "input", kwargs)
    return fast_gelu_op(self)


def npu_fast_gelu_backward(grad, self=None, **kwargs):
    """Gradient of :func:`npu_fast_gelu`: ``grad * fast_gelu'(self)``.

    Formula (derivative of the product's formula)::

        A2 / A3:     s + 1.702 x s (1 - s),   s = sigmoid(1.702 x)
        910 / 310P:  (e + 1.702 x e + exp(1.702 (x - |x|))) / (1 + e)^2,   e = exp(-1.702 |x|)

    ``grad`` has ``self``'s shape and dtype; the result too (float32 compute, rounded once).
    """
    if kwargs:
        self = accept_alias(BACKWARD_OP, "self", self, "input", kwargs)
    return npu_fast_gelu_backward_op(grad, self)


# -- fast providers: one compiled function per formula -------------------------------------------

def _register_compiled(op, variants, key) -> None:
    providers = {n: CompiledProvider(fn, key) for n, fn in variants.items()}

    def supports(*args):
        return providers[formula()].supports(*args)

    def run(*args):
        return providers[formula()].run(*args)

    op.add_provider(CompiledProvider.name, run, supports)


_register_compiled(npu_fast_gelu_op, {1: _forward_1, 2: _forward_2},
                   key=lambda self: (self.dtype, self.device.type))
_register_compiled(fast_gelu_op, {1: _forward_1, 2: _forward_2},
                   key=lambda self: (self.dtype, self.device.type))
_register_compiled(npu_fast_gelu_backward_op, {1: _backward_1, 2: _backward_2},
                   key=lambda grad, self: (self.dtype, self.device.type))


TORCH_NPU_FUNCTIONS = {
    "npu_fast_gelu": npu_fast_gelu,
    "fast_gelu": fast_gelu,
    "npu_fast_gelu_backward": npu_fast_gelu_backward,
}

"""torch_npu.npu_gelu_mul.

Formula (seed 004, ``npu_gelu_mul``)::

    x1 = input[..., :d];  x2 = input[..., d:]          # last dim = 2d
    tanh: GELU(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
    none: GELU(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
    out = GELU(x1) * x2

Precision: computed in float32 (float64 for float64) and rounded once to the input dtype.
"""

from __future__ import annotations

from ... import checks, targets
from ...kernels import compiled
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _common
from .glu_core import compute_dtype, gelu

OP = "npu_gelu_mul"
SCHEMA = "npu_gelu_mul(Tensor input, *, str approximate='none') -> Tensor"

MODES = ("none", "tanh")
MAX_LAST_DIM = 1024
MAX_ROWS = 200000
# seed 004: A2, A3; aclnnGeluMul (hicann/ops-nn activation/gelu_mul/docs/aclnnGeluMul.md): 950.
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def check_gelu_mul(input, *, approximate="none"):
    op = OP
    checks.expect_one_of(approximate, MODES, op, "approximate")
    _common.expect_float(op, "input", input)
    _common.expect_rank(op, "input", input, 2, 8)
    d = input.shape[-1]
    checks.expect(d % 2 == 0, op, "input", "an even last dim", d, ValueError)
    checks.expect(d <= MAX_LAST_DIM, op, "input", f"a last dim <= {MAX_LAST_DIM}", d, ValueError)
    rows = 1
    for s in input.shape[:-1]:
        rows = rows * s
    checks.expect(rows <= MAX_ROWS, op, "input",
                  f"a product of the dims other than the last <= {MAX_ROWS}", rows, ValueError)
    targets.expect_supported(op, _SUPPORTED)


def gelu_mul_reference(input, *, approximate="none"):
    x1, x2 = input.chunk(2, -1)
    ct = compute_dtype(input.dtype)
    return (gelu(x1.to(ct), approximate) * x2.to(ct)).to(input.dtype)


gelu_mul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gelu_mul,
                    reference=gelu_mul_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
gelu_mul_op.forbid_autograd("npu_gelu_mul has no backward on the NPU (op-plugin's "
                            "derivatives.yaml lists none)")


def npu_gelu_mul(input=None, *, approximate="none", **kwargs):
    """GELU of the left half of the last dim, times the right half.

    Formula (seed 004)::

        x1 = input[..., :d];  x2 = input[..., d:]       (last dim 2d)
        'tanh': GELU(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        'none': GELU(x) = 0.5 * x * (1 + erf(x / sqrt(2)))
        out = GELU(x1) * x2

    Parameters
    ----------
    input : Tensor
        2-D to 8-D, bfloat16, float16 or float32 (float64 accepted outside strict mode); last
        dim even and <= 1024; product of the other dims <= 200000; empty tensors accepted.
        ``self=`` is accepted as an alias.
    approximate : {'none', 'tanh'}, keyword-only, default 'none'

    Returns
    -------
    Tensor
        ``input``'s shape with the last dim halved, ``input``'s dtype; computed in float32 and
        rounded once.

    Constraints
    -----------
    The size limits hold on every product (seed 004, aclnnGeluMul), so they are checked in
    default mode too.  Strict mode: A2, A3 (seed 004) and 950 (aclnnGeluMul).

    Notes
    -----
    No backward on the NPU: calling it with an input that requires grad raises.

    Examples
    --------
    >>> x = torch.rand(100, 400, dtype=torch.float16)
    >>> npu_anywhere.npu_gelu_mul(x, approximate="none").shape
    torch.Size([100, 200])
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return gelu_mul_op(input, approximate=approximate)


compiled.register(gelu_mul_op, key=lambda input, *, approximate="none":
                  (approximate, input.dtype, input.device.type))


TORCH_NPU_FUNCTIONS = {"npu_gelu_mul": npu_gelu_mul}

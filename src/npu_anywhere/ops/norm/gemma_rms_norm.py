"""torch_npu.npu_gemma_rms_norm: RMSNorm scaled by ``1 + gamma``.

Formula (aclnnGemmaRmsNorm, hicann/ops-nn ``norm/gemma_rms_norm``)::

    rstd = 1 / sqrt(mean(input^2 over the trailing gamma.dim() dims) + epsilon)
    y    = input * rstd * (1 + gamma)
"""

from __future__ import annotations

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import rms_core
from .rms_core import check_gamma, rms_norm_fp32, stat_dtype
from .rms_norm import check_dtype_pair

OP = "npu_gemma_rms_norm"
SCHEMA = ("npu_gemma_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) "
          "-> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})


def check_gemma_rms_norm(self, gamma, epsilon=1e-06):
    product = targets.expect_supported(OP, _SUPPORTED)
    check_dtype_pair(OP, self, gamma, x_name="input", mixed_ok=False)
    checks.expect_same_device({"input": self, "gamma": gamma}, OP)
    check_gamma(OP, self, gamma, x_name="input")
    if product is not None:
        # Seed 004: "不支持空进空出" (the aclnn kernel itself accepts empty tensors).
        checks.expect(self.numel() != 0, OP, "input", "a non-empty tensor in strict mode",
                      lambda: f"shape {tuple(self.shape)}", ValueError)


def _gemma_body(self, gamma, epsilon, _numerics=None):
    y, rstd = rms_norm_fp32(self, gamma, epsilon, gemma=True)
    return y.to(self.dtype), rstd.to(stat_dtype(self.dtype))


def gemma_rms_norm_reference(self, gamma, epsilon=1e-06):
    return _gemma_body(self, gamma, epsilon)


gemma_rms_norm_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gemma_rms_norm,
                          reference=gemma_rms_norm_reference, metadata_check=True,
                          info=OpInfo(api="torch_npu"))
gemma_rms_norm_op.forbid_autograd("npu_gemma_rms_norm has no backward in op-plugin's "
                                  "derivatives.yaml")


def npu_gemma_rms_norm(input=None, gamma=None, epsilon=1e-06, **kwargs):
    """Gemma RMSNorm returning ``(y, rstd)``: ``y = input * rstd * (1 + gamma)``.

    Formula (aclnnGemmaRmsNorm)::

        rstd = 1 / sqrt(mean(input^2 over the trailing gamma.dim() dims) + epsilon)
        y    = input * rstd * (1 + gamma)

    Parameters
    ----------
    input : Tensor
        1-D to 8-D, float16, bfloat16 or float32 (float64 outside strict mode).  ``self=``
        (op-plugin's name) is accepted as an alias.
    gamma : Tensor
        ``gamma.shape == input.shape[n:]`` with ``n < input.dim()``; same dtype as ``input``.
    epsilon : float
        Default 1e-6.

    Returns
    -------
    y : Tensor
        input's shape and dtype; ``(1 + gamma)`` and the products in float32, one rounding.
    rstd : Tensor
        float32 (float64 for float64 input), shape ``input.shape[:-k] + (1,) * k``.

    Constraints
    -----------
    Products: A2, A3 (seed 004) and 950 (aclnn doc).  Strict mode rejects empty input (seed:
    "不支持空进空出") and float64.

    Notes
    -----
    The seed says rstd has input's dtype; op-plugin allocates it as float32
    (``op_plugin/ops/opapi/GemmaRmsNormKernelOpApi.cpp``, meta registration), which is
    followed.  The kernel is the RmsNorm kernel with ``gamma + 1`` added in float32 (ops-nn
    ``norm/gemma_rms_norm/op_kernel/gemma_rms_norm.cpp`` -> ``rms_norm.h``).  The seed says
    non-contiguous tensors are unsupported; they are accepted here.  No autograd (not in
    derivatives.yaml): a call with inputs requiring grad raises.

    Examples
    --------
    >>> x = torch.randn(20, 10, 64); g = torch.randn(64)
    >>> y, rstd = npu_anywhere.npu_gemma_rms_norm(x, g)
    >>> rstd.shape
    torch.Size([20, 10, 1])
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return gemma_rms_norm_op(input, gamma, epsilon)


def _bind(self, gamma, epsilon=1e-06):
    return self, gamma, epsilon


rms_core.register_compiled(
    gemma_rms_norm_op, _gemma_body,
    key=lambda self, gamma, epsilon: (self.dtype, tuple(gamma.shape), self.device.type),
    numerics=lambda *a, **k: None, bind=_bind)


TORCH_NPU_FUNCTIONS = {"npu_gemma_rms_norm": npu_gemma_rms_norm}

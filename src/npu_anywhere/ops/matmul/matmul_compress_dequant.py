"""torch_npu.npu_matmul_compress_dequant: int8 matmul with a losslessly compressed weight,
plus bias, dequantized to float16.

Formula (aclnnMatmulCompressDequant, ``hicann/ops-nn matmul/matmul_v2_compress_dequant/docs``;
seed 004)::

    x2_unzip = unzip(x2, compress_index, compress_info)      [K, N] int8
    out      = float16((x1 @ x2_unzip + bias) * deq_scale)   [M, N]

``x1 @ x2_unzip + bias`` is exact in int32 (the bias is broadcast into the accumulator before
the matmul, ``op_kernel/pp_matmul_i8_nz_compress.h``), then scaled in float32 and rounded once.

The compressed format is not public: msModelSlim's ``weight_compression`` tool writes it and
the Atlas inference (310P) cube unit's hardware unzip engine reads it
(``load_gm_to_cbuf_unzip`` in the kernel), with 8 x 8 compression tiles.  So a compressed
(1-D) ``x2`` raises NotImplementedError.  A 2-D ``[K, N]`` x2 is taken as the already
reconstructed weight (seed 004's example passes one: "实际使用时为压缩权重重建结果"), and the
formula above runs on it.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import integer

OP = "npu_matmul_compress_dequant"
SCHEMA = ("npu_matmul_compress_dequant(Tensor x1, Tensor x2, Tensor compress_index, Tensor bias, "
          "Tensor scale, *, Tensor? offsetW=None, int? offsetX=None) -> Tensor")

# aclnn doc: the Atlas inference series (310P) only; seed 004 names no product.
_SUPPORTED = frozenset({Product.ATLAS_INFERENCE})
# uint64 / int64: npu_trans_quant_param-style words (op-plugin's meta wants uint64); float32:
# plain scales, as seed 004's example passes.
_SCALE_DTYPES = (torch.uint64, torch.int64, torch.float32)


def check_matmul_compress_dequant(x1, x2, compress_index, bias, scale, *, offsetW=None,
                                  offsetX=None):
    targets.expect_supported(OP, _SUPPORTED)
    checks.expect(offsetW is None, OP, "offsetW", "None (only None is supported)",
                  lambda: f"a tensor of shape {tuple(offsetW.shape)}", ValueError)
    checks.expect(offsetX is None or offsetX == 0, OP, "offsetX", "0 (only 0 is supported)",
                  offsetX, ValueError)
    checks.expect_dtype(x1, (torch.int8,), OP, "x1")
    checks.expect_dtype(x2, (torch.int8,), OP, "x2")
    checks.expect_dtype(compress_index, (torch.int8,), OP, "compress_index")
    checks.expect_dtype(bias, (torch.int32,), OP, "bias")
    checks.expect_dtype(scale, _SCALE_DTYPES, OP, "scale")
    checks.expect_same_device({"x1": x1, "x2": x2, "compress_index": compress_index,
                               "bias": bias, "scale": scale}, OP)
    checks.expect_dim(x1, 2, OP, "x1")
    checks.expect_dim(bias, 2, OP, "bias")
    checks.expect_dim(scale, 2, OP, "scale")
    checks.expect_dim(compress_index, 1, OP, "compress_index")
    checks.expect_dim(x2, (1, 2), OP, "x2")
    for name, t in (("x1", x1), ("x2", x2), ("bias", bias), ("scale", scale)):
        checks.expect_nonempty(t, OP, name)
    k = x1.shape[1]
    n = bias.shape[1]
    checks.expect(bias.shape[0] == 1, OP, "bias", lambda: f"shape (1, N) = (1, {n})",
                  lambda: f"shape {tuple(bias.shape)}", ValueError)
    checks.expect(scale.shape[0] == 1 and scale.shape[1] in (1, n), OP, "scale",
                  lambda: f"shape (1, {n}) or (1, 1) (N from bias)",
                  lambda: f"shape {tuple(scale.shape)}", ValueError)
    checks.expect(x2.dim() == 2, OP, "x2",
                  "a 2-D [K, N] uncompressed weight: the 1-D msModelSlim weight_compression "
                  "format (decompressed by the 310P's hardware unzip engine) is not public, so "
                  "compressed weights cannot be emulated",
                  lambda: f"a 1-D tensor of {x2.numel()} elements", NotImplementedError)
    checks.expect(tuple(x2.shape) == (k, n), OP, "x2",
                  lambda: f"shape (K, N) = ({k}, {n}) (K from x1, N from bias)",
                  lambda: f"shape {tuple(x2.shape)}", RuntimeError)


def _scale_f32(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype == torch.float32:
        return scale
    word = scale.view(torch.int64) if scale.dtype == torch.uint64 else scale
    return integer.unpack_scale_word(word)[0]


def matmul_compress_dequant_reference(x1, x2, compress_index, bias, scale, *, offsetW=None,
                                      offsetX=None):
    acc = integer.int_mm(x1, x2) + bias                          # exact int32 [M, N]
    return (acc.to(torch.float32) * _scale_f32(scale)).to(torch.float16)


def _matmul_compress_dequant_fake(x1, x2, compress_index, bias, scale, *, offsetW=None,
                                  offsetX=None):
    return x1.new_empty((x1.shape[0], bias.shape[1]), dtype=torch.float16)


matmul_compress_dequant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                   check=check_matmul_compress_dequant,
                                   reference=matmul_compress_dequant_reference,
                                   fake=_matmul_compress_dequant_fake, metadata_check=True,
                                   info=OpInfo(api="torch_npu"))
matmul_compress_dequant_op.forbid_autograd(
    "npu_matmul_compress_dequant has no backward on the NPU (inference only)")


def npu_matmul_compress_dequant(x1, x2, compress_index, bias, scale, *, offsetW=None,
                                offsetX=None):
    """Matmul with a compressed int8 weight, bias and dequantization to float16.

    Formula (aclnnMatmulCompressDequant)::

        x2_unzip = unzip(x2, compress_index, compress_info)
        out = float16((x1 @ x2_unzip + bias) * scale)

    with ``x1 @ x2_unzip + bias`` exact in int32 and the scaling in float32.

    Parameters
    ----------
    x1 : Tensor
        int8 ``[M, K]``.
    x2 : Tensor
        int8.  On the NPU the 1-D output of msModelSlim's weight compression; that format is
        not public, so only a 2-D ``[K, N]`` already reconstructed weight is accepted here
        (a 1-D x2 raises NotImplementedError naming the compression).
    compress_index : Tensor
        int8 1-D compression index table (unused for an uncompressed x2).
    bias : Tensor
        int32 ``(1, N)``; N is the output's second dim.
    scale : Tensor
        ``(1, N)`` or ``(1, 1)``: uint64 / int64 words as npu_trans_quant_param makes them
        (the fp19 scale field is used), or float32 scales (seed 004's example).
    offsetW : Tensor, optional
        Only None is supported.
    offsetX : int, optional
        Only 0 (or None) is supported.

    Returns
    -------
    float16 Tensor ``[M, N]`` (M from x1, N from bias).

    Constraints
    -----------
    x1, bias and scale are 2-D.  Strict mode: the Atlas inference series (310P) only (aclnn
    doc).

    Notes
    -----
    The compression (8 x 8 tiles, ``compress_info = {8, 8, K, N, 1}`` in op-plugin) is
    decoded by the 310P's hardware unzip engine (``hicann/ops-nn
    matmul/matmul_v2_compress_dequant/op_kernel/pp_matmul_i8_nz_compress.h``); no public
    description or software decoder exists, so it is not emulated.  No autograd.

    Examples
    --------
    >>> m, k, n = 16, 256, 128
    >>> out = npu_anywhere.npu_matmul_compress_dequant(
    ...     torch.ones((m, k), dtype=torch.int8), torch.zeros((k, n), dtype=torch.int8),
    ...     torch.zeros(8, dtype=torch.int8), torch.zeros((1, n), dtype=torch.int32),
    ...     torch.ones((1, n), dtype=torch.float32))
    >>> out.shape, out.dtype
    (torch.Size([16, 128]), torch.float16)
    """
    return matmul_compress_dequant_op(x1, x2, compress_index, bias, scale, offsetW=offsetW,
                                      offsetX=offsetX)


TORCH_NPU_FUNCTIONS = {"npu_matmul_compress_dequant": npu_matmul_compress_dequant}

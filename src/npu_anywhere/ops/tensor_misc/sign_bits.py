"""torch_npu.npu_sign_bits_pack / npu_sign_bits_unpack (1-bit Adam sign compression).

Formula (seed 004; op-plugin docs/zh/custom_APIs ``npu_sign_bits_pack.md`` /
``npu_sign_bits_unpack.md`` give the numpy equivalent, and op-plugin
``op_plugin/ops/aclops/SignBitsPackKernelNpu.cpp`` / ``SignBitsUnpackKernelNpu.cpp`` the checks
and output shapes)::

    pack:    bit_e = 1 if x_e >= 0 else 0           (np.bool_(np.sign(x) + 1): -0.0 and NaN -> 1)
             byte_k = sum_j bit_{8k+j} << j         (little bit order; the tail padded with 0 bits,
                                                     "-1.0 floats" in the doc's words)
             out = bytes.reshape(size, -1)          uint8, ceil(numel / 8) bytes in all
    unpack:  v_e = +1 if bit e of the bytes (little bit order) is 1 else -1
             out = v.reshape(size, -1)              dtype float16 or float32, numel * 8 values
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

PACK = "npu_sign_bits_pack"
PACK_SCHEMA = "npu_sign_bits_pack(Tensor self, int size) -> Tensor"
UNPACK = "npu_sign_bits_unpack"
UNPACK_SCHEMA = "npu_sign_bits_unpack(Tensor input, int size, ScalarType dtype) -> Tensor"

_FLOATS = (torch.float16, torch.float32)
# seed 004: "值为1设置输出类型为float16，值为0设置输出类型为float32"
_DTYPE_CODES = {1: torch.float16, 0: torch.float32}


def _weights(device) -> torch.Tensor:
    return torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=device)


def check_sign_bits_pack(self, size):
    checks.expect_dim(self, 1, PACK, "self")
    checks.expect_dtype(self, _FLOATS, PACK, "self")
    packed = (self.shape[0] + 7) // 8
    checks.expect(size > 0 and packed % size == 0, PACK, "size",
                  lambda: f"a positive divisor of the packed length ceil({self.shape[0]} / 8) "
                  f"= {packed}", size, ValueError)


def check_sign_bits_unpack(input, size, dtype):
    checks.expect_dim(input, 1, UNPACK, "input")
    checks.expect_dtype(input, (torch.uint8,), UNPACK, "input")
    checks.expect(dtype in _FLOATS, UNPACK, "dtype", "torch.float16 or torch.float32",
                  str(dtype), TypeError)
    values = input.shape[0] * 8
    checks.expect(size > 0 and values % size == 0, UNPACK, "size",
                  lambda: f"a positive divisor of the unpacked length {input.shape[0]} * 8 "
                  f"= {values}", size, ValueError)


def sign_bits_pack_reference(self, size):
    bits = (~(self < 0)).to(torch.uint8)              # x >= 0, -0.0 and NaN give 1
    pad = (-self.shape[0]) % 8
    bits = torch.cat([bits, bits.new_zeros(pad)]).view(-1, 8)
    packed = (bits * _weights(self.device)).sum(dim=1, dtype=torch.uint8)
    return packed.view(size, -1)


def sign_bits_unpack_reference(input, size, dtype):
    bits = (input.unsqueeze(1) & _weights(input.device)) != 0
    ones = torch.ones((), dtype=dtype, device=input.device)
    return torch.where(bits, ones, -ones).reshape(size, -1)


pack_op = NpuOp(PACK_SCHEMA, namespace=TORCH_NPU_NS, check=check_sign_bits_pack,
                reference=sign_bits_pack_reference, metadata_check=True,
                info=OpInfo(api="torch_npu"))
pack_op.forbid_autograd("derivatives.yaml defines no backward for npu_sign_bits_pack")
unpack_op = NpuOp(UNPACK_SCHEMA, namespace=TORCH_NPU_NS, check=check_sign_bits_unpack,
                  reference=sign_bits_unpack_reference, metadata_check=True,
                  info=OpInfo(api="torch_npu"))
# no autograd kernel needed: the input is uint8 (never requires grad)


def npu_sign_bits_pack(self, size):
    """Pack the signs of a 1-D float tensor into bits, 8 per uint8, reshaped to ``(size, -1)``.

    Formula::

        bit_e = 1 if self[e] >= 0 else 0      (-0.0 and NaN give 1, as np.sign(x) + 1 != 0)
        out[k] = sum_j bit_{8k+j} * 2**j      (least significant bit first; missing tail bits 0)

    Parameters
    ----------
    self : Tensor
        1-D float16 or float32.
    size : int
        The output's first dim: a positive divisor of ``ceil(numel / 8)``.

    Returns
    -------
    Tensor
        uint8 ``(size, ceil(numel / 8) // size)``.

    Notes
    -----
    Source: op-plugin ``npu_sign_bits_pack.md`` (numpy ``sign_pack``) and
    ``SignBitsPackKernelNpu.cpp``.  No backward.  The Atlas 200/300/500 inference products take
    float16 only (seed 004); no strict-mode product models them.

    Examples
    --------
    >>> a = torch.tensor([5, 4, 3, 2, 0, -1, -2, 4, 3, 2, 1, 0, -1, -2], dtype=torch.float32)
    >>> npu_anywhere.npu_sign_bits_pack(a, 2)
    tensor([[159],
            [ 15]], dtype=torch.uint8)
    """
    return pack_op(self, size)


def npu_sign_bits_unpack(input, size, dtype):
    """Unpack uint8 sign bits into +1 / -1 floats, reshaped to ``(size, -1)``.

    Formula::

        out_e = +1.0 if (input[e // 8] >> (e % 8)) & 1 else -1.0

    Parameters
    ----------
    input : Tensor
        1-D uint8.
    size : int
        The output's first dim: a positive divisor of ``numel * 8``.
    dtype : torch.dtype or int
        ``torch.float16`` or ``torch.float32``; the seed's integer codes are accepted too
        (1 float16, 0 float32).

    Returns
    -------
    Tensor
        ``dtype`` of shape ``(size, numel * 8 // size)``.

    Notes
    -----
    Source: op-plugin ``npu_sign_bits_unpack.md`` (numpy ``sign_unpack``) and
    ``SignBitsUnpackKernelNpu.cpp``.  No backward.

    Examples
    --------
    >>> npu_anywhere.npu_sign_bits_unpack(torch.tensor([159, 15], dtype=torch.uint8), 2,
    ...                                   torch.float32)
    """
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in _DTYPE_CODES:
        dtype = _DTYPE_CODES[dtype]
    return unpack_op(input, size, dtype)


TORCH_NPU_FUNCTIONS = {
    PACK: npu_sign_bits_pack,
    UNPACK: npu_sign_bits_unpack,
}

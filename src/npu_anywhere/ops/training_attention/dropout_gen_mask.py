"""torch_npu._npu_dropout_gen_mask: the bit-packed dropout keep-mask of (seed, offset).

Schema from op-plugin ``op_plugin_functions.yaml``; the output length follows op-plugin's
``FlashAttentionKernelNpuOpApi.cpp`` (``dropout_gen_mask_impl``: ``(numels + 127) / 128 * 128 / 8``
bytes) and the bit order its tests unpack with (``np.unpackbits(..., bitorder='little')``).

On the NPU this is the StatelessDropOutGenMask kernel, the very generator npu_fusion_attention
uses for its own keep-mask, so a mask made here with (seed, offset) is the one a fusion-attention
call (or its grad) with that seed / offset applies.  The emulation keeps that property with its
own stream (:func:`.fa_masks.uniform_stream`); the bits are not the NPU's Philox ones.
"""

from __future__ import annotations

import math

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from .fa_masks import pack_bits, uniform_stream

OP = "_npu_dropout_gen_mask"
SCHEMA = (f"{OP}.Tensor(Tensor self, int[] size, float p, int seed, int offset, *, "
          "bool? parallel=True, bool? sync=None) -> Tensor")


def _numels(size) -> int:
    return math.prod(size)


def _mask_bytes(numels: int) -> int:
    return (numels + 127) // 128 * 16


def check_dropout_gen_mask(self, size, p, seed, offset, *, parallel=True, sync=None):
    checks.expect(all(s >= 0 for s in size), OP, "size", "non-negative sizes", list(size),
                  ValueError)
    checks.expect(0.0 <= p <= 1.0, OP, "p", "in [0, 1] (the drop probability)", p, ValueError)


def dropout_gen_mask_reference(self, size, p, seed, offset, *, parallel=True, sync=None):
    numels = _numels(size)
    return pack_bits(uniform_stream(int(seed), int(offset), 0, numels, self.device) < 1.0 - p)


def _dropout_gen_mask_fake(self, size, p, seed, offset, *, parallel=True, sync=None):
    return self.new_empty(_mask_bytes(_numels(size)), dtype=torch.uint8)


dropout_gen_mask_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_dropout_gen_mask,
                            reference=dropout_gen_mask_reference, fake=_dropout_gen_mask_fake,
                            metadata_check=True, info=OpInfo(api="torch_npu"))
# no autograd kernel: the output is uint8 (never differentiable); ``self`` may require grad


def npu_dropout_gen_mask(self, size, p, seed, offset, *, parallel=True, sync=None):
    """Bit-packed dropout keep-mask of ``prod(size)`` elements for (seed, offset).

    Element ``e`` is kept (bit 1) with probability ``1 - p``; it is bit ``e % 8`` (least
    significant first) of byte ``e // 8``.

    Parameters
    ----------
    self : Tensor
        Only its device is used (the mask is made there).
    size : list of int
        The mask's shape, e.g. ``[B, N, Sq, Skv]`` for npu_fusion_attention (TND:
        ``[N * sum_b Sq_b Skv_b]``); elements in row-major order.
    p : float
        The drop probability, ``1 - keep_prob``.
    seed, offset : int
        The stream: the same (seed, offset) gives the same mask, and the mask
        npu_fusion_attention / npu_fusion_attention_grad apply with that seed / offset and
        ``keep_prob = 1 - p``.
    parallel, sync : bool, optional
        Accepted (how the NPU schedules the generation); no effect.

    Returns
    -------
    Tensor
        uint8 ``[ceil(prod(size) / 128) * 16]`` (whole 128-bit blocks; pad bits 0).

    Notes
    -----
    The bits come from this emulation's stream (:func:`.fa_masks.uniform_stream`), not the NPU's
    Philox generator: masks agree with this package's fusion attention, not with an NPU's.
    """
    return dropout_gen_mask_op(self, size, p, seed, offset, parallel=parallel, sync=sync)


TORCH_NPU_FUNCTIONS = {OP: npu_dropout_gen_mask}

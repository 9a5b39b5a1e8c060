"""Weight-only quantized matmul in cache-resident tiles: the int8 / int4 weight is dequantized a
block of output columns at a time by one compiled kernel, and each tile feeds a ``torch.mm``.

Why tiles of output columns: a ``(k, columns)`` tile holds the full reduction for its columns,
so each tile's product is final -- a bfloat16 ``torch.mm`` can accumulate in float32 and round
once, which is the reference's rounding, and at decode sizes no float copy of the whole weight
is made (the point of W4A16 is to move and hold a quarter of the weight bytes).  A tile of about
1 MiB stays in the core's L2 cache between the decode that writes it and the GEMM that reads it.
With many rows of x (prefill), or off the CPU, one tile spans the whole weight: the decode is
then a small part of the GEMM's work, and one wide GEMM beats many narrow ones.

Why planes for int4: a packed word ``(row, c)`` holds columns ``8c .. 8c + 7`` (nibble ``j`` is
column ``8c + j``).  Decoding nibble ``j`` of every word of the tile gives a contiguous plane, so
the kernel is a plain vectorised elementwise loop over the words (no interleaving gather); the
columns come out in the order ``(j, c)`` and the small ``(m, columns)`` product is put back in
``(c, j)`` order.  The scale and offset rows are rearranged the same way once per call (they are
``groups x n``, a few hundred KiB at most).

The arithmetic is the reference's step by step (``weight_quant_batchmatmul.dequantize``): the
integer value is exact in float16 / bfloat16, ``value + offset`` and its product with the scale
are each rounded to x's dtype; the GEMM sums in float32.  float16 tiles are emitted as float32
(values still rounded to float16), because a float16 ``torch.mm`` on CPU is many times slower
than a float32 one.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

TILE_BYTES = 1 << 20          # one core's L2 on the CPUs measured (AMD EPYC, 1 MiB)
WHOLE_WEIGHT_ROWS = 256       # with more rows of x than this, one tile spans the whole weight:
                              # re-reading x once per tile would cost more than the decode saves


def int4_tile(words: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
              out_dtype: torch.dtype) -> torch.Tensor:
    """Packed int4 words ``[k, c]`` -> dequantized ``[k, 8c]`` tile, columns in plane order
    (column ``j * c + i`` is logical column ``8i + j``).

    ``scale`` / ``offset``: ``[groups, 8, c]`` planes in x's dtype (``groups`` divides k).
    """
    k, c = words.shape
    groups = scale.shape[0]
    # nibble j sits at bits 4j..4j+3: shift it to the top, then an arithmetic shift sign-extends.
    shifts = torch.arange(28, -4, -4, dtype=torch.int32, device=words.device).reshape(8, 1)
    nibbles = (words.unsqueeze(1) << shifts) >> 28                      # [k, 8, c]
    w = _dequantize(nibbles.reshape(groups, k // groups, 8, c), scale.unsqueeze(1),
                    None if offset is None else offset.unsqueeze(1))
    return w.reshape(k, 8 * c).to(out_dtype)


def int8_tile(values: torch.Tensor, scale: torch.Tensor, offset: Optional[torch.Tensor],
              out_dtype: torch.dtype) -> torch.Tensor:
    """int8 ``[k, columns]`` -> dequantized tile; ``scale`` / ``offset``: ``[groups, columns]``."""
    k, cols = values.shape
    groups = scale.shape[0]
    w = _dequantize(values.reshape(groups, k // groups, cols), scale.unsqueeze(1),
                    None if offset is None else offset.unsqueeze(1))
    return w.reshape(k, cols).to(out_dtype)


def _dequantize(values: torch.Tensor, scale: torch.Tensor,
                offset: Optional[torch.Tensor]) -> torch.Tensor:
    """``(values + offset) * scale`` in scale's dtype, each step rounded once.

    Written in float32 with explicit roundings rather than as float16 / bfloat16 arithmetic:
    the integers and the parameters are exact in float32, so each float32 step rounded to the
    dtype is that dtype's own operation; and Inductor's C++ code converts int32 -> float32
    directly instead of through the 16-bit type (about 4x faster decode, measured).
    """
    dtype = scale.dtype
    w = values.to(torch.float32)
    if offset is not None:
        w = (w + offset.to(torch.float32)).to(dtype).to(torch.float32)
    return (w * scale.to(torch.float32)).to(dtype)


def _rows(p: torch.Tensor, n: int) -> torch.Tensor:
    """A per-tensor / per-channel / per-group parameter as ``[groups, n]``."""
    return p.reshape(1, 1).expand(1, n) if p.numel() == 1 else p.reshape(-1, n)


def _planes(p: torch.Tensor) -> torch.Tensor:
    """``[groups, n]`` -> ``[groups, 8, n // 8]``: entry ``(g, j, i)`` is column ``8i + j``."""
    groups, n = p.shape
    return p.reshape(groups, n // 8, 8).transpose(1, 2).contiguous()


def tile_words(k: int, packed: bool) -> int:
    """Storage columns per tile (int32 words for int4, int8 values otherwise)."""
    bytes_per_column = 2 * k
    columns = max(8, TILE_BYTES // bytes_per_column)
    return max(1, columns // 8) if packed else columns


TileKernel = Callable[..., torch.Tensor]


def tiled_weight_matmul(x2d: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                        offset: Optional[torch.Tensor], group_size: int, float_out: bool,
                        run_tile: Optional[Callable[..., torch.Tensor]] = None) -> torch.Tensor:
    """``x2d [m, k] @ ANTIQUANT(weight)`` for a contiguous int8 ``[k, n]`` or packed int32
    ``[k, n // 8]`` weight: float32 ``[m, n]`` when ``float_out`` (or x is float16), else x's
    dtype rounded once.

    ``run_tile(kind, key, *tile_args)`` runs a tile kernel (the compiled one); ``None`` runs
    :func:`int4_tile` / :func:`int8_tile` eagerly.  ``group_size`` must divide k.
    """
    dtype = x2d.dtype
    packed = weight.dtype == torch.int32
    k, stored = weight.shape
    n = stored * 8 if packed else stored
    m = x2d.shape[0]
    out_dtype = torch.float32 if (float_out or dtype == torch.float16) else dtype
    a = x2d.to(out_dtype)
    s = _rows(scale, n)
    o = None if offset is None else _rows(offset, n)
    if packed:
        s = _planes(s)
        o = None if o is None else _planes(o)
    # Cache-sized tiles are a CPU matter; a GPU wants one wide decode and one wide GEMM.
    whole = m > WHOLE_WEIGHT_ROWS or x2d.device.type != "cpu"
    step = stored if whole else min(stored, tile_words(k, packed))
    y = torch.empty(m, n, dtype=out_dtype, device=x2d.device)
    kind = "int4" if packed else "int8"
    for c0 in range(0, stored, step):
        c1 = min(stored, c0 + step)
        sp = s[..., c0:c1]
        op = None if o is None else o[..., c0:c1]
        args = (weight[:, c0:c1], sp, op, out_dtype)
        if run_tile is None:
            tile = (int4_tile if packed else int8_tile)(*args)
        else:
            key = (kind, str(dtype), str(out_dtype), k, c1 - c0, sp.shape[0], o is not None,
                   x2d.device.type)
            tile = run_tile(kind, key, *args)
        part = torch.mm(a, tile)
        if packed:
            cols = c1 - c0
            y[:, 8 * c0:8 * c1].view(m, cols, 8).copy_(part.view(m, 8, cols).transpose(1, 2))
        else:
            y[:, c0:c1].copy_(part)
    return y

"""Paged KV-cache layouts shared by the cache-writing ops.

A paged cache holds ``num_blocks`` blocks of ``block_size`` token slots; slot ``s`` is token
``s % block_size`` of block ``s // block_size`` (``slot = block_id * block_size + offset``).

Two layouts carry a token's ``num_heads * head_size`` values:

* **ND** (``cache_mode='Norm'``): ``[num_blocks, block_size, num_heads, head_size]``; token ``s``
  is ``cache[s // block_size, s % block_size]``.
* **NZ** (``cache_mode='PA_NZ'``): the FRACTAL_NZ arrangement of the ND cache, in which each
  token's values are cut into rows of ``last_dim = 32 // element_size`` elements (one 32-byte
  fractal row: 16 elements for 2-byte dtypes, 32 for 1-byte dtypes, 8 for 4-byte dtypes) and
  row ``c`` of token ``s`` lives at ``cache[s // block_size, c, s % block_size, :]``.  The cache
  is ``[num_blocks, num_heads * head_size // last_dim, block_size, last_dim]``, or the same
  memory seen per head, ``[num_blocks, num_heads, head_size // last_dim, block_size,
  last_dim]``.

The NZ shapes above are the *logical* shapes torch_npu shows (what ``npu_format_cast(x, 29)``
returns and what ``print`` displays); with ``last_dim`` elements = 32 bytes per row, the
fractal storage of a ``[..., block_size, last_dim]`` tensor is byte-for-byte its row-major
order, so emulating on the logical tensor is exact.  Sources: the ScatterPaKvCache goldens in
Ascend/op-plugin ``test/test_custom_ops/test_scatter_pa_kv_cache.py`` and hicann/ops-transformer
``attention/scatter_pa_kv_cache/tests/ut/op_kernel/scatter_pa_kv_cache_data/gen_data.py``
(``last_dim = 32 // dtype_size``), and the shape checks of ``scatter_pa_kv_cache_tiling.cpp``
(4-D and 5-D NZ caches).

Writes are bitwise copies (``index_put`` copies bits; the dtypes PyTorch cannot ``index_put``
on CPU -- uint16, uint32 -- go through a same-size integer view) and touch only the slots
named: their cost follows the tokens written, not the cache size.
"""

from __future__ import annotations

import torch

FRACTAL_BYTES = 32
"""Bytes in one row of a FRACTAL_NZ cube: the NZ cache's last dim holds this many bytes."""

_SAME_SIZE_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def nz_last_dim(dtype: torch.dtype) -> int:
    """Elements in one NZ row: 16 for 2-byte dtypes, 32 for 1-byte dtypes, 8 for 4-byte ones."""
    return FRACTAL_BYTES // dtype.itemsize


def bitwise(t: torch.Tensor) -> torch.Tensor:
    """``t`` seen as the signed integer dtype of the same width (a view: writes go through)."""
    return t.view(_SAME_SIZE_INT[t.element_size()])


def as_words(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors seen as 8- or 4-byte integers along their last dims (views), else as
    :func:`bitwise` views.

    For code that only moves bits: compiled copies of wide integers vectorize, while Inductor
    moves 1- and 2-byte integers one at a time (twice as slow for a bfloat16 cache write).
    ``Tensor.view(dtype)`` itself refuses what cannot be reinterpreted (a strided last dim, a
    last dim or storage offset that is not a whole number of words).
    """
    for dtype in (torch.int64, torch.int32):
        try:
            return tuple(t.view(dtype) for t in tensors)
        except RuntimeError:
            continue
    return tuple(bitwise(t) for t in tensors)


_NO_INDEX_PUT = (torch.uint16, torch.uint32, torch.uint64)


def writable(t: torch.Tensor) -> torch.Tensor:
    """``t``, or :func:`bitwise` of it for the dtypes PyTorch cannot ``index_put`` into on CPU.

    ``index_put`` copies the bits of every other dtype (NaN payloads and -0.0 included), so
    only those few need the integer view, which costs a microsecond per tensor per call.
    """
    return bitwise(t) if t.dtype in _NO_INDEX_PUT else t


def split_slots(slots: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(block ids, offsets in the block) of non-negative slot numbers."""
    return torch.div(slots, block_size, rounding_mode="floor"), torch.remainder(slots, block_size)


def token_rows(cache: torch.Tensor) -> torch.Tensor | None:
    """An ND cache ``[nb, bs, ...]`` seen as ``[nb * bs, ...]`` (one row per slot), when its first
    two dims merge into one without a copy; else None."""
    try:
        return cache.view((cache.shape[0] * cache.shape[1],) + tuple(cache.shape[2:]))
    except RuntimeError:
        return None


def write_nd(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """``cache[s // bs, s % bs] = rows[i]`` for the i-th slot ``s`` (ND cache, any trailing dims;
    ``rows`` of the cache's dtype)."""
    src = writable(rows).reshape((slots.numel(),) + tuple(cache.shape[2:]))
    flat = token_rows(cache)
    if flat is not None:
        writable(flat)[slots] = src
    else:
        blocks, offsets = split_slots(slots, cache.shape[1])
        writable(cache)[blocks, offsets] = src


def write_nz(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    """Write token ``rows[i]`` (any shape of ``num_heads * head_size`` values) to slot ``slots[i]``
    of a 4-D ``[nb, H // ld, bs, ld]`` or 5-D ``[nb, N, D // ld, bs, ld]`` NZ cache."""
    blocks, offsets = split_slots(slots, cache.shape[-2])
    src = writable(rows)
    dst = writable(cache)
    if cache.dim() == 4:
        dst[blocks, :, offsets] = src.reshape(slots.numel(), cache.shape[1], cache.shape[3])
    else:
        dst[blocks, :, :, offsets] = src.reshape(slots.numel(), cache.shape[1], cache.shape[2],
                                                 cache.shape[4])


def nd_to_nz(cache: torch.Tensor, *, per_head: bool = False) -> torch.Tensor:
    """The NZ cache holding the same tokens as an ND ``[nb, bs, N, D]`` cache (a new tensor).

    ``per_head=False`` gives ``[nb, N * D // ld, bs, ld]``, ``True`` gives
    ``[nb, N, D // ld, bs, ld]``; ``D * element_size`` must be a multiple of 32 bytes.
    """
    nb, bs, n, d = cache.shape
    ld = nz_last_dim(cache.dtype)
    if d % ld:
        raise ValueError(f"nd_to_nz: expected head_size a multiple of {ld} for "
                         f"{cache.dtype}, but got {d}")
    nz = cache.reshape(nb, bs, n * d // ld, ld).permute(0, 2, 1, 3).contiguous()
    return nz.view(nb, n, d // ld, bs, ld) if per_head else nz


def nz_to_nd(cache: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The ND ``[nb, bs, N, D]`` cache holding the same tokens as a 4-D or 5-D NZ cache."""
    nb, bs, ld = cache.shape[0], cache.shape[-2], cache.shape[-1]
    rows = cache.reshape(nb, -1, bs, ld).permute(0, 2, 1, 3)
    return rows.reshape(nb, bs, num_heads, -1).contiguous()

"""Checks and index helpers shared by the Native Sparse Attention (NSA) ops.

The training NSA ops take TND tensors whose batches are given by host lists of cumulative
token counts (``actual_seq_len[i] = s0 + ... + si``); the helpers here validate such lists and
turn them into ``(start, length)`` spans.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ... import checks, targets

HALF = (torch.float16, torch.bfloat16)


def floats() -> tuple:
    """float16 / bfloat16, plus float32 and float64 outside strict mode (gradcheck, goldens)."""
    return HALF if targets.current() is not None else HALF + (torch.float32, torch.float64)


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def expect_tensor(op: str, name: str, t: torch.Tensor, dims: int) -> None:
    checks.expect_dim(t, dims, op, name)
    checks.expect_dtype(t, floats(), op, name)
    checks.expect(t.numel() > 0, op, name, "a non-empty tensor",
                  lambda: f"shape {tuple(t.shape)}", ValueError)


def expect_cumulative(op: str, name: str, lengths: Optional[Sequence[int]],
                      total: Optional[int] = None) -> list[int]:
    """``lengths`` as a list: given, non-decreasing, non-negative, ending at ``total``."""
    checks.expect(lengths is not None, op, name, "a list of cumulative sequence lengths",
                  "None", ValueError)
    values = [int(v) for v in lengths]
    checks.expect(len(values) > 0, op, name, "a non-empty list", "[]", ValueError)
    ok = values[0] >= 0 and all(b >= a for a, b in zip(values, values[1:]))
    checks.expect(ok, op, name, "non-decreasing cumulative lengths starting at 0 or more",
                  lambda: repr(values), ValueError)
    if total is not None:
        checks.expect(values[-1] == total, op, name,
                      lambda: f"a last value equal to the token count T = {total}",
                      values[-1], ValueError)
    return values


def spans(cumulative: Sequence[int]) -> list[tuple[int, int]]:
    """``(start, length)`` of each batch of a cumulative-length list."""
    out, start = [], 0
    for end in cumulative:
        out.append((start, end - start))
        start = end
    return out


def expect_multiple_of_16(op: str, **values: int) -> None:
    for name, value in values.items():
        checks.expect(value > 0 and value % 16 == 0, op, name, "a positive multiple of 16",
                      value, ValueError)


def expect_positive(op: str, **values: int) -> None:
    for name, value in values.items():
        checks.expect(value > 0, op, name, "a positive int", value, ValueError)


def expect_block_sizes(op: str, compress_block_size: int, compress_stride: int,
                       select_block_size: int) -> None:
    """The window rules of the compressed-attention ops: ``compress_block_size >=
    compress_stride``, ``select_block_size >= compress_block_size`` and a multiple of the
    stride (the selection blocks are made of whole strides)."""
    expect_positive(op, compress_block_size=compress_block_size,
                    compress_stride=compress_stride, select_block_size=select_block_size)
    checks.expect(compress_block_size >= compress_stride, op, "compress_block_size",
                  lambda: f"at least compress_stride = {compress_stride}", compress_block_size,
                  ValueError)
    checks.expect(select_block_size >= compress_block_size
                  and select_block_size % compress_stride == 0, op, "select_block_size",
                  lambda: f"at least compress_block_size = {compress_block_size} and a "
                          f"multiple of compress_stride = {compress_stride}",
                  select_block_size, ValueError)

"""Helpers shared by the cache/scatter tests: bitwise views and exactly representable values."""

import torch

_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """A same-width integer view: comparisons are bit for bit (and work for every dtype)."""
    return t.view(_INT[t.element_size()])


def values(shape, dtype, seed):
    """Small values exact in every dtype (quarters in [-7.5, 7.5] for floats)."""
    gen = torch.Generator().manual_seed(seed)
    ints = torch.randint(-30, 31, shape, generator=gen)
    if dtype == torch.bool:
        return ints > 0
    if dtype.is_floating_point:
        return (ints.to(torch.float32) / 4).to(dtype)
    if dtype == torch.uint8:
        return (ints + 30).to(dtype)
    return ints.to(dtype)

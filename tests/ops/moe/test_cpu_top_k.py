"""The C++ stable top-k (kernels/cpu_top_k.py) against a Python golden, on all three code paths.

The golden is a plain sort of each row by (value descending, index ascending) in float64, so
``-0.0`` ties ``+0.0``; NaNs, which a float sort cannot order, are checked on hand-made rows
against the kernel's documented rule (a positive NaN above ``+inf``, a negative one below
``-inf``).  Every path (AVX-512, AVX2, scalar insertion; the build's ISA caps the request) runs
on whatever machine the suite runs on.
"""

from __future__ import annotations

import pytest
import torch

from npu_anywhere.kernels import cpu_top_k
from npu_anywhere.kernels.compiled import compiling_after

PATHS = [2, 1, 0]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture
def built(built_cpu_top_k):
    yield


def golden(values: torch.Tensor, k: int):
    rows = values.reshape(-1, values.shape[-1]).double().tolist()
    idx = [sorted(range(len(r)), key=lambda j: (-r[j], j))[:k] for r in rows]
    idx = torch.tensor(idx, dtype=torch.int64).reshape(*values.shape[:-1], k)
    return values.gather(-1, idx), idx.to(torch.int32)


def tied_values(shape, dtype, seed):
    """Few distinct values (many exact ties), both zeros, both infinities, negatives."""
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor([-float("inf"), -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, float("inf")])
    values = pool[torch.randint(0, pool.numel(), shape, generator=gen)]
    noise = torch.randn(shape, generator=gen)
    return torch.where(torch.rand(shape, generator=gen) < 0.5, values, noise).to(dtype)


# widths below, at and past a 16-lane step; k from 1 to the largest the kernel takes
SHAPES = [((5, 1), 1), ((7, 9), 9), ((6, 16), 3), ((11, 17), 8), ((3, 4, 64), 8),
          ((4, 100), 64), ((9, 33), 20)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k", SHAPES)
def test_matches_the_stable_ranking(built, path, dtype, shape, k):
    values = tied_values(shape, dtype, seed=sum(shape) + k)
    got_values, got_idx = cpu_top_k.top_k(values, k, vector_path=path)
    want_values, want_idx = golden(values, k)
    assert got_idx.dtype == torch.int32 and got_values.dtype == dtype
    assert got_idx.shape == (*shape[:-1], k)
    assert torch.equal(got_idx, want_idx)
    assert torch.equal(got_values, want_values)
    # -0.0 keeps its sign: the values are gathered, not recomputed
    assert torch.equal(torch.signbit(got_values), torch.signbit(want_values))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nans_rank_by_sign_and_finished_rows(built, path, dtype):
    # NaNs of both signs set bit by bit (a conversion may drop a NaN's sign)
    values = torch.tensor([[1.0, 0.0, 0.0, float("inf"), -float("inf"), 0.0],
                           [0.0, 2.0, -0.0, 0.0, 0.0, 0.0]]).to(dtype)
    bits = values.view({torch.float32: torch.int32}.get(dtype, torch.int16))
    width = torch.finfo(dtype).bits
    quiet = {torch.float32: 0x7FC00000, torch.bfloat16: 0x7FC0, torch.float16: 0x7E00}[dtype]
    negative = (quiet | 1 << (width - 1)) - (1 << width)   # the same NaN, sign bit set
    for r, c in [(0, 2), (1, 4)]:
        bits[r, c] = quiet
    for r, c in [(0, 1), (1, 0), (1, 5)]:
        bits[r, c] = negative
    assert values.isnan().sum() == 5
    finished = torch.tensor([False, True])
    got_values, got_idx = cpu_top_k.top_k(values, 6, finished, masked_id=6, vector_path=path)
    assert got_idx[0].tolist() == [2, 3, 0, 5, 4, 1]
    assert got_idx[1].tolist() == [6] * 6
    _, ranked = cpu_top_k.top_k(values[1:], 6, vector_path=path)
    assert ranked.tolist() == [[4, 1, 2, 3, 0, 5]]       # -0.0 ties 0.0: lower index first
    assert torch.isnan(got_values[0, 0]) and torch.isnan(got_values[0, 5])


def test_strided_rows_and_empty(built):
    base = tied_values((8, 40), torch.float32, seed=1)
    view = base[::2, 3:30]                                  # rows of stride 80, a width of 27
    got = cpu_top_k.top_k(view, 5)
    want = golden(view.contiguous(), 5)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    columns = base.t()                                       # a last dim of stride 40
    got = cpu_top_k.top_k(columns, 4)
    want = golden(columns.contiguous(), 4)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    empty_values, empty_idx = cpu_top_k.top_k(torch.zeros(0, 5), 2)
    assert empty_values.shape == (0, 2) and empty_idx.shape == (0, 2)


def test_declines_what_it_cannot_take():
    with compiling_after(0):
        assert "dtype" in cpu_top_k.supports(torch.zeros(2, 4, dtype=torch.float64), 2)
        assert "above 64" in cpu_top_k.supports(torch.zeros(2, 100), 65)
        assert "k outside" in cpu_top_k.supports(torch.zeros(2, 4), 5)
        assert "k outside" in cpu_top_k.supports(torch.zeros(()), 1)
    with compiling_after(None):
        fresh = cpu_top_k.CppKernel("test", [], "", build=lambda: None)
        assert "never" in fresh.ready("key")

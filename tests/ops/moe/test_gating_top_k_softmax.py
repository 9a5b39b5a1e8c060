"""npu_moe_gating_top_k_softmax (+ _v2) against goldens written from the docs.

Seed 004 and op-plugin's goldens (test_npu_moe_gating_top_k_softmax*.py): softmax over the last
dim, the k largest with ties broken by the lower expert id (a stable argsort of -p), finished
rows routed to expert E, ``row_idx[n, j] = j * N + n``.  The goldens below are plain Python
loops over rows in float64 (v1 rounds p to the input dtype before ranking, as its golden does).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def softmax64(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def rank(values, k):
    # Descending by value, ties by ascending index.
    return sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def golden_v1(x, finished, k):
    e = x.shape[-1]
    flat = x.reshape(-1, e).double().tolist()
    n = len(flat)
    fin = finished.reshape(-1).tolist() if finished is not None else [False] * n
    ys, ids = [], []
    for r, row in enumerate(flat):
        p = torch.tensor(softmax64(row), dtype=torch.float64).to(x.dtype).double().tolist()
        top = rank(p, k)
        ys.append([p[i] for i in top])
        ids.append([e if fin[r] else i for i in top])
    row_idx = [[j * n + r for j in range(k)] for r in range(n)]
    shape = (*x.shape[:-1], k)
    return (torch.tensor(ys, dtype=torch.float64).reshape(shape),
            torch.tensor(ids, dtype=torch.int32).reshape(shape),
            torch.tensor(row_idx, dtype=torch.int32).reshape(shape))


@pytest.fixture(params=["reference", "cpp_top_k"])
def provider(request, monkeypatch):
    """Each golden test runs on the reference and on the CPU C++ top-k provider (built once
    per process), and checks that the kernel really answered."""
    if request.param == "reference":
        with na.use_providers("reference"):
            yield
        return
    from npu_anywhere.kernels import cpu_top_k
    from npu_anywhere.kernels.compiled import compiling_after
    request.getfixturevalue("built_cpu_top_k")
    calls = []
    real = cpu_top_k.top_k
    monkeypatch.setattr(cpu_top_k, "top_k", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with compiling_after(0), na.use_providers("cpp_top_k"):
        yield
    assert calls, "the C++ top-k did not run"


def make(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,k", [((7, 13), 3), ((2, 3, 9), 1), ((5, 6), 6)])
@pytest.mark.parametrize("with_finished", [False, True])
def test_v1_matches_golden(provider, dtype, shape, k, with_finished):
    x = make(shape, dtype)
    finished = (torch.arange(math.prod(shape[:-1])) % 3 == 1).reshape(shape[:-1]) \
        if with_finished else None
    y, ids, row_idx = na.npu_moe_gating_top_k_softmax(x, finished, k=k)
    gy, gids, grow = golden_v1(x, finished, k)
    assert y.dtype == dtype and ids.dtype == torch.int32 and row_idx.dtype == torch.int32
    assert_close_to_golden(y, gy)
    assert torch.equal(ids, gids)
    assert torch.equal(row_idx, grow)


def test_ties_keep_lower_expert_first(provider):
    x = torch.tensor([[1.0, 3.0, 3.0, 1.0, 3.0]])
    _, ids, _ = na.npu_moe_gating_top_k_softmax(x, None, k=4)
    assert ids.tolist() == [[1, 2, 4, 0]]
    # bfloat16 rounding of the softmax makes distinct logits tie: the lower expert first
    x = torch.tensor([[0.0, 0.001, -0.001, 0.002, 5.0]], dtype=torch.bfloat16)
    _, ids, _ = na.npu_moe_gating_top_k_softmax(x, None, k=3)
    assert ids.tolist() == [[4, 0, 1]]


def test_non_contiguous_input_and_untouched(provider):
    base = make((9, 16), torch.float32)
    x = base[:, ::2]
    before = x.clone()
    y, ids, _ = na.npu_moe_gating_top_k_softmax(x, None, k=2)
    gy, gids, _ = golden_v1(x.contiguous(), None, 2)
    assert_close_to_golden(y, gy)
    assert torch.equal(ids, gids)
    assert torch.equal(x, before)


def golden_v2(x, finished, k, renorm, output_softmax):
    e = x.shape[-1]
    flat = x.reshape(-1, e).double().tolist()
    fin = finished.reshape(-1).tolist() if finished is not None else [False] * len(flat)
    ys, ids, sms = [], [], []
    for r, row in enumerate(flat):
        if renorm == 1:
            top = rank(row, k)
            ys.append(softmax64([row[i] for i in top]))
        else:
            p = softmax64(row)
            top = rank(p, k)
            ys.append([p[i] for i in top])
            sms.append(p)
        ids.append([e if fin[r] else i for i in top])
    shape = (*x.shape[:-1], k)
    sm = torch.tensor(sms, dtype=torch.float64).reshape(x.shape) \
        if renorm == 0 and output_softmax else torch.empty(0, dtype=torch.float64)
    return (torch.tensor(ys, dtype=torch.float64).reshape(shape),
            torch.tensor(ids, dtype=torch.int32).reshape(shape), sm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("renorm,output_softmax", [(0, False), (0, True), (1, False), (1, True)])
def test_v2_matches_golden(provider, dtype, renorm, output_softmax):
    x = make((2, 5, 11), dtype, seed=3)
    finished = torch.tensor([[True, False, False, True, False], [False] * 5])
    y, ids, sm = na.npu_moe_gating_top_k_softmax_v2(x, k=3, finished=finished, renorm=renorm,
                                                   output_softmax=output_softmax)
    gy, gids, gsm = golden_v2(x, finished, 3, renorm, output_softmax)
    assert y.dtype == dtype and sm.dtype == torch.float32
    assert_close_to_golden(y, gy)
    assert torch.equal(ids, gids)
    assert sm.shape == gsm.shape
    if sm.numel():
        assert_close_to_golden(sm, gsm, dtype=torch.float32)


def test_bad_inputs():
    x = make((4, 6), torch.float32)
    with pytest.raises(ValueError, match="npu_moe_gating_top_k_softmax: expected k in"):
        na.npu_moe_gating_top_k_softmax(x, None, k=7)
    with pytest.raises(ValueError, match="expected k in"):
        torch.ops.npu.npu_moe_gating_top_k_softmax(x, None, 0)
    with pytest.raises(ValueError, match="expected x a 2-D or 3-D tensor"):
        na.npu_moe_gating_top_k_softmax(make((6,), torch.float32), None, k=1)
    with pytest.raises(TypeError, match="expected finished dtype in"):
        na.npu_moe_gating_top_k_softmax(x, torch.zeros(4, dtype=torch.int32), k=1)
    with pytest.raises(RuntimeError, match="expected finished the shape x.shape"):
        na.npu_moe_gating_top_k_softmax(x, torch.zeros(5, dtype=torch.bool), k=1)
    with pytest.raises(TypeError, match="expected x dtype in"):
        na.npu_moe_gating_top_k_softmax(x.int(), None, k=1)
    with pytest.raises(ValueError, match="npu_moe_gating_top_k_softmax_v2: expected renorm"):
        na.npu_moe_gating_top_k_softmax_v2(x, k=1, renorm=2)


def test_strict_mode():
    x = make((4, 6), torch.float32)
    with na.strict("A2"):
        na.npu_moe_gating_top_k_softmax(x, None, k=2)
        with pytest.raises(TypeError, match="expected x dtype in"):
            na.npu_moe_gating_top_k_softmax(x.double(), None, k=2)
    with na.strict("310P"):
        with pytest.raises(Exception, match="npu_moe_gating_top_k_softmax"):
            na.npu_moe_gating_top_k_softmax(x, None, k=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_stable_top_k_ranks_ties_by_index(dtype):
    from npu_anywhere.ops.moe._routing import stable_top_k

    gen = torch.Generator().manual_seed(3)
    # few distinct values (many ties), negatives, both zeros and infinities
    pool = torch.tensor([-float("inf"), -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, float("inf")])
    values = pool[torch.randint(0, pool.numel(), (37, 13), generator=gen)].to(dtype)
    got_values, got_idx = stable_top_k(values, 6)
    # the golden: a stable descending argsort in float64 (-0.0 == 0.0 there, as in float compare)
    want_idx = torch.from_numpy(
        (-values.double().numpy()).argsort(axis=-1, kind="stable")[:, :6].copy())
    assert torch.equal(got_idx, want_idx)
    assert got_values.dtype == dtype and torch.equal(got_values, values.gather(-1, want_idx))


def test_compiled_provider_keeps_the_stable_ranking():
    from npu_anywhere.kernels import compiled as compiled_kernels
    from npu_anywhere.library import REGISTRY

    gen = torch.Generator().manual_seed(4)
    # rounded logits: many exact ties after the bfloat16 softmax
    x = (torch.randint(-3, 4, (33, 16), generator=gen).float() / 2).to(torch.bfloat16)
    finished = torch.rand(33, generator=gen) < 0.2
    with na.use_providers("reference"):
        ref = na.npu_moe_gating_top_k_softmax(x, finished, k=5)
        ref2 = na.npu_moe_gating_top_k_softmax_v2(x, k=5, renorm=1)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        got = na.npu_moe_gating_top_k_softmax(x, finished, k=5)
        got2 = na.npu_moe_gating_top_k_softmax_v2(x, k=5, renorm=1)
    for name in ("npu_moe_gating_top_k_softmax", "npu_moe_gating_top_k_softmax_v2"):
        fast = {p.name: p for p in REGISTRY[name].providers._fast}
        assert fast["compiled"].fn.__self__._disabled is None
    assert torch.equal(got[1], ref[1]) and torch.equal(got[2], ref[2])
    assert torch.equal(got2[1], ref2[1])
    torch.testing.assert_close(got[0], ref[0], rtol=8e-3, atol=0)
    torch.testing.assert_close(got2[0], ref2[0], rtol=8e-3, atol=0)


@pytest.mark.slow       # one Inductor compile
def test_stable_top_k_max_passes_in_compiled_graphs():
    # Compiled graphs rank few of many float32 values (k <= 8, width >= 8k) by max-passes over
    # the keys instead of ATen's topk: the same ranking, ties by index.
    from npu_anywhere.ops.moe._routing import stable_top_k

    gen = torch.Generator().manual_seed(5)
    pool = torch.tensor([-float("inf"), -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, float("inf")])
    values = pool[torch.randint(0, pool.numel(), (21, 16), generator=gen)]
    nan_rows = torch.randn(3, 16, generator=gen)
    nan_rows[:, ::5] = float("nan")
    nan_rows[1, 3] = -float("nan")
    got_values, got_idx = torch.compile(stable_top_k, fullgraph=True, dynamic=False)(
        torch.cat([values, nan_rows]), 2)
    want_idx = torch.from_numpy((-values.double().numpy()).argsort(axis=-1, kind="stable")[:, :2]
                                .copy())
    assert torch.equal(got_idx[:21], want_idx)
    assert torch.equal(got_values[:21], values.gather(-1, want_idx))
    eager_values, eager_idx = stable_top_k(nan_rows, 2)      # ATen topk over the same keys
    assert torch.equal(got_idx[21:], eager_idx)
    assert torch.allclose(got_values[21:], eager_values, rtol=0, atol=0, equal_nan=True)

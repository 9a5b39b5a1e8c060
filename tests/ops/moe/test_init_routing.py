"""npu_moe_init_routing (v1), npu_moe_compute_expert_tokens and npu_moe_init_routing_v2.

Goldens are Python loops written from seed 004 and op-plugin's goldens
(test_npu_moe_init_routing.py, test_npu_moe_compute_tokens.py, test_npu_moe_init_routing_v2.py):
a stable sort of the flattened expert ids (ties by flat position), the inverse index, per-expert
counts, capacity slots ``e * C + rank`` and int8 quantisation with half-to-even rounding.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na


def ids(n, k, experts, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, experts, (n, k), generator=gen, dtype=torch.int32)


def feats(n, h, dtype=torch.float32, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, h, generator=gen, dtype=torch.float64).to(dtype)


def stable_order(keys):
    return sorted(range(len(keys)), key=lambda i: (keys[i], i))


# -- v1 --------------------------------------------------------------------------------------

def golden_v1(x, row_idx, expert_idx, active_num):
    n, k = expert_idx.shape
    e = expert_idx.reshape(-1).tolist()
    r = row_idx.reshape(-1).tolist()
    order = stable_order(e)
    sorted_row = [r[i] for i in order]
    expanded_row_idx = [0] * (n * k)
    for i, s in enumerate(sorted_row):
        expanded_row_idx[s] = i
    kept = min(n, active_num) * k
    rows = [x[s % n] for s in sorted_row[:kept]]
    ex = torch.stack(rows) if rows else x.new_empty(0, x.shape[1])
    return ex, torch.tensor(expanded_row_idx, dtype=torch.int32), \
        torch.tensor([e[i] for i in order], dtype=torch.int32)


def test_v1_doc_example():
    x = torch.tensor([[0.1] * 4, [0.2] * 4, [0.3] * 4])
    row_idx = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32)
    expert_idx = torch.tensor([[1, 2], [0, 1], [0, 2]], dtype=torch.int32)
    ex, eri, eei = na.npu_moe_init_routing(x, row_idx, expert_idx, 3)
    assert eei.tolist() == [0, 0, 1, 1, 2, 2]
    assert eri.tolist() == [2, 0, 1, 4, 3, 5]
    assert torch.equal(ex, x[[1, 2, 0, 1, 0, 2]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n,k,active", [(7, 3, 7), (10, 2, 4), (5, 5, 100), (6, 1, 0)])
def test_v1_matches_golden(dtype, n, k, active):
    x = feats(n, 12, dtype)
    expert_idx = ids(n, k, 6)
    row_idx = torch.arange(n * k, dtype=torch.int32).view(k, n).t()   # non-contiguous
    got = na.npu_moe_init_routing(x, row_idx, expert_idx, active)
    want = golden_v1(x, row_idx, expert_idx, active)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_v1_bad_inputs():
    x = feats(4, 8)
    e = ids(4, 2, 5)
    r = torch.arange(8, dtype=torch.int32).view(2, 4).t()
    with pytest.raises(TypeError, match="npu_moe_init_routing: expected expert_idx dtype in"):
        na.npu_moe_init_routing(x, r, e.long(), 4)
    with pytest.raises(RuntimeError, match="expected row_idx the shape of expert_idx"):
        na.npu_moe_init_routing(x, r[:, :1], e, 4)
    with pytest.raises(RuntimeError, match="expected expert_idx x.size"):
        na.npu_moe_init_routing(x[:3], r, e, 4)
    with pytest.raises(ValueError, match="expected active_num >= 0"):
        na.npu_moe_init_routing(x, r, e, -1)


# -- compute_expert_tokens ----------------------------------------------------------------------

def test_compute_expert_tokens_golden():
    sorted_experts = torch.tensor([3, 3, 4, 5, 6, 7], dtype=torch.int32)
    assert na.npu_moe_compute_expert_tokens(sorted_experts, 5).tolist() == [0, 0, 0, 2, 3]
    gen = torch.Generator().manual_seed(0)
    s = torch.sort(torch.randint(0, 32, (301,), generator=gen, dtype=torch.int32)).values
    got = na.npu_moe_compute_expert_tokens(s, 31)
    want = [sum(1 for v in s.tolist() if v <= e) for e in range(31)]
    assert got.dtype == torch.int32 and got.tolist() == want
    with pytest.raises(ValueError, match="npu_moe_compute_expert_tokens: expected num_expert > 0"):
        na.npu_moe_compute_expert_tokens(s, 0)


# -- v2 --------------------------------------------------------------------------------------

def golden_v2(x, expert_idx, *, expert_num, start=None, end=None, active_num=-1, drop_pad_mode=0,
              capacity=-1, tokens_type=1, row_idx_type=0, quant_mode=-1, scale=None,
              offset=None):
    n, k = expert_idx.shape
    start = 0 if start is None else start
    end = expert_num if end is None else end
    flat = expert_idx.reshape(-1).tolist()
    keys = [2 ** 31 - 1 if v < start else v for v in flat]
    order = stable_order(keys)
    sk = [keys[i] for i in order]
    valid = sum(1 for v in flat if start <= v < end)
    counts = [sum(1 for v in flat if v == e) for e in range(start, end)]
    if tokens_type == 1:
        tokens = counts
    elif tokens_type == 0:
        tokens = [sum(counts[:i + 1]) for i in range(len(counts))]
    else:
        pairs = [[start + i, c] for i, c in enumerate(counts) if c > 0]
        tokens = pairs + [[0, 0]] * (expert_num - len(pairs))
    h = x.shape[1]

    def quant(row, expert):
        if quant_mode == 0:
            v = row.to(torch.float16) * scale.to(torch.float16)[0]
            v = v + (offset.to(torch.float16)[0] if offset is not None else 0)
            return torch.round(v.double()).clamp(-128, 127).to(torch.int8), None
        v = row.double()
        if scale is not None:
            v = v * scale[0 if scale.shape[0] == 1 else expert - start].double()
        s = v.abs().max() / 127
        return torch.round(v / s).clamp(-128, 127).to(torch.int8), s

    if drop_pad_mode == 0:
        rows = n * k if active_num <= 0 else min(active_num, n * k)
        if row_idx_type == 1:
            eri = list(order)
        else:
            eri = [-1] * (n * k)
            for i in range(valid):
                eri[order[i]] = i
        out_dtype = x.dtype if quant_mode == -1 else torch.int8
        ex = torch.zeros(rows, h, dtype=out_dtype)
        es = torch.zeros(rows, dtype=torch.float64)
        for i in range(min(rows, valid)):
            src = order[i] // k
            if quant_mode == -1:
                ex[i] = x[src]
                if scale is not None:
                    es[i] = scale[src]
            else:
                ex[i], s = quant(x[src], sk[i])
                if s is not None:
                    es[i] = s
        return ex, eri, tokens, es
    slots = expert_num * capacity
    eri = [-1] * (n * k)
    out_dtype = x.dtype if quant_mode == -1 else torch.int8
    ex = torch.zeros(slots, h, dtype=out_dtype)
    es = torch.zeros(slots, dtype=torch.float64)
    seen = {}
    for i in range(valid):
        e = sk[i]
        r = seen.get(e, 0)
        seen[e] = r + 1
        if r >= capacity:
            continue
        slot = e * capacity + r
        eri[order[i]] = slot
        src = order[i] // k
        if quant_mode == -1:
            ex[slot] = x[src]
            if scale is not None:
                es[slot] = scale[src]
        else:
            ex[slot], s = quant(x[src], e)
            if s is not None:
                es[slot] = s
    return ex.view(expert_num, capacity, h), eri, tokens, es


def _compare(got, want, quant_mode):
    ex, eri, tok, es = got
    wex, weri, wtok, wes = want
    assert eri.dtype == torch.int32 and eri.tolist() == weri
    assert tok.dtype == torch.int64 and tok.tolist() == wtok
    assert ex.shape == wex.shape and ex.dtype == wex.dtype
    if quant_mode == -1:
        assert torch.equal(ex, wex)
    else:
        # The float32 kernel and the float64 golden may sit on either side of a .5 tie.
        assert (ex.int() - wex.int()).abs().max() <= 1
        assert (ex.int() != wex.int()).float().mean() < 0.02
    if quant_mode != 0:
        assert es.dtype == torch.float32
        torch.testing.assert_close(es.double(), wes, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens_type", [0, 1, 2])
@pytest.mark.parametrize("row_idx_type", [0, 1])
def test_v2_dropless(dtype, tokens_type, row_idx_type):
    x = feats(9, 16, dtype)
    e = ids(9, 3, 8, seed=4)
    scale = feats(9, 1, torch.float32, seed=7).reshape(-1)
    kw = dict(expert_num=8, active_num=27, drop_pad_mode=0)
    got = na.npu_moe_init_routing_v2(x, e, scale=scale, expert_tokens_num_type=tokens_type,
                                     expert_tokens_num_flag=True, active_expert_range=[2, 6],
                                     row_idx_type=row_idx_type, **kw)
    want = golden_v2(x, e, start=2, end=6, tokens_type=tokens_type, row_idx_type=row_idx_type,
                     scale=scale, **kw)
    _compare(got, want, -1)


@pytest.mark.parametrize("active_num", [-1, 0, 5, 100])
def test_v2_active_num_rows(active_num):
    x = feats(6, 4)
    e = ids(6, 2, 4, seed=2)
    got = na.npu_moe_init_routing_v2(x, e, active_num=active_num, expert_num=4,
                                     expert_tokens_num_type=1, expert_tokens_num_flag=True)
    want = golden_v2(x, e, expert_num=4, active_num=active_num)
    _compare(got, want, -1)


@pytest.mark.parametrize("capacity", [1, 2, 5])
@pytest.mark.parametrize("tokens_type", [0, 1])
def test_v2_drop_pad(capacity, tokens_type):
    x = feats(10, 8)
    e = ids(10, 2, 6, seed=5)
    scale = feats(10, 1, seed=8).reshape(-1)
    got = na.npu_moe_init_routing_v2(x, e, scale=scale, expert_num=6, drop_pad_mode=1,
                                     expert_capacity=capacity, expert_tokens_num_type=tokens_type,
                                     expert_tokens_num_flag=True)
    want = golden_v2(x, e, expert_num=6, drop_pad_mode=1, capacity=capacity,
                     tokens_type=tokens_type, scale=scale)
    _compare(got, want, -1)


@pytest.mark.parametrize("drop_pad_mode", [0, 1])
@pytest.mark.parametrize("scale_rows", [None, 1, "per_expert"])
def test_v2_dynamic_quant(drop_pad_mode, scale_rows):
    x = feats(8, 32, torch.bfloat16)
    e = ids(8, 2, 4, seed=6)
    scale = None
    if scale_rows == 1:
        scale = feats(1, 32, seed=9).abs() + 0.5
    elif scale_rows == "per_expert":
        scale = feats(4, 32, seed=9).abs() + 0.5
    kw = dict(expert_num=4, drop_pad_mode=drop_pad_mode, quant_mode=1, scale=scale)
    if drop_pad_mode:
        kw["capacity"] = 3
    got = na.npu_moe_init_routing_v2(
        x, e, expert_tokens_num_type=1, expert_tokens_num_flag=True,
        expert_capacity=kw.get("capacity", -1),
        **{a: b for a, b in kw.items() if a != "capacity"})
    want = golden_v2(x, e, **kw)
    _compare(got, want, 1)


def test_v2_static_quant():
    x = feats(6, 16, torch.float16) * 20
    e = ids(6, 2, 4, seed=3)
    scale, offset = torch.tensor([3.3]), torch.tensor([0.5])
    got = na.npu_moe_init_routing_v2(x, e, scale=scale, offset=offset, expert_num=4,
                                     quant_mode=0, expert_tokens_num_type=1,
                                     expert_tokens_num_flag=True)
    want = golden_v2(x, e, expert_num=4, quant_mode=0, scale=scale, offset=offset)
    _compare(got, want, 0)
    assert got[0].abs().max() == 127 or got[0].min() == -128      # saturation reached


@pytest.mark.parametrize("drop_pad_mode", [0, 1])
def test_v2_static_quant_expanded_scale_is_1d_as_npu_eager(drop_pad_mode):
    # The NPU's eager op (op-plugin MoeInitRoutingV2KernelNpuOpApi.cpp) allocates one float32
    # per expanded row / capacity slot for static quant; op-plugin's meta says 0-d.  Eager is
    # followed, and the fake kernel (compile) must agree with it.
    from torch._subclasses.fake_tensor import FakeTensorMode

    x = feats(5, 8, torch.bfloat16)
    e = ids(5, 2, 4, seed=2)
    kw = dict(scale=torch.tensor([1.5]), offset=torch.tensor([0.25]), expert_num=4,
              quant_mode=0, active_num=7, drop_pad_mode=drop_pad_mode,
              expert_capacity=3 if drop_pad_mode else -1)
    rows = 4 * 3 if drop_pad_mode else 7
    es = na.npu_moe_init_routing_v2(x, e, **kw)[3]
    assert es.dtype == torch.float32 and es.shape == (rows,)
    with FakeTensorMode() as mode:
        fkw = {a: (mode.from_tensor(b) if isinstance(b, torch.Tensor) else b)
               for a, b in kw.items()}
        fake = torch.ops.npu.npu_moe_init_routing_v2(mode.from_tensor(x), mode.from_tensor(e),
                                                     **fkw)[3]
    assert fake.shape == es.shape and fake.dtype == es.dtype


def test_v2_int8_input_and_shapes_only_from_metadata():
    x = torch.randint(-128, 127, (5, 8), dtype=torch.int8)
    e = ids(5, 2, 3)
    ex, eri, tok, es = na.npu_moe_init_routing_v2(x, e, expert_num=3)
    want = golden_v2(x, e, expert_num=3)
    assert torch.equal(ex, want[0]) and eri.tolist() == want[1]
    assert tok.shape == torch.Size([])       # expert_tokens_num_flag False: op-plugin's meta


def test_v2_bad_inputs():
    x = feats(4, 8)
    e = ids(4, 2, 4)
    f = na.npu_moe_init_routing_v2
    with pytest.raises(ValueError, match="npu_moe_init_routing_v2: expected expert_num in"):
        f(x, e)
    with pytest.raises(ValueError, match="expected drop_pad_mode one of"):
        f(x, e, expert_num=4, drop_pad_mode=2)
    with pytest.raises(ValueError, match="expected expert_capacity > 0"):
        f(x, e, expert_num=4, drop_pad_mode=1)
    with pytest.raises(ValueError, match="expected active_expert_range 0 <= expert_start"):
        f(x, e, expert_num=4, active_expert_range=[3, 2])
    with pytest.raises(ValueError, match="expected drop_pad_mode 0 when quant_mode is 9"):
        f(x, e, expert_num=4, quant_mode=9, drop_pad_mode=1, expert_capacity=2)
    with pytest.raises(ValueError, match="expected x_dtype None when quant_mode is 1"):
        f(x, e, expert_num=4, quant_mode=1, x_dtype=290)
    with pytest.raises(ValueError, match="expected x_dtype torch_npu.hifloat8 or .* for a uint8"):
        f(x.to(torch.uint8), e, expert_num=4)
    with pytest.raises(TypeError, match="expected x dtype in .*float32.*bfloat16"):
        f(x.half(), e, expert_num=4, quant_mode=13)
    with pytest.raises(RuntimeError, match="expected x an even hidden size when quant_mode is 13"):
        f(feats(4, 7), e, expert_num=4, quant_mode=13)
    with pytest.raises(RuntimeError, match="expected scale shape \\(1, 8\\) when quant_mode is 13"):
        f(x, e, expert_num=4, quant_mode=13, scale=torch.ones(4, 8))
    with pytest.raises(ValueError, match="expected scale a \\(1,\\) tensor when quant_mode is 7"):
        f(x, e, expert_num=4, quant_mode=7)
    with pytest.raises(ValueError, match="expected quant_mode one of"):
        f(x, e, expert_num=4, quant_mode=4)
    with pytest.raises(ValueError, match="expected quant_mode -1 for an int8 x"):
        f(x.to(torch.int8), e, expert_num=4, quant_mode=1)
    with pytest.raises(RuntimeError, match="expected scale shape \\(1, H\\)"):
        f(x, e, expert_num=4, quant_mode=1, scale=torch.ones(3, 8))
    with pytest.raises(ValueError, match="expected scale a \\(1,\\) tensor"):
        f(x, e, expert_num=4, quant_mode=0)
    with pytest.raises(TypeError, match="expected expert_idx dtype in"):
        torch.ops.npu.npu_moe_init_routing_v2(x, e.long(), expert_num=4)
    with pytest.raises(RuntimeError, match="npu_moe_init_routing_v2: expected quant_mode 13 for "
                                           "an int4 x_dtype .*quant_mode=13"):
        f(x, e, expert_num=4, quant_mode=1, x_dtype=285)          # 285: torch_npu.int4


@pytest.mark.parametrize("quant_mode", [-1, 0, 1])
@pytest.mark.parametrize("drop_pad_mode", [0, 1])
def test_v2_empty_x_ignores_scale(quant_mode, drop_pad_mode):
    # op-plugin returns empty outputs and zero counts for 0 rows before scale is looked at
    # (its own test passes a (0,) scale in dynamic quant mode).
    x = feats(0, 8)
    e = torch.zeros(0, 3, dtype=torch.int32)
    out = na.npu_moe_init_routing_v2(
        x, e, scale=torch.ones(0), expert_num=4, quant_mode=quant_mode, active_num=0,
        drop_pad_mode=drop_pad_mode, expert_capacity=2 if drop_pad_mode else -1,
        expert_tokens_num_type=1, expert_tokens_num_flag=True)
    ex, eri, tok, es = out
    assert eri.numel() == 0 and tok.tolist() == [0, 0, 0, 0]
    if drop_pad_mode == 0:
        assert ex.shape == (0, 8) and es.shape == (0,)        # one scale per row, none
    else:
        assert ex.shape == (4, 2, 8) and not ex.float().any()
    assert ex.dtype == (x.dtype if quant_mode == -1 else torch.int8)

"""The mc2_comm ops on one rank (no process group: every collective is the identity), against
float64 goldens written from the doc formulas (seed 004, ops-transformer mc2/*/README.md)."""

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.compat import hccl

HCOM = "not_a_group"


def gen(seed):
    return torch.Generator().manual_seed(seed)


def f(*shape, dtype=torch.float16, seed=0):
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


def i8(*shape, seed=0):
    return torch.randint(-8, 8, shape, generator=gen(seed), dtype=torch.int8)


def d(t):
    return t.to(torch.float64)


def close(out, golden, dtype):
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(d(out), golden, rtol=tol, atol=tol * golden.abs().max().item())


def test_no_group_means_one_rank():
    assert hccl.lookup(HCOM) is None and hccl.group_size(HCOM) == 1


# ---- npu_mm_all_reduce_base ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batched", [False, True])
def test_all_reduce_float(dtype, batched):
    x1 = f(2, 3, 24, dtype=dtype) if batched else f(5, 24, dtype=dtype)
    x2 = f(7, 24, dtype=dtype, seed=1).t()            # transposed (non-contiguous) weight
    bias, x3 = f(7, dtype=dtype, seed=2), f(*x1.shape[:-1], 7, dtype=dtype, seed=3)
    before = x1.clone()
    out = na.npu_mm_all_reduce_base(x1, x2, HCOM, bias=bias, x3=x3)
    assert out.shape == (*x1.shape[:-1], 7)
    close(out, d(x1) @ d(x2) + d(bias) + d(x3), dtype)
    assert torch.equal(x1, before)


@pytest.mark.parametrize("granularity", ["tensor", "channel", "group"])
def test_all_reduce_weight_quant(granularity):
    dtype, k, n = torch.bfloat16, 64, 6
    x1, x2 = f(3, k, dtype=dtype), i8(k, n, seed=1)
    shape = {"tensor": (1,), "channel": (n,), "group": (2, n)}[granularity]
    scale = (torch.rand(shape, generator=gen(2)) * 0.1 + 0.01).to(dtype)
    offset = torch.randn(shape, generator=gen(3)).to(dtype)
    group = 32 if granularity == "group" else 0
    out = torch.ops.npu.npu_mm_all_reduce_base(x1, x2, HCOM, antiquant_scale=scale,
                                               antiquant_offset=offset,
                                               antiquant_group_size=group)
    rows = (lambda p: d(p).repeat_interleave(32, 0)) if group else (lambda p: d(p).reshape(1, -1))
    weight = (d(x2) + rows(offset)) * rows(scale)
    close(out, d(x1) @ weight, dtype)


@pytest.mark.parametrize("case", ["int64", "fp32_pertoken", "bf16_pertoken", "bf16_y_fp16"])
def test_all_reduce_full_quant(case):
    x1, x2, n = i8(2, 3, 32), i8(32, 5, seed=1), 5
    scale = torch.tensor([0.5, 0.25, 0.125, 1.0, 0.0625])     # exact in the int64 word
    bias = torch.arange(-2, 3, dtype=torch.int32)
    pertoken = torch.rand(6, generator=gen(2)) + 0.5
    kw = dict(bias=bias)
    golden_scale = d(scale)
    if case == "int64":
        kw["dequant_scale"] = na.npu_trans_quant_param(scale)
        expect, pt = torch.float16, None
    elif case == "fp32_pertoken":
        kw.update(dequant_scale=scale, pertoken_scale=pertoken)
        expect, pt = torch.float16, pertoken
    else:
        kw.update(dequant_scale=scale.to(torch.bfloat16), pertoken_scale=pertoken)
        expect, pt = torch.bfloat16, pertoken
        if case == "bf16_y_fp16":
            kw["y_dtype"] = 5
            expect = torch.float16
    kw["x3"] = f(2, 3, n, dtype=expect, seed=4)
    out = na.npu_mm_all_reduce_base(x1, x2, HCOM, **kw)
    golden = (d(x1) @ d(x2) + d(bias)) * golden_scale
    if pt is not None:
        golden = golden * d(pt).reshape(2, 3, 1)
    close(out, golden + d(kw["x3"]), expect)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(comm_turn=1), ValueError, "expected comm_turn 0"),
    (dict(bias=f(8)), RuntimeError, "expected bias one of the shapes"),
    (dict(x3=f(4, 6, dtype=torch.bfloat16)), TypeError, "expected x3 dtype"),
    (dict(dequant_scale=torch.rand(6)), ValueError, "expected dequant_scale None"),
    (dict(x1_dtype=1), NotImplementedError, "expected x1_dtype None"),
])
def test_all_reduce_bad_inputs(kwargs, error, match):
    x1 = f(4, 16)
    before = x1.clone()
    with pytest.raises(error, match=f"npu_mm_all_reduce_base: {match}"):
        na.npu_mm_all_reduce_base(x1, f(16, 6), HCOM, **kwargs)
    assert torch.equal(x1, before)


# ---- npu_mm_reduce_scatter_base / npu_all_gather_base_mm ----------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tp_float(dtype):
    x1, x2, bias = f(5, 24, dtype=dtype), f(9, 24, dtype=dtype, seed=1).t(), f(9, dtype=dtype)
    golden = d(x1) @ d(x2) + d(bias)
    close(na.npu_mm_reduce_scatter_base(x1, x2, HCOM, 1, bias=bias), golden, dtype)
    out, gathered = na.npu_all_gather_base_mm(x1, x2, HCOM, 1, bias=bias)
    close(out, golden, dtype)
    assert torch.equal(gathered, x1) and gathered.data_ptr() != x1.data_ptr()
    out, gathered = na.npu_all_gather_base_mm(input=x1, x2=x2, hcom=HCOM, world_size=1,
                                              gather_output=False)
    assert gathered.shape == (0,)


@pytest.mark.parametrize("case", ["fp32_pertoken_bf16", "fp32_fp16", "int64"])
def test_tp_int8(case):
    x1, x2 = i8(6, 32), i8(32, 4, seed=1)
    x2_scale = torch.tensor([[0.5, 0.25, 2.0, 0.125]])
    kw, expect = {}, torch.bfloat16
    golden = d(x1) @ d(x2) * d(x2_scale)
    if case == "fp32_pertoken_bf16":
        x1_scale = torch.rand(6, 1, generator=gen(3)) + 0.5
        kw.update(x1_scale=x1_scale, x2_scale=x2_scale)
        golden = golden * d(x1_scale)
    elif case == "fp32_fp16":
        kw.update(x2_scale=x2_scale, output_dtype=torch.float16)
        expect = torch.float16
    else:
        kw.update(x2_scale=na.npu_trans_quant_param(x2_scale))
        expect = torch.float16
    close(torch.ops.npu.npu_mm_reduce_scatter_base(x1, x2, HCOM, 1, **kw), golden, expect)
    out, gathered = torch.ops.npu.npu_all_gather_base_mm(x1, x2, HCOM, 1, **kw)
    close(out, golden, expect)
    assert torch.equal(gathered, x1)


@pytest.mark.parametrize("op, args, kwargs, error, match", [
    ("npu_mm_reduce_scatter_base", (f(5, 16), f(16, 4), HCOM, 2), {}, ValueError,
     "expected world_size the size of the group named by hcom \\(1, no such group\\)"),
    ("npu_mm_reduce_scatter_base", (i8(4, 16), i8(16, 4), HCOM, 1),
     dict(x2_scale=torch.rand(1, 4), bias=torch.zeros(4, dtype=torch.int32)), ValueError,
     "expected bias None for int8 inputs"),
    ("npu_all_gather_base_mm", (f(4, 16), f(16, 4), HCOM, 1), dict(output_dtype=torch.float16),
     ValueError, "expected output_dtype None for float inputs"),
    ("npu_all_gather_base_mm", (i8(4, 16), i8(16, 4), HCOM, 1),
     dict(x1_scale=torch.rand(4, 1), x2_scale=torch.ones(1, 4, dtype=torch.int64)), TypeError,
     "expected x2_scale float32 with x1_scale"),
    ("npu_all_gather_base_mm", (f(4, 16), f(16, 4), HCOM, 1), dict(comm_mode="x"), ValueError,
     "expected comm_mode None, 'aiv' or 'ai_cpu'"),
])
def test_tp_bad_inputs(op, args, kwargs, error, match):
    with pytest.raises(error, match=f"{op}: {match}"):
        getattr(na, op)(*args, **kwargs)


# ---- npu_alltoallv_gmm / npu_gmm_alltoallv ------------------------------------------------------

def _grouped_golden(x, weights, sizes):
    parts, start = [], 0
    for w, size in zip(weights, sizes):
        parts.append(d(x[start:start + size]) @ d(w))
        start += size
    return torch.cat(parts)


@pytest.mark.parametrize("trans", [False, True])
def test_ep_one_rank(trans):
    counts = [3, 0, 4]                                   # e = 3 experts, one with no rows
    x = f(7, 16, dtype=torch.bfloat16)
    w = f(3, 16, 5, dtype=torch.bfloat16, seed=1)
    given = w.transpose(1, 2).contiguous() if trans else w
    mm_x, mm_w = f(2, 16, dtype=torch.bfloat16, seed=2), f(16, 6, dtype=torch.bfloat16, seed=3)
    golden = _grouped_golden(x, w, counts)
    y, mm_y, perm = na.npu_alltoallv_gmm(x, given, HCOM, 1, counts, counts, mm_x=mm_x,
                                         mm_weight=mm_w.t() if trans else mm_w,
                                         trans_gmm_weight=trans, trans_mm_weight=trans,
                                         permute_out_flag=True)
    close(y, golden, torch.bfloat16)
    close(mm_y, d(mm_x) @ d(mm_w), torch.bfloat16)
    assert torch.equal(perm, x)                         # one rank: the permute is the identity
    y, mm_y = na.npu_gmm_alltoallv(x, given, HCOM, 1, counts, counts, trans_gmm_weight=trans)
    close(y, golden, torch.bfloat16)
    assert mm_y.shape == (0,)


def test_ep_bad_inputs():
    x, w = f(7, 16), f(2, 16, 8)
    with pytest.raises(ValueError, match="npu_alltoallv_gmm: expected recv_counts equal to "
                                         "send_counts on a single rank"):
        na.npu_alltoallv_gmm(x, w, HCOM, 1, [5, 2], [4, 3])
    with pytest.raises(RuntimeError, match="npu_gmm_alltoallv: expected gmm_weight gmm_x's H1"):
        na.npu_gmm_alltoallv(x, f(2, 15, 8), HCOM, 1, [5, 2], [5, 2])
    with pytest.raises(ValueError, match="npu_gmm_alltoallv: expected send_counts non-negative"):
        na.npu_gmm_alltoallv(x, w, HCOM, 1, [8, -1], [8, -1])


def test_no_autograd():
    x1 = f(4, 16, dtype=torch.float32).requires_grad_()
    with pytest.raises(RuntimeError, match="no backward"):
        na.npu_mm_reduce_scatter_base(x1.half(), f(16, 4), HCOM, 1)


# ---- npu_alltoallv_quant_gmm / npu_quant_gmm_alltoallv (per-tensor hifloat8) --------------------

HF8 = 290          # torch_npu.hifloat8


def hf8_values(codes):
    # The element decoding is the quant family's (tested there); the rest of the golden --
    # grouping, scaling, permutation -- is written here.
    from npu_anywhere.ops.quant.hifloat8 import decode_hifloat8
    return d(decode_hifloat8(codes))


@pytest.mark.parametrize("op", ["npu_alltoallv_quant_gmm", "npu_quant_gmm_alltoallv"])
def test_ep_quant_one_rank(op):
    codes = torch.randint(0, 110, (9, 32), generator=gen(0), dtype=torch.uint8)
    weight = torch.randint(0, 110, (3, 32, 5), generator=gen(1), dtype=torch.int8).abs()
    mm_x = torch.randint(0, 110, (2, 32), generator=gen(2), dtype=torch.uint8)
    mm_w = torch.randint(0, 110, (32, 4), generator=gen(3), dtype=torch.uint8)
    xs, ws = torch.tensor([0.5]), torch.tensor([0.75])
    counts = [4, 0, 5]
    quant = dict(gmm_x_quant_mode=1, gmm_weight_quant_mode=1, gmm_x_dtype=HF8,
                 gmm_weight_dtype=HF8, mm_x=mm_x, mm_weight=mm_w, mm_x_scale=xs,
                 mm_weight_scale=ws, mm_x_quant_mode=1, mm_weight_quant_mode=1, mm_x_dtype=HF8,
                 mm_weight_dtype=HF8)
    if op == "npu_alltoallv_quant_gmm":
        quant["permute_out_flag"] = True
    outs = getattr(na, op)(codes, weight, xs, ws, HCOM, 1, counts, counts, torch.bfloat16,
                           **quant)
    golden = _grouped_golden(hf8_values(codes), [hf8_values(w) for w in weight], counts)
    close(outs[0], golden * 0.5 * 0.75, torch.bfloat16)
    close(outs[1], hf8_values(mm_x) @ hf8_values(mm_w) * 0.5 * 0.75, torch.bfloat16)
    if op == "npu_alltoallv_quant_gmm":
        assert torch.equal(outs[2], codes)


def test_ep_quant_bad_inputs():
    codes, weight = torch.zeros(3, 16, dtype=torch.uint8), torch.zeros(1, 16, 4, dtype=torch.uint8)
    one = torch.tensor([1.0])
    with pytest.raises(ValueError, match="npu_quant_gmm_alltoallv: expected gmm_y_dtype "
                                         "torch.float16 or torch.bfloat16"):
        na.npu_quant_gmm_alltoallv(codes, weight, one, one, HCOM, 1, [3], [3], torch.float32,
                                   gmm_x_quant_mode=1, gmm_weight_quant_mode=1,
                                   gmm_x_dtype=HF8, gmm_weight_dtype=HF8)
    with pytest.raises(TypeError, match="npu_alltoallv_quant_gmm: expected gmm_x_scale dtype"):
        na.npu_alltoallv_quant_gmm(codes, weight, one.double(), one, HCOM, 1, [3], [3], 5,
                                   gmm_x_quant_mode=1, gmm_weight_quant_mode=1,
                                   gmm_x_dtype=HF8, gmm_weight_dtype=HF8)


@pytest.mark.parametrize("op, args, allowed, refused", [
    ("npu_mm_all_reduce_base", lambda: (f(2, 16), f(16, 4), HCOM), "A2", "A3"),
    ("npu_all_gather_base_mm", lambda: (f(2, 16), f(16, 4), HCOM, 1), "A3", "950"),
    ("npu_gmm_alltoallv", lambda: (f(3, 16), f(1, 16, 4), HCOM, 1, [3], [3]), "A3", "A2"),
])
def test_strict_products(op, args, allowed, refused):
    from npu_anywhere import targets
    with targets.strict(allowed):
        getattr(na, op)(*args())
    with targets.strict(refused), pytest.raises(RuntimeError, match=op):
        getattr(na, op)(*args())

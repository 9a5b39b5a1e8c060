"""npu_grouped_matmul's A8W4 and A4W4 paths against goldens written here.

Two goldens each: the kernels' rounding steps (ops-transformer ``grouped_matmul_a4w4.h`` and
``grouped_matmul_antiquant_a8w4_msd.h``; op-plugin's ``gmm_a8w4_golden``), compared bit for
bit, and the doc formula in float64 (op-plugin formula 3-3, ops-transformer README), compared
within the error of the kernels' float16 partial sums (bounded from their magnitudes).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na

gmm = na.npu_grouped_matmul
SIZES = [3, 0, 4]
E, M = len(SIZES), sum(SIZES) + 1          # one row past the groups
ROWS = torch.repeat_interleave(torch.arange(E), torch.tensor(SIZES))


def _pack(values: torch.Tensor) -> torch.Tensor:
    """int4 values [..., n] -> int32 [..., n / 8] (the NPU's packing)."""
    flat = values.reshape(-1, values.shape[-1])
    return na.npu_convert_weight_to_int4pack(flat).reshape(*values.shape[:-1], -1)


def _words(scale: torch.Tensor) -> torch.Tensor:
    """float32 scales as uint64 words (float32 bits in the low word), as the doc builds them."""
    return scale.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _scales(*shape) -> torch.Tensor:
    # float16-representable, as op-plugin's golden makes them: the fixpipe's fp19 keeps them.
    return (torch.rand(*shape) * 0.02 + 0.001).half().float()


def _dequant_sum(a, w, s):
    """Kernel steps: per k-group exact int product, float32 * scale, float16, float16 adds."""
    step = w.shape[0] // s.shape[0]
    acc = torch.zeros(a.shape[0], w.shape[1], dtype=torch.float16)
    for g in range(s.shape[0]):
        part = a[:, g * step:(g + 1) * step].long() @ w[g * step:(g + 1) * step].long()
        acc = (acc.float() + (part.float() * s[g]).half().float()).half()
    return acc.float()


def _assert_msd_close(y, formula, x, hi_lo_weight, extra):
    """The float64 formula within A8W4's float16 partial sums: those round values as large as
    ``16 |hi| @ |w s| + |lo| @ |w s|`` (the split cancels them), a 2**-11 relative error each."""
    hi = torch.div(x, 16, rounding_mode="floor").double()
    lo = x.double() - 16 * hi - 8
    magnitude = torch.stack([(16 * hi[r].abs() + lo[r].abs()) @ hi_lo_weight[r].abs()
                             for r in range(formula.shape[0])]) + extra
    err = (y.double() - formula).abs()
    assert (err <= 2 ** -8 * magnitude + 2 ** -7 * formula.abs()).all(), float(err.max())


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group_list_type", [0, 1])
def test_a8w4_symmetric(out_dtype, group_list_type):
    k, n = 512, 16
    x = torch.randint(-128, 128, (M, k), dtype=torch.int8)
    wv = torch.randint(-8, 8, (E, k, n), dtype=torch.int32)
    s = _scales(E, k // 256, n)
    s_full = s.double().repeat_interleave(256, dim=1)
    bias = (8 * (wv.double() * s_full).sum(1)).float()     # the documented offline term
    pts = torch.rand(M)
    # The operator reads group_list as group sizes whatever group_list_type says.
    y, = gmm([x], [_pack(wv)], bias=[bias], scale=[_words(s)], per_token_scale=[pts],
             group_list=torch.tensor(SIZES), split_item=3, group_type=0,
             group_list_type=group_list_type, output_dtype=out_dtype)
    assert y.dtype == out_dtype and y.shape == (M, n)
    assert (y[-1] == 0).all()
    hi = torch.div(x, 16, rounding_mode="floor")
    lo = x.long() - 16 * hi.long() - 8
    steps = torch.zeros(M, n, dtype=torch.float32)
    for r in range(M - 1):
        e = int(ROWS[r])
        d_hi = _dequant_sum(hi[r:r + 1], wv[e], s[e])
        d_lo = _dequant_sum(lo[r:r + 1], wv[e], s[e])
        steps[r] = ((d_lo + d_hi * 16) + bias[e]) * pts[r]
    assert torch.equal(y, steps.to(out_dtype))
    # per_token_scale as (m, 1), the asymmetric form's shape that op-plugin passes here too
    y2, = gmm([x], [_pack(wv)], bias=[bias], scale=[_words(s)], per_token_scale=[pts[:, None]],
              group_list=torch.tensor(SIZES), split_item=3, group_type=0,
              group_list_type=group_list_type, output_dtype=out_dtype)
    assert torch.equal(y2, y)
    ws = [wv[ROWS[r]].double() * s_full[ROWS[r]] for r in range(M - 1)]
    p = pts[:M - 1, None].double()
    formula = torch.stack([x[r].double() @ ws[r] for r in range(M - 1)]) * p
    _assert_msd_close(y[:M - 1].double() / p, formula / p, x[:M - 1], ws,
                      bias[ROWS].double().abs())


def test_a8w4_asymmetric_offset_and_nz_weight():
    k, n = 256, 8
    x = torch.randint(-128, 128, (M, k), dtype=torch.int8)
    wv = torch.randint(-8, 8, (E, k, n), dtype=torch.int32)
    s = _scales(E, 1, n)
    ao = torch.randint(-3, 4, (E, 1, n)).float()
    bias = (8 * (wv.double() * s.double()).sum(1)).float()
    offset = ao * s                                         # antiquant_offset * scale
    pts = torch.rand(M)
    w = na.npu_format_cast(_pack(wv), 29)                   # FRACTAL_NZ: same values
    y, = gmm([x], [w], bias=[bias], scale=[_words(s)], offset=[offset],
             per_token_scale=[pts], group_list=torch.tensor(SIZES), split_item=2,
             group_type=0, group_list_type=1, output_dtype=torch.float16)
    hi = torch.div(x, 16, rounding_mode="floor")
    lo = x.long() - 16 * hi.long() - 8
    steps = torch.zeros(M, n)
    for r in range(M - 1):
        e = int(ROWS[r])
        v = (_dequant_sum(lo[r:r + 1], wv[e], s[e]) + _dequant_sum(hi[r:r + 1], wv[e], s[e]) * 16
             + bias[e])
        steps[r] = (x[r].float().sum() * offset[e, 0] + v) * pts[r]
    assert torch.equal(y, steps.half())
    formula = torch.stack([x[r].double() @ ((wv[ROWS[r]].double() + ao[ROWS[r]].double())
                                            * s[ROWS[r]].double()) for r in range(M - 1)])
    p = pts[:M - 1, None].double()
    ws = [wv[ROWS[r]].double() * s[ROWS[r]].double() for r in range(M - 1)]
    _assert_msd_close(y[:M - 1].double() / p, formula, x[:M - 1], ws,
                      bias[ROWS].double().abs())


@pytest.mark.parametrize("per_group,with_pts,out_dtype", [
    (False, True, torch.float16), (True, True, torch.bfloat16), (True, False, torch.float16)])
def test_a4w4(per_group, with_pts, out_dtype):
    k, n, g = 64, 16, 4
    xv = torch.randint(-8, 8, (M, k), dtype=torch.int32)
    wv = torch.randint(-8, 8, (E, k, n), dtype=torch.int32)
    s = _scales(E, g, n) if per_group else _scales(E, n)
    pts = torch.rand(M) if with_pts else None
    y, = gmm([_pack(xv)], [_pack(wv)], scale=[_words(s)],
             per_token_scale=None if pts is None else [pts],
             group_list=torch.tensor(SIZES).cumsum(0), split_item=3, group_type=0,
             group_list_type=0, output_dtype=out_dtype)
    assert y.dtype == out_dtype and y.shape == (M, n)
    s3 = s if per_group else s[:, None, :]
    steps = torch.zeros(M, n)
    for r in range(M - 1):
        e = int(ROWS[r])
        steps[r] = _dequant_sum(xv[r:r + 1], wv[e], s3[e]) * (1.0 if pts is None else pts[r])
    assert torch.equal(y, steps.to(out_dtype))
    s_full = s3.double().repeat_interleave(k // s3.shape[1], dim=1)
    ws = [wv[ROWS[r]].double() * s_full[ROWS[r]] for r in range(M - 1)]
    formula = torch.stack([xv[r].double() @ ws[r] for r in range(M - 1)])
    # Per-group float16 partial sums round values up to |x| @ |w s| (2**-11 relative each).
    magnitude = torch.stack([xv[r].double().abs() @ ws[r].abs() for r in range(M - 1)])
    y64 = y[:M - 1].double()
    if pts is not None:
        y64 = y64 / pts[:M - 1, None].double()
    assert ((y64 - formula).abs() <= 2 ** -8 * magnitude + 2 ** -7 * formula.abs()).all()


def test_int8_quant_nz_weight_is_the_same_matmul():
    x = torch.randint(-128, 128, (M, 16), dtype=torch.int8)
    w = torch.randint(-128, 128, (E, 16, 8), dtype=torch.int8)
    common = dict(group_list=torch.tensor(SIZES), split_item=3, group_type=0, group_list_type=1,
                  output_dtype=torch.int32)
    y_nd, = gmm([x], [w], **common)
    y_nz, = gmm([x], [na.npu_format_cast(w, 29)], **common)
    assert torch.equal(y_nd, y_nz)


def _a8w4(**over):
    return gmm(**_a8w4_args(**over))


def _a4w4(**over):
    return gmm(**_a4w4_args(**over))


def _a8w4_args(**over):
    k, n = 256, 8
    args = dict(x=[torch.randint(-128, 128, (M, k), dtype=torch.int8)],
                weight=[_pack(torch.randint(-8, 8, (E, k, n), dtype=torch.int32))],
                bias=[torch.zeros(E, n)], scale=[_words(_scales(E, 1, n))],
                per_token_scale=[torch.rand(M)], group_list=torch.tensor(SIZES), split_item=3,
                group_type=0, group_list_type=1, output_dtype=torch.float16)
    args.update(over)
    return args


def _a4w4_args(**over):
    args = dict(x=[_pack(torch.randint(-8, 8, (M, 16), dtype=torch.int32))],
                weight=[_pack(torch.randint(-8, 8, (E, 16, 8), dtype=torch.int32))],
                scale=[_words(_scales(E, 8))], group_list=torch.tensor(SIZES), split_item=3,
                group_type=0, group_list_type=1, output_dtype=torch.bfloat16)
    args.update(over)
    return args


@pytest.mark.parametrize("call,over,error,match", [
    (_a8w4, {"output_dtype": None}, ValueError, "expected output_dtype float16 or bfloat16"),
    (_a8w4, {"bias": None}, ValueError, "expected bias a list of one tensor"),
    (_a8w4, {"per_token_scale": None}, ValueError, "expected per_token_scale a list of one"),
    (_a8w4, {"scale": [torch.zeros(E, 2, 8, dtype=torch.int64)]}, RuntimeError,
     "expected scale shape \\(3, 1, 8\\)"),
    (_a8w4, {"x": [torch.zeros(M, 128, dtype=torch.int8)],
             "weight": [torch.zeros(E, 128, 1, dtype=torch.int32)]}, ValueError,
     "expected weight k a multiple of 256"),
    (_a8w4, {"offset": [torch.zeros(E, 1, 8)], "output_dtype": torch.bfloat16}, ValueError,
     "expected output_dtype float16 for A8W4 with offset"),
    (_a8w4, {"act_type": 1}, ValueError, "expected act_type 0 for A8W4"),
    (_a8w4, {"group_type": -1, "group_list": None, "split_item": 0}, ValueError,
     "expected group_type 0 with split_item 2 or 3 for int4-weight"),
    (_a8w4, {"weight": [torch.zeros(E, 1, 256, dtype=torch.int32).transpose(1, 2)]},
     ValueError, "expected weight an untransposed packed int4 weight"),
    (_a4w4, {"bias": [torch.zeros(E, 8)]}, ValueError, "expected bias None for A4W4"),
    (_a4w4, {"scale": [torch.zeros(E, 3, 8, dtype=torch.int64)]}, ValueError,
     "expected scale a group count G dividing k = 16"),
    (_a4w4, {"scale": [torch.zeros(E, 8)]}, TypeError, "expected scale dtype in"),
    (_a4w4, {"weight": [torch.zeros(E, 16, 8, dtype=torch.int8)]}, TypeError,
     "expected weight dtype in"),
    (_a4w4, {"offset": [torch.zeros(E, 1, 8)]}, ValueError, "expected offset None"),
])
def test_bad_inputs(call, over, error, match):
    with pytest.raises(error, match="npu_grouped_matmul: " + match):
        call(**over)


def test_strict_products():
    asym, a4w4 = _a8w4_args(offset=[torch.zeros(E, 1, 8)]), _a4w4_args()
    with na.strict("A2"), pytest.raises(ValueError, match="\\{k, n\\} = \\{7168, 4096\\}"):
        gmm(**asym)
    with na.strict("A3"):
        y, = gmm(**a4w4)
        assert y.shape == (M, 8)
    with na.strict("310P"), pytest.raises(TypeError, match="expected x dtype in"):
        gmm(**a4w4)


def test_float8_inputs_are_not_emulated():
    x = torch.zeros(M, 32).to(torch.float8_e4m3fn)
    w = torch.zeros(E, 32, 8).to(torch.float8_e4m3fn)
    with pytest.raises(NotImplementedError, match="npu_grouped_matmul: expected x no float8"):
        gmm([x], [w], group_list=torch.tensor(SIZES), split_item=3, group_type=0,
            group_list_type=1)

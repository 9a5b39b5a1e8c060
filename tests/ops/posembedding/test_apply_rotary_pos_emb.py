"""Tests for cann_ops_transformer.apply_rotary_pos_emb (+ _grad) and the in-place
torch_npu.npu_apply_rotary_pos_emb, against goldens written from the docs.

Spec: seed 000 (CANN article, section 3) and seed 004 ("npu_apply_rotary_pos_emb")::

    q_embed = (query * cos) + query_rotate * sin        k_embed likewise
    half:       query_q1 = query[..., : D // 2]; query_q2 = query[..., D // 2 :]
                query_rotate = cat((-query_q2, query_q1), dim=-1)
    quarter:    q1 = [: D//4], q2 = [D//4 : D//2], q3 = [D//2 : D//4*3], q4 = [D//4*3 :]
                query_rotate = cat((-q2, q1, -q4, q3), dim=-1)
    interleave: q1 = query[..., ::2].view(-1, 1); q2 = query[..., 1::2].view(-1, 1)
                query_rotate = cat((-q2, q1), dim=-1).view(query.shape)

Every expected value is computed from those lines in float64, never by the library.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

MODES = ["half", "quarter", "interleave"]
LAYOUTS = ["BSND", "BSH", "SBND", "BNSD", "TND"]
LAYOUTS_4D = ["BSND", "BSH", "SBND", "BNSD"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
LAYOUT_CODE = {"BSND": 1, "BSH": 1, "SBND": 2, "BNSD": 3, "TND": 4}
OP = "apply_rotary_pos_emb: expected"
GRAD = "apply_rotary_pos_emb_grad: expected"
NPU = "npu_apply_rotary_pos_emb: expected"


# -- goldens (literal doc formulas, float64) -------------------------------------------------

def golden_rotate(x: torch.Tensor, mode: str) -> torch.Tensor:
    d = x.shape[-1]
    if mode == "half":
        q1 = x[..., : d // 2]
        q2 = x[..., d // 2:]
        return torch.cat((-q2, q1), dim=-1)
    if mode == "quarter":
        q1 = x[..., : d // 4]
        q2 = x[..., d // 4: d // 2]
        q3 = x[..., d // 2: d // 4 * 3]
        q4 = x[..., d // 4 * 3:]
        return torch.cat((-q2, q1, -q4, q3), dim=-1)
    assert mode == "interleave"
    q1 = x[..., ::2].reshape(-1, 1)      # the doc's .view(-1, 1)
    q2 = x[..., 1::2].reshape(-1, 1)
    return torch.cat((-q2, q1), dim=-1).reshape(x.shape)


def golden_pair(query, key, cos, sin, mode="half"):
    q, k, c, s = (t.double() for t in (query, key, cos, sin))
    return q * c + golden_rotate(q, mode) * s, k * c + golden_rotate(k, mode) * s


def golden_pair_grads(gq, gk, query, key, cos, sin):
    """(grad_query, grad_key, grad_cos, grad_sin) of the fp64 half-mode golden by autograd."""
    xs = [t.detach().double().requires_grad_(True) for t in (query, key, cos, sin)]
    qo, ko = golden_pair(*xs, mode="half")
    return torch.autograd.grad((qo, ko), xs, (gq.double(), gk.double()))


# -- input builders --------------------------------------------------------------------------

def shapes(layout, *, b=3, s=7, nq=5, nk=3, d=12, cos_b1=False):
    cb = 1 if cos_b1 else b
    if layout in ("BSND", "BSH"):
        return (b, s, nq, d), (b, s, nk, d), (cb, s, 1, d)
    if layout == "SBND":
        return (s, b, nq, d), (s, b, nk, d), (s, cb, 1, d)
    if layout == "BNSD":
        return (b, nq, s, d), (b, nk, s, d), (cb, 1, s, d)
    assert layout == "TND"
    t = b * s
    return (t, nq, d), (t, nk, d), (t, 1, d)


def rand(shape, dtype, seed, unit=False):
    g = torch.Generator().manual_seed(seed)
    if unit:
        t = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    else:
        t = torch.randn(shape, generator=g, dtype=torch.float64)
    return t.to(dtype)


def make_inputs(layout, dtype=torch.float32, seed=0, **kw):
    qs, ks, cs = shapes(layout, **kw)
    return (rand(qs, dtype, seed), rand(ks, dtype, seed + 1),
            rand(cs, dtype, seed + 2, unit=True), rand(cs, dtype, seed + 3, unit=True))


def _raises(exc, fn, prefix=OP):
    with pytest.raises(exc) as info:
        fn()
    assert str(info.value).startswith(prefix), str(info.value)
    return info


# ============================================================================================
# apply_rotary_pos_emb (new outputs)
# ============================================================================================

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_forward_matches_doc(mode, layout, dtype):
    q, k, c, s = make_inputs(layout, dtype, seed=1)
    clones = [t.clone() for t in (q, k, c, s)]
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s, layout=layout, rotary_mode=mode)
    assert qo.shape == q.shape and ko.shape == k.shape
    assert qo.dtype == dtype and ko.dtype == dtype
    gq, gk = golden_pair(q, k, c, s, mode)
    assert_close_to_golden(qo, gq, dtype=dtype)
    assert_close_to_golden(ko, gk, dtype=dtype)
    # inputs untouched, outputs are new tensors
    for t, before in zip((q, k, c, s), clones):
        assert torch.equal(t, before)
    assert qo is not q and ko is not k
    assert qo.data_ptr() != q.data_ptr() and ko.data_ptr() != k.data_ptr()


@pytest.mark.parametrize("layout", LAYOUTS_4D)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_forward_cos_batch_broadcast(mode, layout, dtype):
    q, k, c, s = make_inputs(layout, dtype, seed=2, cos_b1=True)
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s, layout, mode)
    gq, gk = golden_pair(q, k, c, s, mode)
    assert_close_to_golden(qo, gq, dtype=dtype)
    assert_close_to_golden(ko, gk, dtype=dtype)


@pytest.mark.parametrize("mode,d", [("half", 2), ("half", 10), ("quarter", 4), ("quarter", 20),
                                    ("interleave", 2), ("interleave", 6), ("half", 128),
                                    ("quarter", 64), ("interleave", 128)])
def test_forward_head_dims(mode, d):
    q, k, c, s = make_inputs("BSND", torch.float32, seed=3, b=1, s=3, nq=2, nk=1, d=d)
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s, "BSND", mode)
    gq, gk = golden_pair(q, k, c, s, mode)
    assert_close_to_golden(qo, gq)
    assert_close_to_golden(ko, gk)


def test_defaults_are_bsnd_half():
    q, k, c, s = make_inputs("BSND", torch.float64, seed=4)
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s)
    gq, gk = golden_pair(q, k, c, s, "half")
    assert_close_to_golden(qo, gq)
    assert_close_to_golden(ko, gk)
    assert not torch.allclose(qo, golden_pair(q, k, c, s, "quarter")[0])


def test_known_values_per_mode():
    x = torch.arange(1.0, 9.0, dtype=torch.float64).reshape(1, 1, 1, 8)
    zero = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    one = torch.ones(1, 1, 1, 8, dtype=torch.float64)
    expect = {
        "half": [-5, -6, -7, -8, 1, 2, 3, 4],
        "quarter": [-3, -4, 1, 2, -7, -8, 5, 6],
        "interleave": [-2, 1, -4, 3, -6, 5, -8, 7],
    }
    for mode, want in expect.items():
        qo, ko = na.apply_rotary_pos_emb(x, x, zero, one, "BSND", mode)
        assert qo.flatten().tolist() == [float(v) for v in want], mode
        assert ko.flatten().tolist() == [float(v) for v in want], mode


def test_all_entry_points_agree():
    q, k, c, s = make_inputs("SBND", torch.float64, seed=5)
    a = na.apply_rotary_pos_emb(q, k, c, s, "SBND", "quarter")
    b = na.ops.apply_rotary_pos_emb(q, k, c, s, "SBND", "quarter")
    d = torch.ops.cann_ops_transformer.apply_rotary_pos_emb(q, k, c, s, "SBND", "quarter")
    gq, gk = golden_pair(q, k, c, s, "quarter")
    for qo, ko in (a, b, d):
        assert_close_to_golden(qo, gq)
        assert_close_to_golden(ko, gk)


def _noncontig(layout, dtype=torch.float32, seed=6):
    """Views: q a permuted view, k a slice of a wider tensor, cos/sin strided slices."""
    qs, ks, cs = shapes(layout)
    q = rand(tuple(reversed(qs)), dtype, seed).permute(*reversed(range(len(qs))))
    k = rand(ks[:-1] + (ks[-1] * 2,), dtype, seed + 1)[..., 3: 3 + ks[-1]]
    c = rand(cs[:-1] + (cs[-1] * 2,), dtype, seed + 2, unit=True)[..., ::2]
    s = rand((2,) + cs, dtype, seed + 3, unit=True)[1]
    return q, k, c, s


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", MODES)
def test_forward_non_contiguous(mode, layout):
    q, k, c, s = _noncontig(layout)
    assert not q.is_contiguous() and not k.is_contiguous() and not c.is_contiguous()
    clones = [t.clone() for t in (q, k, c, s)]
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s, layout, mode)
    gq, gk = golden_pair(q.contiguous(), k.contiguous(), c.contiguous(), s, mode)
    assert_close_to_golden(qo, gq)
    assert_close_to_golden(ko, gk)
    for t, before in zip((q, k, c, s), clones):
        assert torch.equal(t, before)


def _ordered_bits(t):
    bits = t.view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_computed_in_fp32_rounded_once(mode, dtype):
    q, k, c, s = make_inputs("BSND", dtype, seed=7, b=2, s=16, nq=8, nk=4, d=32)
    qo, ko = na.apply_rotary_pos_emb(q, k, c, s, "BSND", mode)
    for out, x in ((qo, q), (ko, k)):
        x32, c32, s32 = x.float(), c.float(), s.float()
        expected = (x32 * c32 + golden_rotate(x32, mode) * s32).to(dtype)
        ulps = (_ordered_bits(out) - _ordered_bits(expected)).abs()
        assert int(ulps.max()) <= 1
        assert float((ulps == 0).double().mean()) >= 0.99


# -- autograd --------------------------------------------------------------------------------

LAYOUT_BCAST = [(lay, b1) for lay in LAYOUTS for b1 in (False, True) if not (lay == "TND" and b1)]


@pytest.mark.parametrize("layout,cos_b1", LAYOUT_BCAST,
                         ids=[f"{l}-{'cosB1' if b else 'cosB'}" for l, b in LAYOUT_BCAST])
def test_gradcheck_half(layout, cos_b1):
    q, k, c, s = make_inputs(layout, torch.float64, seed=8, b=2, s=3, nq=2, nk=1, d=4,
                             cos_b1=cos_b1)
    inputs = tuple(t.requires_grad_(True) for t in (q, k, c, s))
    assert torch.autograd.gradcheck(
        lambda a, b, cc, ss: na.apply_rotary_pos_emb(a, b, cc, ss, layout, "half"), inputs)


@pytest.mark.parametrize("need", ["query", "key", "cos", "sin", "qk", "all"])
def test_autograd_partial_inputs_match_golden(need):
    q, k, c, s = make_inputs("BNSD", torch.float64, seed=9, cos_b1=True)
    names = {"query": 0, "key": 1, "cos": 2, "sin": 3}
    want_idx = {"qk": [0, 1], "all": [0, 1, 2, 3]}.get(need, [names.get(need)])
    ts = [q, k, c, s]
    for i in want_idx:
        ts[i].requires_grad_(True)
    qo, ko = na.apply_rotary_pos_emb(*ts, layout="BNSD")
    gq, gk = rand(qo.shape, torch.float64, 90), rand(ko.shape, torch.float64, 91)
    got = torch.autograd.grad((qo, ko), [ts[i] for i in want_idx], (gq, gk))
    ref = golden_pair_grads(gq, gk, q, k, c, s)
    for g, i in zip(got, want_idx):
        assert g.shape == ts[i].shape
        assert_close_to_golden(g, ref[i])


@pytest.mark.parametrize("mode", ["quarter", "interleave"])
@pytest.mark.parametrize("which", [0, 1, 2, 3])
def test_grad_request_outside_half_raises(mode, which):
    ts = list(make_inputs("BSND", torch.float64, seed=10))
    ts[which].requires_grad_(True)
    _raises(ValueError, lambda: na.apply_rotary_pos_emb(*ts, "BSND", mode))
    # without grad mode the same call is fine
    with torch.no_grad():
        qo, _ = na.apply_rotary_pos_emb(*ts, "BSND", mode)
    assert_close_to_golden(qo, golden_pair(*ts, mode)[0])


def test_grad_request_strict_non_950_raises():
    q, k, c, s = make_inputs("BSND", torch.float32, seed=11, b=2, s=3, nq=2, nk=2, d=128)
    q.requires_grad_(True)
    with na.strict("A2"):
        with pytest.raises(RuntimeError) as info:
            na.apply_rotary_pos_emb(q, k, c, s)
    assert str(info.value).startswith("apply_rotary_pos_emb")
    with na.strict("950"):
        qo, ko = na.apply_rotary_pos_emb(q, k, c, s)
        (g,) = torch.autograd.grad(qo.sum() + ko.sum(), q)
    ref = golden_pair_grads(torch.ones_like(qo), torch.ones_like(ko), q, k, c, s)
    assert_close_to_golden(g, ref[0])


# -- apply_rotary_pos_emb_grad ---------------------------------------------------------------

GRAD_BCAST = [(lay, b1) for lay, b1 in LAYOUT_BCAST if lay != "BSH"]


@pytest.mark.parametrize("with_qk", [True, False], ids=["with_qk", "no_qk"])
@pytest.mark.parametrize("layout,cos_b1", GRAD_BCAST,
                         ids=[f"{l}-{'cosB1' if b else 'cosB'}" for l, b in GRAD_BCAST])
def test_grad_op_matches_autograd_golden(layout, cos_b1, with_qk):
    q, k, c, s = make_inputs(layout, torch.float64, seed=12, cos_b1=cos_b1)
    gq, gk = rand(q.shape, torch.float64, 120), rand(k.shape, torch.float64, 121)
    kw = {"query": q, "key": k} if with_qk else {}
    dq, dk, dc, ds = na.apply_rotary_pos_emb_grad(gq, gk, c, s, rotary_mode="half",
                                                  layout=LAYOUT_CODE[layout], **kw)
    ref = golden_pair_grads(gq, gk, q, k, c, s)
    assert_close_to_golden(dq, ref[0])
    assert_close_to_golden(dk, ref[1])
    if with_qk:
        assert dc.shape == c.shape and ds.shape == s.shape
        assert_close_to_golden(dc, ref[2])
        assert_close_to_golden(ds, ref[3])
    else:
        assert dc is None and ds is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_grad_op_dtypes(dtype):
    q, k, c, s = make_inputs("BSND", dtype, seed=13, cos_b1=True)
    gq, gk = rand(q.shape, dtype, 130), rand(k.shape, dtype, 131)
    out = torch.ops.cann_ops_transformer.apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k)
    ref = golden_pair_grads(gq, gk, q, k, c, s)
    for got, want in zip(out, ref):
        assert got.dtype == dtype
        assert_close_to_golden(got, want, dtype=dtype)


def test_grad_op_defaults_none():
    q, k, c, s = make_inputs("BSND", torch.float64, seed=14)
    gq, gk = rand(q.shape, torch.float64, 140), rand(k.shape, torch.float64, 141)
    out = na.apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k, rotary_mode=None,
                                       layout=None)
    ref = golden_pair_grads(gq, gk, q, k, c, s)
    for got, want in zip(out, ref):
        assert_close_to_golden(got, want)


@pytest.mark.parametrize("given", ["query", "key"])
def test_grad_op_only_one_of_query_key(given):
    q, k, c, s = make_inputs("BSND", torch.float64, seed=15)
    kw = {given: q if given == "query" else k}
    _raises(ValueError, lambda: na.apply_rotary_pos_emb_grad(q, k, c, s, **kw), prefix=GRAD)


@pytest.mark.parametrize("mode", ["quarter", "interleave"])
def test_grad_op_non_half_mode(mode):
    q, k, c, s = make_inputs("BSND", torch.float64, seed=16)
    _raises(ValueError, lambda: na.apply_rotary_pos_emb_grad(q, k, c, s, rotary_mode=mode),
            prefix=GRAD)


@pytest.mark.parametrize("layout", [0, 5, "BSND"])
def test_grad_op_bad_layout_code(layout):
    q, k, c, s = make_inputs("BSND", torch.float64, seed=17)
    with pytest.raises((ValueError, RuntimeError)):
        na.apply_rotary_pos_emb_grad(q, k, c, s, layout=layout)


def test_grad_op_query_shape_mismatch():
    q, k, c, s = make_inputs("BSND", torch.float64, seed=18)
    with pytest.raises(RuntimeError) as info:
        na.apply_rotary_pos_emb_grad(q, k, c, s, query=q[..., :2, :], key=k)
    assert str(info.value).startswith(GRAD)


def test_grad_op_strict_only_950():
    q, k, c, s = make_inputs("BSND", torch.float32, seed=19, d=128)
    with na.strict("A2"):
        _raises(RuntimeError, lambda: na.apply_rotary_pos_emb_grad(q, k, c, s), prefix=GRAD)
    with na.strict("950"):
        dq, dk, dc, ds = na.apply_rotary_pos_emb_grad(q, k, c, s)
    assert dc is None and ds is None
    assert_close_to_golden(dq, golden_pair_grads(q, k, q, k, c, s)[0])


# -- errors ----------------------------------------------------------------------------------

def _bad_call(case):
    q, k, c, s = make_inputs("BSND", torch.float32, seed=20, b=2, s=3, nq=4, nk=2, d=8)
    layout, mode = "BSND", "half"
    if case == "empty":
        q, k = q[:, :0], k[:, :0]
        c, s = c[:, :0], s[:, :0]
    elif case == "empty-d":
        q, k, c, s = (t[..., :0] for t in (q, k, c, s))
    elif case == "layout":
        layout = "XYZ"
    elif case == "mode":
        mode = "third"
    elif case == "odd-d":
        q, k, c, s = (t[..., :7] for t in (q, k, c, s))
    elif case == "quarter-d6":
        q, k, c, s = (t[..., :6] for t in (q, k, c, s))
        mode = "quarter"
    elif case == "mixed-dtype-key":
        k = k.half()
    elif case == "mixed-dtype-cos":
        c = c.double()
    elif case == "int-dtype":
        q, k, c, s = (t.to(torch.int32) for t in (q, k, c, s))
    elif case == "cos-n":
        c, s = c.expand(2, 3, 2, 8), s.expand(2, 3, 2, 8)
    elif case == "qk-b":
        k = k[:1]
    elif case == "qk-s":
        k = k[:, :2]
    elif case == "qk-d":
        k = k[..., :4]
    elif case == "tnd-t":
        q, k = q.flatten(0, 1), k.flatten(0, 1)[:5]
        c, s = c.flatten(0, 1), s.flatten(0, 1)
        layout = "TND"
    elif case == "cos-sin-shape":
        s = s[:1]
    elif case == "cos-s":
        c, s = c[:, :2], s[:, :2]
    elif case == "cos-b":
        c, s = torch.cat((c, c)), torch.cat((s, s))
    elif case == "3d-bsnd":
        q, k, c, s = (t[0] for t in (q, k, c, s))
    elif case == "4d-tnd":
        layout = "TND"
    elif case == "cos-d-small":
        c, s = c[..., :4], s[..., :4]
    elif case == "cos-d-large":
        c = torch.cat((c, c), -1)
        s = torch.cat((s, s), -1)
    elif case == "d-too-big":
        q, k = (t[..., :1].expand(*t.shape[:-1], 1026) for t in (q, k))
        c, s = (t[..., :1].expand(*t.shape[:-1], 1026) for t in (c, s))
    else:
        raise AssertionError(case)
    return q, k, c, s, layout, mode


ERRORS = {
    "empty": ValueError,
    "empty-d": ValueError,
    "layout": ValueError,
    "mode": ValueError,
    "odd-d": ValueError,
    "quarter-d6": ValueError,
    "mixed-dtype-key": TypeError,
    "mixed-dtype-cos": TypeError,
    "int-dtype": TypeError,
    "cos-n": RuntimeError,
    "qk-b": RuntimeError,
    "qk-s": RuntimeError,
    "qk-d": RuntimeError,
    "tnd-t": RuntimeError,
    "cos-sin-shape": RuntimeError,
    "cos-s": RuntimeError,
    "cos-b": RuntimeError,
    "3d-bsnd": ValueError,
    "4d-tnd": ValueError,
    "cos-d-small": NotImplementedError,
    "cos-d-large": RuntimeError,
    "d-too-big": ValueError,
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(case):
    q, k, c, s, layout, mode = _bad_call(case)
    _raises(ERRORS[case], lambda: na.apply_rotary_pos_emb(q, k, c, s, layout, mode))


@pytest.mark.parametrize("case", [c for c in ERRORS if not c.startswith("empty")])
def test_errors_npu_inplace_leave_inputs_untouched(case):
    q, k, c, s, layout, mode = _bad_call(case)
    if case == "d-too-big":
        q, k = q.contiguous(), k.contiguous()
    before = [t.clone() for t in (q, k, c, s)]
    _raises(ERRORS[case], lambda: na.npu_apply_rotary_pos_emb(q, k, c, s, layout, mode),
            prefix=NPU)
    for t, b in zip((q, k, c, s), before):
        assert torch.equal(t, b) and t.dtype == b.dtype


# -- strict mode -----------------------------------------------------------------------------

def _d128(layout="BSND", dtype=torch.float32, **kw):
    kw.setdefault("d", 128)
    return make_inputs(layout, dtype, seed=21, b=2, s=3, nq=2, nk=1, **kw)


def test_strict_a2_rejects_sbnd():
    q, k, c, s = _d128("SBND")
    with na.strict("A2"):
        _raises(ValueError, lambda: na.apply_rotary_pos_emb(q, k, c, s, "SBND"))
    na.apply_rotary_pos_emb(q, k, c, s, "SBND")  # default mode accepts it


def test_strict_a2_rejects_bnsd():
    q, k, c, s = _d128("BNSD")
    with na.strict("A2"):
        _raises(ValueError, lambda: na.apply_rotary_pos_emb(q, k, c, s, "BNSD"))


@pytest.mark.parametrize("d", [96, 32, 256])
def test_strict_a2_head_dim(d):
    q, k, c, s = _d128(d=d)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.apply_rotary_pos_emb(q, k, c, s))


def test_strict_a2_cos_batch_broadcast_rejected():
    q, k, c, s = _d128(cos_b1=True)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.apply_rotary_pos_emb(q, k, c, s))


@pytest.mark.parametrize("layout,d", [("BSND", 128), ("BSND", 64), ("TND", 128), ("BSH", 64)])
@pytest.mark.parametrize("product", ["A2", "A3"])
def test_strict_a2_a3_ok(product, layout, d):
    q, k, c, s = _d128(layout, d=d)
    with na.strict(product):
        qo, ko = na.apply_rotary_pos_emb(q, k, c, s, layout)
    gq, gk = golden_pair(q, k, c, s)
    assert_close_to_golden(qo, gq)
    assert_close_to_golden(ko, gk)


def test_strict_a2_rejects_fp64():
    q, k, c, s = _d128(dtype=torch.float64)
    with na.strict("A2"):
        _raises(TypeError, lambda: na.apply_rotary_pos_emb(q, k, c, s))


def test_strict_310p_bf16():
    q, k, c, s = _d128(dtype=torch.bfloat16)
    with na.strict("310P"):
        _raises(TypeError, lambda: na.apply_rotary_pos_emb(q, k, c, s))
        qo, _ = na.apply_rotary_pos_emb(*(t.half() for t in (q, k, c, s)))
    assert qo.dtype == torch.float16


def test_strict_910_unsupported():
    q, k, c, s = _d128()
    with na.strict("910"):
        _raises(RuntimeError, lambda: na.apply_rotary_pos_emb(q, k, c, s))


def test_strict_950_accepts_everything_documented():
    q, k, c, s = make_inputs("SBND", torch.bfloat16, seed=22, d=12, cos_b1=True)
    with na.strict("950"):
        qo, ko = na.apply_rotary_pos_emb(q, k, c, s, "SBND", "quarter")
    gq, gk = golden_pair(q, k, c, s, "quarter")
    assert_close_to_golden(qo, gq, dtype=torch.bfloat16)
    assert_close_to_golden(ko, gk, dtype=torch.bfloat16)


# ============================================================================================
# npu_apply_rotary_pos_emb (in place)
# ============================================================================================

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("layout", ["BSND", "SBND", "BNSD", "TND"])
@pytest.mark.parametrize("mode", MODES)
def test_npu_inplace_matches_doc(mode, layout, dtype):
    q, k, c, s = make_inputs(layout, dtype, seed=30, cos_b1=(layout == "SBND"))
    q0, k0, c0, s0 = (t.clone() for t in (q, k, c, s))
    out = na.npu_apply_rotary_pos_emb(q, k, c, s, layout=layout, rotary_mode=mode)
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0] is q and out[1] is k
    gq, gk = golden_pair(q0, k0, c0, s0, mode)
    assert_close_to_golden(q, gq, dtype=dtype)
    assert_close_to_golden(k, gk, dtype=dtype)
    assert q.dtype == dtype and q.shape == q0.shape
    assert torch.equal(c, c0) and torch.equal(s, s0)


def test_npu_inplace_bsh_accepted_as_bsnd():
    q, k, c, s = make_inputs("BSND", torch.float32, seed=31)
    q0, k0 = q.clone(), k.clone()
    na.npu_apply_rotary_pos_emb(q, k, c, s, "BSH")
    gq, gk = golden_pair(q0, k0, c, s)
    assert_close_to_golden(q, gq)
    assert_close_to_golden(k, gk)


def test_npu_inplace_positional_and_keyword_and_torch_ops():
    base = make_inputs("TND", torch.float64, seed=32)
    want = golden_pair(*base, "interleave")
    calls = [
        lambda q, k, c, s: na.npu_apply_rotary_pos_emb(q, k, c, s, "TND", "interleave"),
        lambda q, k, c, s: na.npu_apply_rotary_pos_emb(q, k, c, s, layout="TND",
                                                       rotary_mode="interleave"),
        lambda q, k, c, s: na.npu_apply_rotary_pos_emb(q, k, c, s, "TND",
                                                       rotary_mode="interleave"),
        lambda q, k, c, s: torch.ops.npu.npu_apply_rotary_pos_emb(q, k, c, s, "TND",
                                                                  "interleave"),
        lambda q, k, c, s: torch.ops.npu.npu_apply_rotary_pos_emb(
            q, k, c, s, layout="TND", rotary_mode="interleave"),
    ]
    for call in calls:
        q, k, c, s = (t.clone() for t in base)
        qo, ko = call(q, k, c, s)
        assert qo is q and ko is k
        assert_close_to_golden(q, want[0])
        assert_close_to_golden(k, want[1])


def test_npu_inplace_default_mode_and_layout():
    q, k, c, s = make_inputs("BSND", torch.float64, seed=33)
    q0, k0 = q.clone(), k.clone()
    na.npu_apply_rotary_pos_emb(q, k, c, s)
    gq, gk = golden_pair(q0, k0, c, s, "half")
    assert_close_to_golden(q, gq)
    assert_close_to_golden(k, gk)


@pytest.mark.parametrize("mode", MODES)
def test_npu_inplace_non_contiguous_views_write_through(mode):
    qs, ks, cs = shapes("BSND")
    q_base = rand(qs[:-1] + (qs[-1] * 2,), torch.float32, 34)
    k_base = rand(tuple(reversed(ks)), torch.float32, 35)
    q = q_base[..., 5: 5 + qs[-1]]                       # slice view
    k = k_base.permute(3, 2, 1, 0)                       # permuted view
    c = rand(cs, torch.float32, 36, unit=True)
    s = rand(cs, torch.float32, 37, unit=True)
    q_base0, k0, q0 = q_base.clone(), k.clone(), q.clone()
    out = na.npu_apply_rotary_pos_emb(q, k, c, s, "BSND", mode)
    assert out[0] is q and out[1] is k
    gq, gk = golden_pair(q0, k0, c, s, mode)
    assert_close_to_golden(q, gq)
    assert_close_to_golden(k, gk)
    # the written view goes through to the base, the rest of the base is untouched
    assert_close_to_golden(q_base[..., 5: 5 + qs[-1]], gq)
    assert torch.equal(q_base[..., :5], q_base0[..., :5])
    assert torch.equal(q_base[..., 5 + qs[-1]:], q_base0[..., 5 + qs[-1]:])


def test_npu_inplace_query_is_key():
    q, _, c, s = make_inputs("BSND", torch.float64, seed=38)
    q0 = q.clone()
    na.npu_apply_rotary_pos_emb(q, q, c, s)
    gq, _ = golden_pair(q0, q0, c, s)
    assert_close_to_golden(q, gq)


@pytest.mark.parametrize("case", ["mode", "shape", "dtype", "layout", "cos-n"])
def test_npu_inplace_failure_leaves_inputs_bit_identical(case):
    q, k, c, s = make_inputs("BSND", torch.float32, seed=39)
    layout, mode = "BSND", "half"
    if case == "mode":
        mode = "bad"
    elif case == "shape":
        k = k[:, :2].contiguous()
    elif case == "dtype":
        s = s.half()
    elif case == "layout":
        layout = "NDSB"
    elif case == "cos-n":
        c = c.expand(3, 7, 2, 12).contiguous()
        s = s.expand(3, 7, 2, 12).contiguous()
    qb, kb = q.clone(), k.clone()
    with pytest.raises((ValueError, TypeError, RuntimeError)) as info:
        na.npu_apply_rotary_pos_emb(q, k, c, s, layout, mode)
    assert str(info.value).startswith(NPU)
    assert torch.equal(q.view(torch.int32), qb.view(torch.int32))
    assert torch.equal(k.view(torch.int32), kb.view(torch.int32))


@pytest.mark.parametrize("which", ["query", "key", "cos", "sin"])
def test_npu_inplace_requires_grad_raises(which):
    ts = dict(zip(["query", "key", "cos", "sin"], make_inputs("BSND", torch.float32, seed=40)))
    before = {n: t.clone() for n, t in ts.items()}
    ts[which].requires_grad_(True)
    with pytest.raises(RuntimeError) as info:
        na.npu_apply_rotary_pos_emb(ts["query"], ts["key"], ts["cos"], ts["sin"])
    msg = str(info.value)
    assert "no backward" in msg and "npu_apply_rotary_pos_emb" in msg
    for n in ts:
        assert torch.equal(ts[n].detach(), before[n])
    # under no_grad the same call runs
    with torch.no_grad():
        q = ts["query"].detach().clone()
        k = ts["key"].detach().clone()
        na.npu_apply_rotary_pos_emb(q, k, ts["cos"].detach(), ts["sin"].detach())
    assert_close_to_golden(q, golden_pair(before["query"], before["key"], before["cos"],
                                          before["sin"])[0])


@pytest.mark.parametrize("layout", ["BSND", "TND"])
def test_npu_inplace_empty_tensors(layout):
    q, k, c, s = make_inputs(layout, torch.float32, seed=41, b=2, s=0, nq=2, nk=1, d=128)
    assert q.numel() == 0
    qo, ko = na.npu_apply_rotary_pos_emb(q, k, c, s, layout)
    assert qo is q and ko is k and q.numel() == 0
    with na.strict("950"):
        na.npu_apply_rotary_pos_emb(q, k, c, s, layout)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_apply_rotary_pos_emb(q, k, c, s, layout),
                prefix=NPU)
    # the CANN op never accepts empty tensors
    _raises(ValueError, lambda: na.apply_rotary_pos_emb(q, k, c, s, layout))


@pytest.mark.parametrize("mode", ["interleave", "quarter"])
def test_npu_inplace_strict_a2_half_only(mode):
    q, k, c, s = _d128()
    q0, k0 = q.clone(), k.clone()
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_apply_rotary_pos_emb(q, k, c, s, "BSND", mode),
                prefix=NPU)
        assert torch.equal(q, q0) and torch.equal(k, k0)
        na.npu_apply_rotary_pos_emb(q, k, c, s, "BSND", "half")
    assert_close_to_golden(q, golden_pair(q0, k0, c, s)[0])
    assert_close_to_golden(k, golden_pair(q0, k0, c, s)[1])


@pytest.mark.parametrize("layout", ["SBND", "BNSD", "BSH"])
def test_npu_inplace_strict_a2_layouts(layout):
    q, k, c, s = _d128(layout)
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_apply_rotary_pos_emb(q, k, c, s, layout),
                prefix=NPU)


def test_npu_inplace_strict_misc():
    q, k, c, s = _d128()
    with na.strict("A2"):
        _raises(ValueError, lambda: na.npu_apply_rotary_pos_emb(*_d128(d=96)), prefix=NPU)
        _raises(ValueError, lambda: na.npu_apply_rotary_pos_emb(*_d128(cos_b1=True)),
                prefix=NPU)
    with na.strict("310P"):
        _raises(TypeError, lambda: na.npu_apply_rotary_pos_emb(
            *(t.bfloat16() for t in (q, k, c, s))), prefix=NPU)
    with na.strict("910"):
        _raises(RuntimeError, lambda: na.npu_apply_rotary_pos_emb(q, k, c, s), prefix=NPU)
    with na.strict("950"):   # Atlas 350: all modes, BNSD, cos B=1
        q2, k2, c2, s2 = make_inputs("BNSD", torch.float32, seed=42, cos_b1=True)
        q20, k20 = q2.clone(), k2.clone()
        na.npu_apply_rotary_pos_emb(q2, k2, c2, s2, "BNSD", "quarter")
    assert_close_to_golden(q2, golden_pair(q20, k20, c2, s2, "quarter")[0])
    assert_close_to_golden(k2, golden_pair(q20, k20, c2, s2, "quarter")[1])

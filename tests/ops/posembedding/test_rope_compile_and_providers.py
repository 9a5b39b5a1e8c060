"""RoPE ops under torch.compile, FakeTensor, and the "compiled" vs "reference" providers.

The goldens here are the doc formulas (seed 004 npu_rotary_mul, seed 000 section 3) in
float64; compiled / fake results are also compared with the eager call.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.kernels import compiled as compiled_kernels
from npu_anywhere.library import REGISTRY
from npu_anywhere.testing.tolerances import assert_close_to_golden


# -- goldens (literal doc formulas, float64) -------------------------------------------------

def rotary_mul_golden(x, r1, r2, mode="half"):
    x, r1, r2 = x.double(), r1.double(), r2.double()
    if mode == "half":
        x1, x2 = torch.chunk(x, 2, -1)
        x_new = torch.cat((-x2, x1), dim=-1)
    else:
        x1, x2 = x[..., ::2], x[..., 1::2]
        x_new = torch.stack((-x2, x1), dim=-1).flatten(-2)
    return r1 * x + r2 * x_new


def _rotate(x, mode):
    d = x.shape[-1]
    if mode == "half":
        return torch.cat((-x[..., d // 2:], x[..., : d // 2]), dim=-1)
    if mode == "quarter":
        q1, q2 = x[..., : d // 4], x[..., d // 4: d // 2]
        q3, q4 = x[..., d // 2: d // 4 * 3], x[..., d // 4 * 3:]
        return torch.cat((-q2, q1, -q4, q3), dim=-1)
    q1 = x[..., ::2].reshape(-1, 1)
    q2 = x[..., 1::2].reshape(-1, 1)
    return torch.cat((-q2, q1), dim=-1).reshape(x.shape)


def pair_golden(q, k, c, s, mode="half"):
    q, k, c, s = (t.double() for t in (q, k, c, s))
    return q * c + _rotate(q, mode) * s, k * c + _rotate(k, mode) * s


def rand(shape, dtype=torch.float32, seed=0, unit=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1 if unit
         else torch.randn(shape, generator=g, dtype=torch.float64))
    return t.to(dtype)


def rope_inputs(q_shape, k_shape, c_shape, dtype=torch.float32, seed=0):
    return (rand(q_shape, dtype, seed), rand(k_shape, dtype, seed + 1),
            rand(c_shape, dtype, seed + 2, True), rand(c_shape, dtype, seed + 3, True))


def _compile(fn, backend):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=True)


# ============================================================================================
# torch.compile(fullgraph=True)
# ============================================================================================

@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_compile_npu_rotary_mul(mode):
    x = rand((2, 3, 5, 6), seed=1)
    r1, r2 = rand((1, 3, 1, 6), seed=2, unit=True), rand((1, 3, 1, 6), seed=3, unit=True)
    fn = _compile(lambda a, b, c: na.npu_rotary_mul(a, b, c, mode) * 2.0, "eager")
    out = fn(x, r1, r2)
    torch.testing.assert_close(out, na.npu_rotary_mul(x, r1, r2, mode) * 2.0, rtol=0, atol=0)
    assert_close_to_golden(out / 2.0, rotary_mul_golden(x, r1, r2, mode))


def test_compile_npu_rotary_mul_autograd_aot_eager():
    x = rand((2, 3, 4, 6), torch.float64, seed=4).requires_grad_(True)
    r1 = rand((1, 3, 1, 6), torch.float64, seed=5, unit=True).requires_grad_(True)
    r2 = rand((1, 3, 1, 6), torch.float64, seed=6, unit=True).requires_grad_(True)
    fn = _compile(lambda a, b, c: torch.ops.npu.npu_rotary_mul(a, b, c, "interleave"),
                  "aot_eager")
    out = fn(x, r1, r2)
    g = rand(out.shape, torch.float64, seed=7)
    got = torch.autograd.grad(out, (x, r1, r2), g)
    xs = [t.detach().clone().requires_grad_(True) for t in (x, r1, r2)]
    want = torch.autograd.grad(rotary_mul_golden(*xs, "interleave"), xs, g)
    assert_close_to_golden(out, rotary_mul_golden(x, r1, r2, "interleave"))
    for a, b in zip(got, want):
        assert_close_to_golden(a, b)


def test_compile_npu_rotary_mul_backward():
    x = rand((2, 3, 4, 6), seed=8)
    r1, r2 = rand((1, 3, 1, 6), seed=9, unit=True), rand((2, 3, 1, 6), seed=10, unit=True)
    g = rand(x.shape, seed=11)
    fn = _compile(lambda *a: na.npu_rotary_mul_backward(*a, rotary_mode="half"), "aot_eager")
    got = fn(g, x, r1, r2)
    want = na.npu_rotary_mul_backward(g, x, r1, r2, rotary_mode="half")
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        assert a.shape == b.shape


@pytest.mark.parametrize("mode,layout", [("quarter", "SBND"), ("interleave", "TND")])
def test_compile_apply_rotary_pos_emb(mode, layout):
    if layout == "SBND":
        q, k, c, s = rope_inputs((3, 2, 4, 8), (3, 2, 2, 8), (3, 1, 1, 8), seed=12)
    else:
        q, k, c, s = rope_inputs((6, 4, 8), (6, 2, 8), (6, 1, 8), seed=12)
    fn = _compile(lambda *a: na.apply_rotary_pos_emb(*a, layout=layout, rotary_mode=mode),
                  "aot_eager")
    qo, ko = fn(q, k, c, s)
    eq, ek = na.apply_rotary_pos_emb(q, k, c, s, layout, mode)
    torch.testing.assert_close(qo, eq, rtol=0, atol=0)
    torch.testing.assert_close(ko, ek, rtol=0, atol=0)
    gq, gk = pair_golden(q, k, c, s, mode)
    assert_close_to_golden(qo, gq)
    assert_close_to_golden(ko, gk)


def test_compile_apply_rotary_pos_emb_grad():
    q, k, c, s = rope_inputs((2, 3, 4, 8), (2, 3, 2, 8), (1, 3, 1, 8), seed=13)
    gq, gk = rand(q.shape, seed=14), rand(k.shape, seed=15)
    fn = _compile(lambda gq, gk, c, s, q, k: torch.ops.cann_ops_transformer
                  .apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k, layout=1),
                  "aot_eager")
    got = fn(gq, gk, c, s, q, k)
    want = na.apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k, layout=1)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_npu_apply_rotary_pos_emb_in_place(backend):
    q, k, c, s = rope_inputs((2, 3, 4, 8), (2, 3, 2, 8), (2, 3, 1, 8), seed=16)
    q0, k0, c0, s0 = (t.clone() for t in (q, k, c, s))

    def f(q, k, c, s):
        qo, ko = na.npu_apply_rotary_pos_emb(q, k, c, s, "BSND", "half")
        return qo + 0, ko + 0

    fn = _compile(f, backend)
    qo, ko = fn(q, k, c, s)
    gq, gk = pair_golden(q0, k0, c0, s0)
    # the inputs themselves were updated under compile
    assert_close_to_golden(q, gq)
    assert_close_to_golden(k, gk)
    assert torch.equal(qo, q) and torch.equal(ko, k)
    assert torch.equal(c, c0) and torch.equal(s, s0)


def test_compile_npu_apply_rotary_pos_emb_returned_aliases():
    q, k, c, s = rope_inputs((6, 4, 8), (6, 2, 8), (6, 1, 8), seed=17)
    q0, k0 = q.clone(), k.clone()
    fn = _compile(lambda *a: torch.ops.npu.npu_apply_rotary_pos_emb(*a, "TND", "quarter"),
                  "aot_eager")
    qo, ko = fn(q, k, c, s)
    gq, gk = pair_golden(q0, k0, c, s, "quarter")
    assert_close_to_golden(q, gq)
    assert_close_to_golden(k, gk)
    assert torch.equal(qo, q) and torch.equal(ko, k)


def test_compile_strict_mode_errors_match_eager():
    x = rand((2, 3, 1, 896), seed=18)
    r1, r2 = rand((1, 3, 1, 896), seed=19, unit=True), rand((1, 3, 1, 896), seed=20, unit=True)
    fn = _compile(lambda a, b, c: na.npu_rotary_mul(a, b, c), "eager")
    with na.strict("A2"):
        with pytest.raises(ValueError) as eager:
            na.npu_rotary_mul(x, r1, r2)
        with pytest.raises(Exception) as comp:
            fn(x, r1, r2)
    # dynamo may wrap the error; the original message must be in the chain
    chain, e = [], comp.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(x, ValueError) and str(x) == str(eager.value) for x in chain), chain


@pytest.mark.slow
def test_compile_npu_rotary_mul_inductor():
    x = rand((2, 3, 5, 8), seed=21)
    r1, r2 = rand((1, 3, 1, 8), seed=22, unit=True), rand((1, 3, 1, 8), seed=23, unit=True)
    torch._dynamo.reset()
    fn = torch.compile(lambda a, b, c: na.npu_rotary_mul(a, b, c, "half") + 1.0,
                       fullgraph=True)
    out = fn(x, r1, r2)
    assert_close_to_golden(out, rotary_mul_golden(x, r1, r2, "half") + 1.0)
    torch.testing.assert_close(out, na.npu_rotary_mul(x, r1, r2, "half") + 1.0)


# ============================================================================================
# "compiled" provider vs "reference" provider
# ============================================================================================

def _compiled_provider(op_name):
    fast = {p.name: p for p in REGISTRY[op_name].providers._fast}
    return fast["compiled"].fn.__self__


def _ordered_bits(t):
    bits = t.view(torch.int16).to(torch.int32)
    mag = bits & 0x7FFF
    return torch.where(bits < 0, -mag, mag)


def _assert_provider_parity(fast, ref, dtype):
    assert fast.shape == ref.shape and fast.dtype == ref.dtype == dtype
    if dtype in (torch.float16, torch.bfloat16):
        # both round the same fp32 formula once; contraction may move a result by 1 ulp
        ulps = (_ordered_bits(fast) - _ordered_bits(ref)).abs()
        assert int(ulps.max()) <= 1
        assert float((ulps == 0).double().mean()) >= 0.99
    else:
        torch.testing.assert_close(fast, ref, rtol=2e-6, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode,dtype,with_rotate", [("half", torch.float32, False),
                                                    ("interleave", torch.bfloat16, False),
                                                    ("half", torch.float16, True)], ids=str)
def test_compiled_provider_rotary_mul(mode, dtype, with_rotate):
    x = rand((2, 5, 3, 16), dtype, seed=30)
    r1, r2 = rand((1, 5, 1, 16), dtype, 31, True), rand((1, 5, 1, 16), dtype, 32, True)
    rotate = rand((16, 16), dtype, seed=33) if with_rotate else None
    provider = _compiled_provider("npu_rotary_mul")
    with na.use_providers("reference"):
        ref = na.npu_rotary_mul(x, r1, r2, mode, rotate)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = na.npu_rotary_mul(x, r1, r2, mode, rotate)
    assert provider._disabled is None, provider._disabled
    assert (mode, dtype, dtype, "cpu", not with_rotate) in provider._compiled
    _assert_provider_parity(fast, ref, dtype)
    if not with_rotate:
        assert_close_to_golden(fast, rotary_mul_golden(x, r1, r2, mode), dtype=dtype)


@pytest.mark.slow
def test_compiled_provider_rotary_mul_backward():
    g, x = rand((2, 5, 3, 16), seed=34), rand((2, 5, 3, 16), seed=35)
    r1, r2 = rand((1, 5, 1, 16), seed=36, unit=True), rand((1, 5, 1, 16), seed=37, unit=True)
    with na.use_providers("reference"):
        ref = na.npu_rotary_mul_backward(g, x, r1, r2)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = na.npu_rotary_mul_backward(g, x, r1, r2)
    assert _compiled_provider("npu_rotary_mul_backward")._disabled is None
    for f, r in zip(fast, ref):
        _assert_provider_parity(f, r, torch.float32)


_PAIR_SHAPES = {  # layout: (query, key, cos)
    "BSND": ((2, 5, 4, 16), (2, 5, 2, 16), (1, 5, 1, 16)),
    "TND": ((7, 4, 16), (7, 2, 16), (7, 1, 16)),
    "BNSD": ((2, 4, 5, 16), (2, 2, 5, 16), (2, 1, 5, 16)),
    "SBND": ((5, 2, 4, 16), (5, 2, 2, 16), (5, 2, 1, 16)),
}


@pytest.mark.slow
@pytest.mark.parametrize("op,layout,mode,dtype", [
    ("apply_rotary_pos_emb", "BSND", "quarter", torch.float32),
    ("apply_rotary_pos_emb", "TND", "interleave", torch.bfloat16),
    ("apply_rotary_pos_emb", "BNSD", "half", torch.float16),
    ("npu_apply_rotary_pos_emb", "SBND", "half", torch.float16),
], ids=str)
def test_compiled_provider_rope_pair(op, layout, mode, dtype):
    q, k, c, s = rope_inputs(*_PAIR_SHAPES[layout], dtype, seed=40)
    internal = "_npu_apply_rotary_pos_emb_inplace" if op.startswith("npu_") else op
    provider = _compiled_provider(internal)
    fn = getattr(na, op)
    with na.use_providers("reference"):
        rq, rk = fn(q.clone(), k.clone(), c, s, layout, mode)
    qi, ki = q.clone(), k.clone()
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fq, fk = fn(qi, ki, c, s, layout, mode)
    assert provider._disabled is None, provider._disabled
    assert (layout, mode, dtype, "cpu") in provider._compiled
    if op.startswith("npu_"):
        assert fq is qi and fk is ki
    _assert_provider_parity(fq, rq, dtype)
    _assert_provider_parity(fk, rk, dtype)
    gq, gk = pair_golden(q, k, c, s, mode)
    assert_close_to_golden(fq, gq, dtype=dtype)
    assert_close_to_golden(fk, gk, dtype=dtype)


@pytest.mark.slow
def test_compiled_provider_rope_grad():
    q, k, c, s = rope_inputs(*_PAIR_SHAPES["BSND"], torch.float32, seed=45)
    gq, gk = rand(q.shape, seed=46), rand(k.shape, seed=47)
    with na.use_providers("reference"):
        ref = na.apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = na.apply_rotary_pos_emb_grad(gq, gk, c, s, query=q, key=k)
    for f, r in zip(fast, ref):
        _assert_provider_parity(f, r, torch.float32)


def test_compiled_provider_tiering():
    """A specialization runs the reference until it is hot, and is compiled only then."""
    x = rand((2, 3, 4, 8), torch.float64, seed=50)
    r1, r2 = rand((1, 3, 1, 8), torch.float64, 51, True), rand((1, 3, 1, 8), torch.float64, 52,
                                                               True)
    provider = _compiled_provider("npu_rotary_mul")
    key = ("interleave", torch.float64, torch.float64, "cpu", True)
    provider._calls.pop(key, None)
    with compiled_kernels.compiling_after(None):
        assert provider.supports(x, r1, r2, "interleave") is not None    # never
    with compiled_kernels.compiling_after(3):
        for _ in range(3):
            assert provider.supports(x, r1, r2, "interleave") is not None
        assert provider.supports(x, r1, r2, "interleave") is None         # fourth call: hot
    assert key not in provider._compiled                                  # nothing compiled yet


def test_compiled_provider_is_skipped_while_tracing():
    x = rand((2, 3, 4, 8), seed=53)
    r1, r2 = rand((1, 3, 1, 8), seed=54, unit=True), rand((1, 3, 1, 8), seed=55, unit=True)
    provider = _compiled_provider("npu_rotary_mul")
    seen = []

    def traced(a, b, c):
        seen.append(provider.supports(a, b, c))
        return a

    with compiled_kernels.compiling_after(0):
        torch.compile(traced, backend="eager")(x, r1, r2)
    assert seen and "tracing" in seen[0]


# ============================================================================================
# FakeTensor
# ============================================================================================

def _fake_like(mode, *tensors):
    return [mode.from_tensor(t) for t in tensors]


def test_fake_shapes_and_dtypes():
    with FakeTensorMode() as fm:
        x = torch.empty(3, 7, 5, 10, dtype=torch.bfloat16)
        r = torch.empty(1, 7, 1, 10, dtype=torch.bfloat16)
        out = na.npu_rotary_mul(x, r, r, "interleave")
        assert out.shape == x.shape and out.dtype == torch.bfloat16
        dx, dr1, dr2 = na.npu_rotary_mul_backward(x, x, r, r)
        assert (dx.shape, dr1.shape, dr2.shape) == (x.shape, r.shape, r.shape)
        assert dx.dtype == dr1.dtype == dr2.dtype == torch.bfloat16

        q = torch.empty(7, 3, 5, 12, dtype=torch.float16)      # SBND
        k = torch.empty(7, 3, 2, 12, dtype=torch.float16)
        c = torch.empty(7, 1, 1, 12, dtype=torch.float16)
        qo, ko = na.apply_rotary_pos_emb(q, k, c, c, "SBND", "quarter")
        assert qo.shape == q.shape and ko.shape == k.shape
        assert qo.dtype == ko.dtype == torch.float16

        gq, gk, gc, gs = na.apply_rotary_pos_emb_grad(q, k, c, c, query=q, key=k, layout=2)
        assert (gq.shape, gk.shape, gc.shape, gs.shape) == (q.shape, k.shape, c.shape, c.shape)
        assert gc.dtype == torch.float16
        gq, gk, gc, gs = na.apply_rotary_pos_emb_grad(q, k, c, c, layout=2)
        assert gc is None and gs is None and gq.shape == q.shape

        qt = torch.empty(21, 5, 8)                             # TND
        kt = torch.empty(21, 1, 8)
        ct = torch.empty(21, 1, 8)
        a, b = na.npu_apply_rotary_pos_emb(qt, kt, ct, ct, "TND", "interleave")
        assert a is qt and b is kt
        assert a.shape == (21, 5, 8) and a.dtype == torch.float32
    assert fm is not None


def _bad_cases():
    x = rand((2, 3, 4, 8), seed=60)
    r = rand((1, 3, 1, 8), seed=61, unit=True)
    q, k, c, s = rope_inputs((2, 3, 4, 8), (2, 3, 2, 8), (2, 3, 1, 8), seed=62)
    return {
        "rotary_mul-quarter": (lambda x, r: na.npu_rotary_mul(x, r, r, "quarter"), (x, r)),
        "rotary_mul-odd-d": (lambda x, r: na.npu_rotary_mul(x, r, r), (x[..., :7], r[..., :7])),
        "rotary_mul-3d": (lambda x, r: na.npu_rotary_mul(x, r, r), (x[0], r[0])),
        "rotary_mul-dtype": (lambda x, r: na.npu_rotary_mul(x, r, r), (x, r.int())),
        "rotary_mul-bcast": (lambda x, r: na.npu_rotary_mul(x, r, r), (x, r[:, :2])),
        "rotary_mul-rotate": (lambda x, r: na.npu_rotary_mul(x, r, r, "half", x[0, 0]), (x, r)),
        "rotary_mul_backward-shape": (lambda x, r: na.npu_rotary_mul_backward(x[:1], x, r, r),
                                      (x, r)),
        "apply-mode": (lambda *a: na.apply_rotary_pos_emb(*a, "BSND", "third"), (q, k, c, s)),
        "apply-layout": (lambda *a: na.apply_rotary_pos_emb(*a, "XYZ"), (q, k, c, s)),
        "apply-cos-n": (lambda q, k, c, s: na.apply_rotary_pos_emb(
            q, k, c.expand(2, 3, 2, 8), s.expand(2, 3, 2, 8)), (q, k, c, s)),
        "apply-qk-s": (lambda q, k, c, s: na.apply_rotary_pos_emb(q, k[:, :2], c, s),
                       (q, k, c, s)),
        "apply-cos-d-small": (lambda q, k, c, s: na.apply_rotary_pos_emb(
            q, k, c[..., :4], s[..., :4]), (q, k, c, s)),
        "apply-empty": (lambda q, k, c, s: na.apply_rotary_pos_emb(
            q[:, :0], k[:, :0], c[:, :0], s[:, :0]), (q, k, c, s)),
        "apply-dtype": (lambda q, k, c, s: na.apply_rotary_pos_emb(q, k, c, s.double()),
                        (q, k, c, s)),
        "grad-one-of": (lambda q, k, c, s: na.apply_rotary_pos_emb_grad(q, k, c, s, query=q),
                        (q, k, c, s)),
        "grad-quarter": (lambda q, k, c, s: na.apply_rotary_pos_emb_grad(
            q, k, c, s, rotary_mode="quarter"), (q, k, c, s)),
        "npu-mode": (lambda *a: na.npu_apply_rotary_pos_emb(*a, "BSND", "bad"), (q, k, c, s)),
        "npu-shape": (lambda q, k, c, s: na.npu_apply_rotary_pos_emb(q, k[:1], c, s),
                      (q, k, c, s)),
        "npu-3d": (lambda q, k, c, s: na.npu_apply_rotary_pos_emb(q[0], k[0], c[0], s[0]),
                   (q, k, c, s)),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
def test_fake_errors_match_eager(case):
    fn, args = _bad_cases()[case]
    with pytest.raises(Exception) as eager:
        fn(*args)
    with FakeTensorMode() as fm:
        fake_args = _fake_like(fm, *args)
        with pytest.raises(Exception) as fake:
            fn(*fake_args)
    assert type(fake.value) is type(eager.value)
    assert str(fake.value) == str(eager.value)
    assert isinstance(eager.value, (ValueError, TypeError, RuntimeError, NotImplementedError))
    assert ": expected" in str(eager.value)


def test_fake_strict_mode_errors_match_eager():
    q, k, c, s = rope_inputs((2, 3, 4, 96), (2, 3, 2, 96), (2, 3, 1, 96), seed=70)
    with na.strict("A2"):
        with pytest.raises(ValueError) as eager:
            na.npu_apply_rotary_pos_emb(q, k, c, s)
        with FakeTensorMode() as fm:
            fake_args = _fake_like(fm, q, k, c, s)
            with pytest.raises(ValueError) as fake:
                na.npu_apply_rotary_pos_emb(*fake_args)
    assert str(fake.value) == str(eager.value)


@pytest.mark.slow
@pytest.mark.parametrize("section,cache_mode,rotary_mode,dtype,head", [
    ([16, 24, 24], "interleave", "half", torch.bfloat16, 128),
    (None, "default", "interleaved", torch.float32, 96),
], ids=str)
def test_compiled_provider_mrope(section, cache_mode, rotary_mode, dtype, head):
    gen = torch.Generator().manual_seed(60)
    rows = 3 if section else None
    positions = torch.randint(0, 40, (rows, 9) if rows else (9,), generator=gen)
    query = torch.randn(9, 2 * head, generator=gen).to(dtype)
    key = torch.randn(9, head, generator=gen).to(dtype)
    cache = torch.randn(40, 128 if section else 64, generator=gen).to(dtype)
    kwargs = dict(mrope_section=section, rotary_mode=rotary_mode, cache_mode=cache_mode)
    with na.use_providers("reference"):
        ref = na.npu_mrope(positions, query, key, cache, head, **kwargs)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = na.npu_mrope(positions, query, key, cache, head, **kwargs)
    for f, r in zip(fast, ref):
        _assert_provider_parity(f, r, dtype)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"), \
            pytest.raises(IndexError, match="npu_mrope: expected positions values"):
        na.npu_mrope(positions + 40, query, key, cache, head, **kwargs)


@pytest.mark.slow
def test_compiled_provider_interleave_rope():
    x = rand((2, 3, 5, 64), torch.float16, seed=61)
    cos, sin = rand((2, 1, 5, 64), torch.float16, 62, True), rand((2, 1, 5, 64), torch.float16,
                                                                    63, True)
    with na.use_providers("reference"):
        ref = na.npu_interleave_rope(x, cos, sin)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        fast = na.npu_interleave_rope(x, cos, sin)
    _assert_provider_parity(fast, ref, torch.float16)

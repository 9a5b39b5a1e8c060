"""Shared checks, arithmetic and cache writes of the MLA prolog ops (npu_mla_prolog, _v2, _v3,
_v3_functional).

The three versions compute the same four paths (the formulas and their sources are in the
docstring of :func:`npu_anywhere.ops.attention.mla_prolog_v3.npu_mla_prolog_v3`); they differ in
how the quantization scenario is chosen (v3: ``weight_quant_mode`` / ``kv_cache_quant_mode`` /
``query_quant_mode``; v1 and v2: from the dtypes of ``token_x``, ``weight_uq_qr`` and
``kv_cache``), in the cache modes they accept and in what they return.  :class:`Scenario` holds
the choice; :func:`check` validates a call against it (metadata only); :func:`compute` runs the
float32 arithmetic; :func:`plan_writes` turns ``cache_index`` into cache slots (eagerly, raising
before anything is written) and :func:`write_caches` writes the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import checks, targets
from ..cache.paged import nz_last_dim, write_nd, write_nz
from ..kv_rope_cache._kv_writes import interleave_rope, rms_norm_rows
from ..quant import core as qcore

PAGED_MODES = ("PA_BSND", "PA_NZ")
BLK_MODES = ("PA_BLK_BSND", "PA_BLK_NZ")
NZ_MODES = ("PA_NZ", "PA_BLK_NZ")
V3_CACHE_MODES = PAGED_MODES + BLK_MODES + ("BSND", "TND")

_INT8 = qcore.format_of(torch.int8)
BF16 = torch.bfloat16
F32 = torch.float32

# Strict-mode shape rules (seed 004 / op-plugin docs, 约束说明).
_V3_HE = (1024, 2048, 3072, 4096, 5120, 6144, 7168, 7680, 8192)
_HEADS = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Scenario:
    """The quantization scenario: v3's three modes (0 = not quantized)."""
    weight: int = 0      # 0 none, 1 weight_uq_qr int8, 2 int8 full quant (3/4/5: fp8 kinds)
    kv_cache: int = 0    # 0 none, 1 per-tensor, 2 per-channel, 3 per-token-per-group
    query: int = 0       # 0 none, 1 per-token-head int8 query

    @property
    def quant_query(self) -> bool:
        return self.query == 1


def v1v2_scenario(token_x, weight_uq_qr, kv_cache) -> Scenario:
    """v1/v2 pick the scenario from dtypes: int8 token_x is the full quant (v2 only), an int8
    weight_uq_qr the partial quant; an int8 kv_cache quantizes the caches (per-channel in the
    partial quant, per-tensor with an int8 query in the full quant)."""
    if token_x.dtype == torch.int8:
        return Scenario(2, 1, 1) if kv_cache.dtype == torch.int8 else Scenario(2, 0, 0)
    if weight_uq_qr.dtype == torch.int8:
        return Scenario(1, 2, 0) if kv_cache.dtype == torch.int8 else Scenario(1, 0, 0)
    return Scenario(0, 0, 0)


_DOCUMENTED = {(0, 0, 0), (1, 0, 0), (1, 2, 0), (1, 3, 0), (2, 0, 0), (2, 1, 1), (2, 3, 0),
               (3, 0, 0), (3, 1, 1), (3, 3, 0), (4, 0, 0), (4, 1, 1), (4, 3, 0), (5, 0, 0),
               (5, 1, 1), (5, 3, 0)}
_IMPLEMENTED = {(0, 0, 0), (1, 0, 0), (1, 2, 0), (2, 0, 0), (2, 1, 1)}


@dataclass(frozen=True)
class Dims:
    tokens: tuple      # (T,) or (B, S)
    he: int
    hcq: int
    n: int
    d: int
    dr: int
    hckv: int

    @property
    def t(self) -> int:
        out = 1
        for s in self.tokens:
            out *= s
        return out


def dims_of(token_x, weight_dq, weight_uk, rope_sin) -> Dims:
    """The dimensions of a call that passed :func:`check`."""
    n, d, hckv = weight_uk.shape
    return Dims(tuple(token_x.shape[:-1]), token_x.shape[-1], weight_dq.shape[1], n, d,
                rope_sin.shape[-1], hckv)


def _shape(t) -> str:
    return f"shape {tuple(t.shape)}"


def _expect_shape(op, name, t, shape, error=RuntimeError):
    checks.expect(tuple(t.shape) == tuple(shape), op, name, f"the shape {tuple(shape)}",
                  lambda: _shape(t), error)


def _expect_dtype(op, name, t, dtypes, why=""):
    if t.dtype in dtypes:
        return
    names = [str(d).replace("torch.", "") for d in dtypes]
    checks.expect(False, op, name, f"dtype in {names}{why}", str(t.dtype).replace("torch.", ""),
                  TypeError)


def _expect_absent(op, name, t, why):
    checks.expect(t is None, op, name, f"None ({why})", lambda: f"a tensor of {_shape(t)}",
                  ValueError)


def _expect_present(op, name, t, why):
    checks.expect(t is not None, op, name, f"a tensor ({why})", "None", ValueError)


def check_scenario(op, sc: Scenario) -> None:
    key = (sc.weight, sc.kv_cache, sc.query)
    checks.expect_one_of(sc.weight, range(6), op, "weight_quant_mode")
    checks.expect_one_of(sc.kv_cache, range(4), op, "kv_cache_quant_mode")
    checks.expect_one_of(sc.query, range(2), op, "query_quant_mode")
    checks.expect(key in _DOCUMENTED, op, "(weight_quant_mode, kv_cache_quant_mode, "
                  "query_quant_mode)", lambda: f"one of the documented scenarios "
                  f"{sorted(_DOCUMENTED)}", repr(key), ValueError)
    if key not in _IMPLEMENTED:
        what = ("the fp8 / mxfp8 / hifloat8 full quant" if sc.weight >= 3 else
                "the per-token-per-group kv_cache quant")
        checks.expect(False, op, "(weight_quant_mode, kv_cache_quant_mode, query_quant_mode)",
                      f"one of {sorted(_IMPLEMENTED)} ({what} is not implemented by "
                      "npu_anywhere yet)", repr(key), NotImplementedError)


def check(op, version, sc: Scenario, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
          gamma_cq, gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache, cache_index, *,
          dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr,
          quant_scale_ckv, quant_scale_ckr, smooth_scales_cq, actual_seq_len=None,
          cache_mode="PA_BSND", modes=PAGED_MODES, supported=frozenset()) -> Dims:
    """Validate a call (metadata only: shapes, dtypes, modes); returns its dimensions."""
    check_scenario(op, sc)
    checks.expect_one_of(cache_mode, modes, op, "cache_mode")
    checks.expect(token_x.dim() in (2, 3), op, "token_x", "a 2-D [T, He] or 3-D [B, S, He] "
                  "tensor", lambda: _shape(token_x), ValueError)
    tokens = tuple(token_x.shape[:-1])
    he = token_x.shape[-1]
    checks.expect_dim(weight_dq, 2, op, "weight_dq")
    checks.expect_dim(weight_uq_qr, 2, op, "weight_uq_qr")
    checks.expect_dim(weight_uk, 3, op, "weight_uk")
    checks.expect_dim(weight_dkv_kr, 2, op, "weight_dkv_kr")
    checks.expect_dim(gamma_cq, 1, op, "rmsnorm_gamma_cq")
    checks.expect_dim(gamma_ckv, 1, op, "rmsnorm_gamma_ckv")
    n, d, hckv = weight_uk.shape
    hcq = weight_dq.shape[1]
    checks.expect(rope_sin.dim() == token_x.dim(), op, "rope_sin",
                  lambda: f"a {token_x.dim()}-D tensor like token_x", lambda: _shape(rope_sin),
                  ValueError)
    dr = rope_sin.shape[-1]
    dims = Dims(tokens, he, hcq, n, d, dr, hckv)
    _expect_shape(op, "rope_sin", rope_sin, tokens + (dr,))
    _expect_shape(op, "rope_cos", rope_cos, tokens + (dr,))
    checks.expect(dr > 0 and dr % 2 == 0, op, "rope_sin", "an even, non-zero last dim Dr",
                  dr, ValueError)
    _expect_shape(op, "weight_dq", weight_dq, (he, hcq))
    _expect_shape(op, "weight_uq_qr", weight_uq_qr, (hcq, n * (d + dr)))
    _expect_shape(op, "weight_dkv_kr", weight_dkv_kr, (he, hckv + dr))
    _expect_shape(op, "rmsnorm_gamma_cq", gamma_cq, (hcq,))
    _expect_shape(op, "rmsnorm_gamma_ckv", gamma_ckv, (hckv,))
    checks.expect(n > 0 and d > 0 and hckv > 0 and hcq > 0 and he > 0, op, "weight_uk",
                  "non-zero N, D, Hckv (and non-zero He, Hcq)", lambda: _shape(weight_uk),
                  ValueError)
    _check_dtypes(op, version, sc, dims, token_x, weight_dq, weight_uq_qr, weight_uk,
                  weight_dkv_kr, gamma_cq, gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache,
                  dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_uq_qr,
                  dequant_scale_w_dkv_kr, quant_scale_ckv, quant_scale_ckr, smooth_scales_cq)
    _check_caches(op, dims, kv_cache, kr_cache, cache_index, actual_seq_len, cache_mode)
    tensors = {"token_x": token_x, "weight_dq": weight_dq, "weight_uq_qr": weight_uq_qr,
               "weight_uk": weight_uk, "weight_dkv_kr": weight_dkv_kr,
               "rmsnorm_gamma_cq": gamma_cq, "rmsnorm_gamma_ckv": gamma_ckv,
               "rope_sin": rope_sin, "rope_cos": rope_cos, "kv_cache": kv_cache,
               "kr_cache": kr_cache}
    for name, t in (("cache_index", cache_index), ("dequant_scale_x", dequant_scale_x),
                    ("dequant_scale_w_dq", dequant_scale_w_dq),
                    ("dequant_scale_w_uq_qr", dequant_scale_w_uq_qr),
                    ("dequant_scale_w_dkv_kr", dequant_scale_w_dkv_kr),
                    ("quant_scale_ckv", quant_scale_ckv), ("quant_scale_ckr", quant_scale_ckr),
                    ("smooth_scales_cq", smooth_scales_cq), ("actual_seq_len", actual_seq_len)):
        if t is not None:
            tensors[name] = t
    checks.expect_same_device(tensors, op)
    product = targets.expect_supported(op, supported)
    if product is not None:
        _check_strict(op, version, product, dims, kv_cache, cache_mode)
    return dims


def _check_dtypes(op, version, sc, dims, token_x, weight_dq, weight_uq_qr, weight_uk,
                  weight_dkv_kr, gamma_cq, gamma_ckv, rope_sin, rope_cos, kv_cache, kr_cache,
                  dequant_scale_x, dequant_scale_w_dq, dequant_scale_w_uq_qr,
                  dequant_scale_w_dkv_kr, quant_scale_ckv, quant_scale_ckr, smooth_scales_cq):
    full = sc.weight == 2
    partial = sc.weight == 1
    why = f" (weight_quant_mode={sc.weight})" if version == 3 else ""
    x_dt = (torch.int8,) if full else (BF16,)
    _expect_dtype(op, "token_x", token_x, x_dt, why)
    _expect_dtype(op, "weight_dq", weight_dq, x_dt, why)
    _expect_dtype(op, "weight_dkv_kr", weight_dkv_kr, x_dt, why)
    _expect_dtype(op, "weight_uq_qr", weight_uq_qr, (torch.int8,) if sc.weight else (BF16,), why)
    for name, t in (("weight_uk", weight_uk), ("rmsnorm_gamma_cq", gamma_cq),
                    ("rmsnorm_gamma_ckv", gamma_ckv), ("rope_sin", rope_sin),
                    ("rope_cos", rope_cos)):
        _expect_dtype(op, name, t, (BF16,))
    kv_why = f" (kv_cache_quant_mode={sc.kv_cache})" if version == 3 else ""
    _expect_dtype(op, "kv_cache", kv_cache, (torch.int8,) if sc.kv_cache else (BF16,), kv_why)
    _expect_dtype(op, "kr_cache", kr_cache, (torch.int8,) if sc.kv_cache == 2 else (BF16,),
                  kv_why)
    t = dims.t
    nd = dims.n * (dims.d + dims.dr)
    # dequant scales of the int8 matmuls
    needs = {"dequant_scale_x": (dequant_scale_x, (t, 1), full),
             "dequant_scale_w_dq": (dequant_scale_w_dq, (1, dims.hcq), full),
             "dequant_scale_w_uq_qr": (dequant_scale_w_uq_qr, (1, nd), sc.weight > 0),
             "dequant_scale_w_dkv_kr": (dequant_scale_w_dkv_kr, (1, dims.hckv + dims.dr), full)}
    for name, (value, shape, required) in needs.items():
        reason = "the quantized scenario needs it" if required else \
            "it is used only when the matmul it dequantizes is quantized"
        if required:
            _expect_present(op, name, value, reason)
            _expect_dtype(op, name, value, (F32,))
            _expect_shape(op, name, value, shape)
        elif version != 1:
            _expect_absent(op, name, value, reason)
    if smooth_scales_cq is not None:
        checks.expect(sc.weight > 0, op, "smooth_scales_cq", "None (it smooths the dynamic "
                      "quant of c^Q, which only the quantized scenarios have)",
                      lambda: f"a tensor of {_shape(smooth_scales_cq)}", ValueError)
        _expect_dtype(op, "smooth_scales_cq", smooth_scales_cq, (F32,))
        _expect_shape(op, "smooth_scales_cq", smooth_scales_cq, (1, dims.hcq))
    # cache quant scales
    if sc.kv_cache == 0:
        _expect_absent(op, "quant_scale_ckv", quant_scale_ckv, "the kv_cache is not quantized")
        _expect_absent(op, "quant_scale_ckr", quant_scale_ckr, "the kr_cache is not quantized")
        return
    _expect_present(op, "quant_scale_ckv", quant_scale_ckv, "the kv_cache is quantized")
    _expect_dtype(op, "quant_scale_ckv", quant_scale_ckv, (F32,))
    if sc.kv_cache == 2:
        _expect_shape(op, "quant_scale_ckv", quant_scale_ckv, (1, dims.hckv))
        _expect_present(op, "quant_scale_ckr", quant_scale_ckr, "the kr_cache is quantized")
        _expect_dtype(op, "quant_scale_ckr", quant_scale_ckr, (F32,))
        _expect_shape(op, "quant_scale_ckr", quant_scale_ckr, (1, dims.dr))
    else:
        # per-tensor: v3 documents [1]; v2 documents (1, Hckv), of which op-plugin's golden
        # (test_mla_prolog_v2.py: quant_scale_ckv[:, :1]) uses the first value
        ok = quant_scale_ckv.numel() == 1 or tuple(quant_scale_ckv.shape) == (1, dims.hckv)
        checks.expect(ok, op, "quant_scale_ckv", lambda: "a single value or the shape (1, "
                      f"{dims.hckv}) (per-tensor kv_cache quant: its first value is the scale)",
                      lambda: _shape(quant_scale_ckv), RuntimeError)
        _expect_absent(op, "quant_scale_ckr", quant_scale_ckr, "the kr_cache is not quantized "
                       "in the per-tensor scenario")


def _check_caches(op, dims, kv_cache, kr_cache, cache_index, actual_seq_len, cache_mode):
    tokens = dims.tokens
    if cache_mode in NZ_MODES:      # its memory, not its shape, holds the NZ rows
        for name, cache in (("kv_cache", kv_cache), ("kr_cache", kr_cache)):
            checks.expect(cache.is_contiguous(), op, name, lambda: "a contiguous tensor in "
                          f"cache_mode '{cache_mode}' (its memory holds the NZ rows)",
                          lambda c=cache: f"strides {c.stride()}", ValueError)
    if cache_mode in ("BSND", "TND"):
        want = 3 if cache_mode == "BSND" else 2
        checks.expect(len(tokens) + 1 == want, op, "token_x",
                      lambda: f"a {want}-D tensor (cache_mode '{cache_mode}')",
                      lambda: f"a {len(tokens) + 1}-D tensor", ValueError)
        lead = tokens
    else:
        lead = None
    for name, cache, last in (("kv_cache", kv_cache, dims.hckv), ("kr_cache", kr_cache, dims.dr)):
        if lead is None:
            checks.expect(cache.dim() == 4, op, name, "a 4-D [BlockNum, BlockSize, Nkv, D] "
                          "tensor", lambda c=cache: _shape(c), ValueError)
        else:
            checks.expect(cache.dim() == len(lead) + 2 and tuple(cache.shape[:len(lead)]) == lead,
                          op, name, lambda: f"the shape {lead} + (Nkv, D) (cache_mode "
                          f"'{cache_mode}')", lambda c=cache: _shape(c), RuntimeError)
        checks.expect(cache.shape[-1] == last, op, name, lambda l=last: f"a last dim of {l}",
                      lambda c=cache: _shape(c), RuntimeError)
    checks.expect(kv_cache.shape[:-1] == kr_cache.shape[:-1], op, "kr_cache",
                  lambda: f"the leading dims of kv_cache {tuple(kv_cache.shape[:-1])}",
                  lambda: _shape(kr_cache), RuntimeError)
    checks.expect(kv_cache.shape[-2] > 0, op, "kv_cache", "Nkv > 0", lambda: _shape(kv_cache),
                  ValueError)
    if cache_mode in NZ_MODES:
        for name, cache in (("kv_cache", kv_cache), ("kr_cache", kr_cache)):
            ld = nz_last_dim(cache.dtype)
            checks.expect(cache.shape[-1] % ld == 0, op, name,
                          lambda c=cache, l=ld: f"a last dim that is a multiple of {l} for "
                          f"{str(c.dtype)[6:]} in cache_mode '{cache_mode}' (32-byte NZ rows)",
                          lambda c=cache: _shape(c), RuntimeError)
    if lead is not None:
        return
    _expect_present(op, "cache_index", cache_index, f"cache_mode '{cache_mode}' writes through it")
    _expect_dtype(op, "cache_index", cache_index, (torch.int64,))
    if cache_mode in PAGED_MODES:
        _expect_shape(op, "cache_index", cache_index, tokens)
        _expect_absent(op, "actual_seq_len", actual_seq_len,
                       "only the PA_BLK modes with a 2-D token_x use it")
        return
    bs = kv_cache.shape[1]
    checks.expect(bs > 0, op, "kv_cache", "BlockSize > 0", lambda: _shape(kv_cache), ValueError)
    if len(tokens) == 2:
        pages = -(-tokens[1] // bs)
        _expect_shape(op, "cache_index", cache_index, (tokens[0], pages))
        _expect_absent(op, "actual_seq_len", actual_seq_len,
                       "a 3-D token_x gives every batch S tokens")
    else:
        _expect_present(op, "actual_seq_len", actual_seq_len,
                        f"a 2-D token_x in cache_mode '{cache_mode}' needs the batch bounds")
        _expect_dtype(op, "actual_seq_len", actual_seq_len, (torch.int32,))
        checks.expect_dim(actual_seq_len, 1, op, "actual_seq_len")
        checks.expect_dim(cache_index, 1, op, "cache_index")


def _check_strict(op, version, product, dims, kv_cache, cache_mode):
    he_ok = _V3_HE if version == 3 else (7168,)
    hcq_ok = (1536, 2048) if version == 3 else (1536,)
    d_ok = (128, 192) if version == 3 else (128,)
    why = f" on {product.value}"
    checks.expect(dims.he in he_ok, op, "token_x", f"He in {list(he_ok)}{why}", dims.he,
                  ValueError)
    checks.expect(dims.hcq in hcq_ok, op, "weight_dq", f"Hcq in {list(hcq_ok)}{why}", dims.hcq,
                  ValueError)
    checks.expect(dims.n in _HEADS, op, "weight_uk", f"N in {list(_HEADS)}{why}", dims.n,
                  ValueError)
    checks.expect(dims.d in d_ok, op, "weight_uk", f"D in {list(d_ok)}{why}", dims.d, ValueError)
    checks.expect(dims.hckv == 512, op, "weight_uk", f"Hckv = 512{why}", dims.hckv, ValueError)
    checks.expect(dims.dr == 64, op, "rope_sin", f"Dr = 64{why}", dims.dr, ValueError)
    checks.expect(kv_cache.shape[-2] == 1, op, "kv_cache", f"Nkv = 1{why}", kv_cache.shape[-2],
                  ValueError)
    if cache_mode in PAGED_MODES + BLK_MODES:
        bs = kv_cache.shape[1]
        ok = (bs in (16, 128)) if version != 3 else (16 <= bs <= 1024 and bs % 16 == 0)
        req = "BlockSize in [16, 128]" if version != 3 else \
            "BlockSize a multiple of 16 in [16, 1024]"
        checks.expect(ok, op, "kv_cache", req + why, bs, ValueError)


# -- arithmetic ------------------------------------------------------------------------------

def _mm(a, w, quantized):
    """a @ w in float32.  int8 operands: the exact int32 sums (float64 holds them exactly),
    converted to float32 as the kernel's int32 -> float cast does."""
    if quantized:
        return (a.to(torch.float64) @ w.to(torch.float64)).to(F32)
    return a.to(F32) @ w.to(F32)


def _round_bf16(x):
    return x.to(BF16).to(F32)


def _dynamic_int8(v, smooth=None):
    """Symmetric int8 quant of each row of float32 ``v`` (over its last dim):
    ``scale = max|v * smooth| / 127``, ``q = rint(v * smooth / scale)`` saturated."""
    if smooth is not None:
        v = v * smooth.to(F32)
    scale = v.abs().amax(dim=-1, keepdim=True) / 127.0
    return qcore.cast_to(v / scale, _INT8), scale


def compute(sc: Scenario, dims: Dims, token_x, weight_dq, weight_uq_qr, weight_uk, weight_dkv_kr,
            gamma_cq, gamma_ckv, rope_sin, rope_cos, *, dequant_scale_x, dequant_scale_w_dq,
            dequant_scale_w_uq_qr, dequant_scale_w_dkv_kr, quant_scale_ckv, quant_scale_ckr,
            smooth_scales_cq, eps_cq, eps_ckv, qc_qr_scale=1.0, kc_scale=1.0):
    """(query, query_rope, dequant_scale_q_nope or None, query_norm, dequant_scale_q_norm or
    None, kv rows [T, Hckv], kr rows [T, Dr]) -- the rows already in the caches' dtypes."""
    t, n, d, dr, hckv = dims.t, dims.n, dims.d, dims.dr, dims.hckv
    full = sc.weight == 2
    x = token_x.reshape(t, dims.he)
    cos = rope_cos.reshape(t, dr).to(F32)
    sin = rope_sin.reshape(t, dr).to(F32)
    # path 1/2: c^Q = RmsNorm(x W^DQ) (* qc_qr_scale)
    mm1 = _mm(x, weight_dq, full)
    if full:
        mm1 = mm1 * dequant_scale_x.to(F32) * dequant_scale_w_dq.to(F32)
    else:
        mm1 = _round_bf16(mm1)
    c_q = rms_norm_rows(mm1, gamma_cq, eps_cq) * qc_qr_scale
    if sc.weight == 0:
        c_q = _round_bf16(c_q)
        query_norm, scale_q_norm = c_q.to(BF16), None
        mm2 = _round_bf16(_mm(c_q, weight_uq_qr, False))
    else:
        c_q_int, scale_q_norm = _dynamic_int8(c_q, smooth_scales_cq)
        query_norm = c_q_int
        mm2 = _mm(c_q_int, weight_uq_qr, True) * scale_q_norm * dequant_scale_w_uq_qr.to(F32)
    mm2 = mm2.reshape(t, n, d + dr)
    q_nope = _round_bf16(mm2[..., :d])
    # q^N = q^C W^UK per head: [N, T, D] @ [N, D, Hckv]
    query = _round_bf16(torch.bmm(q_nope.transpose(0, 1), weight_uk.to(F32)).transpose(0, 1))
    q_rope = _round_bf16(interleave_rope(mm2[..., d:], cos.unsqueeze(1), sin.unsqueeze(1)))
    scale_q_nope = None
    if sc.quant_query:
        query, scale_q_nope = _dynamic_int8(query)           # per token and head: [T, N, 1]
        q_rope = q_rope * quant_scale_ckv.to(F32).reshape(-1)[0] / scale_q_nope
    # path 3/4: c^KV = RmsNorm(x W^DKV) (* kc_scale), k^R = ROPE(x W^KR)
    mm4 = _mm(x, weight_dkv_kr, full)
    if full:
        mm4 = mm4 * dequant_scale_x.to(F32) * dequant_scale_w_dkv_kr.to(F32)
    c_kv = rms_norm_rows(mm4[:, :hckv], gamma_ckv, eps_ckv) * kc_scale
    k_rope = interleave_rope(mm4[:, hckv:], cos, sin)
    if sc.kv_cache == 0:
        kv_rows, kr_rows = c_kv.to(BF16), k_rope.to(BF16)
    elif sc.kv_cache == 1:
        kv_rows = qcore.cast_to(c_kv * quant_scale_ckv.to(F32).reshape(-1)[0], _INT8)
        kr_rows = k_rope.to(BF16)
    else:
        kv_rows = qcore.cast_to(c_kv * quant_scale_ckv.to(F32), _INT8)
        kr_rows = qcore.cast_to(k_rope * quant_scale_ckr.to(F32), _INT8)
    query = query.reshape(dims.tokens + (n, hckv))
    if not sc.quant_query:
        query = query.to(BF16)
    q_rope = q_rope.to(BF16).reshape(dims.tokens + (n, dr))
    query_norm = query_norm.reshape(dims.tokens + (dims.hcq,))
    return (query.contiguous(), q_rope.contiguous(), scale_q_nope, query_norm.contiguous(),
            scale_q_norm, kv_rows, kr_rows)


def outputs_meta(sc: Scenario, dims: Dims, token_x, weight_uq_qr):
    """Empty tensors shaped like (query, query_rope, dequant_scale_q_nope, query_norm,
    dequant_scale_q_norm) as v3 returns them with ``query_norm_flag=True``."""
    qdt = torch.int8 if sc.quant_query else BF16
    new = token_x.new_empty
    return (new(dims.tokens + (dims.n, dims.hckv), dtype=qdt),
            new(dims.tokens + (dims.n, dims.dr), dtype=BF16),
            new((dims.t, dims.n, 1), dtype=F32) if sc.quant_query else None,
            new(dims.tokens + (dims.hcq,), dtype=weight_uq_qr.dtype),
            new((dims.t, 1), dtype=F32) if sc.weight else None)


# -- cache writes -----------------------------------------------------------------------------

def _bad_index(op, param, flat, mask, requirement):
    pos = int(mask.nonzero()[0, 0])
    checks.expect(False, op, param, requirement, f"{int(flat[pos])} at flat position {pos}",
                  IndexError)


def plan_writes(op, dims: Dims, kv_cache, cache_index, actual_seq_len, cache_mode):
    """(keep, slots): the tokens written (None: all) and their cache slots (block * BlockSize +
    offset; None for BSND / TND, which write every token in order).  Raises on bad index values
    before anything is written; negative slots (or block ids) skip the token, as the kernel's
    ``ScatterCache`` does (``paTokenIndex < 0``: return); of tokens sharing a slot the last is
    written."""
    if cache_mode in ("BSND", "TND"):
        return None, None
    nb, bs = kv_cache.shape[0], kv_cache.shape[1]
    t = dims.t
    if nb == 0:
        # Skv = 0: the caches are not updated (the docs: "kv_cache、kr_cache ... 不更新")
        none = cache_index.new_zeros((0,))
        return none, none
    if cache_mode in PAGED_MODES:
        slots = cache_index.reshape(-1)
        total = nb * bs
        if slots.numel():
            bad = slots >= total
            if bool(bad.any()):
                _bad_index(op, "cache_index", slots, bad,
                           f"values below BlockNum * BlockSize = {total} (negative skips)")
    else:
        blocks_t = cache_index.reshape(-1)
        if blocks_t.numel():
            bad = blocks_t >= nb
            if bool(bad.any()):
                _bad_index(op, "cache_index", blocks_t, bad,
                           f"block ids below BlockNum = {nb} (negative skips)")
        if len(dims.tokens) == 2:
            b, s = dims.tokens
            pages = cache_index.shape[1]
            tok = torch.arange(t, device=cache_index.device)
            batch, pos = torch.div(tok, s, rounding_mode="floor"), tok % s
            page = batch * pages + torch.div(pos, bs, rounding_mode="floor")
        else:
            ends = actual_seq_len.to(torch.int64)
            starts = torch.cat((ends.new_zeros(1), ends[:-1]))
            lens = ends - starts
            if ends.numel() and (bool((lens < 0).any()) or int(ends[-1]) != t):
                checks.expect(False, op, "actual_seq_len", f"non-decreasing prefix sums ending "
                              f"at T = {t}", ends.tolist(), ValueError)
            if not ends.numel() and t:
                checks.expect(False, op, "actual_seq_len", f"prefix sums ending at T = {t}",
                              "an empty tensor", ValueError)
            page_counts = torch.div(lens + bs - 1, bs, rounding_mode="floor")
            page_starts = torch.cumsum(page_counts, 0) - page_counts
            need = int(page_counts.sum()) if page_counts.numel() else 0
            if cache_index.numel() < need:
                checks.expect(False, op, "cache_index", f"at least sum(ceil(S_i / BlockSize)) "
                              f"= {need} block ids", f"{cache_index.numel()}", RuntimeError)
            tok = torch.arange(t, device=cache_index.device)
            batch = torch.searchsorted(ends, tok, right=True)
            pos = tok - starts[batch]
            page = page_starts[batch] + torch.div(pos, bs, rounding_mode="floor")
        block = blocks_t[page] if t else blocks_t.new_zeros(0)
        slots = torch.where(block >= 0, block * bs + pos % bs, block.new_full((), -1)) \
            if t else block
    keep = None
    if slots.numel() and bool((slots < 0).any()):
        keep = (slots >= 0).nonzero().squeeze(1)
        slots = slots[keep]
    if slots.numel() > 1:
        # Tokens sharing a slot: the last one's row stays (op-plugin's goldens write the tokens
        # in order; the seed's v1 example sends every token to slot 0).
        uniq, inverse = torch.unique(slots, return_inverse=True)
        if uniq.numel() != slots.numel():
            order = torch.arange(slots.numel(), device=slots.device)
            last = torch.full_like(uniq, -1).scatter_reduce(0, inverse, order, "amax")
            last = torch.sort(last).values
            keep = last if keep is None else keep[last]
            slots = slots[last]
    return keep, slots


def write_caches(kv_cache, kr_cache, kv_rows, kr_rows, keep, slots, cache_mode):
    """Write token rows (one per token, broadcast over the Nkv heads) into both caches."""
    for cache, rows in ((kv_cache, kv_rows), (kr_cache, kr_rows)):
        if keep is not None:
            rows = rows[keep]
        heads, width = cache.shape[-2], cache.shape[-1]
        rows = rows.unsqueeze(1).expand(rows.shape[0], heads, width)
        if cache_mode in ("BSND", "TND"):
            cache.copy_(rows.reshape(cache.shape))
        elif cache_mode in NZ_MODES:
            nb, bs = cache.shape[0], cache.shape[1]
            ld = nz_last_dim(cache.dtype)
            write_nz(cache.view(nb, heads * width // ld, bs, ld), slots, rows)
        else:
            write_nd(cache, slots, rows)

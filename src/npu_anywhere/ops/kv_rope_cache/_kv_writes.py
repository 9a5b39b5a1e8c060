"""The arithmetic and the cache writes of npu_kv_rmsnorm_rope_cache (+ _v2, _v2_functional).

:func:`prepare` checks the index values and plans the writes (eagerly, before anything is
written); :func:`compute_and_write` does the float32 norm and RoPE, the quantization and the
writes of a checked plan -- the function the compiled provider compiles.  The formulas and
their sources are in the docstring of
:func:`npu_anywhere.ops.kv_rope_cache.kv_rmsnorm_rope_cache.npu_kv_rmsnorm_rope_cache`.
"""

from __future__ import annotations

import torch

from ... import checks
from ..cache.paged import bitwise, writable, write_nd, write_nz
from ..posembedding import rotation
from ..quant import core as qcore
from ._kv_checks import (BLK_MODES, NZ_MODES, QUANT_FORMATS, V2_DK, V2_DV, cache_block_size,
                         cache_format)


# -- math --------------------------------------------------------------------------------------
# Every step below is an elementwise tensor op (no ATen reduction, no addcmul), so that the eager
# reference and its Inductor compilation round identically on every CPU: ATen's reductions sum
# in an order that depends on the vector width it was dispatched to (AVX-512, AVX2, scalar) and
# never matches Inductor's, and ATen's addcmul contracts to an FMA where Inductor (compiled with
# -ffp-contract=off) multiplies and adds.  The order is the A2/A3 kernel's, which does not
# depend on the host CPU either.

_LANES = 64     # floats per vector repeat of the A2/A3 kernel's reduction


def sum_of_squares(x):
    """Row sums of ``x * x`` over the last dim (kept, size 1), in x's dtype, in the A2/A3
    kernel's order.

    hicann/ops-transformer ``posembedding/kv_rms_norm_rope_cache/op_kernel/
    kv_rms_norm_rope_cache_b16_b1sd.h`` (``RmsNorm``): square, then add 64-float blocks in
    adjacent pairs (block 2i += block 2i+1) until one block is left, then ``WholeReduceSum`` of
    its 64 lanes.  The lane tree inside ``WholeReduceSum`` is not documented; here it halves
    (lane i += lane i+32, then i += i+16, ...).  Widths that are not 64 * 2**k are padded with
    zeros (adding +0.0 to a sum of squares is exact), so every width uses the same scheme.
    The summed dim is moved first, so that every add reads and writes whole contiguous slabs.
    """
    sq = x * x
    width = sq.shape[-1]
    blocks = max(1, -(-width // _LANES))
    blocks = 1 << (blocks - 1).bit_length()     # a power of two, for the pairwise block adds
    pad = blocks * _LANES - width
    if pad:
        sq = torch.cat((sq, sq.new_zeros(sq.shape[:-1] + (pad,))), dim=-1)
    sq = sq.movedim(-1, 0).unflatten(0, (blocks, _LANES))      # [blocks, 64, *rows]
    while sq.shape[0] > 1:
        sq = sq[0::2] + sq[1::2]
    sq = sq[0]
    while sq.shape[0] > 1:
        half = sq.shape[0] // 2
        sq = sq[:half] + sq[half:]
    return sq.movedim(0, -1)


def rms_norm_rows(x, gamma, epsilon):
    """RMSNorm of the last dim in float32 (float64 for float64 x): ``x * rsqrt(sum(x * x) *
    (1 / D) + epsilon) * gamma``.

    The sum and the multiply by the reciprocal (as the tiling passes it) are the A2/A3 kernel's
    (``kv_rms_norm_rope_cache_b16_b1sd.h``, ``RmsNorm``); the kernel then takes ``Sqrt`` and
    divides, which here is ``rsqrt`` and a multiply: eager float32 ``torch.sqrt`` on CPU goes to
    MKL's vector math, which is not correctly rounded (its bits vary with the CPU), while
    ``torch.rsqrt`` is an IEEE square root and an IEEE division in ATen and in Inductor alike.
    """
    xc = x.to(rotation.compute_dtype(x.dtype))
    rstd = torch.rsqrt(sum_of_squares(xc) * (1.0 / x.shape[-1]) + epsilon)
    return xc * rstd * gamma.to(xc.dtype)


def interleave_rope(x, cos, sin):
    """RoPE of interleaved pairs, in x's (float32) dtype: de-interleave x to ``xd`` = (x0, x2,
    x4, ..., x1, x3, ...), then ``xd * cos + cat(-xd2, xd1) * sin`` -- two multiplies and an add,
    each rounded (the A2/A3 kernel's ``RoPE``: ``Mul``, ``Muls(-1)`` + ``Mul``, ``Add``)."""
    even, odd = x[..., 0::2], x[..., 1::2]
    xd = torch.cat((even, odd), dim=-1)
    rotated = torch.cat((-odd, even), dim=-1)
    return xd * cos.to(x.dtype) + rotated * sin.to(x.dtype)


def norm_and_rope(kv, gamma, cos, sin, epsilon):
    """(k_embed, y) in float32: interleaved RoPE of kv[..., Dv:] and RMSNorm of kv[..., :Dv]."""
    dv = gamma.shape[0]
    y = rms_norm_rows(kv[..., :dv], gamma, epsilon)
    return interleave_rope(kv[..., dv:].to(y.dtype), cos, sin), y


def norm_then_rope(kv, gamma, cos, sin, epsilon):
    """The V2 path's k in float32: RMSNorm of all of kv, then interleaved RoPE of its first
    ``cos.shape[-1]`` values, the rest kept: ``cat(rope(y[..., :64]), y[..., 64:])``."""
    y = rms_norm_rows(kv, gamma, epsilon)
    r = cos.shape[-1]
    return torch.cat((interleave_rope(y[..., :r], cos, sin), y[..., r:]), dim=-1)


def _quantize(values, eff, scale, offset, heads):
    """float32 values -> cache dtype: round(values * scale [+ offset]), saturated.

    int8 rounds half to even, float8 to nearest even, hifloat8 half away from zero (the 950
    kernel's ``CAST_FP32_TO_HIFLOAT8``: ``RoundMode::CAST_ROUND``, ``SatMode::SAT``)."""
    def shaped(t):
        return t.reshape(heads, 1, -1) if t.dim() == 2 else t
    q = values * shaped(scale)
    if offset is not None:
        q = q + shaped(offset)
    fmt = qcore.format_of(eff)
    mode = "round" if fmt.name == "hifloat8" else "rint"
    return qcore.cast_to(q, fmt, round_mode=mode, inplace=True)


def _cache_values(values, eff, scale, offset, heads, cache_dtype):
    if eff in QUANT_FORMATS:
        out = _quantize(values, eff, scale, offset, heads)
    else:
        out = values.to(eff)
    return out if out.dtype == cache_dtype else bitwise(out).view(cache_dtype)


# -- index plans (eager, before the first write) ---------------------------------------------

def _bad(op, flat, mask, requirement, error=IndexError):
    pos = int(mask.nonzero()[0, 0])
    checks.expect(False, op, "index", requirement, f"{int(flat[pos])} at flat position {pos}",
                  error)


def _expect_unique(op, keys, requirement):
    if keys.numel() < 2:
        return
    srt = torch.sort(keys).values
    dup = srt[1:] == srt[:-1]
    if bool(dup.any()):
        value = int(srt[1:][dup][0])
        checks.expect(False, op, "index", requirement, f"a repeated value {value}", ValueError)


def _plan(op, index, b, s, k_cache, cache_mode):
    """(token rows of the flattened [B*S] tokens, destinations) for the writes; raises on a bad
    index before anything is written."""
    flat = index.reshape(-1)
    if cache_mode == "Norm":
        scache = k_cache.shape[2]
        lo, hi = (int(x) for x in torch.aminmax(flat))
        if lo < -1 or hi >= scache:
            _bad(op, flat, (flat < -1) | (flat >= scache),
                 f"values in [-1, {scache - 1}] (-1 skips; Scache = {scache})")
        keep = None if lo >= 0 else (flat >= 0).nonzero().squeeze(1)
        if keep is None:             # no skipped token: no gather needed
            batch, pos = torch.div(torch.arange(b * s, device=index.device), s,
                                   rounding_mode="floor"), flat
        else:
            batch, pos = torch.div(keep, s, rounding_mode="floor"), flat[keep]
        # unique within a batch (different batches may repeat: they write different caches)
        _expect_unique(op, batch * scache + pos, "positions that do not repeat within a batch")
        return keep, (batch, pos)
    nz = cache_mode in NZ_MODES
    bs = cache_block_size(k_cache, nz)
    total = k_cache.shape[0] * bs
    lo, hi = (int(x) for x in torch.aminmax(flat))
    if lo < -1 or hi >= total:
        _bad(op, flat, (flat < -1) | (flat >= total),
             f"values in [-1, {total - 1}] (-1 skips; BlockNum * BlockSize = {total})")
    if cache_mode in BLK_MODES:
        pages = -(-s // bs)
        _expect_unique(op, torch.div(flat[flat >= 0], bs, rounding_mode="floor"),
                       "values whose value // BlockSize do not repeat")
        tok = torch.arange(b * s, device=index.device)
        seq = tok % s
        page_start = flat[torch.div(tok, s, rounding_mode="floor") * pages
                          + torch.div(seq, bs, rounding_mode="floor")]
        if lo >= 0:              # no skipped block: no gather needed
            return None, torch.div(page_start, bs, rounding_mode="floor") * bs + seq % bs
        keep = (page_start >= 0).nonzero().squeeze(1)
        block = torch.div(page_start[keep], bs, rounding_mode="floor")
        return keep, block * bs + seq[keep] % bs
    if lo >= 0:                  # no skipped token: no gather needed
        _expect_unique(op, flat, "values that do not repeat")
        return None, flat
    keep = (flat >= 0).nonzero().squeeze(1)
    _expect_unique(op, flat[keep], "values that do not repeat")
    return keep, flat[keep]


def _write(cache, rows, dest, cache_mode):
    if cache_mode == "Norm":        # cache[b, n, pos] for every head n
        batch, pos = dest
        # explicit sizes: an all-padding call has no rows, and -1 cannot be inferred from 0
        writable(cache)[batch, :, pos] = writable(rows).reshape(batch.numel(), cache.shape[1],
                                                                cache.shape[3])
    elif cache_mode in NZ_MODES:
        if cache.dim() == 4:    # [nb, bs, N, D] whose memory holds [nb, N*D//ld, bs, ld]
            nb, bs, n, d = cache.shape
            ld = 32 // cache.element_size()
            write_nz(cache.view(nb, n * d // ld, bs, ld), dest, rows)
        else:
            write_nz(cache, dest, rows)
    else:
        write_nd(cache, dest, rows)


def run_into(op, kv, gamma, cos, sin, index, k_cache, ckv_cache, k_rope_scale, c_kv_scale,
             k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv, k_cache_dtype,
             ckv_cache_dtype, v=None):
    """Validate the index values, compute, then write both caches; returns (k_rope, c_kv)."""
    k_eff, c_eff, keep, dest = prepare(op, kv, index, k_cache, ckv_cache, cache_mode,
                                       k_cache_dtype, ckv_cache_dtype)
    return compute_and_write(kv, gamma, cos, sin, k_cache, ckv_cache, keep, dest, k_rope_scale,
                             c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode,
                             is_output_kv, k_eff, c_eff, v)


def prepare(op, kv, index, k_cache, ckv_cache, cache_mode, k_cache_dtype, ckv_cache_dtype):
    """(k_eff, c_eff, keep, dest): the caches' value dtypes and the write plan (eager: it
    checks the index values, raising before anything is written)."""
    k_eff, _ = cache_format(op, k_cache, k_cache_dtype, "k_cache")
    c_eff, _ = cache_format(op, ckv_cache, ckv_cache_dtype, "ckv_cache")
    keep, dest = _plan(op, index, kv.shape[0], kv.shape[2], k_cache, cache_mode)
    return k_eff, c_eff, keep, dest


def compute_and_write(kv, gamma, cos, sin, k_cache, ckv_cache, keep, dest, k_rope_scale,
                      c_kv_scale, k_rope_offset, c_kv_offset, epsilon, cache_mode, is_output_kv,
                      k_eff, c_eff, v):
    """The arithmetic and the writes of a checked plan (no data-dependent control flow: the
    compiled provider compiles it when no token is skipped)."""
    b, n, s, _ = kv.shape
    if v is None:
        k, y = norm_and_rope(kv, gamma, cos, sin, epsilon)
        rows_k, rows_y = k.reshape(b * s, -1), y.reshape(b * s, -1)
        k_params, c_params = (k_rope_scale, k_rope_offset), (c_kv_scale, c_kv_offset)
    else:
        k, y = norm_then_rope(kv, gamma, cos, sin, epsilon), v
        # one row [N, D] per token (b, s); v is quantized from its float32 value (a float
        # scale promotes it), else copied
        rows_k, rows_y = (t.transpose(1, 2).reshape(b * s, n, -1) for t in (k, v))
        def per_head(t):        # [N, D] (or [D] for N = 1) -> [1, N, D] against [T, N, D]
            return None if t is None else t.reshape(1, n, -1)
        k_params = (per_head(k_rope_scale), per_head(k_rope_offset))
        c_params = (per_head(c_kv_scale), per_head(c_kv_offset))
    if keep is not None:
        rows_k, rows_y = rows_k[keep], rows_y[keep]
    k_rows = _cache_values(rows_k, k_eff, *k_params, n, k_cache.dtype)
    c_rows = _cache_values(rows_y, c_eff, *c_params, n, ckv_cache.dtype)
    _write(k_cache, k_rows, dest, cache_mode)
    _write(ckv_cache, c_rows, dest, cache_mode)
    if v is None:
        if is_output_kv:
            return k.to(kv.dtype), y.to(kv.dtype)
        return (kv.new_zeros((b, n, s, cos.shape[3])), kv.new_zeros((b, n, s, gamma.shape[0])))
    # V2: in 'Norm' without quantization the kernel does not write the outputs (tiling sets
    # isOutputKv = 0; aclnn doc: "Norm ... 仅在V2场景中开启量化模式时有效")
    quantized = k_eff in QUANT_FORMATS or c_eff in QUANT_FORMATS
    if is_output_kv and (cache_mode != "Norm" or quantized):
        return k.to(kv.dtype).contiguous(), v.clone(memory_format=torch.contiguous_format)
    return kv.new_zeros((b, n, s, V2_DK)), kv.new_zeros((b, n, s, V2_DV))


def outputs_fake(kv, gamma, cos, v=None):
    """(k_rope, c_kv): [B, N, S, Dk] and [B, N, S, Dv] -- Dk = cos's last dim and Dv = gamma's
    length in V1, kv's and v's last dims in V2 (op-plugin's meta functions)."""
    b, n, s, d = kv.shape
    dk, dv = (cos.shape[3], gamma.shape[0]) if v is None else (d, v.shape[3])
    return kv.new_empty((b, n, s, dk)), kv.new_empty((b, n, s, dv))

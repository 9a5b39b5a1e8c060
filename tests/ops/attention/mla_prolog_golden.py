"""A float64 golden of the MLA prolog, written from the doc formulas (op-plugin
torch_npu-npu_mla_prolog_v3.md) and the rounding steps of op-plugin's goldens
(test/test_custom_ops/test_mla_prolog.py, test_mla_prolog_v3.py).  Independent of
npu_anywhere's code."""

from __future__ import annotations

import torch

F64 = torch.float64


def bf(x):
    """Round to bfloat16 and back (the kernel's bf16 intermediates)."""
    return x.to(torch.bfloat16).to(F64)


def rms(x, gamma, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * gamma.to(F64)


def rope(x, cos, sin):
    # interleave-half: x1 = x[..., ::2], x2 = x[..., 1::2]; cat(x1, x2) * cos + cat(-x2, x1) * sin
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.cat((x1, x2), -1) * cos + torch.cat((-x2, x1), -1) * sin


def int8(v):
    return torch.clamp(torch.round(v), -128, 127)


def golden(args, kw):
    """dict with query, query_rope, scale_q_nope, query_norm, scale_q_norm (T-major), kv rows
    [T, Hckv] and kr rows [T, Dr] (before the cache cast), all float64."""
    x, w_dq, w_uq_qr, w_uk, w_dkv_kr, g_cq, g_ckv, sin, cos = args[:9]
    wq = kw.get("weight_quant_mode", 0)
    kvq = kw.get("kv_cache_quant_mode", 0)
    qq = kw.get("query_quant_mode", 0)
    n, d, hckv = w_uk.shape
    dr = sin.shape[-1]
    t = sin.numel() // dr
    x = x.reshape(t, -1).to(F64)
    cos = cos.reshape(t, dr).to(F64)
    sin = sin.reshape(t, dr).to(F64)
    eps_cq = kw.get("rmsnorm_epsilon_cq", 1e-5)
    eps_ckv = kw.get("rmsnorm_epsilon_ckv", 1e-5)
    out = {}
    mm1 = x @ w_dq.to(F64)
    if wq == 2:
        mm1 = mm1 * kw["dequant_scale_x"].to(F64) * kw["dequant_scale_w_dq"].to(F64)
    else:
        mm1 = bf(mm1)
    c_q = rms(mm1, g_cq, eps_cq) * kw.get("qc_qr_scale", 1.0)
    if wq == 0:
        c_q = bf(c_q)
        out["query_norm"] = c_q
        mm2 = bf(c_q @ w_uq_qr.to(F64))
    else:
        smooth = kw.get("smooth_scales_cq")
        v = c_q * (smooth.to(F64) if smooth is not None else 1.0)
        s = v.abs().amax(-1, keepdim=True) / 127
        q = int8(v / s)
        out["query_norm"], out["scale_q_norm"] = q, s
        mm2 = (q @ w_uq_qr.to(F64)) * s * kw["dequant_scale_w_uq_qr"].to(F64)
    mm2 = mm2.reshape(t, n, d + dr)
    q_nope = bf(mm2[..., :d])
    query = bf(torch.einsum("tnd,ndh->tnh", q_nope, w_uk.to(F64)))
    q_rope = bf(rope(mm2[..., d:], cos[:, None], sin[:, None]))
    if qq == 1:
        s = query.abs().amax(-1, keepdim=True) / 127
        query = int8(query / s)
        out["scale_q_nope"] = s
        q_rope = q_rope * kw["quant_scale_ckv"].to(F64).reshape(-1)[0] / s
    out["query"], out["query_rope"] = query, q_rope
    mm4 = x @ w_dkv_kr.to(F64)
    if wq == 2:
        mm4 = mm4 * kw["dequant_scale_x"].to(F64) * kw["dequant_scale_w_dkv_kr"].to(F64)
    kv = rms(mm4[:, :hckv], g_ckv, eps_ckv) * kw.get("kc_scale", 1.0)
    kr = rope(mm4[:, hckv:], cos, sin)
    if kvq == 1:
        kv = int8(kv * kw["quant_scale_ckv"].to(F64).reshape(-1)[0])
    elif kvq == 2:
        kv = int8(kv * kw["quant_scale_ckv"].to(F64))
        kr = int8(kr * kw["quant_scale_ckr"].to(F64))
    out["kv"], out["kr"] = kv, kr
    return out


def token_slots(kw, tokens, block_size):
    """The cache slot of each token (T-major), -1 where skipped."""
    mode = kw.get("cache_mode", "PA_BSND")
    index = kw["cache_index"]
    if mode in ("PA_BSND", "PA_NZ"):
        return index.reshape(-1).tolist()
    slots = []
    if len(tokens) == 2:
        b, s = tokens
        for bi in range(b):
            for si in range(s):
                blk = int(index[bi, si // block_size])
                slots.append(-1 if blk < 0 else blk * block_size + si % block_size)
        return slots
    ends = kw["actual_seq_len"].tolist()
    page = 0
    start = 0
    for end in ends:
        for p in range(end - start):
            blk = int(index[page + p // block_size])
            slots.append(-1 if blk < 0 else blk * block_size + p % block_size)
        page += -(-(end - start) // block_size)
        start = end
    return slots


def cache_rows(cache, mode):
    """The cache as [slots, Nkv, D] rows in token order of its slots (NZ memory decoded)."""
    if mode in ("PA_NZ", "PA_BLK_NZ"):
        nb, bs, heads, width = cache.shape
        ld = 32 // cache.element_size()
        nz = cache.reshape(-1).view(nb, heads * width // ld, bs, ld)
        return nz.permute(0, 2, 1, 3).reshape(nb * bs, heads, width)
    return cache.reshape(-1, cache.shape[-2], cache.shape[-1])

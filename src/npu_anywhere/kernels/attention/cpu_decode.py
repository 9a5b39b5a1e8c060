"""One-token paged decode on the CPU: a C++ loop nest over the cache blocks, built once.

Why not Inductor here: decode is ``[g, D] x [D, tokens]`` per KV head with ``g = Nq / Nkv``
(4 for llama-3-8B), too thin for a GEMM, and Inductor's loops over the gathered cache
(``paged.decode_core``) keep the block-table lookup, the ``P @ V`` reduction over tokens and
the value rows strided by ``Nkv * Dv`` in their innermost loop, which is several times the
cost of reading the cache.  This kernel reads every cached token row once, whole and in
order (a 2 KiB row of all KV heads at llama sizes; tasks that each read half of every row
measured 1.4x slower, a quarter 1.9x: partial rows defeat the hardware prefetchers), with the
next block's rows prefetched while one block is worked on.

Per batch (one OpenMP task; a batch's heads are split over tasks only when there are fewer
batches than threads), with ``Hc * g`` query rows of float32::

    pass 1, keys:    s[r, t] = scale * sum_d q[r, d] * k[t, d]     (float32 FMA)
    softmax:         m = max_t s;  e = exp(s - m);  l = sum_t e     (float32, unrounded e)
                     e <- round(e) to the probabilities dtype       (after the sum)
    pass 2, values:  acc[r, :] += e[r, t] * v[t, :]                 (float32 FMA)
    out = acc / l,  lse = m + log(l);  out 0 and lse -inf where kv_len is 0

which is :func:`.paged.decode_core` (and the NPU kernels' order of roundings, see
``problem.probs_dtype``) computed with the row maximum over the whole sequence.  The scores
are the only scratch: ``Hc * g`` float32 rows of the longest length per thread (128 bytes
per token at llama sizes against 4 KiB of bf16 cache read per token).

The code is built by :class:`..cpp.CppKernel` (Inductor's C++ code cache, ``at::vec`` for
AVX2 / AVX-512 / NEON), once per process, on the tiering of ``kernels/compiled.py``; a failed
build is logged once and turns the kernel off (callers fall back).
"""

from __future__ import annotations

from typing import Optional

import torch

from ..cpp import CppKernel

CACHE_DTYPES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
"""Cache dtypes the kernel reads (the code of the cache type argument)."""

ROUNDINGS = {None: 0, torch.bfloat16: 1, torch.float16: 2}
"""Probabilities dtypes (``round_to``) and their codes."""

_SOURCE = r"""
#include <torch/csrc/inductor/cpp_prefix.h>
#include <cstring>
#include <memory>

namespace npu_anywhere_decode {

using Vec = at::vec::Vectorized<float>;
using VecN = at::vec::VectorizedN<float, 2>;
constexpr int64_t W = VecN::size();   // floats per step; one full vector of 16-bit values

// n (<= W) values as floats, the lanes past n zero (at::vec's partial loads fill them with
// ones or leave them to the ISA, and a dot product sums every lane).
template <typename T>
inline VecN load_float(const T* p, int64_t n) {
    if (n < W) {
        alignas(64) unsigned char buf[W * sizeof(T)] = {0};
        std::memcpy(buf, p, n * sizeof(T));
        return load_float(reinterpret_cast<const T*>(buf), W);
    }
    if constexpr (std::is_same_v<T, float>) {
        return VecN::loadu(p);
    } else {
        return at::vec::convert<float, 2, T, 1>(at::vec::Vectorized<T>::loadu(p));
    }
}

template <typename R>
inline VecN round_through(VecN x) {
    return at::vec::convert<float, 2, R, 1>(at::vec::convert<R, 1, float, 2>(x));
}

inline float sum_all(const VecN& x) {
    return at::vec::vec_reduce_all<float, 2>([](Vec& a, Vec& b) { return a + b; }, x);
}

inline float max_all(const VecN& x) {
    return at::vec::vec_reduce_all<float, 2>(
        [](Vec& a, Vec& b) { return at::vec::maximum(a, b); }, x);
}

// GT query rows (q, D floats apart) against one key row: GT scores, s_stride apart.
template <int GT, typename T>
inline void score_rows(const float* q, int64_t D, const T* k, float scale, float* s,
                       int64_t s_stride) {
    VecN acc[GT];
    for (int j = 0; j < GT; ++j) acc[j] = VecN(0.f);
    for (int64_t d = 0; d < D; d += W) {
        const int64_t c = std::min(W, D - d);
        const VecN kv = load_float(k + d, c);
        for (int j = 0; j < GT; ++j)
            acc[j] = at::vec::fmadd(load_float(q + j * D + d, c), kv, acc[j]);
    }
    for (int j = 0; j < GT; ++j) s[j * s_stride] = scale * sum_all(acc[j]);
}

// acc[j, :] += sum_i e[j, i] * v[i, :] for GT probability rows over n value rows; the
// accumulators stay in registers for one vector of Dv at a time.
template <int GT, typename T>
inline void add_values(const float* e, int64_t e_stride, const T* v, int64_t v_stride,
                       int64_t n, int64_t Dv, float* acc_rows) {
    for (int64_t d = 0; d < Dv; d += W) {
        const int64_t c = std::min(W, Dv - d);
        VecN acc[GT];
        for (int j = 0; j < GT; ++j) acc[j] = VecN::loadu(acc_rows + j * Dv + d, c);
        for (int64_t i = 0; i < n; ++i) {
            const VecN vv = load_float(v + i * v_stride + d, c);
            for (int j = 0; j < GT; ++j)
                acc[j] = at::vec::fmadd(VecN(e[j * e_stride + i]), vv, acc[j]);
        }
        for (int j = 0; j < GT; ++j) acc[j].store(acc_rows + j * Dv + d, c);
    }
}

// The query rows of one KV head come in tiles of up to four (registers for the accumulators).
template <typename T>
inline void score_tile(int64_t gt, const float* q, int64_t D, const T* k, float scale, float* s,
                       int64_t s_stride) {
    switch (gt) {
        case 4: score_rows<4, T>(q, D, k, scale, s, s_stride); break;
        case 3: score_rows<3, T>(q, D, k, scale, s, s_stride); break;
        case 2: score_rows<2, T>(q, D, k, scale, s, s_stride); break;
        default: score_rows<1, T>(q, D, k, scale, s, s_stride); break;
    }
}

template <typename T>
inline void value_tile(int64_t gt, const float* e, int64_t e_stride, const T* v, int64_t v_stride,
                       int64_t n, int64_t Dv, float* acc_rows) {
    switch (gt) {
        case 4: add_values<4, T>(e, e_stride, v, v_stride, n, Dv, acc_rows); break;
        case 3: add_values<3, T>(e, e_stride, v, v_stride, n, Dv, acc_rows); break;
        case 2: add_values<2, T>(e, e_stride, v, v_stride, n, Dv, acc_rows); break;
        default: add_values<1, T>(e, e_stride, v, v_stride, n, Dv, acc_rows); break;
    }
}

// Fetch rows [r0, r1) of a block (row_bytes apart, span bytes each) into L2, a block ahead of
// their use (into L1 that far ahead they evict the scores and the query: measured 20% slower;
// no software prefetch at all: 40% slower, the blocks being scattered).
inline void prefetch_rows(const char* block, int64_t r0, int64_t r1, int64_t row_bytes,
                          int64_t span) {
    for (int64_t r = r0; r < r1; ++r)
        for (int64_t off = 0; off < span; off += 64)
            __builtin_prefetch(block + r * row_bytes + off, 0, 2);
}

// exp(s - max) of one score row in place, rounded to the probabilities dtype after the sum.
inline void softmax_row(float* row, int64_t L, int64_t rounding, float* m_out, float* l_out) {
    VecN mv(-std::numeric_limits<float>::infinity());
    int64_t t = 0;
    for (; t + W <= L; t += W) mv = at::vec::maximum(mv, VecN::loadu(row + t));
    float m = max_all(mv);
    for (; t < L; ++t) m = std::max(m, row[t]);
    const VecN mm(m);
    VecN sv(0.f);
    float l = 0.f;
    for (t = 0; t < L; t += W) {
        const int64_t c = std::min(W, L - t);
        const VecN e = (VecN::loadu(row + t, c) - mm).exp();
        if (c == W) {
            sv = sv + e;
        } else {
            float tail[W];
            e.store(tail, c);
            for (int64_t u = 0; u < c; ++u) l += tail[u];
        }
        if (rounding == 1) round_through<at::BFloat16>(e).store(row + t, c);
        else if (rounding == 2) round_through<at::Half>(e).store(row + t, c);
        else e.store(row + t, c);
    }
    *m_out = m;
    *l_out = l + sum_all(sv);
}

// One task: batch b, KV heads h0 .. h0 + Hc (all of a token row's heads when Hc == H).
template <typename T>
void decode_task(const float* q, const T* kc, const T* vc, const int64_t* table, int64_t bs,
                 int64_t H, int64_t h0, int64_t Hc, int64_t G, int64_t D, int64_t Dv, int64_t L,
                 int64_t stride, float scale, int64_t rounding, float* s, float* acc,
                 float* sums, float* out, float* lse) {
    const int64_t rows = Hc * G;
    const int64_t key_row = H * D, value_row = H * Dv;
    const int64_t blocks = (L + bs - 1) / bs;
    for (int64_t p = 0; p < blocks; ++p) {
        const int64_t n = std::min(bs, L - p * bs);
        const T* base = kc + (table[p] * bs * H + h0) * D;
        const int64_t next_rows = p + 1 < blocks ? std::min(bs, L - (p + 1) * bs) : 0;
        const int64_t next_id = table[std::min(p + 1, blocks - 1)];
        const char* next = reinterpret_cast<const char*>(kc + (next_id * bs * H + h0) * D);
        for (int64_t i = 0; i < n; ++i) {
            if (i < next_rows)
                prefetch_rows(next, i, i + 1, key_row * sizeof(T), Hc * D * sizeof(T));
            const T* row = base + i * key_row;
            for (int64_t hh = 0; hh < Hc; ++hh)
                for (int64_t g0 = 0; g0 < G; g0 += 4)
                    score_tile<T>(std::min<int64_t>(4, G - g0), q + (hh * G + g0) * D, D,
                                  row + hh * D, scale,
                                  s + (hh * G + g0) * stride + p * bs + i, stride);
        }
    }
    for (int64_t r = 0; r < rows; ++r)       // lse holds the row maximum until the end
        softmax_row(s + r * stride, L, rounding, lse + r, sums + r);
    for (int64_t x = 0; x < rows * Dv; ++x) acc[x] = 0.f;
    for (int64_t p = 0; p < blocks; ++p) {
        const int64_t n = std::min(bs, L - p * bs);
        const T* base = vc + (table[p] * bs * H + h0) * Dv;
        const int64_t next_rows = p + 1 < blocks ? std::min(bs, L - (p + 1) * bs) : 0;
        const int64_t next_id = table[std::min(p + 1, blocks - 1)];
        const char* next = reinterpret_cast<const char*>(vc + (next_id * bs * H + h0) * Dv);
        for (int64_t hh = 0; hh < Hc; ++hh) {
            // this head's share of the next block's rows
            prefetch_rows(next, hh * next_rows / Hc, (hh + 1) * next_rows / Hc,
                          value_row * sizeof(T), Hc * Dv * sizeof(T));
            for (int64_t g0 = 0; g0 < G; g0 += 4)
                value_tile<T>(std::min<int64_t>(4, G - g0), s + (hh * G + g0) * stride + p * bs,
                              stride, base + hh * Dv, value_row, n, Dv,
                              acc + (hh * G + g0) * Dv);
        }
    }
    for (int64_t r = 0; r < rows; ++r) {
        const float l = sums[r];
        for (int64_t x = 0; x < Dv; ++x) out[r * Dv + x] = acc[r * Dv + x] / l;
        lse[r] = lse[r] + std::log(l);
    }
}

template <typename T>
void decode(const float* q, const T* kc, const T* vc, const int64_t* table,
            const int64_t* kv_lens, float* out, float* lse, int64_t B, int64_t P, int64_t bs,
            int64_t H, int64_t G,
            int64_t D, int64_t Dv, int64_t Hc, int64_t stride, float scale, int64_t rounding) {
    const int64_t splits = H / Hc;
    const int64_t rows = Hc * G;
    #pragma omp parallel
    {
        std::unique_ptr<float[]> s(new float[rows * stride + W]);
        std::unique_ptr<float[]> acc(new float[rows * Dv + W]);
        std::unique_ptr<float[]> sums(new float[rows + W]);
        #pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < B * splits; ++task) {
            const int64_t b = task / splits, h0 = (task % splits) * Hc;
            const int64_t L =
                std::max<int64_t>(0, std::min(kv_lens[b], std::min(P * bs, stride)));
            float* o = out + (b * H + h0) * G * Dv;
            float* ls = lse + (b * H + h0) * G;
            if (L == 0) {
                for (int64_t x = 0; x < rows * Dv; ++x) o[x] = 0.f;
                for (int64_t r = 0; r < rows; ++r)
                    ls[r] = -std::numeric_limits<float>::infinity();
                continue;
            }
            decode_task<T>(q + (b * H + h0) * G * D, kc, vc, table + b * P, bs, H, h0, Hc, G,
                           D, Dv, L, stride, scale, rounding, s.get(), acc.get(), sums.get(), o,
                           ls);
        }
    }
}

}  // namespace npu_anywhere_decode

extern "C" void kernel(const float* q, const void* kc, const void* vc, const int64_t* table,
                       const int64_t* kv_lens, float* out, float* lse, int64_t B, int64_t P,
                       int64_t bs, int64_t H, int64_t G, int64_t D, int64_t Dv, int64_t Hc,
                       int64_t stride, float scale, int64_t rounding, int64_t cache_type) {
    using namespace npu_anywhere_decode;
#define NPU_ANYWHERE_DECODE(T)                                                               \
    decode<T>(q, static_cast<const T*>(kc), static_cast<const T*>(vc), table, kv_lens, out,   \
              lse, B, P, bs, H, G, D, Dv, Hc, stride, scale, rounding)
    switch (cache_type) {
        case 0: NPU_ANYWHERE_DECODE(at::BFloat16); break;
        case 1: NPU_ANYWHERE_DECODE(at::Half); break;
        default: NPU_ANYWHERE_DECODE(float); break;
    }
#undef NPU_ANYWHERE_DECODE
}
"""

_ARGTYPES = (["const float*", "const void*", "const void*", "const int64_t*", "const int64_t*",
              "float*", "float*"] + ["int64_t"] * 9 + ["float", "int64_t", "int64_t"])


_kernel = CppKernel("CPU paged decode", _ARGTYPES, _SOURCE)


def supports(q, key_cache, value_cache, table, kv_lens, scale, round_to=None) -> Optional[str]:
    """None when :func:`decode` can take these :func:`.paged.decode_core` arguments."""
    if q.device.type != "cpu":
        return "not a CPU tensor"
    if q.dtype != torch.float32:
        return "compute dtype is not float32"
    if key_cache.dtype != value_cache.dtype or key_cache.dtype not in CACHE_DTYPES:
        return f"cache dtype {key_cache.dtype} / {value_cache.dtype}"
    if round_to not in ROUNDINGS:
        return f"probabilities dtype {round_to}"
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        return "a non-contiguous cache"
    if key_cache.shape[:3] != value_cache.shape[:3]:
        return "key and value caches of different blocks or heads"
    key = (tuple(q.shape[1:]), tuple(key_cache.shape[1:]), tuple(value_cache.shape[1:]),
           key_cache.dtype, round_to)
    return _kernel.ready(key)


def _head_split(batch: int, heads: int) -> int:
    """KV heads per task: all of them (whole cache rows) unless batches cannot feed the threads."""
    threads = torch.get_num_threads()
    per_task = heads
    while batch * (heads // per_task) < threads and per_task % 2 == 0:
        per_task //= 2
    return per_task


def decode(q, key_cache, value_cache, table, kv_lens, scale: float,
           round_to: Optional[torch.dtype] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out [B, Nkv, g, Dv], lse [B, Nkv, g])`` float32: :func:`.paged.decode_core`'s
    arguments and results (``table`` int64 in range, ``kv_lens`` int64), after
    :func:`supports` returned None."""
    b, h, g, d = q.shape
    p = table.shape[1]
    bs, dv = key_cache.shape[1], value_cache.shape[3]
    q = q.contiguous()
    table = table.to(torch.int64).contiguous()
    kv_lens = kv_lens.to(torch.int64).contiguous()
    longest = int(kv_lens.max()) if b else 0
    stride = max(1, min(p * bs, longest))              # score row length: the longest sequence
    out = torch.empty((b, h, g, dv), dtype=torch.float32)
    lse = torch.empty((b, h, g), dtype=torch.float32)
    if b:
        _kernel(q, key_cache, value_cache, table, kv_lens, out, lse, b, p, bs, h, g, d, dv,
                _head_split(b, h), stride, float(scale), ROUNDINGS[round_to],
                CACHE_DTYPES[key_cache.dtype])
    return out, lse

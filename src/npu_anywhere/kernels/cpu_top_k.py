"""Stable top-k of the last dim on the CPU: a C++ pass per row, built once.

Why a kernel: MoE gating ranks a few of many values per token (8 of 64 for DeepSeek-V2-Lite,
8 of 256 for V3), and ATen's ``topk`` spends most of its time per row on a generic selection
(3.2 ms for 4096 x 64, k = 8, one thread, against 0.25 ms for the softmax before it).  Here
each row is one pass over its values keeping the ``k`` best in a sorted register array.

The ranking is :func:`npu_anywhere.ops.moe._routing.stable_top_k`'s, exactly: descending by
value, equal values by lower index first, ``-0.0`` equal to ``+0.0``, a positive NaN above
``+inf`` and a negative NaN below ``-inf``.  Every comparison is on an int64 key, the value's
float32 bits made order-preserving in the high half and the reversed index in the low half,
so no two keys tie and nothing depends on floating-point compiler flags.

Rows with ``k <= 32`` insert into the sorted array (a branch that is rarely taken once the
array holds good values); wider selections use ``std::partial_sort`` on the keys.  Rows are
split over OpenMP threads.  Built by :class:`.cpp.CppKernel` (Inductor's C++ code cache) on the
tiering of ``kernels/compiled.py``; a failed build turns it off and callers fall back.
"""

from __future__ import annotations

from typing import Optional

import torch

from .cpp import CppKernel

VALUE_TYPES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
"""The dtypes the kernel ranks (the code of its value type argument)."""

_SOURCE = r"""
#include <torch/csrc/inductor/cpp_prefix.h>
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>

namespace npu_anywhere_top_k {

// The vector paths this build has: 2 AVX-512, 1 AVX2, 0 none (the caller may ask for less).
#if defined(CPU_CAPABILITY_AVX512)
constexpr int64_t BUILT_PATH = 2;
#elif defined(CPU_CAPABILITY_AVX2)
constexpr int64_t BUILT_PATH = 1;
#else
constexpr int64_t BUILT_PATH = 0;
#endif
constexpr int64_t FLOOR = std::numeric_limits<int64_t>::min();
constexpr int64_t PAD = 16;          // keys rows are padded with FLOOR to a multiple of this

inline uint32_t float_bits(float v) {
    uint32_t b;
    std::memcpy(&b, &v, sizeof(b));
    return b;
}
inline uint32_t value_bits(float v) { return float_bits(v); }
inline uint32_t value_bits(at::BFloat16 v) { return static_cast<uint32_t>(v.x) << 16; }
inline uint32_t value_bits(at::Half v) { return float_bits(static_cast<float>(v)); }

// The unique ranking key of value bits b at index j of a row of n: order-preserving signed
// bits (negative zero folded onto zero, negative floats reversed) above the reversed index.
inline int64_t rank_key(uint32_t b, int64_t j, int64_t n) {
    if (b == 0x80000000u) b = 0;
    int32_t s = static_cast<int32_t>(b);
    if (s < 0) s ^= 0x7FFFFFFF;
    return static_cast<int64_t>(s) * 4294967296LL + static_cast<int64_t>(n - 1 - j);
}

// The keys of a row of n values into keys[0, m) (m = n rounded up to PAD, the rest FLOOR).
template <typename T>
inline void row_keys(const T* row, int64_t n, int64_t m, int64_t* keys, int64_t path) {
    int64_t j = 0;
#if defined(CPU_CAPABILITY_AVX512)
    if (path == 2) {                 // 16 values at a time; lanes past n are reset below
        const __m512i zero = _mm512_setzero_si512();
        const __m512i neg_zero = _mm512_set1_epi32(static_cast<int32_t>(0x80000000u));
        const __m512i low31 = _mm512_set1_epi32(0x7FFFFFFF);
        const __m512i low32 = _mm512_set1_epi64(0xFFFFFFFFLL);
        const __m512i step = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
        for (; j < n; j += 16) {
            const __mmask16 live =
                j + 16 <= n ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
            __m512i b;
            if constexpr (std::is_same_v<T, float>) {
                b = _mm512_maskz_loadu_epi32(live, row + j);
            } else if constexpr (std::is_same_v<T, at::BFloat16>) {
                const __m256i half = _mm256_maskz_loadu_epi16(live, row + j);
                b = _mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16);
            } else {
                b = _mm512_castps_si512(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(live, row + j)));
            }
            b = _mm512_mask_mov_epi32(b, _mm512_cmpeq_epi32_mask(b, neg_zero), zero);
            b = _mm512_mask_xor_epi32(b, _mm512_cmplt_epi32_mask(b, zero), b, low31);
            // the reversed index; past n it goes negative, cut to 32 bits (reset below)
            const __m512i rev0 = _mm512_sub_epi64(_mm512_set1_epi64(n - 1 - j), step);
            const __m512i rev1 = _mm512_sub_epi64(rev0, _mm512_set1_epi64(8));
            const __m512i hi0 = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(b));
            const __m512i hi1 = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(b, 1));
            _mm512_storeu_si512(keys + j, _mm512_or_si512(_mm512_slli_epi64(hi0, 32),
                                                          _mm512_and_si512(rev0, low32)));
            _mm512_storeu_si512(keys + j + 8, _mm512_or_si512(_mm512_slli_epi64(hi1, 32),
                                                              _mm512_and_si512(rev1, low32)));
        }
        j = n;
    }
#endif
    for (; j < n; ++j) keys[j] = rank_key(value_bits(row[j]), j, n);
    for (j = n; j < m; ++j) keys[j] = FLOOR;
}

// The k largest of m keys, descending, by k max-passes: each takes the largest key below the
// previous one.  Keys are unique, so nothing is taken twice or skipped; a lane at or above the
// previous key counts as FLOOR, which only wins when the answer is FLOOR itself.  Intrinsics:
// at::vec's int64 compare and blend measured 6x slower (a mask round trip per lane group).
// Two accumulators keep the max latency off the critical path.
#if defined(CPU_CAPABILITY_AVX512)
inline void passes_avx512(const int64_t* keys, int64_t m, int64_t k, int64_t* best) {
    int64_t prev = std::numeric_limits<int64_t>::max();
    const __m512i floor = _mm512_set1_epi64(FLOOR);
    for (int64_t p = 0; p < k; ++p) {
        const __m512i below = _mm512_set1_epi64(prev);
        __m512i acc0 = floor, acc1 = floor;
        for (int64_t i = 0; i < m; i += 16) {
            const __m512i a = _mm512_loadu_si512(keys + i);
            const __m512i b = _mm512_loadu_si512(keys + i + 8);
            acc0 = _mm512_mask_max_epi64(acc0, _mm512_cmplt_epi64_mask(a, below), acc0, a);
            acc1 = _mm512_mask_max_epi64(acc1, _mm512_cmplt_epi64_mask(b, below), acc1, b);
        }
        prev = _mm512_reduce_max_epi64(_mm512_max_epi64(acc0, acc1));
        best[p] = prev;
    }
}
#endif
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
inline __m256i masked_max(__m256i acc, __m256i x, __m256i below, __m256i floor) {
    const __m256i cand = _mm256_blendv_epi8(floor, x, _mm256_cmpgt_epi64(below, x));
    return _mm256_blendv_epi8(acc, cand, _mm256_cmpgt_epi64(cand, acc));
}
inline void passes_avx2(const int64_t* keys, int64_t m, int64_t k, int64_t* best) {
    int64_t prev = std::numeric_limits<int64_t>::max();
    const __m256i floor = _mm256_set1_epi64x(FLOOR);
    for (int64_t p = 0; p < k; ++p) {
        const __m256i below = _mm256_set1_epi64x(prev);
        __m256i acc0 = floor, acc1 = floor;
        for (int64_t i = 0; i < m; i += 8) {
            acc0 = masked_max(acc0, _mm256_loadu_si256((const __m256i*)(keys + i)), below, floor);
            acc1 = masked_max(acc1, _mm256_loadu_si256((const __m256i*)(keys + i + 4)), below,
                              floor);
        }
        alignas(32) int64_t lanes[8];
        _mm256_store_si256((__m256i*)lanes, acc0);
        _mm256_store_si256((__m256i*)(lanes + 4), acc1);
        prev = *std::max_element(lanes, lanes + 8);
        best[p] = prev;
    }
}
#endif

// Without vectors: insertion into the sorted array (a branch rarely taken once it holds
// good keys).
inline void insertion(const int64_t* keys, int64_t n, int64_t k, int64_t* best) {
    for (int64_t j = 0; j < n; ++j) {
        const int64_t key = keys[j];
        if (j >= k && key <= best[k - 1]) continue;
        int64_t p = std::min(j, k - 1);
        for (; p > 0 && best[p - 1] < key; --p) best[p] = best[p - 1];
        best[p] = key;
    }
}

inline void top_keys(const int64_t* keys, int64_t n, int64_t m, int64_t k, int64_t* best,
                     int64_t path) {
#if defined(CPU_CAPABILITY_AVX512)
    if (path == 2) return passes_avx512(keys, m, k, best);
#endif
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
    if (path >= 1) return passes_avx2(keys, m, k, best);
#endif
    insertion(keys, n, k, best);
}

template <typename T>
void top_k(const T* values, int64_t rows, int64_t n, int64_t stride, int64_t k,
           const bool* finished, int64_t masked_id, T* out_values, int32_t* out_idx,
           int64_t path) {
    const int64_t m = (n + PAD - 1) / PAD * PAD;
    #pragma omp parallel
    {
        std::unique_ptr<int64_t[]> keys(new int64_t[m]);
        std::unique_ptr<int64_t[]> best(new int64_t[k]);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
            const T* row = values + r * stride;
            row_keys(row, n, m, keys.get(), path);
            top_keys(keys.get(), n, m, k, best.get(), path);
            const bool done = finished != nullptr && finished[r];
            for (int64_t j = 0; j < k; ++j) {
                const int64_t idx = n - 1 - (best[j] & 0xFFFFFFFFLL);
                out_values[r * k + j] = row[idx];
                out_idx[r * k + j] = static_cast<int32_t>(done ? masked_id : idx);
            }
        }
    }
}

}  // namespace npu_anywhere_top_k

// path: the fastest vector path to use (2 AVX-512, 1 AVX2, 0 none), capped by the build's.
extern "C" void kernel(const void* values, int64_t rows, int64_t n, int64_t stride, int64_t k,
                       const bool* finished, int64_t has_finished, int64_t masked_id,
                       void* out_values, int32_t* out_idx, int64_t value_type, int64_t path) {
    using namespace npu_anywhere_top_k;
    const bool* fin = has_finished ? finished : nullptr;
    path = std::min(path, BUILT_PATH);
#define NPU_ANYWHERE_TOP_K(T)                                                                 \
    top_k<T>(static_cast<const T*>(values), rows, n, stride, k, fin, masked_id,               \
             static_cast<T*>(out_values), out_idx, path)
    switch (value_type) {
        case 0: NPU_ANYWHERE_TOP_K(at::BFloat16); break;
        case 1: NPU_ANYWHERE_TOP_K(at::Half); break;
        default: NPU_ANYWHERE_TOP_K(float); break;
    }
#undef NPU_ANYWHERE_TOP_K
}
"""

_ARGTYPES = ["const void*", "int64_t", "int64_t", "int64_t", "int64_t", "const bool*", "int64_t",
             "int64_t", "void*", "int32_t*", "int64_t", "int64_t"]

_kernel = CppKernel("CPU stable top-k", _ARGTYPES, _SOURCE)

MAX_K = 64
"""The largest k the kernel takes (its passes cost k reads of the row)."""

_MAX_WIDTH = 2 ** 31 - 1      # the reversed index lives in 32 bits of the key


def supports(values: torch.Tensor, k: int) -> Optional[str]:
    """None when :func:`top_k` can rank ``values`` (building the kernel once it is hot)."""
    if values.device.type != "cpu":
        return "not a CPU tensor"
    if values.dtype not in VALUE_TYPES:
        return f"dtype {values.dtype}"
    if values.dim() == 0 or not 0 < k <= values.shape[-1] or values.shape[-1] > _MAX_WIDTH:
        return "k outside (0, width] or a row too wide"
    if k > MAX_K:
        return f"k above {MAX_K} (ATen's topk selects as fast there)"
    return _kernel.ready(values.dtype)


def top_k(values: torch.Tensor, k: int, finished: Optional[torch.Tensor] = None,
          masked_id: int = 0, vector_path: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """``(top values, int32 indices)`` of shape ``values.shape[:-1] + (k,)``, after
    :func:`supports` returned None; rows where ``finished`` (bool, ``values.shape[:-1]``) is
    True get the index ``masked_id`` (their values stay the ranked ones).

    ``vector_path`` caps the code path (2 AVX-512, 1 AVX2, 0 scalar; the build's own ISA caps
    it too): the ranking is the same on each, and tests run all three on one machine."""
    width = values.shape[-1]
    rows_shape = values.shape[:-1]
    flat = values.reshape(-1, width)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    rows = flat.shape[0]
    out_values = torch.empty((rows, k), dtype=values.dtype)
    out_idx = torch.empty((rows, k), dtype=torch.int32)
    if finished is None:
        fin, has_finished = out_idx, 0        # any pointer: the kernel does not read it
    else:
        fin, has_finished = finished.reshape(-1).contiguous(), 1
    if rows:
        _kernel(flat, rows, width, flat.stride(0), k, fin, has_finished, int(masked_id),
                out_values, out_idx, VALUE_TYPES[values.dtype], vector_path)
    return out_values.view(*rows_shape, k), out_idx.view(*rows_shape, k)

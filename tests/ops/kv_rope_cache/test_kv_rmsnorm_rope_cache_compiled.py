"""npu_kv_rmsnorm_rope_cache: the compiled provider (bit for bit against the reference) and the
A2/A3 strict-mode rules of the V1 path.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import targets

from kv_cache_golden import (
    _null,
    HIF8,
    OP,
    _raises_before_write,
    bits,
    check_result,
    make,
    make_v2,
)


# -- the compiled provider ---------------------------------------------------------------------

COMPILED_CASES = [("Norm", False, False), ("PA_NZ", True, False), ("PA_BLK_BNSD", False, False),
                  ("PA_BNSD", True, True), ("PA_NZ", False, True), ("PA_NZ", "hifloat8", False)]


@pytest.mark.parametrize("mode,quant,v2", COMPILED_CASES)
def test_compiled_provider_matches_the_reference_bit_for_bit(mode, quant, v2):
    """Calls without a skipped token run compiled code; it writes the same bits as the eager
    reference (emulate_precision_casts keeps the roundings), and skipped tokens stay eager."""
    _compiled_matches_reference(mode, quant, v2)


@pytest.mark.slow
@pytest.mark.parametrize("mode,quant,v2",
                         [c for c in COMPILED_CASES if c[2] or c[1] == "hifloat8"])
def test_compiled_provider_bit_for_bit_in_avx2_code(mode, quant, v2):
    """The same with Inductor's AVX2 code (``cpp.simdlen = 256``), what an x86 CPU without
    AVX-512 (AMD Zen3) runs whatever this machine has: the eager arithmetic uses no op whose
    rounding depends on the CPU (ATen reductions, addcmul's FMA, MKL's float32 sqrt), so the
    bits still agree; hifloat8 caches are declined where Inductor's int32 select is wrong."""
    with torch._inductor.config.patch({"cpp.simdlen": 256}):
        _compiled_matches_reference(mode, quant, v2)


def _compiled_matches_reference(mode, quant, v2):
    from npu_anywhere import dispatch
    from npu_anywhere.kernels import compiled
    from npu_anywhere.ops.kv_rope_cache import kv_rmsnorm_rope_cache as module

    def call(args, v):
        kw = dict(v=v, cache_mode=mode, is_output_kv=True)
        if quant:
            width = 192 if v2 else 32
            kw.update(k_rope_scale=torch.full((args[0].shape[1], width), 3.0),
                      k_rope_offset=torch.full((args[0].shape[1], width), 0.5) if v2 else None)
        if quant == "hifloat8":     # both caches hifloat8 (uint8 codes), through the v2 API
            kw.update(c_kv_scale=torch.full((32,), 700.0), c_kv_offset=torch.full((1,), -0.25),
                      k_cache_dtype=HIF8, ckv_cache_dtype=HIF8)
            return tuple(args[5:7]) + na.npu_kv_rmsnorm_rope_cache_v2(*args, **kw)
        return na.npu_kv_rmsnorm_rope_cache(*args, **kw)

    def inputs(skip):
        kc_dtype = {True: torch.int8, "hifloat8": torch.uint8}.get(quant)
        if v2:
            return make_v2(mode=mode, k_dtype=kc_dtype, skip=skip, bs=32)
        return make(mode=mode, k_dtype=kc_dtype, c_dtype=torch.uint8 if kc_dtype ==
                    torch.uint8 else None, dk=32, bs=32, skip=skip,
                    s=37 if "BLK" in mode else 3), None

    module._compiled_compute._compiled.clear()
    torch._dynamo.reset()
    for skip in (False, True, False):
        (args, v), (twin, v_twin) = inputs(skip), inputs(skip)
        with dispatch.use_providers("reference"):
            want = call(twin, v_twin)
        with compiled.compiling_after(0), dispatch.use_providers("compiled"):
            got = call(args, v)
        for a, b in zip(got, want):
            assert torch.equal(bits(a), bits(b))
    declined = quant == "hifloat8" and not module.int32_select_compiles_exactly()
    # the compiled code did run (unless declined, when nothing may have compiled) ...
    assert len(module._compiled_compute._compiled) == (0 if declined else 1)
    assert module._compiled_compute._disabled is None         # ... and did not fail to compile


# -- A2/A3 strict-mode rules of the V1 path (aclnnKvRmsNormRopeCacheV2 doc: quantization-mode
# constraints and the A2/A3 input-combination table; hicann/ops-transformer
# op_host/kv_rms_norm_rope_cache_ds_tiling.cpp) --------------------------------------------


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_norm_no_quantization_on_a2_a3(product):
    int8 = make(mode="Norm", k_dtype=torch.int8, dk=32)
    _raises_before_write(product, int8, dict(k_rope_scale=torch.ones(32), cache_mode="Norm"),
                         TypeError, f"{OP} k_cache dtype float16 \\(kv's\\) on {product} with "
                         "cache_mode 'Norm'")
    flt = make(mode="Norm")
    for kw, param in ((dict(k_rope_scale=torch.ones(16)), "k_rope_scale"),
                      (dict(c_kv_scale=torch.ones(32)), "c_kv_scale"),
                      (dict(c_kv_offset=torch.ones(32)), "c_kv_offset")):
        _raises_before_write(product, flt, dict(kw, cache_mode="Norm"), ValueError,
                             f"{OP} {param} None on {product} with cache_mode 'Norm'")
    # the same calls run in default mode and on the 950; A2/A3 quantize outside 'Norm'
    for target in (None, "950"):
        with targets.strict(target) if target else _null():
            a = make(mode="Norm", k_dtype=torch.int8, dk=32)
            kc0, cc0 = a[5].clone(), a[6].clone()
            out = na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.full((32,), 4.0),
                                               cache_mode="Norm", is_output_kv=True)
            check_result(a[:5] + (kc0, cc0), out[:2], out[2:], "Norm",
                         scales=(torch.full((32,), 4.0), None))
    with targets.strict(product):
        na.npu_kv_rmsnorm_rope_cache(*make(mode="Norm"), cache_mode="Norm")
        na.npu_kv_rmsnorm_rope_cache(*make(mode="PA_BNSD", k_dtype=torch.int8, dk=32, bs=32),
                                     k_rope_scale=torch.ones(32), cache_mode="PA_BNSD")


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_cos_broadcast_on_a2_a3(product):
    bcast = RuntimeError
    msg = f"{OP} cos shape \\(2, 1, 3, 32\\) on {product} with cache_mode"
    for mode in ("PA_NZ", "PA_BLK_BNSD", "PA_BLK_NZ"):
        a = make(mode=mode, cos_one=True, dk=32, bs=16)
        _raises_before_write(product, a, dict(cache_mode=mode), bcast, msg)
    # PA/PA_BNSD: only without quantization (a scale, even for a float cache, selects the
    # quant kernel)
    for mode in ("PA", "PA_BNSD"):
        a = make(mode=mode, cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
        _raises_before_write(product, a, dict(k_rope_scale=torch.ones(32), cache_mode=mode),
                             bcast, msg + f" '{mode}' and a quant scale")
        a = make(mode=mode, cos_one=True, dk=32, bs=32)
        _raises_before_write(product, a, dict(c_kv_scale=torch.ones(32), cache_mode=mode),
                             bcast, msg)
    # accepted: Norm, PA/PA_BNSD without quantization, and S = 1 (nothing to broadcast)
    with targets.strict(product):
        for mode in ("Norm", "PA", "PA_BNSD"):
            a = make(mode=mode, cos_one=True, dk=32, bs=16)
            kc0, cc0 = a[5].clone(), a[6].clone()
            out = na.npu_kv_rmsnorm_rope_cache(*a, cache_mode=mode, is_output_kv=True)
            check_result((a[0], a[1], a[2].expand(-1, -1, 3, -1), a[3].expand(-1, -1, 3, -1),
                          a[4], kc0, cc0), out[:2], out[2:], mode)
        a = make(mode="PA_NZ", s=1, cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
        na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.ones(32), cache_mode="PA_NZ")
    # default mode and the 950 broadcast in every cache mode
    for target in (None, "950"):
        with targets.strict(target) if target else _null():
            a = make(mode="PA_NZ", cos_one=True, dk=32, k_dtype=torch.int8, bs=32)
            kc0, cc0 = a[5].clone(), a[6].clone()
            ks = torch.full((32,), 2.0)
            out = na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=ks, cache_mode="PA_NZ",
                                               is_output_kv=True)
            check_result((a[0], a[1], a[2].expand(-1, -1, 3, -1), a[3].expand(-1, -1, 3, -1),
                          a[4], kc0, cc0), out[:2], out[2:], "PA_NZ", scales=(ks, None))


@pytest.mark.parametrize("product", ["A2", "A3"])
def test_v1_scalar_scale_shape_on_a2_a3(product):
    a = make(mode="PA_BNSD", k_dtype=torch.int8, dk=32, bs=32)
    _raises_before_write(product, a, dict(k_rope_scale=torch.ones(1), cache_mode="PA_BNSD"),
                         RuntimeError, f"{OP} k_rope_scale shape \\(1, 32\\) or \\(32,\\) on "
                         f"{product}, but got shape \\(1,\\)")
    with targets.strict("950"):
        na.npu_kv_rmsnorm_rope_cache(*a, k_rope_scale=torch.ones(1), cache_mode="PA_BNSD")

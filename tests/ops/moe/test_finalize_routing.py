"""npu_moe_finalize_routing against a loop golden (op-plugin's ``moe_finalize_routing_np``
formula, written here in float64) for drop_pad_mode 0-3 and the optional inputs."""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def rnd(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def golden(rows, skip1, skip2, bias, scales, idx, experts, mode, n, k):
    h = rows.shape[-1]
    table = rows.reshape(-1, h).double()
    out = torch.zeros(n, h, dtype=torch.float64)
    if skip1 is not None:
        out += skip1.double()
    if skip2 is not None:
        out += skip2.double()
    for i in range(n):
        for j in range(k):
            v = int(idx[j * n + i] if mode in (0, 1) else idx[i * k + j])
            row = torch.zeros(h, dtype=torch.float64) if v == -1 else table[v]
            s = 1.0 if scales is None else float(scales[i, j])
            b = bias[experts[i, j]].double() if bias is not None else 0
            out[i] += s * (row + b)
    return out


def case(dtype, mode, n=6, k=3, h=5, e=4, cap=4, seed=0):
    if mode in (1, 3):
        rows = rnd(e, cap, h, dtype=dtype, seed=seed)
        gen = torch.Generator().manual_seed(seed + 1)
        idx = torch.randint(-1, e * cap, (n * k,), generator=gen, dtype=torch.int32)
    else:
        rows = rnd(n * k, h, dtype=dtype, seed=seed)
        idx = torch.randperm(n * k, generator=torch.Generator().manual_seed(seed + 1)).int()
    experts = torch.randint(0, e, (n, k), generator=torch.Generator().manual_seed(seed + 2),
                            dtype=torch.int32)
    return dict(rows=rows, skip1=rnd(n, h, dtype=dtype, seed=seed + 3),
                skip2=rnd(n, h, dtype=dtype, seed=seed + 4), bias=rnd(e, h, dtype=dtype, seed=5),
                scales=rnd(n, k, dtype=dtype, seed=6), idx=idx, experts=experts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_matches_golden(dtype, mode):
    c = case(dtype, mode)
    out = na.npu_moe_finalize_routing(c["rows"], c["skip1"], c["skip2"], c["bias"], c["scales"],
                                      c["idx"], c["experts"], mode)
    want = golden(c["rows"], c["skip1"], c["skip2"], c["bias"], c["scales"], c["idx"],
                  c["experts"], mode, 6, 3)
    assert out.dtype == dtype and out.shape == (6, 5)
    assert_close_to_golden(out, want)


@pytest.mark.parametrize("drop", ["skip2", "skips", "bias", "scales", "all"])
def test_optional_inputs(drop):
    c = case(torch.float32, 0)
    args = {"skip1": c["skip1"], "skip2": c["skip2"], "bias": c["bias"], "scales": c["scales"]}
    if drop in ("skip2", "skips", "all"):
        args["skip2"] = None
    if drop in ("skips", "all"):
        args["skip1"] = None
    if drop in ("bias", "all"):
        args["bias"] = None
    if drop in ("scales", "all"):
        args["scales"] = None
    experts = None if drop == "all" else c["experts"]
    out = na.npu_moe_finalize_routing(c["rows"], args["skip1"], args["skip2"], args["bias"],
                                      args["scales"], c["idx"], experts, 0, k=3)
    want = golden(c["rows"], args["skip1"], args["skip2"], args["bias"], args["scales"], c["idx"],
                  c["experts"], 0, 6, 3)
    assert_close_to_golden(out, want)


def test_non_contiguous_rows():
    c = case(torch.float32, 2)
    wide = torch.cat([c["rows"], c["rows"]], dim=1)[:, ::2]
    out = na.npu_moe_finalize_routing(wide, c["skip1"], None, None, c["scales"].t().contiguous().t(),
                                      c["idx"], c["experts"], 2)
    want = golden(wide.contiguous(), c["skip1"], None, None, c["scales"], c["idx"], c["experts"],
                  2, 6, 3)
    assert_close_to_golden(out, want)


def test_bad_inputs():
    c = case(torch.float32, 0)
    f = na.npu_moe_finalize_routing
    with pytest.raises(ValueError, match="npu_moe_finalize_routing: expected drop_pad_mode one of"):
        f(c["rows"], None, None, None, c["scales"], c["idx"], c["experts"], 4)
    with pytest.raises(ValueError, match="expected expanded_permuted_rows a 3-D tensor"):
        f(c["rows"], None, None, None, c["scales"], c["idx"], c["experts"], 1)
    with pytest.raises(ValueError, match="expected skip2 None when skip1 is None"):
        f(c["rows"], None, c["skip2"], None, c["scales"], c["idx"], c["experts"], 0)
    with pytest.raises(TypeError, match="expected skip1 the same dtype"):
        f(c["rows"], c["skip1"].half(), None, None, c["scales"], c["idx"], c["experts"], 0)
    with pytest.raises(RuntimeError, match="expected skip1 shape \\(NUM_ROWS, H\\)"):
        f(c["rows"], c["skip1"][:5], None, None, c["scales"], c["idx"], c["experts"], 0)
    with pytest.raises(ValueError, match="expected export_for_source_row a tensor when bias"):
        f(c["rows"], None, None, c["bias"], c["scales"], c["idx"], None, 0)
    with pytest.raises(TypeError, match="expected expanded_src_to_dst_row dtype in"):
        torch.ops.npu.npu_moe_finalize_routing(c["rows"], None, None, None, c["scales"],
                                               c["idx"].long(), c["experts"], 0)


@pytest.mark.parametrize("mode,dtype", [(1, torch.bfloat16), (2, torch.float32)])
def test_compiled_provider_matches_golden(mode, dtype):
    from npu_anywhere.kernels import compiled as compiled_kernels
    from npu_anywhere.library import REGISTRY

    c = case(dtype, mode, n=9, k=3, h=40)
    fast = {p.name: p for p in REGISTRY["npu_moe_finalize_routing"].providers._fast}
    provider = fast["compiled"].fn.__self__
    args = (c["rows"], c["skip1"], c["skip2"], c["bias"], c["scales"], c["idx"], c["experts"],
            mode)
    with na.use_providers("reference"):
        ref = na.npu_moe_finalize_routing(*args)
    with compiled_kernels.compiling_after(0), na.use_providers("compiled"):
        out = na.npu_moe_finalize_routing(*args)
    assert provider._disabled is None, provider._disabled
    assert any(key[1] == mode for key in provider._compiled)
    want = golden(c["rows"], c["skip1"], c["skip2"], c["bias"], c["scales"], c["idx"],
                  c["experts"], mode, 9, 3)
    assert_close_to_golden(out, want)
    torch.testing.assert_close(out, ref, rtol=0, atol=0 if dtype == torch.float32 else 1e-2)

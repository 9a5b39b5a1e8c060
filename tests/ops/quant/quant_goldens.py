"""Goldens and helpers shared by the quant tests.

Everything here is written from the docs / the CANN kernels' documented operation order, never
by calling npu_anywhere.
"""

from __future__ import annotations

import numpy as np
import torch

DTYPE_MAX = {"int8": 127.0, "int4": 7.0, "float8_e4m3fn": 448.0, "float8_e5m2": 57344.0,
             "hifloat8": 32768.0}


def hifloat8_golden(values: torch.Tensor) -> torch.Tensor:
    """The CANN goldens' hifloat8 output (hicann/ops-nn ``quant/quant_max/tests/assets/
    golden.py``): float32 values clipped to +-2^15, NaN -> 0, then ``en_dtypes.hifloat8``'s
    cast (round half away from zero); returned as the uint8 codes."""
    import en_dtypes

    a = values.detach().to(torch.float32).contiguous().numpy().copy()
    np.clip(a, -32768.0, 32768.0, out=a)
    a = np.nan_to_num(a, nan=0.0)
    return torch.from_numpy(a.astype(en_dtypes.hifloat8).view(np.uint8).copy())


def float8_golden(values: torch.Tensor, dst: torch.dtype) -> torch.Tensor:
    """The CANN goldens' float8 output (hicann/ops-nn ``quant/quant_max/tests/assets/golden.py``,
    ``quant/dynamic_block_quant/tests/assets/golden.py``): float32 values clipped to the
    format's largest finite value, NaN (of either sign) -> +0 ("NPU will cast NaN ... to
    positive ZERO", the kernels' ``SatMode::SAT``), then the round-half-even float8 cast."""
    top = DTYPE_MAX["float8_e4m3fn" if dst == torch.float8_e4m3fn else "float8_e5m2"]
    a = values.detach().to(torch.float32).contiguous().numpy().copy()
    np.clip(a, -top, top, out=a)
    a = np.nan_to_num(a, nan=0.0)
    return torch.from_numpy(a).to(dst)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtype, shape and bytes (a float8 +0 is not a -0, NaN equals the same NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def hifloat8_values(codes: torch.Tensor) -> torch.Tensor:
    """float64 values of hifloat8 codes, decoded by ``en_dtypes``."""
    import en_dtypes

    a = codes.contiguous().numpy().view(en_dtypes.hifloat8).astype(np.float64)
    return torch.from_numpy(a)


def assert_hifloat8_near(y: torch.Tensor, exact: torch.Tensor, max_mismatch: float = 0.01
                         ) -> None:
    """``y`` (hifloat8 codes) is the golden cast of the float64 ``exact`` except, for at most
    ``max_mismatch`` of the elements, the other neighbour of ``exact``: the NPU computes the
    value in float32, which can fall on the other side of a hifloat8 tie."""
    want = hifloat8_golden(exact)
    bad = y != want
    if bad.any():
        got_v, want_v, ex = hifloat8_values(y[bad]), hifloat8_values(want[bad]), exact[bad]
        lo, hi = torch.minimum(got_v, want_v), torch.maximum(got_v, want_v)
        assert bool(((lo <= ex) & (ex <= hi)).all()), (
            f"not a neighbour: got {got_v[:5].tolist()} want {want_v[:5].tolist()} exact "
            f"{ex[:5].tolist()}")
    assert bad.double().mean().item() <= max_mismatch, f"{int(bad.sum())} tie flips"


def unpack_int4_bytes(packed: torch.Tensor) -> torch.Tensor:
    """op-plugin's golden unpacking (test_npu_dynamic_quant.py ``convert_int4_to_int8``): the
    int32 buffer as bytes, low nibble first."""
    raw = np.ascontiguousarray(packed.numpy()).view(np.uint8).reshape(-1, 1)
    low = (raw & 0x0F).astype(np.int16)
    high = (raw >> 4).astype(np.int16)
    both = np.concatenate([low, high], axis=1)
    both = np.where(both >= 8, both - 16, both).astype(np.int8)
    shape = (*packed.shape[:-1], packed.shape[-1] * 8)
    return torch.from_numpy(both.reshape(shape).copy())


def half_even(t: torch.Tensor) -> torch.Tensor:
    """Round half to even, written out: floor(t + 0.5), minus 1 at exact ties with odd result."""
    f = torch.floor(t + 0.5)
    tie = (t + 0.5) == f
    odd = torch.remainder(f, 2) == 1
    return torch.where(tie & odd, f - 1, f)


def assert_quantized(y: torch.Tensor, exact: torch.Tensor, lo: float, hi: float,
                     tie_window: float = 2e-5) -> None:
    """``y`` (integers) equals round-half-even of the float64 ``exact`` (clamped to [lo, hi]),
    except that within ``tie_window`` (relative) of a .5 boundary either neighbour is accepted:
    the NPU works in float32, where those values can fall on either side."""
    want = half_even(exact).clamp(lo, hi)
    got = y.to(torch.float64)
    diff = (got - want).abs()
    frac = exact - torch.floor(exact)
    near_tie = (frac - 0.5).abs() <= tie_window * exact.abs().clamp_min(1.0)
    bad = (diff > 0) & ~(near_tie & (diff <= 1))
    assert not bad.any(), (f"{int(bad.sum())} mismatches, e.g. got {got[bad][:5].tolist()} want "
                           f"{want[bad][:5].tolist()} exact {exact[bad][:5].tolist()}")
    assert int(((diff > 0)).sum()) <= max(3, y.numel() // 1000), "too many tie flips"


def smooth_rows_golden(x: torch.Tensor, smooth, group_index) -> torch.Tensor:
    """op-plugin's golden loop (test_npu_dynamic_quant.py): rows [start, end) of x viewed as
    (rows, H) times smooth_scales[i]; empty groups skipped; float64."""
    v = x.to(torch.float64)
    if smooth is None:
        return v
    if group_index is None:
        return v * smooth.to(torch.float64)
    rows = v.reshape(-1, v.shape[-1]).clone()
    start = 0
    for i, end in enumerate(group_index.tolist()):
        if end <= start:
            start = end
            continue
        rows[start:end] = rows[start:end] * smooth[i].to(torch.float64)
        start = end
    return rows.reshape(v.shape)


def rand(shape, dtype=torch.float16, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)

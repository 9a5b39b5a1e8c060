"""torch_npu.npu_ifmr: IFMR (input feature map reconstruction) calibration -- search the int8
quantization scale (and offset) that minimizes the reconstruction error of ``data``.

Algorithm (op-plugin ``test/test_base_ops/test_ifmr.py`` golden)::

    cdf       = cumsum / numel(data)
    max_init  = count(cdf < max_percentile)     / bins * (data_max - data_min) + data_min
    min_init  = count(cdf < 1 - min_percentile) / bins * (data_max - data_min) + data_min
    for every step s in arange(search_start, search_end, search_step):
        candidate scale/offset from (min_init, max_init * s)
        loss(s) = sum((dequant(quant(data)) - data) ** 2)
    return the candidate with the smallest loss (the first one on ties)

Details: see :func:`npu_ifmr`.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import core

OP = "npu_ifmr"
SCHEMA = ("npu_ifmr(Tensor data, Tensor data_min, Tensor data_max, Tensor cumsum, "
          "float min_percentile, float max_percentile, float search_start, float search_end, "
          "float search_step, bool with_offset) -> (Tensor, Tensor)")

DATA_DTYPES = (torch.float16, torch.float32)
FLT_EPSILON = 1.192092896e-07
INT8 = core.FORMATS["int8"]
# Seed 004: Atlas training, A2, A3; the 950 from hicann/ops-nn quant/ifmr/README.md (its only
# kernel config is op_host/config/ascend950).
SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.A2, Product.A3, Product.ASCEND_950})


def search_steps(search_start: float, search_end: float, search_step: float) -> list[float]:
    """The candidate multipliers: ``numpy.arange(start, end, step, dtype=float32)``, as the
    golden builds them (their count and float32 values)."""
    return np.arange(search_start, search_end, search_step, dtype=np.float32).tolist()


def check_ifmr(data, data_min, data_max, cumsum, min_percentile, max_percentile, search_start,
               search_end, search_step, with_offset):
    checks.expect_dtype(data, DATA_DTYPES, OP, "data")
    checks.expect_nonempty(data, OP, "data")
    for name, t in (("data_min", data_min), ("data_max", data_max)):
        checks.expect(t.dtype == data.dtype, OP, name, lambda: f"the dtype of data ({data.dtype})",
                      lambda t=t: str(t.dtype), TypeError)
        checks.expect(t.numel() == 1, OP, name, "a single value (shape (1,))",
                      lambda t=t: f"shape {tuple(t.shape)}")
    checks.expect_dtype(cumsum, (torch.int32,), OP, "cumsum")
    checks.expect_dim(cumsum, 1, OP, "cumsum")
    checks.expect_nonempty(cumsum, OP, "cumsum")
    checks.expect_same_device({"data": data, "data_min": data_min, "data_max": data_max,
                               "cumsum": cumsum}, OP)
    for name, p in (("min_percentile", min_percentile), ("max_percentile", max_percentile)):
        checks.expect(0.0 <= p <= 1.0, OP, name, "a value in [0, 1]", p, ValueError)
    checks.expect(math.isfinite(search_step) and search_step > 0, OP, "search_step",
                  "a positive value", search_step, ValueError)
    checks.expect(math.isfinite(search_start) and math.isfinite(search_end)
                  and 0.0 <= search_start < search_end, OP, "search_start",
                  lambda: f"a value in [0, search_end) (search_end {search_end})",
                  search_start, ValueError)
    targets.expect_supported(OP, SUPPORTED)


def ifmr_reference(data, data_min, data_max, cumsum, min_percentile, max_percentile,
                   search_start, search_end, search_step, with_offset):
    f32 = torch.float32
    x = data.to(f32).reshape(-1)
    bins = float(cumsum.shape[0])
    cdf = cumsum.to(f32) / float(x.numel())
    max_index = (cdf < core._f32(max_percentile)).sum().to(f32)
    min_index = (cdf < core._f32(1.0 - min_percentile)).sum().to(f32)
    lo = data_min.to(f32).reshape(1)
    span = data_max.to(f32).reshape(1) - lo
    max_init = max_index / bins * span + lo
    min_init = min_index / bins * span + lo
    steps = torch.tensor(search_steps(search_start, search_end, search_step), dtype=f32,
                         device=data.device)
    if with_offset:
        max_init = torch.where(max_init < 0, torch.zeros_like(max_init), max_init)
        min_init = torch.where(min_init > 0, torch.zeros_like(min_init), min_init)
        min_list = min_init * torch.ones_like(steps)
        max_list = max_init * steps
        scale = (max_list - min_list) / 255.0
        scale = torch.where(scale < FLT_EPSILON, torch.ones_like(scale), scale)
        offset = -(torch.round(min_list / scale) + 128.0)
    else:
        max_init = torch.maximum(max_init.abs(), min_init.abs())
        scale = max_init * steps / 127.0
        offset = torch.zeros_like(scale)
    losses = []
    for i in range(steps.shape[0]):
        q = (torch.round(x / scale[i]) + offset[i]).clamp(INT8.qmin, INT8.qmax)
        err = (q - offset[i]) * scale[i] - x
        losses.append((err * err).sum())
    best = torch.argmin(torch.stack(losses)).reshape(1)      # a tensor index (traceable)
    out_shape = data_min.shape
    return (scale.gather(0, best).reshape(out_shape).to(data_min.dtype),
            offset.gather(0, best).reshape(out_shape).to(data_min.dtype))


ifmr_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_ifmr, reference=ifmr_reference,
                metadata_check=True, info=OpInfo(api="torch_npu"))
ifmr_op.forbid_autograd("npu_ifmr has no backward on the NPU")


def npu_ifmr(data, data_min, data_max, cumsum, min_percentile, max_percentile, search_start,
             search_end, search_step, with_offset):
    """IFMR calibration: the int8 scale (and offset) minimizing the squared reconstruction
    error of ``data`` over a search around a percentile-based initial range.

    Algorithm (float32 throughout)::

        cdf       = cumsum / numel(data)
        max_init  = count(cdf < max_percentile)     / bins * (data_max - data_min) + data_min
        min_init  = count(cdf < 1 - min_percentile) / bins * (data_max - data_min) + data_min
        steps     = arange(search_start, search_end, search_step)   # float32
        with_offset:
            max_init = max(max_init, 0); min_init = min(min_init, 0)
            scale    = (max_init * steps - min_init) / 255   (values < FLT_EPSILON -> 1)
            offset   = -(round(min_init / scale) + 128)
        else:
            scale    = max(|max_init|, |min_init|) * steps / 127;  offset = 0
        loss      = sum(((clip(round(data / scale) + offset, -128, 127) - offset) * scale
                         - data) ** 2)
        return scale, offset at argmin(loss)   (the first on ties)

    ``round`` is half to even (``numpy.round``).

    Parameters
    ----------
    data : Tensor
        float32 or float16, non-empty, any shape and strides.
    data_min, data_max : Tensor
        One value each (shape ``(1,)``), data's dtype: the minimum / maximum of data.
    cumsum : Tensor
        int32 1-D: the cumulative histogram of data over [data_min, data_max]; its length is
        the number of bins.
    min_percentile, max_percentile : float
        In [0, 1].
    search_start, search_end, search_step : float
        The multipliers tried: ``arange(search_start, search_end, search_step)`` in float32
        (0 <= start < end, step > 0).
    with_offset : bool
        Asymmetric (offset) or symmetric quantization.

    Returns
    -------
    (scale, offset)
        Both of data_min's shape and dtype.

    Constraints
    -----------
    Products: Atlas training (910), A2, A3 (seed 004) and the 950 (hicann/ops-nn
    ``quant/ifmr/README.md``).

    Notes
    -----
    Settled by op-plugin's golden (``test/test_base_ops/test_ifmr.py`` ``cpu_op_exec``, which
    the NPU's IFMR is judged by; ``op_plugin/ops/aclops/IfmrKernelNpu.cpp`` passes the
    arguments as float32 attributes and allocates both outputs like data_min).  Sums run in
    float32 in a different order from numpy's pairwise sum, so two candidates whose losses
    agree to about 1e-7 relative may be ordered differently.  With ``with_offset=False`` and
    an all-zero initial range the scale is 0 and every loss NaN (as in the golden).  The
    seed's one-line description (copied from npu_indexing) is a doc defect.  No backward.

    Examples
    --------
    >>> data = torch.tensor([0.0, 0.25, 0.5, 1.0])
    >>> cumsum = torch.tensor([1, 2, 3, 4], dtype=torch.int32)
    >>> scale, offset = npu_anywhere.npu_ifmr(data, data.min().reshape(1),
    ...     data.max().reshape(1), cumsum, 1.0, 1.0, 0.7, 1.3, 0.01, False)
    """
    return ifmr_op(data, data_min, data_max, cumsum, min_percentile, max_percentile,
                   search_start, search_end, search_step, with_offset)


TORCH_NPU_FUNCTIONS = {"npu_ifmr": npu_ifmr}

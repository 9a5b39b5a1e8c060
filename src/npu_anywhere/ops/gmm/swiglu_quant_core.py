"""The shared arithmetic of npu_grouped_matmul_swiglu_quant and its v2.

Formula (op-plugin golden ``test/test_custom_ops/test_npu_grouped_matmul_swiglu_quant.py``,
``GMM_Swiglu_quant``)::

    c      = float32(x[r] @ weight[e(r)]) * weight_scale[e(r)] * x_scale[r]     (int32 exact)
    a, g   = c[:, :n/2], c[:, n/2:]
    s      = a * sigmoid(a) * g                            (SwiGLU, the left half activated)
    q      = int8(round(s * (127 / max|s|)))  per row;  q_scale = max|s| / 127

The per-row quantization is :func:`quant.core.dynamic_symmetric` with the A2/A3 kernels'
reciprocal order.  Rows past the last group are not computed (the NPU leaves them dirty; the
doc says to cut them off at the cumsum's end): here they come out as 0 with scale 0.
"""

from __future__ import annotations

import torch

from ..quant import core as quant_core
from ..matmul.integer import int_mm
from .grouping import Segment


def grouped_swiglu_quant(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                         x_scale: torch.Tensor, segments: list[Segment]
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    m, n = x.shape[0], weight.shape[2]
    c = torch.zeros(m, n, dtype=torch.float32, device=x.device)
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        acc = int_mm(x[rows], weight[seg.expert])          # exact int32
        v = acc.to(torch.float32) * weight_scale[seg.expert].to(torch.float32)
        c[rows] = v * x_scale[rows].unsqueeze(-1)
    a, g = c.chunk(2, dim=-1)
    s = a * torch.sigmoid(a) * g
    q, scale = quant_core.dynamic_symmetric(s, quant_core.FORMATS["int8"], -1,
                                            reciprocal=True, owned=True)
    return q, scale.squeeze(-1)

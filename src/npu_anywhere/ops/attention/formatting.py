"""From the solver's float32 ``(out [B, N, Sq, Dv], lse [B, N, Sq])`` to the op's outputs.

- left padding: valid rows go back to ``S - pad - len : S - pad``;
- layout: BSH / BSND / BNSD / NBSD, or packed TND / NTD (rows past the last cumulative length 0);
- dtype: rounded once to the query dtype, or quantized to int8 with ``quant_scale2`` /
  ``quant_offset2``: ``int8(sat(rint(out * scale + offset)))`` per-tensor or per-channel
  (per (N, D) element);
- softmax_lse: float32 ``[B, N, Sq, 1]`` (``[T, N, 1]`` packed); a row with nothing visible
  holds ``-3.40e38``, the value the incremental kernel writes for an empty KV
  (ops-transformer ``incre_flash_attention`` ``InitAllZeroOutput``); rows that the mask alone
  empties arrive here already resolved (``core.apply_masked_rows``: finite, or +inf).  Without
  ``softmax_lse_flag`` the lse is the empty float32 placeholder op-plugin allocates
  (``{0}``, ``FusedInferAttentionScoreKernelNpuOpApi.cpp``; the page says a [1] zero tensor).
"""

from __future__ import annotations

from typing import Optional

import torch

from . import layouts
from .fia_normalize import OutputPlan

EMPTY_ROW_LSE = -3.40e38


def _unshift(x: torch.Tensor, starts: Optional[list], capacity: int) -> torch.Tensor:
    if starts is None:
        return x
    out = torch.zeros_like(x)
    for b, st in enumerate(starts):
        out[b, :, st:] = x[b, :, :capacity - st]
    return out


def _to_layout(x: torch.Tensor, plan: OutputPlan) -> torch.Tensor:
    if plan.q_layout in layouts.PACKED:
        total = plan.query_shape[0] if plan.q_layout == "TND" else plan.query_shape[1]
        return layouts.pack(x, plan.out_layout, plan.q_cum, total)
    return layouts.from_bnsd(x, plan.out_layout)


def _quantize(out: torch.Tensor, plan: OutputPlan) -> torch.Tensor:
    scale = plan.quant_scale2.to(torch.float32)
    offset = None if plan.quant_offset2 is None else plan.quant_offset2.to(torch.float32)
    n, d = out.shape[1], out.shape[3]
    if scale.numel() > 1:                       # per-channel over (N, D)
        scale = scale.reshape(1, n, 1, d)
        offset = None if offset is None else offset.reshape(1, n, 1, d)
    else:
        scale = scale.reshape(())
        offset = None if offset is None else offset.reshape(())
    y = out * scale
    if offset is not None:
        y = y + offset
    return torch.round(y).clamp_(-128, 127).to(torch.int8)


def format_outputs(out: torch.Tensor, lse: Optional[torch.Tensor], plan: OutputPlan
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    out = _unshift(out, plan.q_start, plan.q_capacity)
    if plan.quant_scale2 is not None:
        out = _quantize(out, plan)
    else:
        out = out.to(plan.out_dtype)
    attention_out = _to_layout(out, plan)
    if not plan.lse_flag:
        # The eager op allocates a {0} float tensor here (op-plugin
        # op_plugin/ops/opapi/FusedInferAttentionScoreKernelNpuOpApi.cpp, and the meta's
        # torch.empty([0])); the page's "[1] zeros" is the aclnn call without an lse tensor.
        return attention_out, out.new_zeros(0, dtype=torch.float32)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, EMPTY_ROW_LSE), lse)
    lse = _unshift(lse.unsqueeze(-1), plan.q_start, plan.q_capacity).to(torch.float32)
    if plan.q_layout in layouts.PACKED:
        total = plan.query_shape[0] if plan.q_layout == "TND" else plan.query_shape[1]
        return attention_out, layouts.pack(lse, "TND", plan.q_cum, total)
    return attention_out, lse.contiguous()


def empty_outputs(query: torch.Tensor, plan: OutputPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """Outputs of the right shapes and dtypes, uninitialized (fake kernels, infer_output)."""
    shape = layouts.output_shape(plan.query_shape, plan.q_layout, plan.out_layout, plan.num_heads,
                                 plan.d_out)
    out = query.new_empty(shape, dtype=plan.out_dtype)
    if plan.lse_flag:
        lse = query.new_empty(layouts.lse_shape(plan.query_shape, plan.q_layout, plan.num_heads),
                              dtype=torch.float32)
    else:
        lse = query.new_empty(0, dtype=torch.float32)
    return out, lse

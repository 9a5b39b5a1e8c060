"""torch_npu.npu_moe_re_routing: tokens received by AlltoAll, regrouped from rank order to
expert order.

Formula (op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_re_routing.md; the index
convention follows ops-transformer moe/moe_re_routing/op_kernel/moe_re_routing.h)::

    C = expert_token_num_per_rank  (N ranks, E experts): C[i, j] tokens of expert j from rank i
    source:      blocks (i, j) in rank-major order,   SrcOffset(i, j) = sum of the blocks before
    destination: blocks (j, i) in expert-major order, DstOffset(j, i) = sum of the blocks before
    permute_tokens[DstOffset(j, i) + r] = tokens[SrcOffset(i, j) + r]      r < C[i, j]
    permute_per_token_scales: per_token_scales moved the same way
    permute_token_idx[d] = the source row of destination row d  (a gather index, idx_type 0)
    expert_token_num[j] = sum_i C[i, j]                            (count mode, type 1)

Without ``per_token_scales`` the NPU leaves ``permute_per_token_scales`` unwritten; here it is
ones.  ``sum(C)`` must equal the token count A (data: not checked, as on the NPU); destination
rows past ``sum(C)`` then read row 0 (``permute_token_idx`` 0) instead of being left undefined.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_moe_re_routing"
SCHEMA = ("npu_moe_re_routing(Tensor tokens, Tensor expert_token_num_per_rank, *, "
          "Tensor? per_token_scales=None, int expert_token_num_type=1, int idx_type=0, "
          "int? tokens_dtype=None) -> (Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_SUPPORTED_BYTES = frozenset({Product.ASCEND_950})      # op-plugin's hifloat8 / float4 tests
_BYTE_TOKEN_DTYPES = (dtypes.HIFLOAT8, dtypes.FLOAT4_E2M1FN_X2, dtypes.FLOAT4_E1M2FN_X2)
_TOKEN_DTYPES = (torch.float16, torch.bfloat16, torch.int8)
_MAX_HIDDEN = 16384


def check_re_routing(tokens, expert_token_num_per_rank, *, per_token_scales=None,
                     expert_token_num_type=1, idx_type=0, tokens_dtype=None):
    product = targets.current()
    if tokens_dtype is None:
        allowed = _TOKEN_DTYPES if product is not None else _TOKEN_DTYPES + (torch.float32,)
    else:
        # Ascend 950: hifloat8 / float4 tokens travel as their uint8 bytes (moved unchanged).
        checks.expect_one_of(tokens_dtype, _BYTE_TOKEN_DTYPES, OP, "tokens_dtype")
        allowed = (torch.uint8,)
    checks.expect_dtype(tokens, allowed, OP, "tokens")
    checks.expect_dim(tokens, 2, OP, "tokens")
    checks.expect(0 < tokens.shape[1] < _MAX_HIDDEN, OP, "tokens",
                  f"a hidden size H with 0 < H < {_MAX_HIDDEN}",
                  lambda: f"shape {tuple(tokens.shape)}", ValueError)
    checks.expect_dim(expert_token_num_per_rank, 2, OP, "expert_token_num_per_rank")
    checks.expect_dtype(expert_token_num_per_rank, (torch.int32, torch.int64), OP,
                        "expert_token_num_per_rank")
    if per_token_scales is not None:
        checks.expect_dtype(per_token_scales, (torch.float32,), OP, "per_token_scales")
        checks.expect(tuple(per_token_scales.shape) == (tokens.shape[0],), OP, "per_token_scales",
                      lambda: f"shape (A,) = ({tokens.shape[0]},)",
                      lambda: f"shape {tuple(per_token_scales.shape)}", RuntimeError)
    checks.expect(expert_token_num_type == 1, OP, "expert_token_num_type",
                  "1 (count mode, the only one supported)", repr(expert_token_num_type),
                  ValueError)
    checks.expect(idx_type == 0, OP, "idx_type", "0 (gather index, the only one supported)",
                  repr(idx_type), ValueError)
    named = {"tokens": tokens, "expert_token_num_per_rank": expert_token_num_per_rank}
    if per_token_scales is not None:
        named["per_token_scales"] = per_token_scales
    checks.expect_same_device(named, OP)
    targets.expect_supported(OP, _SUPPORTED if tokens_dtype is None else _SUPPORTED_BYTES)


def _gather_index(counts: torch.Tensor, rows: int) -> torch.Tensor:
    """The source row of every destination row (int64 ``(rows,)``), with static shapes only."""
    c = counts.to(torch.int64)
    ranks, experts = c.shape
    src_start = (c.reshape(-1).cumsum(0) - c.reshape(-1)).view(ranks, experts)   # (i, j)
    dst_sizes = c.t().reshape(-1)                                                 # (j, i)
    dst_end = dst_sizes.cumsum(0)
    d = torch.arange(rows, dtype=torch.int64, device=counts.device)
    block = torch.searchsorted(dst_end, d, right=True).clamp(max=dst_sizes.numel() - 1)
    offset = d - (dst_end - dst_sizes)[block]
    j, i = block // ranks, block % ranks
    src = src_start[i, j] + offset
    # Rows past sum(C) (inconsistent counts) read row 0 rather than out of bounds.
    return torch.where((d < dst_end[-1]) & (src < rows), src, 0)


def re_routing_reference(tokens, expert_token_num_per_rank, *, per_token_scales=None,
                         expert_token_num_type=1, idx_type=0, tokens_dtype=None):
    rows = tokens.shape[0]
    if expert_token_num_per_rank.numel() == 0:
        src = torch.zeros(rows, dtype=torch.int64, device=tokens.device)
    else:
        src = _gather_index(expert_token_num_per_rank, rows)
    permuted = tokens.index_select(0, src)
    if per_token_scales is None:
        scales = torch.ones(rows, dtype=torch.float32, device=tokens.device)
    else:
        scales = per_token_scales.index_select(0, src)
    counts = expert_token_num_per_rank.sum(dim=0).to(expert_token_num_per_rank.dtype)
    return permuted, scales, src.to(torch.int32), counts


re_routing_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_re_routing,
                      reference=re_routing_reference, metadata_check=True,
                      info=OpInfo(api="torch_npu"))
re_routing_op.forbid_autograd("torch_npu defines no backward for it")


def npu_moe_re_routing(tokens, expert_token_num_per_rank, *, per_token_scales=None,
                       expert_token_num_type=1, idx_type=0, tokens_dtype=None):
    """Regroup tokens received from every rank (rank-major blocks) into expert-major blocks.

    Formula::

        C = expert_token_num_per_rank            # (N, E): tokens of expert j from rank i
        permute_tokens[DstOffset(j, i) + r] = tokens[SrcOffset(i, j) + r],  r < C[i, j]
        SrcOffset(i, j): blocks before (i, j) in rank-major order
        DstOffset(j, i): blocks before (j, i) in expert-major order
        permute_token_idx[d] = source row of d;  expert_token_num[j] = sum_i C[i, j]

    Parameters
    ----------
    tokens : Tensor
        ``(A, H)``, float16, bfloat16 or int8 (float32 too outside strict mode), ``0 < H < 16384``.
    expert_token_num_per_rank : Tensor
        ``(N, E)`` int32 or int64; its sum must be A (data: not checked).
    per_token_scales : Tensor, optional
        ``(A,)`` float32, moved with the tokens.
    expert_token_num_type : int
        Only 1 (counts).
    idx_type : int
        Only 0 (gather index).  1 ("scatter index") is named by op-plugin's page and
        ops-transformer's README ("0为gather索引，1为scatter索引 ... 当前只支持为0"), rejected by
        the A2 / A3 tiling (op_host/moe_re_routing_membase_tiling.cpp: "idxType should == 0")
        and accepted by the Ascend 950 tiling only, whose kernel is not published; no source
        defines its values (op-plugin's only idx_type=1 case is never reached by its zip), so
        it raises here rather than guess.
    tokens_dtype : int, optional
        None, or (Ascend 950) torch_npu.hifloat8 / float4_e2m1fn_x2 / float4_e1m2fn_x2 for
        uint8 ``tokens`` holding those bytes, which are moved unchanged (uint8 out).

    Returns
    -------
    (permute_tokens, permute_per_token_scales, permute_token_idx, expert_token_num) :
    ``(A, H)`` in tokens' dtype, ``(A,)`` float32 (ones without scales), ``(A,)`` int32 and
    ``(E,)`` in ``expert_token_num_per_rank``'s dtype.

    Notes
    -----
    Op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_re_routing.md; index convention of
    ops-transformer moe/moe_re_routing/op_kernel/moe_re_routing.h.  A pure data movement: the
    values are copied bit for bit.  Inference only.  Strict mode: A2, A3.
    """
    return re_routing_op(tokens, expert_token_num_per_rank, per_token_scales=per_token_scales,
                         expert_token_num_type=expert_token_num_type, idx_type=idx_type,
                         tokens_dtype=tokens_dtype)


TORCH_NPU_FUNCTIONS = {OP: npu_moe_re_routing}

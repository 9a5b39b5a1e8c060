"""torch_npu.npu_moe_update_expert: EPLB logical -> physical expert mapping and pruning.

Formula (seed 004 and op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_moe_update_expert.md;
the numerics follow ops-transformer mc2/moe_update_expert/op_kernel/moe_update_expert.h)::

    e = expert_ids[i, j];  count = eplb_table[e, 0];  F = eplb_table.size(1)
    place = 0                                          if count == 1
            local_rank_id // ceil(world_size / count)  balance_mode 0 (by rank)
            i % count                                  balance_mode 1 (by token id)
    balanced_expert_ids[i, j] = eplb_table[e, place + 1]

    with expert_scales and pruning_threshold (float32 arithmetic):
    total[i] = expert_scales[i, 0] + expert_scales[i, 1] + ...   (left to right)
    balanced_active_mask[i, j] = expert_scales[i, j] >= pruning_threshold[j] * total[i]
                                 and active_mask[i]

The kernel compares with ``>=`` (``CMPMODE::GE``): a scale exactly at the threshold is kept,
as in the seed's golden (``scale < threshold * sum`` prunes); the doc's pseudo code writes ``<``
the other way round.  Without pruning inputs the NPU leaves ``balanced_active_mask`` unwritten;
here it is all True (nothing pruned).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._routing import compute_dtype, expect_float

OP = "npu_moe_update_expert"
SCHEMA = ("npu_moe_update_expert(Tensor expert_ids, Tensor eplb_table, *, "
          "Tensor? expert_scales=None, Tensor? pruning_threshold=None, Tensor? active_mask=None, "
          "int local_rank_id=-1, int world_size=-1, int balance_mode=0) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A3})
_MAX_BS = 512                 # tiling BS_MAX
_MAX_K = 16                   # tiling K_MAX
_MAX_EXPERTS = 1024           # tiling MAX_MOE_EXPERT_NUM (rows of eplb_table)
_WORLD_SIZES = (2, 768)       # tiling MIN_WORLD_SIZE, MAX_WORLD_SIZE


def _check_attrs(local_rank_id, world_size, balance_mode):
    checks.expect_one_of(balance_mode, (0, 1), OP, "balance_mode")
    if balance_mode != 0:
        return
    low, high = _WORLD_SIZES
    checks.expect(low <= world_size <= high, OP, "world_size",
                  f"in [{low}, {high}] when balance_mode is 0", world_size, ValueError)
    checks.expect(0 <= local_rank_id < world_size, OP, "local_rank_id",
                  lambda: f"in [0, world_size = {world_size}) when balance_mode is 0",
                  local_rank_id, ValueError)


def _check_pruning(expert_scales, pruning_threshold, active_mask, bs, k):
    given = "given" if expert_scales is not None else "None"
    checks.expect((expert_scales is None) == (pruning_threshold is None), OP,
                  "pruning_threshold", f"a tensor exactly when expert_scales is ({given})",
                  lambda: "None" if pruning_threshold is None else "a tensor", ValueError)
    checks.expect(active_mask is None or expert_scales is not None, OP, "active_mask",
                  "None unless expert_scales and pruning_threshold are given", "a tensor",
                  ValueError)
    if expert_scales is None:
        return
    expect_float(OP, "expert_scales", expert_scales)
    checks.expect(tuple(expert_scales.shape) == (bs, k), OP, "expert_scales",
                  lambda: f"expert_ids' shape {(bs, k)}",
                  lambda: f"shape {tuple(expert_scales.shape)}", RuntimeError)
    checks.expect_dtype(pruning_threshold, (torch.float32,), OP, "pruning_threshold")
    checks.expect(tuple(pruning_threshold.shape) in ((k,), (1, k)), OP, "pruning_threshold",
                  lambda: f"shape ({k},) or (1, {k})",
                  lambda: f"shape {tuple(pruning_threshold.shape)}", RuntimeError)
    if active_mask is not None:
        checks.expect_dtype(active_mask, (torch.bool,), OP, "active_mask")
        checks.expect(tuple(active_mask.shape) == (bs,), OP, "active_mask",
                      lambda: f"shape ({bs},)", lambda: f"shape {tuple(active_mask.shape)}",
                      RuntimeError)


def check_update_expert(expert_ids, eplb_table, *, expert_scales=None, pruning_threshold=None,
                        active_mask=None, local_rank_id=-1, world_size=-1, balance_mode=0):
    targets.expect_supported(OP, _SUPPORTED)
    _check_attrs(local_rank_id, world_size, balance_mode)
    checks.expect_dim(expert_ids, 2, OP, "expert_ids")
    checks.expect_dtype(expert_ids, (torch.int32, torch.int64), OP, "expert_ids")
    bs, k = expert_ids.shape
    checks.expect(1 <= bs <= _MAX_BS, OP, "expert_ids", "BS = size(0) in [1, 512]",
                  lambda: f"shape {tuple(expert_ids.shape)}", ValueError)
    checks.expect(1 <= k <= _MAX_K, OP, "expert_ids", "K = size(1) in [1, 16]",
                  lambda: f"shape {tuple(expert_ids.shape)}", ValueError)
    checks.expect_dim(eplb_table, 2, OP, "eplb_table")
    checks.expect_dtype(eplb_table, (torch.int32,), OP, "eplb_table")
    experts, f = eplb_table.shape
    checks.expect(k <= experts <= _MAX_EXPERTS, OP, "eplb_table",
                  lambda: f"between K = {k} and 1024 rows (logical experts)",
                  lambda: f"shape {tuple(eplb_table.shape)}", ValueError)
    # Outside balance_mode 0 the kernel bounds F by the largest world size.
    max_f = (world_size if balance_mode == 0 else _WORLD_SIZES[1]) + 1
    checks.expect(2 <= f <= max_f, OP, "eplb_table",
                  lambda: f"F = size(1) in [2, world_size + 1 = {max_f}]",
                  lambda: f"shape {tuple(eplb_table.shape)}", ValueError)
    _check_pruning(expert_scales, pruning_threshold, active_mask, bs, k)


def _expect_values(expert_ids, eplb_table, active_mask):
    """The values the mapping reads (eager calls only: they are data)."""
    experts, f = eplb_table.shape
    lo, hi = (int(v) for v in torch.aminmax(expert_ids))
    checks.expect(lo >= 0 and hi < experts, OP, "expert_ids",
                  f"values in [0, {experts - 1}] (rows of eplb_table)",
                  lambda: f"values in [{lo}, {hi}]", IndexError)
    counts = eplb_table[:, 0].index_select(0, expert_ids.reshape(-1).to(torch.int64))
    lo, hi = (int(v) for v in torch.aminmax(counts))
    checks.expect(lo >= 1 and hi <= f - 1, OP, "eplb_table",
                  f"instance counts (column 0) in [1, F - 1 = {f - 1}] for the experts "
                  "expert_ids names", lambda: f"counts in [{lo}, {hi}]", ValueError)
    if active_mask is not None and active_mask.numel() > 1:
        # True entries come first: {true, false, true} is an illegal input (seed 004).
        late = (~active_mask[:-1]) & active_mask[1:]
        if bool(late.any()):
            where = int(late.nonzero()[0, 0]) + 1
            checks.expect(False, OP, "active_mask", "every True before every False",
                          f"True at {where} after a False", ValueError)


def _sum_left_to_right(scales: torch.Tensor) -> torch.Tensor:
    """Row sums in one fixed order (K <= 16 adds), so the threshold compare is reproducible."""
    total = scales[:, 0]
    for j in range(1, scales.shape[1]):
        total = total + scales[:, j]
    return total


def update_expert_reference(expert_ids, eplb_table, *, expert_scales=None,
                            pruning_threshold=None, active_mask=None, local_rank_id=-1,
                            world_size=-1, balance_mode=0):
    _expect_values(expert_ids, eplb_table, active_mask)
    bs, _ = expert_ids.shape
    f = eplb_table.shape[1]
    ids = expert_ids.to(torch.int64)
    table = eplb_table.to(torch.int64)
    counts = table[:, 0][ids]
    if balance_mode == 0:
        modulus = (world_size + counts - 1) // counts               # ceil(world_size / count)
        place = local_rank_id // modulus
    else:
        token = torch.arange(bs, device=ids.device).unsqueeze(1)
        place = token % counts
    place = torch.where(counts == 1, 0, place)
    balanced = table.reshape(-1)[ids * f + place + 1].to(expert_ids.dtype)
    if expert_scales is None:
        return balanced, torch.ones(expert_ids.shape, dtype=torch.bool, device=ids.device)
    ct = compute_dtype(expert_scales.dtype)
    scales = expert_scales.to(ct)
    limits = pruning_threshold.reshape(1, -1).to(ct) * _sum_left_to_right(scales).unsqueeze(1)
    keep = scales >= limits
    if active_mask is not None:
        keep = keep & active_mask.unsqueeze(1)
    return balanced, keep


def update_expert_fake(expert_ids, eplb_table, *, expert_scales=None, pruning_threshold=None,
                       active_mask=None, local_rank_id=-1, world_size=-1, balance_mode=0):
    return expert_ids.new_empty(expert_ids.shape), expert_ids.new_empty(expert_ids.shape,
                                                                        dtype=torch.bool)


update_expert_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_update_expert,
                         reference=update_expert_reference, fake=update_expert_fake,
                         metadata_check=True, info=OpInfo(api="torch_npu"))
update_expert_op.forbid_autograd("npu_moe_update_expert maps expert ids (no backward in "
                                 "op-plugin's derivatives.yaml)")


def npu_moe_update_expert(expert_ids, eplb_table, *, expert_scales=None, pruning_threshold=None,
                          active_mask=None, local_rank_id=-1, world_size=-1, balance_mode=0):
    """Map each token's top-K logical experts to physical instances (EPLB), optionally pruning.

    Formula::

        e = expert_ids[i, j];  count = eplb_table[e, 0]
        place = 0                                          if count == 1
                local_rank_id // ceil(world_size / count)  balance_mode 0
                i % count                                  balance_mode 1
        balanced_expert_ids[i, j] = eplb_table[e, place + 1]
        total[i] = sum_j expert_scales[i, j]                   (float32, left to right)
        balanced_active_mask[i, j] = (expert_scales[i, j] >= pruning_threshold[j] * total[i])
                                     & active_mask[i]

    Parameters
    ----------
    expert_ids : Tensor
        ``(BS, K)`` int32 or int64 logical expert ids; 1 <= BS <= 512, 1 <= K <= 16.
    eplb_table : Tensor
        ``(log_expert_num, F)`` int32, K <= log_expert_num <= 1024, 2 <= F <= world_size + 1:
        column 0 the number of instances of each logical expert (1 .. F-1), columns 1.. their
        physical ids.
    expert_scales : Tensor, optional
        ``(BS, K)`` float16, bfloat16 or float32, descending within each token (the caller's
        promise; the computation does not read the order).  Needs ``pruning_threshold``.
    pruning_threshold : Tensor, optional
        ``(K,)`` or ``(1, K)`` float32.  Needs ``expert_scales``.
    active_mask : Tensor, optional
        ``(BS,)`` bool, every True before every False; needs both pruning inputs.  A False
        token keeps no expert.
    local_rank_id, world_size : int
        Used by balance_mode 0: world_size in [2, 768], local_rank_id in [0, world_size).
    balance_mode : int
        0: choose the instance by rank; 1: by token index.

    Returns
    -------
    (balanced_expert_ids, balanced_active_mask)
        ``(BS, K)`` in ``expert_ids``' dtype, and ``(BS, K)`` bool.

    Constraints
    -----------
    Strict mode: Atlas A3 only.  The doc's further rules on the table (physical ids below
    moe_expert_num, the counts summing to at most 1024 and dividing world_size) keep it
    consistent with npu_moe_distribute_dispatch and are not checked here; the expert ids,
    instance counts and active_mask order are checked in eager calls (they are data).

    Notes
    -----
    The kernel keeps a scale equal to its threshold (``>=``).  Without pruning inputs the NPU
    leaves ``balanced_active_mask`` unwritten; here it is all True.  No backward.

    Examples
    --------
    >>> table = torch.tensor([[1, 3, 0], [2, 5, 6]], dtype=torch.int32)
    >>> ids = torch.tensor([[0, 1], [1, 0]], dtype=torch.int32)
    >>> npu_moe_update_expert(ids, table, balance_mode=1)[0]
    tensor([[3, 5],
            [6, 3]], dtype=torch.int32)
    """
    return update_expert_op(expert_ids, eplb_table, expert_scales=expert_scales,
                            pruning_threshold=pruning_threshold, active_mask=active_mask,
                            local_rank_id=local_rank_id, world_size=world_size,
                            balance_mode=balance_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_moe_update_expert}

"""What npu_alltoallv_gmm and npu_gmm_alltoallv share: the expert-parallel count layout, the
checks, the grouped matmul and the shared-expert matmul.

Counts (seed 004, npu_alltoallv_quant_gmm's page, which spells the layout out): ``send_counts``
and ``recv_counts`` have ``e * ep_world_size`` entries, rank-major: ``send_counts[i * e + j]``
rows go to expert j of rank i, ``recv_counts[i * e + j]`` rows come from rank i for local
expert j.  Rows travel rank-major (all of rank i's, expert by expert); the grouped matmul takes
them expert-major (all of expert j's, rank by rank) -- the "permute" of the formulas.
"""

from __future__ import annotations

import torch

from ... import checks
from . import _comm, _local


def per_rank(counts: list[int], e: int) -> list[int]:
    return [sum(counts[i * e:(i + 1) * e]) for i in range(len(counts) // e)]


def per_expert(counts: list[int], e: int) -> list[int]:
    return [sum(counts[j::e]) for j in range(e)]


def rank_major_to_expert_major(rows: torch.Tensor, counts: list[int], e: int) -> torch.Tensor:
    chunks = torch.split(rows, list(counts))
    ranks = len(counts) // e
    return torch.cat([chunks[i * e + j] for j in range(e) for i in range(ranks)])


def expert_major_to_rank_major(rows: torch.Tensor, counts: list[int], e: int) -> torch.Tensor:
    ranks = len(counts) // e
    chunks = torch.split(rows, [counts[i * e + j] for j in range(e) for i in range(ranks)])
    return torch.cat([chunks[j * ranks + i] for i in range(ranks) for j in range(e)])


def grouped_mm(x: torch.Tensor, weight: torch.Tensor, sizes: list[int],
               trans: bool) -> torch.Tensor:
    """Rows ``sizes[j]`` of x times expert j's weight, float32, rounded once to x's dtype."""
    w = weight.transpose(1, 2) if trans else weight
    parts = [_local.float_mm(rows, w[j]) for j, rows in enumerate(torch.split(x, sizes))]
    return torch.cat(parts).to(x.dtype) if parts else x.new_empty((0, w.shape[2]))


def shared_mm(mm_x, mm_weight, trans: bool, like: torch.Tensor) -> torch.Tensor:
    """The shared expert's ``mm_x @ mm_weight``; an empty ``[0]`` tensor without one (the NPU
    returns an undefined tensor, which a schema output cannot be)."""
    if mm_x is None:
        return like.new_empty((0,))
    w = mm_weight.t() if trans else mm_weight
    return _local.float_mm(mm_x, w).to(mm_x.dtype)


def _expect_counts(op: str, name: str, counts, expected_len: int) -> None:
    checks.expect(len(counts) == expected_len, op, name,
                  lambda: f"e * ep_world_size = {expected_len} entries", len(counts), ValueError)
    checks.expect(all(c >= 0 for c in counts), op, name, "non-negative counts", list(counts),
                  ValueError)


def check(op, gmm_x, gmm_weight, hcom, ep_world_size, send_counts, recv_counts,
          send_counts_tensor, recv_counts_tensor, mm_x, mm_weight, trans_gmm_weight,
          trans_mm_weight, dtypes=_local.FLOAT_DTYPES) -> None:
    """The checks of the four ops (``dtypes``: the input dtypes; the quantized ops pass the
    carriers of their hifloat8 codes)."""
    for name, t in (("send_counts_tensor", send_counts_tensor),
                    ("recv_counts_tensor", recv_counts_tensor)):
        checks.expect(t is None, op, name, "None (the doc: not supported yet)", "a tensor",
                      NotImplementedError)
    _comm.expect_world_size(op, "ep_world_size", ep_world_size, hcom)
    checks.expect_dim(gmm_x, 2, op, "gmm_x")
    checks.expect_dim(gmm_weight, 3, op, "gmm_weight")
    checks.expect_dtype(gmm_x, dtypes, op, "gmm_x")
    codes = dtypes != _local.FLOAT_DTYPES       # carriers of codes: any carrier for any operand
    checks.expect(gmm_weight.dtype == gmm_x.dtype or (codes and gmm_weight.dtype in dtypes), op,
                  "gmm_weight", lambda: f"the dtype of gmm_x ({gmm_x.dtype})"
                  if not codes else f"one of {list(dtypes)}", lambda: str(gmm_weight.dtype),
                  TypeError)
    e = gmm_weight.shape[0]
    checks.expect(e >= 1, op, "gmm_weight", "at least one expert (dim 0)", e, ValueError)
    _expect_counts(op, "send_counts", send_counts, e * ep_world_size)
    _expect_counts(op, "recv_counts", recv_counts, e * ep_world_size)
    if _comm.group_size(hcom) == 1:
        checks.expect(list(recv_counts) == list(send_counts), op, "recv_counts",
                      "equal to send_counts on a single rank (the rows come back unchanged)",
                      list(recv_counts), ValueError)
    checks.expect(gmm_x.shape[0] == sum(send_counts), op, "gmm_x",
                  lambda: f"sum(send_counts) = {sum(send_counts)} rows", gmm_x.shape[0],
                  RuntimeError)
    h1 = gmm_weight.shape[2] if trans_gmm_weight else gmm_weight.shape[1]
    checks.expect(gmm_x.shape[1] == h1, op, "gmm_weight",
                  lambda: f"gmm_x's H1 = {gmm_x.shape[1]} as its "
                          f"{'last' if trans_gmm_weight else 'middle'} dim",
                  lambda: tuple(gmm_weight.shape), RuntimeError)
    named = {"gmm_x": gmm_x, "gmm_weight": gmm_weight}
    checks.expect((mm_x is None) == (mm_weight is None), op, "mm_weight",
                  "given exactly when mm_x is", "the other one alone", ValueError)
    if mm_x is not None:
        checks.expect_dim(mm_x, 2, op, "mm_x")
        checks.expect_dim(mm_weight, 2, op, "mm_weight")
        checks.expect_dtype(mm_x, dtypes, op, "mm_x")
        checks.expect(mm_weight.dtype == mm_x.dtype or (codes and mm_weight.dtype in dtypes),
                      op, "mm_weight",
                      lambda: f"the dtype of mm_x ({mm_x.dtype})", lambda: str(mm_weight.dtype),
                      TypeError)
        k = mm_weight.shape[1] if trans_mm_weight else mm_weight.shape[0]
        checks.expect(mm_x.shape[1] == k, op, "mm_weight",
                      lambda: f"mm_x's k = {mm_x.shape[1]} rows"
                              f"{' (transposed)' if trans_mm_weight else ''}",
                      lambda: tuple(mm_weight.shape), RuntimeError)
        named.update(mm_x=mm_x, mm_weight=mm_weight)
    checks.expect_same_device(named, op)


def fake_outputs(gmm_x, gmm_weight, recv_counts, mm_x, mm_weight, trans_gmm_weight,
                 trans_mm_weight):
    n1 = gmm_weight.shape[1] if trans_gmm_weight else gmm_weight.shape[2]
    y = gmm_x.new_empty((sum(recv_counts), n1))
    if mm_x is None:
        return y, gmm_x.new_empty((0,))
    n2 = mm_weight.shape[0] if trans_mm_weight else mm_weight.shape[1]
    return y, mm_x.new_empty((mm_x.shape[0], n2))

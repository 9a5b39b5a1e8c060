"""How ``group_list`` cuts the grouped axis, shared by the grouped-matmul family.

``group_list_type`` (seed 004 and op-plugin's newer npu_grouped_matmul page):

* 0: the cumulative sums of the group sizes (``[4, 4, 9]``: rows 0-3, none, 4-8);
* 1: the group sizes themselves (``[4, 0, 5]``);
* 2: a ``[E, 2]`` table of ``[group_index, group_size]`` rows (int8 m-axis grouping only): the
  listed groups take consecutive slices, each with the weight of its ``group_index``.

The values are data: reading them is a host synchronisation, done once per call in eager mode
(the FakeTensor path never reads them; output shapes do not depend on them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ... import checks


@dataclass(frozen=True)
class Segment:
    """One matmul of a grouped call: ``length`` entries of the grouped axis from ``start``,
    computed with weight number ``expert``."""
    expert: int
    start: int
    length: int


def check_group_list_meta(op: str, group_list: torch.Tensor, group_list_type: int,
                          max_groups: int) -> None:
    """Dtype, rank and length of a ``group_list`` tensor (no values read)."""
    checks.expect_dtype(group_list, (torch.int64,), op, "group_list")
    if group_list_type == 2:
        checks.expect(group_list.dim() == 2 and group_list.shape[1] == 2, op, "group_list",
                      "shape [E, 2] ([group_index, group_size] rows) when group_list_type is 2",
                      lambda: f"shape {tuple(group_list.shape)}", ValueError)
    else:
        checks.expect_dim(group_list, 1, op, "group_list")
    n = group_list.shape[0]
    checks.expect(n <= max_groups, op, "group_list",
                  lambda: f"at most {max_groups} groups", lambda: f"{n} groups", ValueError)


def segments(op: str, group_list: torch.Tensor, group_list_type: int, total: int,
             n_experts: int, axis: str) -> list[Segment]:
    """The matmuls ``group_list`` describes over a grouped axis of ``total`` entries.

    Raises (before any output is written) when the values break the documented rules:
    negative sizes, a decreasing cumsum, more entries than the axis holds, an expert index out
    of range.  Entries past the last group take part in no matmul.
    """
    values = group_list.tolist()        # one host sync; the shapes never depend on it
    out: list[Segment] = []
    if group_list_type == 2:
        start = 0
        for j, (expert, size) in enumerate(values):
            checks.expect(size >= 0, op, "group_list",
                          "non-negative group sizes in its second column",
                          lambda j=j, size=size: f"{size} at row {j}", ValueError)
            checks.expect(0 <= expert < n_experts, op, "group_list",
                          lambda: f"group indices in [0, {n_experts}) in its first column",
                          lambda j=j, expert=expert: f"{expert} at row {j}", ValueError)
            out.append(Segment(expert, start, size))
            start += size
    elif group_list_type == 1:
        start = 0
        for j, size in enumerate(values):
            checks.expect(size >= 0, op, "group_list", "non-negative group sizes",
                          lambda j=j, size=size: f"{size} at index {j}", ValueError)
            out.append(Segment(j, start, size))
            start += size
    else:
        previous = 0
        for j, end in enumerate(values):
            checks.expect(end >= previous, op, "group_list",
                          "a non-negative, non-decreasing cumsum (group_list_type=0)",
                          lambda j=j, end=end, previous=previous:
                          f"{end} at index {j} after {previous}", ValueError)
            out.append(Segment(j, previous, end - previous))
            previous = end
    covered = out[-1].start + out[-1].length if out else 0
    checks.expect(covered <= total, op, "group_list",
                  lambda: f"groups covering at most the {total} entries of the {axis} axis",
                  lambda: f"groups covering {covered}", ValueError)
    return out


def offsets_from_list(values) -> torch.Tensor:
    """The ``int[] group_list`` overload's values (cumulative offsets) as a tensor."""
    return torch.tensor([int(v) for v in values], dtype=torch.int64)

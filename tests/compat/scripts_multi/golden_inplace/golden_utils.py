"""op-plugin style helpers: a CPU golden computed in place, and an exact comparison."""

import torch


def scatter_nd_update_golden_(data: torch.Tensor, indices: torch.Tensor,
                              updates: torch.Tensor) -> torch.Tensor:
    """``data[indices[i]] = updates[i]`` for each row of 2-D ``indices`` (written in place)."""
    for i in range(indices.shape[0]):
        data[tuple(indices[i].tolist())] = updates[i]
    return data


def assert_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert torch.equal(actual.cpu(), expected.cpu()), (actual, expected)

"""torch_npu.npu_random_choice_with_mask (a random subset of the true elements' coordinates).

Semantics (seed 004 "npu_random_choice_with_mask"; shapes and checks from op-plugin
op_plugin/ops/aclops/RandomChoiceWithMaskKernelNpu.cpp)::

    coords = the [nnz, x.dim()] coordinates of x's true elements
    take   = the first min(count, nnz) of a uniformly random permutation of them
    y      = int32 [count, x.dim()]: take, then rows of 0
    mask   = bool [count]: True for the taken rows

Randomness follows the project's convention for random ops: with ``seed == seed2 == 0`` the
permutation is drawn from torch's generator on ``x``'s device (``torch.manual_seed`` repeats
it); other seeds give a generator of their own, so the call is repeatable, as an op-level
seed is on the NPU.  The NPU's stream itself is not reproduced: the same distribution, other
draws.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

OP = "npu_random_choice_with_mask"
SCHEMA = ("npu_random_choice_with_mask(Tensor x, int count=256, int seed=0, int seed2=0) "
          "-> (Tensor, Tensor)")


def check_random_choice_with_mask(x, count=256, seed=0, seed2=0):
    checks.expect_dtype(x, (torch.bool,), OP, "x")
    checks.expect(1 <= x.dim() <= 5, OP, "x", "a tensor with 1 to 5 dims",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(count > 0, OP, "count", "> 0", count, ValueError)


def _generator(device, seed, seed2):
    if seed == 0 and seed2 == 0:
        return None
    # The CPU generator keeps 32 bits of its seed: fold both seeds into those bits.
    mixed = ((seed & 0xFFFFFFFF) * 0x9E3779B1 + (seed2 & 0xFFFFFFFF)) & 0xFFFFFFFF
    return torch.Generator(device=device).manual_seed(mixed)


def random_choice_with_mask_reference(x, count=256, seed=0, seed2=0):
    coords = torch.nonzero(x)
    nnz = coords.shape[0]
    order = torch.randperm(nnz, generator=_generator(x.device, seed, seed2), device=x.device)
    taken = coords[order[:count]]
    k = taken.shape[0]
    y = torch.zeros(count, x.dim(), dtype=torch.int32, device=x.device)
    y[:k] = taken.to(torch.int32)
    mask = torch.zeros(count, dtype=torch.bool, device=x.device)
    mask[:k] = True
    return y, mask


def _random_choice_with_mask_fake(x, count=256, seed=0, seed2=0):
    return (x.new_empty(count, x.dim(), dtype=torch.int32), x.new_empty(count, dtype=torch.bool))


random_choice_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_random_choice_with_mask,
                         reference=random_choice_with_mask_reference,
                         fake=_random_choice_with_mask_fake, random=True,
                         info=OpInfo(api="torch_npu"))
random_choice_op.forbid_autograd("npu_random_choice_with_mask returns indices; no backward")


def npu_random_choice_with_mask(x=None, count=256, seed=0, seed2=0):
    """Pick up to ``count`` coordinates of ``x``'s true elements at random (shuffled).

    Formula (seed 004; op-plugin RandomChoiceWithMaskKernelNpu.cpp)::

        y[:k] = nonzero(x)[randperm(nnz)[:k]],  k = min(count, nnz);  y[k:] = 0
        mask  = [True] * k + [False] * (count - k)

    Parameters
    ----------
    x : Tensor
        bool tensor with 1 to 5 dims.
    count : int, default 256
        Rows of the output, > 0 (the doc's "0 outputs all" is rejected by the NPU's host
        code, as here).
    seed, seed2 : int, default 0
        Both 0: draw from torch's generator; otherwise a repeatable generator of their own.

    Returns
    -------
    (Tensor, Tensor)
        ``y`` int32 ``[count, x.dim()]`` and ``mask`` bool ``[count]``.

    Notes
    -----
    The draws are not the NPU's (its random stream is not reproduced); the distribution is:
    every ``k``-subset in every order is equally likely.

    Examples
    --------
    >>> y, mask = npu_anywhere.npu_random_choice_with_mask(torch.tensor([1, 0, 1, 0]).bool(), 3)
    >>> sorted(y[mask].flatten().tolist()), mask.tolist()
    ([0, 2], [True, True, False])
    """
    return random_choice_op(x, count, seed, seed2)


TORCH_NPU_FUNCTIONS = {OP: npu_random_choice_with_mask}

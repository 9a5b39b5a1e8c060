"""torch_npu._npu_dropout and npu_dropout_backward.

Formula (seed 004 "_npu_dropout"; op-plugin ``op_plugin/ops/aclops/DropoutKernelNpu.cpp``:
StatelessDropOutGenMask, then DropOutDoMask with ``keep_prob = 1 - p``)::

    keep   ~ Bernoulli(1 - p) per element       (True = kept)
    output = self * keep / (1 - p)
    mask   = keep bit-packed: element e is bit e % 8 (least significant first) of byte e // 8,
             numel rounded up to whole 128-bit blocks (pad bits 0)

Backward (``derivatives.yaml``: ``self: npu_dropout_backward(grad, result1, p)``; the same
DropOutDoMask)::

    grad_self = grad * keep / (1 - p)

The mask layout is the one ``_npu_dropout_gen_mask`` returns (the same packing helper,
:func:`..training_attention.fa_masks.pack_bits`), so a mask from either op can be handed to
``npu_dropout_backward``.  Precision: op-plugin passes ``keep_prob`` as a scalar of ``self``'s
dtype, so it is rounded to that dtype first; the multiply runs in float32 for 16-bit inputs and
is rounded once.  The keep bits are drawn from torch's generator on ``self``'s device
(``torch.manual_seed`` repeats them), not the NPU's Philox stream: same distribution, other bits.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ..training_attention.fa_masks import keep_bits, pack_bits

OP = "_npu_dropout"
SCHEMA = "_npu_dropout(Tensor self, float p) -> (Tensor, Tensor)"
BACKWARD_OP = "npu_dropout_backward"
BACKWARD_SCHEMA = "npu_dropout_backward(Tensor grad_output, Tensor mask, float p) -> Tensor"

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_BLOCK_BITS = 128          # op-plugin LENGTH_DATA_ALIGN: the mask covers whole 128-bit blocks


def mask_bytes(numel: int) -> int:
    return (numel + _BLOCK_BITS - 1) // _BLOCK_BITS * _BLOCK_BITS // 8


def _check_p(op: str, p: float) -> None:
    checks.expect(0.0 <= p <= 1.0, op, "p", "in [0, 1] (the drop probability)", repr(p),
                  ValueError)


def check_npu_dropout(self, p):
    checks.expect_dtype(self, _DTYPES, OP, "self")
    _check_p(OP, p)


def check_npu_dropout_backward(grad_output, mask, p):
    op = BACKWARD_OP
    checks.expect_dtype(grad_output, _DTYPES, op, "grad_output")
    checks.expect_dtype(mask, (torch.uint8,), op, "mask")
    checks.expect_dim(mask, 1, op, "mask")
    need = (grad_output.numel() + 7) // 8
    checks.expect(mask.shape[0] >= need, op, "mask", lambda: f"at least {need} bytes (one bit "
                  f"per element of grad_output, {grad_output.numel()} elements)",
                  lambda: f"{mask.shape[0]} bytes", RuntimeError)
    _check_p(op, p)
    checks.expect_same_device({"grad_output": grad_output, "mask": mask}, op)


def _apply(x: torch.Tensor, keep: torch.Tensor, p: float) -> torch.Tensor:
    """``x * keep / (1 - p)``; dropped elements are exactly 0 (also when p = 1)."""
    ct = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    keep_prob = float(torch.tensor(1.0 - p, dtype=x.dtype))    # rounded as the NPU passes it
    if keep_prob == 0.0:
        return torch.zeros_like(x)
    scaled = x.to(ct) / keep_prob
    return torch.where(keep, scaled, torch.zeros((), dtype=ct, device=x.device)).to(x.dtype)


def npu_dropout_reference(self, p):
    numel = self.numel()
    if p == 0.0:
        keep = torch.ones(self.shape, dtype=torch.bool, device=self.device)
    elif p == 1.0:
        keep = torch.zeros(self.shape, dtype=torch.bool, device=self.device)
    else:
        keep = (torch.rand(numel, dtype=torch.float32, device=self.device) < 1.0 - p
                ).reshape(self.shape)
    return _apply(self, keep, p), pack_bits(keep)


def npu_dropout_backward_reference(grad_output, mask, p):
    e = torch.arange(grad_output.numel(), device=grad_output.device)
    keep = keep_bits(mask, e).reshape(grad_output.shape)
    return _apply(grad_output, keep, p)


dropout_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_npu_dropout,
                   reference=npu_dropout_reference, metadata_check=True, random=True,
                   info=OpInfo(api="torch_npu"))
dropout_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                            check=check_npu_dropout_backward,
                            reference=npu_dropout_backward_reference, metadata_check=True,
                            info=OpInfo(api="torch_npu", backward_of=OP))
dropout_backward_op.forbid_autograd("derivatives.yaml defines no derivative of the backward op")


def _setup_context(ctx, inputs, output):
    _, p = inputs
    ctx.p = p
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(output[1])


def _backward(ctx, grad, _grad_mask):
    (mask,) = ctx.saved_tensors
    if grad is None:
        return None, None
    return dropout_backward_op(grad, mask, ctx.p), None


dropout_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_dropout(self, p):
    """Dropout with drop probability ``p``; returns the output and the bit-packed keep-mask.

    Formula (seed 004, op-plugin ``DropoutKernelNpu.cpp``)::

        keep ~ Bernoulli(1 - p);   output = self * keep / (1 - p)

    Parameters
    ----------
    self : Tensor
        Any shape; float16, bfloat16, float32 or float64.
    p : float
        The drop probability, in [0, 1].  ``p = 0`` keeps everything and ``p = 1`` drops
        everything (output zeros); neither draws random numbers.

    Returns
    -------
    (output, mask) : ``output`` has ``self``'s shape and dtype; ``mask`` is uint8 of
    ``ceil(numel / 128) * 16`` bytes, element ``e`` (row-major) kept iff bit ``e % 8`` of byte
    ``e // 8`` is 1 (pad bits 0): the layout of ``_npu_dropout_gen_mask``.

    Notes
    -----
    ``1 - p`` is rounded to ``self``'s dtype (op-plugin passes it as a scalar of that dtype)
    and the scaling runs in float32 for 16-bit inputs.  The keep bits come from torch's
    generator on ``self``'s device, not the NPU's Philox stream, so masks match the NPU's in
    distribution only.  Differentiable in ``self`` through :func:`npu_dropout_backward`.

    Examples
    --------
    >>> output, mask = npu_anywhere._npu_dropout(torch.tensor([1., 2., 3., 4.]), 0.3)
    """
    return dropout_op(self, p)


def npu_dropout_backward(grad_output, mask, p):
    """Gradient of :func:`_npu_dropout`: ``grad_output * keep / (1 - p)``.

    ``mask`` is the bit-packed uint8 keep-mask ``_npu_dropout`` (or ``_npu_dropout_gen_mask``)
    returns: 1-D, at least one bit per element of ``grad_output`` (row-major, least
    significant bit first).  ``p`` is the drop probability of the forward.  Returns a tensor of
    ``grad_output``'s shape and dtype (op-plugin ``DropoutKernelNpu.cpp``, DropOutDoMask).
    """
    return dropout_backward_op(grad_output, mask, p)


TORCH_NPU_FUNCTIONS = {
    OP: npu_dropout,
    BACKWARD_OP: npu_dropout_backward,
}

"""torch_npu.npu_nsa_compress and npu_nsa_compress_grad (Native Sparse Attention, training).

Formula (seed 004; hicann/ops-transformer attention/nsa_compress/docs/aclnnNsaCompress.md):
each batch ``b`` of the TND ``input`` (tokens ``[start_b, start_b + L_b)``) is cut into windows
of ``compress_block_size`` tokens every ``compress_stride`` tokens (windows that would run past
the batch's end are dropped, batches shorter than one window give none), and each window is
reduced with the per-head weights::

    out[c, n, :] = sum_w weight[w, n] * input[start_b + j * compress_stride + w, n, :]

with ``c`` running over the windows ``j`` of all batches in order, so
``out.shape[0] = sum_b max(0, (L_b - compress_block_size) // compress_stride + 1)``.

The backward (op-plugin derivatives.yaml, ``npu_nsa_compress_grad``) is the exact gradient:
``d input[start + w] += d out[c] * weight[w]`` and ``d weight[w, n] = sum_{c, d} d out[c, n, d] *
input[start_c + w, n, d]``.  Both follow op-plugin test/test_custom_ops/test_npu_nsa_compress.py
and test_npu_nsa_compress_grad.py (the goldens the kernels are judged by): float32 math,
each result rounded once to its input's dtype.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import nsa_common as nsa

OP = "npu_nsa_compress"
SCHEMA = ("npu_nsa_compress(Tensor input, Tensor weight, int compress_block_size, "
          "int compress_stride, *, int[]? actual_seq_len=None) -> Tensor")
GRAD_OP = "npu_nsa_compress_grad"
GRAD_SCHEMA = ("npu_nsa_compress_grad(Tensor grad, Tensor input, Tensor weight, "
               "int compress_block_size, int compress_stride, *, int[]? actual_seq_len=None) "
               "-> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2})


def _check_common(op, input, weight, compress_block_size, compress_stride, actual_seq_len):
    nsa.expect_tensor(op, "input", input, 3)
    nsa.expect_tensor(op, "weight", weight, 2)
    checks.expect_same_dtype({"input": input, "weight": weight}, op)
    checks.expect_same_device({"input": input, "weight": weight}, op)
    checks.expect(compress_block_size > 0, op, "compress_block_size", "a positive int",
                  compress_block_size, ValueError)
    checks.expect(compress_stride > 0, op, "compress_stride", "a positive int",
                  compress_stride, ValueError)
    checks.expect(compress_block_size >= compress_stride, op, "compress_block_size",
                  lambda: f"at least compress_stride = {compress_stride}", compress_block_size,
                  ValueError)
    want = (compress_block_size, input.shape[1])
    checks.expect(tuple(weight.shape) == want, op, "weight",
                  lambda: f"shape {list(want)} ([compress_block_size, N] of input)",
                  lambda: f"shape {tuple(weight.shape)}", RuntimeError)
    nsa.expect_cumulative(op, "actual_seq_len", actual_seq_len, input.shape[0])
    if targets.expect_supported(op, _SUPPORTED) is not None:
        # Limits of the A2 kernel (seed 004 constraints).
        nsa.expect_multiple_of_16(op, compress_block_size=compress_block_size,
                                  compress_stride=compress_stride, head_dim=input.shape[2])
        checks.expect(input.shape[1] <= 128, op, "input", "a head count N of at most 128",
                      input.shape[1], ValueError)
        checks.expect(compress_block_size <= 128, op, "compress_block_size", "at most 128",
                      compress_block_size, ValueError)
        checks.expect(input.shape[2] <= 256, op, "input", "a head dim D of at most 256",
                      input.shape[2], ValueError)


def window_starts(actual_seq_len, block: int, stride: int) -> list[int]:
    """The first token of every compression window, all batches in order."""
    starts = []
    for start, length in nsa.spans(actual_seq_len):
        if length >= block:
            starts.extend(range(start, start + length - block + 1, stride))
    return starts


def check_nsa_compress(input, weight, compress_block_size, compress_stride, *,
                       actual_seq_len=None):
    _check_common(OP, input, weight, compress_block_size, compress_stride, actual_seq_len)


def check_nsa_compress_grad(grad, input, weight, compress_block_size, compress_stride, *,
                            actual_seq_len=None):
    _check_common(GRAD_OP, input, weight, compress_block_size, compress_stride, actual_seq_len)
    count = len(window_starts(actual_seq_len, compress_block_size, compress_stride))
    want = (count, input.shape[1], input.shape[2])
    checks.expect(tuple(grad.shape) == want, GRAD_OP, "grad",
                  lambda: f"shape {list(want)} (the forward's output)",
                  lambda: f"shape {tuple(grad.shape)}", RuntimeError)
    checks.expect_same_dtype({"input": input, "grad": grad}, GRAD_OP)
    checks.expect_same_device({"input": input, "grad": grad}, GRAD_OP)


def _window_index(starts, block: int, device) -> torch.Tensor:
    """``[C, block]`` token index of every window row."""
    base = torch.tensor(starts, dtype=torch.long, device=device)
    return base.unsqueeze(1) + torch.arange(block, device=device)


def nsa_compress_reference(input, weight, compress_block_size, compress_stride, *,
                           actual_seq_len=None):
    starts = window_starts(actual_seq_len, compress_block_size, compress_stride)
    ct = nsa.compute_dtype(input)
    index = _window_index(starts, compress_block_size, input.device)
    windows = input.to(ct)[index]                                      # [C, W, N, D]
    out = torch.einsum("cwnd,wn->cnd", windows, weight.to(ct))
    # einsum's strides depend on the sizes (a single window differs): return plain rows.
    return out.to(input.dtype).clone(memory_format=torch.contiguous_format)


def nsa_compress_grad_reference(grad, input, weight, compress_block_size, compress_stride, *,
                                actual_seq_len=None):
    starts = window_starts(actual_seq_len, compress_block_size, compress_stride)
    ct = nsa.compute_dtype(input)
    x, wt, g = input.to(ct), weight.to(ct), grad.to(ct)
    index = _window_index(starts, compress_block_size, input.device)
    d_rows = torch.einsum("cnd,wn->cwnd", g, wt)                       # [C, W, N, D]
    d_input = torch.zeros_like(x).index_add_(0, index.reshape(-1),
                                             d_rows.reshape(-1, *x.shape[1:]))
    d_weight = torch.einsum("cnd,cwnd->wn", g, x[index])
    return d_input.to(input.dtype), d_weight.to(weight.dtype)


compress_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_nsa_compress,
                    reference=nsa_compress_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
compress_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS, check=check_nsa_compress_grad,
                         reference=nsa_compress_grad_reference, metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, weight, block, stride = inputs[:4]
    ctx.save_for_backward(input, weight)
    ctx.params = (block, stride, inputs[4])


def _backward(ctx, grad):
    input, weight = ctx.saved_tensors
    block, stride, lengths = ctx.params
    d_input, d_weight = compress_grad_op(grad.contiguous(), input, weight, block, stride,
                                         actual_seq_len=lengths)
    return d_input, d_weight, None, None, None


compress_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_nsa_compress(input, weight, compress_block_size, compress_stride, *,
                     actual_seq_len=None):
    """Compress the KV tokens of each sequence with learned per-head window weights (NSA).

    Formula (seed 004; ops-transformer aclnnNsaCompress.md), for window ``j`` of batch ``b``::

        out[c, n, :] = sum_{w < compress_block_size} weight[w, n]
                       * input[start_b + j * compress_stride + w, n, :]

    Parameters
    ----------
    input : Tensor
        ``[T, N, D]`` (TND), float16 or bfloat16 (float32 / float64 outside strict mode);
        non-contiguous accepted, not empty.
    weight : Tensor
        ``[compress_block_size, N]``, ``input``'s dtype.
    compress_block_size, compress_stride : int
        Window length and the step between windows (``compress_block_size >= compress_stride``).
    actual_seq_len : list of int
        Cumulative token counts of the batches (``actual_seq_len[-1] = T``); required.

    Returns
    -------
    Tensor
        ``[C, N, D]`` in ``input``'s dtype, ``C = sum_b max(0, (L_b - compress_block_size) //
        compress_stride + 1)``; float32 math, one rounding.

    Constraints
    -----------
    Atlas A2 training. Strict mode adds the kernel's limits: ``compress_block_size``,
    ``compress_stride`` and ``D`` multiples of 16, ``N <= 128``, ``compress_block_size <= 128``,
    ``D <= 256``.

    Notes
    -----
    Differentiable in ``input`` and ``weight`` through :func:`npu_nsa_compress_grad`.

    Examples
    --------
    >>> x = torch.randn(40, 2, 16, dtype=torch.float16)
    >>> w = torch.randn(16, 2, dtype=torch.float16)
    >>> npu_anywhere.npu_nsa_compress(x, w, 16, 16, actual_seq_len=[20, 40]).shape
    torch.Size([2, 2, 16])
    """
    return compress_op(input, weight, compress_block_size, compress_stride,
                       actual_seq_len=actual_seq_len)


def npu_nsa_compress_grad(grad, input, weight, compress_block_size, compress_stride, *,
                          actual_seq_len=None):
    """Gradients of :func:`npu_nsa_compress` w.r.t. ``input`` and ``weight``.

    Formula (op-plugin test_npu_nsa_compress_grad.py)::

        d_input[start_c + w, n, :] += grad[c, n, :] * weight[w, n]
        d_weight[w, n] = sum_{c, d} grad[c, n, d] * input[start_c + w, n, d]

    ``grad`` is the forward's output shape; returns ``(d_input, d_weight)`` in the dtypes of
    ``input`` and ``weight`` (float32 math, one rounding).  Tokens in no window get zero.
    """
    return compress_grad_op(grad, input, weight, compress_block_size, compress_stride,
                            actual_seq_len=actual_seq_len)


TORCH_NPU_FUNCTIONS = {OP: npu_nsa_compress, GRAD_OP: npu_nsa_compress_grad}

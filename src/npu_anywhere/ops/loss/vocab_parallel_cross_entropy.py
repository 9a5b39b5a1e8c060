"""The vocab-parallel cross-entropy pieces (Megatron's fused_vocab_parallel_cross_entropy split
around its all-reduces):

* ``npu_fused_linear_online_max_sum``: the local logits ``input @ weight.T`` of this rank's vocab
  shard, their row max, the row sum of ``exp(logits - max)``, the target's logit minus the max,
  the packed out-of-shard mask and the shard-local target;
* ``npu_fused_cross_entropy_loss_with_max_sum``: with the globally reduced max / sum / predicted
  logit, ``loss = log(sum_exp) - predicted`` and optionally the shard's softmax;
* ``npu_fused_linear_cross_entropy_loss_with_max_sum_backward``: the gradients of ``input`` and
  ``weight``, from the softmax (high-performance mode) or recomputed from the max and sum
  (memory-saving mode).

Sources: seed 004; op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_fused_linear_online_
max_sum.md (and the two others), op_plugin/ops/opapi/FusedLinearCrossEntropyLossKernelNpuOpApi.cpp
(output shapes and dtypes); hicann ops-nn matmul/fused_linear_online_max_sum (kernel
op_kernel/fused_linear_online_max_sum.h and the golden tests/st/.../executor_aclnnFusedLinear
OnlineMaxSum.py), loss/fused_cross_entropy_loss_with_max_sum/tests/assets/golden.py and
matmul/fused_linear_cross_entropy_loss_grad (docs/aclnnFusedLinearCrossEntropyLossGrad.md and its
executor golden).  Where the doc page and the kernel disagree the kernel is followed:

* a target is out of the shard when ``target < vocab_start_index or target >= vocab_end_index``
  (the end is exclusive, as in Megatron; the page writes ``target > vocab_end_index``);
* the padding bits of ``target_mask`` are computed from a padded target of 0 (the page says 1);
* bit ``j`` of byte ``k`` of ``target_mask`` is row ``8 * k + j`` (least significant bit first).

Math in float32: the matmuls accumulate in float32 (16-bit operands upcast), the statistics are
taken from the float32 logits, and only ``vocab_parallel_logits`` and the gradients are rounded
to the input dtype (the backward rounds the logit gradient to it before its two matmuls, as the
executor golden does).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common

ONLINE_OP = "npu_fused_linear_online_max_sum"
ONLINE_SCHEMA = ("npu_fused_linear_online_max_sum(Tensor input, Tensor weight, Tensor target, "
                 "int vocab_start_index, int vocab_end_index, bool return_logits=False) "
                 "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
LOSS_OP = "npu_fused_cross_entropy_loss_with_max_sum"
LOSS_SCHEMA = ("npu_fused_cross_entropy_loss_with_max_sum(Tensor logits_max, "
               "Tensor sum_exp_logits, Tensor predicted_logits, *, float? label_smoothing=0.0, "
               "Tensor? input=None, Tensor? weight=None, Tensor? vocab_parallel_logits=None) "
               "-> (Tensor, Tensor)")
BACKWARD_OP = "npu_fused_linear_cross_entropy_loss_with_max_sum_backward"
BACKWARD_SCHEMA = ("npu_fused_linear_cross_entropy_loss_with_max_sum_backward(Tensor grad, "
                   "Tensor input, Tensor weight, Tensor target_mask, Tensor masked_target, "
                   "float label_smoothing=0.0, Tensor? logits_max=None, "
                   "Tensor? sum_exp_logits=None, Tensor? softmax=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})
_LOSS_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_HALF = (torch.float16, torch.bfloat16)
_TARGET_DTYPES = (torch.int32, torch.int64)
_MAX_HIDDEN = 65534
_MIN_BACKWARD_VOCAB = 128


def _matmul_operands(op: str, input, weight) -> None:
    """``input [B, H]`` and ``weight [V, H]`` of one 16-bit dtype (float32 / float64 too
    outside strict mode)."""
    documented = _HALF if targets.current() is not None else _HALF + (torch.float32,)
    _common.expect_float(op, "input", input, documented)
    _common.expect_dim(op, "input", input, 2)
    _common.expect_dim(op, "weight", weight, 2)
    checks.expect_same_dtype({"input": input, "weight": weight}, op)
    checks.expect(weight.shape[1] == input.shape[1], op, "weight",
                  lambda: f"size(1) equal to input.size(1) = {input.shape[1]}",
                  lambda: f"shape {tuple(weight.shape)}", RuntimeError)


def _expect_row_vector(op: str, name: str, t, rows: int, dtypes) -> None:
    checks.expect_dtype(t, dtypes, op, name)
    _common.expect_shape(op, name, t, (rows,), "[input.size(0)]")


def check_online_max_sum(input, weight, target, vocab_start_index, vocab_end_index,
                         return_logits=False):
    op = ONLINE_OP
    _matmul_operands(op, input, weight)
    checks.expect_dtype(target, _TARGET_DTYPES, op, "target")
    _common.expect_shape(op, "target", target, input.shape[:1], "[input.size(0)]")
    _common.expect_devices(op, {"input": input, "weight": weight, "target": target})
    checks.expect(vocab_start_index >= 0, op, "vocab_start_index", ">= 0",
                  repr(vocab_start_index), ValueError)
    checks.expect(vocab_end_index >= vocab_start_index, op, "vocab_end_index",
                  lambda: f">= vocab_start_index = {vocab_start_index}", repr(vocab_end_index),
                  ValueError)
    vocab = weight.shape[0]
    checks.expect(vocab_end_index - vocab_start_index <= vocab, op, "vocab_end_index",
                  lambda: f"<= vocab_start_index + weight.size(0) = {vocab_start_index + vocab} "
                  "(the shard's rows)", repr(vocab_end_index), ValueError)
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(input.shape[1] <= _MAX_HIDDEN, op, "input",
                      f"size(1) <= {_MAX_HIDDEN}", lambda: f"shape {tuple(input.shape)}",
                      ValueError)


def _logits_fp32(input, weight):
    ct = torch.float64 if input.dtype == torch.float64 else torch.float32
    return input.to(ct) @ weight.to(ct).t()


def _pack_bits(mask: torch.Tensor, pad_bit: bool) -> torch.Tensor:
    """Bit ``j`` of byte ``k`` is ``mask[8 * k + j]``; the padding rows take ``pad_bit``."""
    rows = mask.shape[0]
    pad = torch.full(((rows + 7) // 8 * 8 - rows,), pad_bit, dtype=torch.bool, device=mask.device)
    bits = torch.cat([mask, pad]).view(-1, 8).to(torch.int32)
    shifts = torch.arange(8, dtype=torch.int32, device=mask.device)
    return (bits << shifts).sum(dim=-1).to(torch.uint8)


def _unpack_bits(packed: torch.Tensor, rows: int) -> torch.Tensor:
    shifts = torch.arange(8, dtype=torch.int32, device=packed.device)
    bits = (packed.to(torch.int32).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(-1)[:rows].to(torch.bool)


def online_max_sum_reference(input, weight, target, vocab_start_index, vocab_end_index,
                             return_logits=False):
    logits = _logits_fp32(input, weight)                      # [B, V]
    rows, vocab = logits.shape
    if vocab:
        logits_max = logits.amax(dim=-1)
    else:
        logits_max = logits.new_zeros((rows,))
    shifted = logits - logits_max.unsqueeze(-1)
    sum_exp = shifted.exp().sum(dim=-1)
    outside = (target < vocab_start_index) | (target >= vocab_end_index)
    masked_target = (target - vocab_start_index).masked_fill(outside, 0)
    if vocab:
        picked = shifted.gather(1, masked_target.long().unsqueeze(1)).squeeze(1)
    else:
        picked = logits.new_zeros((rows,))
    predicted = picked.masked_fill(outside, 0.0)
    pad_bit = (0 < vocab_start_index) or (0 >= vocab_end_index)
    target_mask = _pack_bits(outside, pad_bit)
    stats = (logits_max.float(), sum_exp.float(), predicted.float())
    vocab_parallel_logits = (logits.to(input.dtype) if return_logits
                             else input.new_empty((0,)))
    return (*stats, target_mask, masked_target, vocab_parallel_logits)


def check_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, *,
                            label_smoothing=0.0, input=None, weight=None,
                            vocab_parallel_logits=None):
    op = LOSS_OP
    stats = (torch.float32,) if targets.current() is not None else (torch.float32, torch.float64)
    checks.expect_dtype(logits_max, stats, op, "logits_max")
    _common.expect_dim(op, "logits_max", logits_max, 1)
    for name, t in (("sum_exp_logits", sum_exp_logits), ("predicted_logits", predicted_logits)):
        _common.expect_shape(op, name, t, logits_max.shape, "of logits_max")
    checks.expect_same_dtype({"logits_max": logits_max, "sum_exp_logits": sum_exp_logits,
                              "predicted_logits": predicted_logits}, op)
    checks.expect(label_smoothing is None or label_smoothing == 0.0, op, "label_smoothing",
                  "0.0 (the only value torch_npu supports)", repr(label_smoothing), ValueError)
    checks.expect(input is None, op, "input", "None (the only value torch_npu supports)",
                  "a tensor", ValueError)
    checks.expect(weight is None, op, "weight", "None (the only value torch_npu supports)",
                  "a tensor", ValueError)
    if vocab_parallel_logits is not None:
        _common.expect_float(op, "vocab_parallel_logits", vocab_parallel_logits)
        _common.expect_dim(op, "vocab_parallel_logits", vocab_parallel_logits, 2)
        checks.expect(vocab_parallel_logits.shape[0] == logits_max.shape[0], op,
                      "vocab_parallel_logits", lambda: f"size(0) equal to logits_max.size(0) = "
                      f"{logits_max.shape[0]}", lambda: f"shape {tuple(vocab_parallel_logits.shape)}",
                      RuntimeError)
    _common.expect_devices(op, {"logits_max": logits_max, "sum_exp_logits": sum_exp_logits,
                                "predicted_logits": predicted_logits,
                                "vocab_parallel_logits": vocab_parallel_logits})
    targets.expect_supported(op, _LOSS_SUPPORTED)


def loss_with_max_sum_reference(logits_max, sum_exp_logits, predicted_logits, *,
                                label_smoothing=0.0, input=None, weight=None,
                                vocab_parallel_logits=None):
    ct = logits_max.dtype
    loss = sum_exp_logits.log() - predicted_logits
    if vocab_parallel_logits is None:
        return loss, logits_max.new_empty((0,))
    # The kernel multiplies by the reciprocal of the sum.
    inverse = 1.0 / sum_exp_logits
    softmax = (vocab_parallel_logits.to(ct) - logits_max.unsqueeze(-1)).exp() * inverse.unsqueeze(-1)
    return loss, softmax


def check_backward(grad, input, weight, target_mask, masked_target, label_smoothing=0.0,
                   logits_max=None, sum_exp_logits=None, softmax=None):
    op = BACKWARD_OP
    _matmul_operands(op, input, weight)
    rows, vocab = input.shape[0], weight.shape[0]
    stats = (torch.float32,) if targets.current() is not None else (torch.float32, torch.float64)
    _expect_row_vector(op, "grad", grad, rows, stats)
    checks.expect_dtype(target_mask, (torch.uint8,), op, "target_mask")
    _common.expect_shape(op, "target_mask", target_mask, ((rows + 7) // 8,),
                         "[(input.size(0) + 7) // 8]")
    _expect_row_vector(op, "masked_target", masked_target, rows, _TARGET_DTYPES)
    checks.expect(label_smoothing == 0.0, op, "label_smoothing",
                  "0.0 (the only value torch_npu supports)", repr(label_smoothing), ValueError)
    if softmax is not None:
        checks.expect_dtype(softmax, stats, op, "softmax")
        _common.expect_shape(op, "softmax", softmax, (rows, vocab),
                             "[input.size(0), weight.size(0)]")
    else:
        checks.expect(logits_max is not None and sum_exp_logits is not None, op,
                      "logits_max and sum_exp_logits", "both given when softmax is None",
                      lambda: f"logits_max={'None' if logits_max is None else 'a tensor'}, "
                      f"sum_exp_logits={'None' if sum_exp_logits is None else 'a tensor'}",
                      RuntimeError)
        _expect_row_vector(op, "logits_max", logits_max, rows, stats)
        _expect_row_vector(op, "sum_exp_logits", sum_exp_logits, rows, stats)
    _common.expect_devices(op, {"grad": grad, "input": input, "weight": weight,
                                "target_mask": target_mask, "masked_target": masked_target,
                                "logits_max": logits_max, "sum_exp_logits": sum_exp_logits,
                                "softmax": softmax})
    if targets.expect_supported(op, _SUPPORTED) is not None:
        checks.expect(vocab >= _MIN_BACKWARD_VOCAB, op, "weight",
                      f"size(0) >= {_MIN_BACKWARD_VOCAB}", lambda: f"shape {tuple(weight.shape)}",
                      ValueError)


def backward_reference(grad, input, weight, target_mask, masked_target, label_smoothing=0.0,
                       logits_max=None, sum_exp_logits=None, softmax=None):
    rows = input.shape[0]
    ct = torch.float64 if input.dtype == torch.float64 else torch.float32
    if softmax is not None:
        probs = softmax.to(ct)
    else:
        shifted = _logits_fp32(input, weight).to(ct) - logits_max.to(ct).unsqueeze(-1)
        probs = shifted.exp() / sum_exp_logits.to(ct).unsqueeze(-1)
    inside = (~_unpack_bits(target_mask, rows)).to(ct)           # 1 - target_mask
    grad_logits = probs.scatter_add(1, masked_target.long().unsqueeze(1), -inside.unsqueeze(1))
    grad_logits = grad_logits * grad.to(ct).unsqueeze(-1)
    # The golden rounds the logit gradient to the weight dtype before both matmuls.
    g = grad_logits.to(input.dtype).to(ct)
    grad_input = g @ weight.to(ct)
    grad_weight = g.t() @ input.to(ct)
    return grad_input.to(input.dtype), grad_weight.to(input.dtype)


_NO_AUTOGRAD = ("torch_npu defines no autograd for it: its gradient runs through the global "
                "reduction; call npu_fused_linear_cross_entropy_loss_with_max_sum_backward")

online_max_sum_op = NpuOp(ONLINE_SCHEMA, namespace=TORCH_NPU_NS, check=check_online_max_sum,
                          reference=online_max_sum_reference, metadata_check=True,
                          info=OpInfo(api="torch_npu"))
online_max_sum_op.forbid_autograd(_NO_AUTOGRAD)
loss_with_max_sum_op = NpuOp(LOSS_SCHEMA, namespace=TORCH_NPU_NS, check=check_loss_with_max_sum,
                             reference=loss_with_max_sum_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
loss_with_max_sum_op.forbid_autograd(_NO_AUTOGRAD)
backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_backward,
                    reference=backward_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu", backward_of=ONLINE_OP))
backward_op.forbid_autograd("it is a backward op (no double backward)")


def npu_fused_linear_online_max_sum(input, weight, target, vocab_start_index, vocab_end_index,
                                    return_logits=False):
    """Vocab-parallel cross-entropy, part 1: local logits and their row statistics.

    Formula (op-plugin doc; the kernel's exclusive end)::

        logits     = input @ weight.T                         # [B, V], float32 accumulation
        logits_max = max(logits, -1);   sub = logits - logits_max[:, None]
        sum_exp    = sum(exp(sub), -1)
        outside    = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = 0 where outside else target - vocab_start_index
        predicted  = 0 where outside else sub[b, masked_target[b]]
        target_mask[k] = sum_j outside[8k + j] << j          # padding rows: from target 0

    Parameters
    ----------
    input : Tensor
        ``[B, H]``, bfloat16 or float16 (float32 / float64 too outside strict mode).
    weight : Tensor
        ``[V, H]``, this rank's vocab rows, ``input``'s dtype.
    target : Tensor
        ``[B]`` global class ids, int32 or int64.
    vocab_start_index, vocab_end_index : int
        The shard's ids are ``[vocab_start_index, vocab_end_index)``; ``0 <= start <= end``
        and ``end - start <= V``.
    return_logits : bool
        Also return ``logits`` in ``input``'s dtype.

    Returns
    -------
    (logits_max, sum_exp_logits, predicted_logits, target_mask, masked_target,
    vocab_parallel_logits): three float32 ``[B]``, uint8 ``[(B + 7) // 8]``, ``target``'s dtype
    ``[B]``, and ``[B, V]`` in ``input``'s dtype -- or None when ``return_logits`` is False
    (``torch.ops.npu`` returns an empty tensor there: an op cannot return None).

    Constraints
    -----------
    Strict mode: A2 and A3; ``H <= 65534``.  Inference of the statistics only: no autograd (use
    :func:`npu_fused_linear_cross_entropy_loss_with_max_sum_backward`).

    Notes
    -----
    The page's mask reads ``target > vocab_end_index`` and its padding bits 1; ops-nn's kernel
    (fused_linear_online_max_sum.h: CompareScalar GE, a padded target of 0) and golden are
    followed.  The kernel compares targets converted to float32 (exact below 2**24).
    """
    out = online_max_sum_op(input, weight, target, vocab_start_index, vocab_end_index,
                            return_logits)
    if not return_logits:
        return (*out[:5], None)
    return out


def npu_fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, *,
                                              label_smoothing=0.0, input=None, weight=None,
                                              vocab_parallel_logits=None):
    """Vocab-parallel cross-entropy, part 2: the loss and the shard's softmax.

    Formula (aclnnFusedCrossEntropyLossWithMaxSum.md; ops-nn golden)::

        loss    = log(sum_exp_logits) - predicted_logits
        softmax = exp(vocab_parallel_logits - logits_max[:, None]) * (1 / sum_exp_logits)[:, None]

    ``logits_max``, ``sum_exp_logits`` and ``predicted_logits`` are the globally reduced float32
    ``[B]`` statistics of :func:`npu_fused_linear_online_max_sum` (all-reduce max / sum / sum).
    ``label_smoothing`` must be 0 and ``input``, ``weight`` None (the only values torch_npu
    supports).  Returns ``(loss, softmax)`` in float32; ``softmax`` is ``[B, V]``, or None
    without ``vocab_parallel_logits`` (an empty tensor through ``torch.ops.npu``).  Strict mode:
    A2, A3 and 950.  No autograd.
    """
    loss, softmax = loss_with_max_sum_op(logits_max, sum_exp_logits, predicted_logits,
                                         label_smoothing=label_smoothing, input=input,
                                         weight=weight,
                                         vocab_parallel_logits=vocab_parallel_logits)
    return loss, (softmax if vocab_parallel_logits is not None else None)


def npu_fused_linear_cross_entropy_loss_with_max_sum_backward(
        grad, input, weight, target_mask, masked_target, label_smoothing=0.0, logits_max=None,
        sum_exp_logits=None, softmax=None):
    """Gradients of ``input`` and ``weight`` for the vocab-parallel cross-entropy.

    Formula (aclnnFusedLinearCrossEntropyLossGrad.md)::

        p = softmax                                                    (high-performance mode)
        p = exp(input @ weight.T - logits_max[:, None]) / sum_exp_logits[:, None]  (memory mode)
        p[b, masked_target[b]] -= 1 - bit(target_mask, b)
        g = p * grad[:, None]                  # rounded to input's dtype, as the golden does
        input_grad = g @ weight;  weight_grad = g.T @ input

    ``grad`` float32 ``[B]``; ``target_mask`` / ``masked_target`` as part 1 returns them;
    ``softmax`` float32 ``[B, V]``, or both ``logits_max`` and ``sum_exp_logits`` (float32
    ``[B]``).  ``label_smoothing`` must be 0.  Returns ``(input_grad, weight_grad)`` in ``input``'s
    dtype.  Strict mode: A2 and A3, ``weight.size(0) >= 128``.
    """
    return backward_op(grad, input, weight, target_mask, masked_target, label_smoothing,
                       logits_max, sum_exp_logits, softmax)


TORCH_NPU_FUNCTIONS = {
    ONLINE_OP: npu_fused_linear_online_max_sum,
    LOSS_OP: npu_fused_cross_entropy_loss_with_max_sum,
    BACKWARD_OP: npu_fused_linear_cross_entropy_loss_with_max_sum_backward,
}

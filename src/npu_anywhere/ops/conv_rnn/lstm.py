"""torch_npu.npu_lstm (DynamicRNN, one LSTM layer) and npu_lstm_backward (DynamicRNNGrad).

Sources: seed 004 (npu_lstm); op-plugin ``op_plugin/ops/aclops/LstmKernelNpu.cpp`` (the host
code: time-major input, ``weight = cat([w_ih, w_hh], 1).t()`` of shape ``[I + H, 4H]``,
``bias = b_ih + b_hh``, ``gate_order="ifjo"``, ``forget_bias=0``, seq_mask only read when
``flag_seq``, every output ``[T, B, H]``; the backward reads ``gradh[T - 1]`` and
``gradc[T - 1]`` only); hicann ops-nn ``rnn/dynamic_rnn/op_kernel/LstmFP32.cpp`` (the step,
the mask blend, the REDIRECTIONAL time walk).  The step (gates in i, f, j, o column blocks)::

    [i, f, j, o] = x_t W[:I] + h_{t-1} W[I:] + b
    i, f, o = sigmoid(.), j = tanh(.)
    c_t = f * c_{t-1} + i * j        tanhc_t = tanh(c_t)        h_t = y_t = o * tanhc_t
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _rnn_common as rnn

OP = "npu_lstm"
SCHEMA = ("npu_lstm(Tensor input, Tensor weight, Tensor bias, Tensor seq_mask, Tensor h, "
          "Tensor c, bool has_biases, int num_layers, float dropout, bool train, "
          "bool bidirectional, bool batch_first, bool flag_seq, bool direction) -> "
          "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_lstm_backward"
BACKWARD_SCHEMA = ("npu_lstm_backward(Tensor? grady, Tensor? gradh, Tensor? gradc, "
                   "Tensor input, Tensor weight, Tensor bias, Tensor hx, Tensor cx, "
                   "Tensor y_output, Tensor h_output, Tensor c_output, Tensor i, Tensor j, "
                   "Tensor f, Tensor o, Tensor tanhc) -> (Tensor, Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING,
                        Product.ATLAS_INFERENCE})
_GATES = ("i", "j", "f", "o", "tanhc")


def _sizes(op: str, input, weight, bias):
    """``(T, B, I, H)`` after checking ``input``, ``weight`` and ``bias`` against each other."""
    length, batch, feat, hidden = rnn.sequence_and_gate_bias(op, input, "bias", bias, 4)
    rnn.expect_shape(op, "weight", weight, (feat + hidden, 4 * hidden),
                     "[input_size + hidden_size, 4 * hidden_size]")
    return length, batch, feat, hidden


def _expect_same(op: str, tensors: dict) -> None:
    checks.expect_same_dtype(tensors, op)
    rnn.expect_devices(op, tensors)


def check_lstm(input, weight, bias, seq_mask, h, c, has_biases, num_layers, dropout, train,
               bidirectional, batch_first, flag_seq, direction):
    length, batch, _, hidden = _sizes(OP, input, weight, bias)
    for name, state in (("h", h), ("c", c)):
        rnn.expect_shape(OP, name, state, rnn.state_shapes(batch, hidden), "[1, B, H] or [B, H]")
    _expect_same(OP, {"input": input, "weight": weight, "bias": bias, "h": h, "c": c})
    if flag_seq:
        if seq_mask.dtype == torch.int32:
            rnn.expect_shape(OP, "seq_mask", seq_mask, (batch,),
                             "[batch_size] of int32 sequence lengths")
        else:
            checks.expect_dtype(seq_mask, rnn.allowed((torch.float16, torch.float32, torch.int32)),
                                OP, "seq_mask")
            rnn.expect_shape(OP, "seq_mask", seq_mask, (length, batch, hidden),
                             "[T, B, hidden_size] of a 0/1 mask")
        rnn.expect_devices(OP, {"input": input, "seq_mask": seq_mask})
    targets.expect_supported(OP, _SUPPORTED)


def step_mask(seq_mask, length: int, batch: int, hidden: int):
    """The ``[T, B, H]`` 0/1 mask from int32 lengths ``[B]`` or a mask given as such."""
    if seq_mask.dtype == torch.int32:
        steps = torch.arange(length, device=seq_mask.device).unsqueeze(1)
        valid = steps < seq_mask.unsqueeze(0)
        return valid.unsqueeze(-1).expand(length, batch, hidden)
    return seq_mask


def _split_weight(weight, feat: int):
    return weight[:feat], weight[feat:]


def lstm_reference(input, weight, bias, seq_mask, h, c, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first, flag_seq, direction):
    length, batch, feat = input.shape
    hidden = bias.shape[0] // 4
    mask = step_mask(seq_mask, length, batch, hidden) if flag_seq else None
    w_x, w_h = _split_weight(weight, feat)
    return rnn.lstm_layer(input, w_x, w_h, bias, h.reshape(batch, hidden),
                          c.reshape(batch, hidden), mask, direction, input.dtype)


def check_lstm_backward(grady, gradh, gradc, input, weight, bias, hx, cx, y_output, h_output,
                        c_output, i, j, f, o, tanhc):
    op = BACKWARD_OP
    length, batch, _, hidden = _sizes(op, input, weight, bias)
    for name, state in (("hx", hx), ("cx", cx)):
        rnn.expect_shape(op, name, state, rnn.state_shapes(batch, hidden), "[1, B, H] or [B, H]")
    seq = {"y_output": y_output, "h_output": h_output, "c_output": c_output, "i": i, "j": j,
           "f": f, "o": o, "tanhc": tanhc, "grady": grady, "gradh": gradh, "gradc": gradc}
    for name, t in seq.items():
        if t is not None:
            rnn.expect_shape(op, name, t, (length, batch, hidden), "[T, B, hidden_size]")
    _expect_same(op, {"input": input, "weight": weight, "bias": bias, "hx": hx, "cx": cx,
                      **{k: v for k, v in seq.items() if v is not None}})
    targets.expect_supported(op, _SUPPORTED)


def lstm_grads(grady, gradh, gradc, input, weight, bias, hx, cx, h_output, c_output, gates,
               mask, reverse: bool):
    """``(dx, dweight, dbias, dh0, dc0)``; the final-state gradients are read at the last step
    walked (index ``T - 1``, or 0 when ``reverse``), as the NPU reads ``gradh[T - 1]``."""
    length, batch, feat = input.shape
    hidden = bias.shape[0] // 4
    last = 0 if reverse else length - 1
    cd = rnn.compute_dtype(input.dtype)
    zeros = input.new_zeros((batch, hidden), dtype=cd)
    dy = grady if grady is not None else input.new_zeros((length, batch, hidden), dtype=cd)
    dh = gradh[last] if gradh is not None else zeros
    dc = gradc[last] if gradc is not None else zeros
    w_x, w_h = _split_weight(weight, feat)
    dx, dw_x, dw_h, db, dh0, dc0 = rnn.lstm_layer_backward(
        input, w_x, w_h, hx.reshape(batch, hidden), cx.reshape(batch, hidden), h_output,
        c_output, *gates, dy, dh, dc, mask, reverse)
    dt = input.dtype
    return (dx.to(dt), torch.cat([dw_x, dw_h], dim=0).to(dt), db.to(dt),
            dh0.unsqueeze(0).to(dt), dc0.unsqueeze(0).to(dt))


def lstm_fake(input, weight, bias, seq_mask, h, c, *flags):
    length, batch, _ = input.shape
    return tuple(input.new_empty((length, batch, bias.shape[0] // 4)) for _ in range(8))


def lstm_backward_fake(grady, gradh, gradc, input, weight, bias, hx, cx, *saved):
    state = (1, input.shape[1], bias.shape[0] // 4)
    return (input.new_empty(input.shape), input.new_empty(weight.shape),
            input.new_empty(bias.shape), input.new_empty(state), input.new_empty(state))


def lstm_backward_reference(grady, gradh, gradc, input, weight, bias, hx, cx, y_output,
                            h_output, c_output, i, j, f, o, tanhc):
    return lstm_grads(grady, gradh, gradc, input, weight, bias, hx, cx, h_output, c_output,
                      (i, j, f, o, tanhc), None, False)


# The fake kernels state the output shapes instead of tracing the time loop (much cheaper
# under FakeTensor and symbolic shapes; the reference traces too).
lstm_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_lstm, reference=lstm_reference,
                fake=lstm_fake, metadata_check=True, info=OpInfo(api="torch_npu"))
lstm_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_lstm_backward,
                         reference=lstm_backward_reference, fake=lstm_backward_fake,
                         metadata_check=True,
                         info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    (input, weight, bias, seq_mask, h, c, _, _, _, _, _, _, flag_seq, direction) = inputs
    ctx.mark_non_differentiable(*output[3:])
    ctx.flag_seq, ctx.direction = flag_seq, direction
    ctx.save_for_backward(input, weight, bias, seq_mask, h, c, *output)


def _backward(ctx, grady, gradh, gradc, *_):
    input, weight, bias, seq_mask, h, c, y, h_out, c_out, *gates = ctx.saved_tensors
    if not ctx.flag_seq and not ctx.direction:
        grads = lstm_backward_op(grady, gradh, gradc, input, weight, bias, h, c, y, h_out,
                                 c_out, *gates)
    else:
        # npu_lstm_backward has neither a mask nor a direction; the masked / reversed
        # forward is differentiated exactly with the same recurrence.
        length, batch, _ = input.shape
        mask = step_mask(seq_mask, length, batch, bias.shape[0] // 4) if ctx.flag_seq else None
        grads = lstm_grads(grady, gradh, gradc, input, weight, bias, h, c, h_out, c_out,
                           gates, mask, ctx.direction)
    dx, dw, db, dh0, dc0 = grads
    return (dx, dw, db, None, dh0.reshape(h.shape), dc0.reshape(c.shape)) + (None,) * 8


lstm_op.set_autograd(setup_context=_setup_context, backward=_backward)


def _aliases(op: str, values: dict, kwargs: dict) -> dict:
    """Resolve the doc's spellings (``{"x": "input"}``) in ``kwargs`` into ``values``."""
    for alias, name in (("x", "input"), ("seqMask", "seq_mask")):
        if alias in kwargs:
            values[name] = accept_alias(op, name, values[name], alias, {alias: kwargs.pop(alias)})
    if kwargs:
        accept_alias(op, "input", None, "x", kwargs)   # raises on the unknown keywords
    return values


def npu_lstm(input=None, weight=None, bias=None, seq_mask=None, h=None, c=None, has_biases=True,
             num_layers=1, dropout=0.0, train=True, bidirectional=False, batch_first=False,
             flag_seq=False, direction=False, **kwargs):
    """DynamicRNN: one LSTM layer over a time-major sequence, with its gate intermediates.

    Formula (seed 004; op-plugin LstmKernelNpu.cpp; ops-nn dynamic_rnn LstmFP32.cpp)::

        [i, f, j, o] = x_t @ weight[:I] + h_{t-1} @ weight[I:] + bias   (H columns each)
        i, f, o = sigmoid(.)    j = tanh(.)
        c_t = f * c_{t-1} + i * j    tanhc_t = tanh(c_t)    h_t = y_t = o * tanhc_t

    With ``flag_seq`` a 0/1 mask ``m`` (``seq_mask``) holds finished sequences::

        c_t = m c_t + (1 - m) c_{t-1}    y_t = m o tanh(c_t)    h_t = y_t + (1 - m) h_{t-1}

    Parameters
    ----------
    input : Tensor
        ``[T, B, input_size]``, time-major (``x=`` accepted), float16 or float32.
    weight : Tensor
        ``[input_size + hidden_size, 4 * hidden_size]``: ``cat([w_ih, w_hh], 1).t()`` of
        torch.nn.LSTM's weights, gate columns in i, f, j(g), o order.
    bias : Tensor
        ``[4 * hidden_size]`` (``b_ih + b_hh``); it sets hidden_size.
    seq_mask : Tensor
        Read only when ``flag_seq`` (``seqMask=`` accepted): a ``[T, B, hidden_size]`` 0/1
        mask, or int32 sequence lengths ``[B]``.
    h, c : Tensor
        Initial states, ``[1, B, hidden_size]`` (or ``[B, hidden_size]``).
    has_biases, num_layers, dropout, bidirectional, batch_first : bool, int, float
        Accepted and ignored, as on the NPU (one unidirectional, time-major layer; the bias is
        always added).
    train : bool
        Accepted; the gate outputs are always returned.
    flag_seq : bool
        Apply ``seq_mask``.
    direction : bool
        True walks time backwards (REDIRECTIONAL): step ``T - 1`` first, the final state is
        at index 0.

    Returns
    -------
    tuple of 8 Tensor
        ``y, output_h, output_c, i, j, f, o, tanhc``, each ``[T, B, hidden_size]`` in
        ``input``'s dtype: every step's output, hidden and cell state and gate activations.

    Notes
    -----
    Computed in float32 (float64 kept), every step's outputs rounded to ``input``'s dtype and
    the rounded state carried on, as the kernel does.  Autograd flows from ``y`` and the
    last step of ``output_h`` / ``output_c`` only (earlier steps of those two get no
    gradient), through :func:`npu_lstm_backward`; with ``flag_seq`` or ``direction`` the NPU's
    backward, which has neither, is replaced by the exact masked / reversed gradient.
    Strict mode: A2, A3, Atlas training and inference series.

    Examples
    --------
    >>> x = torch.randn(5, 2, 3); h = c = torch.zeros(1, 2, 4)
    >>> w, b = torch.randn(3 + 4, 16), torch.zeros(16)
    >>> y, hs, cs, i, j, f, o, tanhc = npu_anywhere.npu_lstm(
    ...     x, w, b, torch.empty(0), h, c, True, 1, 0.0, True, False, False, False, False)
    >>> y.shape
    torch.Size([5, 2, 4])
    """
    if kwargs:
        values = _aliases(OP, {"input": input, "seq_mask": seq_mask}, kwargs)
        input, seq_mask = values["input"], values["seq_mask"]
    return lstm_op(input, weight, bias, seq_mask, h, c, has_biases, num_layers, dropout, train,
                   bidirectional, batch_first, flag_seq, direction)


def npu_lstm_backward(grady, gradh, gradc, input, weight, bias, hx, cx, y_output, h_output,
                      c_output, i, j, f, o, tanhc):
    """Gradients of :func:`npu_lstm` (unidirectional, unmasked) from its saved outputs.

    The recurrence of the _lstm_npu_backward doc (seed 004), from ``grady`` ``[T, B, H]`` and
    the final-step gradients ``gradh[T - 1]`` / ``gradc[T - 1]`` (earlier steps of ``gradh`` /
    ``gradc`` are not read, as in op-plugin LstmKernelNpu.cpp); ``None`` grads count as zero.

    Returns ``(grad_input, grad_weight, grad_bias, grad_h, grad_c)``: ``input``'s, ``weight``'s
    and ``bias``' shapes and ``[1, B, H]`` for the states, in ``input``'s dtype (float32 math).
    """
    return lstm_backward_op(grady, gradh, gradc, input, weight, bias, hx, cx, y_output,
                            h_output, c_output, i, j, f, o, tanhc)


TORCH_NPU_FUNCTIONS = {OP: npu_lstm, BACKWARD_OP: npu_lstm_backward}

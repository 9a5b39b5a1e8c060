"""torch_npu.npu_lstm_cell (DynamicRNNV2, one LSTM step) and npu_lstm_cell_backward.

Sources: op-plugin ``op_plugin/ops/aclops/LstmCellKernelNpu.cpp`` (``w_ih`` / ``w_hh`` given
transposed, ``[I, 4H]`` / ``[H, 4H]``, ``bias = b_ih + b_hh``
when given, gate order i, f, c(j), o, outputs ``y`` and the gates ``[1, B, H]`` and the states
``[B, H]``; the backward returns the bias gradient twice, for ``b_ih`` and ``b_hh``) and its
meta function ``op_plugin/python/meta/_meta_registrations.py`` (npu_lstm_cell_meta).  The step
is npu_lstm's (``_rnn_common.lstm_layer``) for one time step.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _rnn_common as rnn

OP = "npu_lstm_cell"
SCHEMA = ("npu_lstm_cell(Tensor input, Tensor w_ih, Tensor w_hh, Tensor h, Tensor c, "
          "Tensor? b_ih=None, Tensor? b_hh=None) -> "
          "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_lstm_cell_backward"
BACKWARD_SCHEMA = ("npu_lstm_cell_backward(Tensor? grady, Tensor? gradh, Tensor? gradc, "
                   "Tensor input, Tensor w_ih, Tensor w_hh, Tensor h, Tensor c, "
                   "Tensor y_output, Tensor h_output, Tensor c_output, Tensor i, Tensor j, "
                   "Tensor f, Tensor o, Tensor tanhc) -> "
                   "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING,
                        Product.ATLAS_INFERENCE})


def _sizes(op: str, input, w_ih, w_hh, h, c):
    """``(B, I, H)`` after checking the cell's tensors against each other.

    hidden_size is ``h.size(1)``; the weights come as the NPU's ``[I, 4H]`` / ``[H, 4H]`` or,
    accepted too, in torch.nn.LSTMCell's ``[4H, I]`` / ``[4H, H]`` (op-plugin's own FakeTensor
    tests pass those), both in the same layout.
    """
    rnn.expect_dim(op, "input", input, 2)
    rnn.expect_float(op, "input", input)
    rnn.expect_dim(op, "h", h, 2)
    batch, feat = input.shape
    hidden = h.shape[1]
    rnn.expect_shape(op, "h", h, (batch, hidden), "[B, hidden_size]")
    rnn.expect_shape(op, "c", c, (batch, hidden), "[B, hidden_size] of h")
    rnn.expect_shape(op, "w_hh", w_hh, [(hidden, 4 * hidden), (4 * hidden, hidden)],
                     "[hidden_size, 4 * hidden_size] (or torch's [4H, H])")
    w_ih_shape = (feat, 4 * hidden) if not torch_layout(w_hh, hidden) else (4 * hidden, feat)
    rnn.expect_shape(op, "w_ih", w_ih, w_ih_shape, "[input_size, 4H] (torch's [4H, input_size] "
                     "when w_hh is [4H, H])")
    tensors = {"input": input, "w_ih": w_ih, "w_hh": w_hh, "h": h, "c": c}
    checks.expect_same_dtype(tensors, op)
    rnn.expect_devices(op, tensors)
    return batch, feat, hidden


def torch_layout(w_hh, hidden: int) -> bool:
    """Whether the weights are in torch.nn.LSTMCell's ``[4H, .]`` layout (H > 0 tells apart)."""
    return tuple(w_hh.shape) == (4 * hidden, hidden)


def _npu_weights(w_ih, w_hh, hidden: int):
    return (w_ih.t(), w_hh.t()) if torch_layout(w_hh, hidden) else (w_ih, w_hh)


def check_lstm_cell(input, w_ih, w_hh, h, c, b_ih=None, b_hh=None):
    _, _, hidden = _sizes(OP, input, w_ih, w_hh, h, c)
    checks.expect((b_ih is None) == (b_hh is None), OP, "b_ih and b_hh", "both given or both None",
                  lambda: f"b_ih {'None' if b_ih is None else 'given'}, b_hh "
                  f"{'None' if b_hh is None else 'given'}", ValueError)
    for name, b in (("b_ih", b_ih), ("b_hh", b_hh)):
        if b is not None:
            rnn.expect_shape(OP, name, b, (4 * hidden,), "[4 * hidden_size]")
            rnn.expect_float(OP, name, b)
            rnn.expect_devices(OP, {"input": input, name: b})
    targets.expect_supported(OP, _SUPPORTED)


def lstm_cell_reference(input, w_ih, w_hh, h, c, b_ih=None, b_hh=None):
    hidden = h.shape[1]
    bias = input.new_zeros(4 * hidden) if b_ih is None else (b_ih + b_hh).to(input.dtype)
    w_x, w_h = _npu_weights(w_ih, w_hh, hidden)
    y, hs, cs, *gates = rnn.lstm_layer(input.unsqueeze(0), w_x, w_h, bias, h, c, None, False,
                                       input.dtype)
    return (y, hs[0], cs[0], *gates)


def check_lstm_cell_backward(grady, gradh, gradc, input, w_ih, w_hh, h, c, y_output, h_output,
                             c_output, i, j, f, o, tanhc):
    op = BACKWARD_OP
    batch, _, hidden = _sizes(op, input, w_ih, w_hh, h, c)
    step = (1, batch, hidden)
    for name, t in (("y_output", y_output), ("i", i), ("j", j), ("f", f), ("o", o),
                    ("tanhc", tanhc), ("grady", grady)):
        if t is not None:
            rnn.expect_shape(op, name, t, step, "[1, B, hidden_size]")
    for name, t in (("h_output", h_output), ("c_output", c_output), ("gradh", gradh),
                    ("gradc", gradc)):
        if t is not None:
            rnn.expect_shape(op, name, t, (batch, hidden), "[B, hidden_size]")
    present = {k: v for k, v in (("input", input), ("y_output", y_output), ("grady", grady),
                                 ("gradh", gradh), ("gradc", gradc)) if v is not None}
    checks.expect_same_dtype(present, op)
    targets.expect_supported(op, _SUPPORTED)


def lstm_cell_backward_reference(grady, gradh, gradc, input, w_ih, w_hh, h, c, y_output,
                                 h_output, c_output, i, j, f, o, tanhc):
    batch, hidden = h.shape
    cd = rnn.compute_dtype(input.dtype)
    zeros = input.new_zeros((batch, hidden), dtype=cd)
    dy = grady if grady is not None else input.new_zeros((1, batch, hidden), dtype=cd)
    w_x, w_h = _npu_weights(w_ih, w_hh, hidden)
    dx, dw_ih, dw_hh, db, dh, dc = rnn.lstm_layer_backward(
        input.unsqueeze(0), w_x, w_h, h, c, h_output.unsqueeze(0), c_output.unsqueeze(0),
        i, j, f, o, tanhc, dy, gradh if gradh is not None else zeros,
        gradc if gradc is not None else zeros, None, False)
    if torch_layout(w_hh, hidden):
        dw_ih, dw_hh = dw_ih.t(), dw_hh.t()
    dt = input.dtype
    return (dx[0].to(dt), dw_ih.to(dt).contiguous(), dw_hh.to(dt).contiguous(), db.to(dt),
            db.to(dt).clone(), dh.to(dt), dc.to(dt))


def lstm_cell_fake(input, w_ih, w_hh, h, c, b_ih=None, b_hh=None):
    step = (1, input.shape[0], h.shape[1])
    return (input.new_empty(step), input.new_empty(step[1:]), input.new_empty(step[1:]),
            *(input.new_empty(step) for _ in range(5)))


def lstm_cell_backward_fake(grady, gradh, gradc, input, w_ih, w_hh, h, c, *saved):
    bias = (4 * h.shape[1],)
    return tuple(input.new_empty(s) for s in (input.shape, w_ih.shape, w_hh.shape, bias, bias,
                                              h.shape, c.shape))


lstm_cell_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_lstm_cell,
                     reference=lstm_cell_reference, fake=lstm_cell_fake, metadata_check=True,
                     info=OpInfo(api="torch_npu"))
lstm_cell_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                              check=check_lstm_cell_backward,
                              reference=lstm_cell_backward_reference,
                              fake=lstm_cell_backward_fake, metadata_check=True,
                              info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, w_ih, w_hh, h, c, b_ih, b_hh = inputs
    ctx.mark_non_differentiable(*output[3:])
    ctx.has_bias = b_ih is not None
    ctx.save_for_backward(input, w_ih, w_hh, h, c, *output)


def _backward(ctx, grady, gradh, gradc, *_):
    input, w_ih, w_hh, h, c, *outputs = ctx.saved_tensors
    dx, dw_ih, dw_hh, db_ih, db_hh, dh, dc = lstm_cell_backward_op(
        grady, gradh, gradc, input, w_ih, w_hh, h, c, *outputs)
    if not ctx.has_bias:
        db_ih = db_hh = None
    return dx, dw_ih, dw_hh, dh, dc, db_ih, db_hh


lstm_cell_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_lstm_cell(input, w_ih, w_hh, h, c, b_ih=None, b_hh=None):
    """One LSTM step (DynamicRNNV2) returning the gate intermediates.

    Formula (op-plugin LstmCellKernelNpu.cpp; the DynamicRNN step)::

        [i, f, j, o] = input @ w_ih + h @ w_hh + b_ih + b_hh     (hidden_size columns each)
        i, f, o = sigmoid(.)   j = tanh(.)   c' = f * c + i * j   h' = y = o * tanh(c')

    Parameters
    ----------
    input : Tensor
        ``[B, input_size]``, float16 or float32.
    w_ih, w_hh : Tensor
        ``[input_size, 4H]`` and ``[hidden_size, 4H]``: torch.nn.LSTMCell's ``weight_ih.t()``
        and ``weight_hh.t()`` (gate blocks i, f, g, o).  torch's own ``[4H, input_size]`` /
        ``[4H, hidden_size]`` are accepted too (hidden_size is ``h.size(1)``); the gradients
        come back in the layout given.
    h, c : Tensor
        ``[B, hidden_size]`` states.
    b_ih, b_hh : Tensor, optional
        ``[4H]`` each, both or neither.

    Returns
    -------
    tuple of 8 Tensor
        ``y_output [1, B, H]``, ``h_output [B, H]``, ``c_output [B, H]`` and ``i, j, f, o,
        tanhc`` (``[1, B, H]``), in ``input``'s dtype (float32 math, rounded once).

    Notes
    -----
    Autograd (from ``y_output``, ``h_output``, ``c_output``) runs
    :func:`npu_lstm_cell_backward`.  op-plugin's meta function sizes the outputs by
    ``w_hh.size(1) / 4``, which is hidden_size only in the NPU layout; here it is always
    ``h.size(1)``.  Strict mode: A2, A3, Atlas training and inference series.
    """
    return lstm_cell_op(input, w_ih, w_hh, h, c, b_ih, b_hh)


def npu_lstm_cell_backward(grady, gradh, gradc, input, w_ih, w_hh, h, c, y_output, h_output,
                           c_output, i, j, f, o, tanhc):
    """Gradients of :func:`npu_lstm_cell`: ``(grad_input, grad_w_ih, grad_w_hh, grad_b_ih,
    grad_b_hh, grad_h, grad_c)``, the two bias gradients equal (the NPU's one ``grad_bias``);
    ``None`` grads count as zero.  The single-step case of :func:`npu_lstm_backward`."""
    return lstm_cell_backward_op(grady, gradh, gradc, input, w_ih, w_hh, h, c, y_output,
                                 h_output, c_output, i, j, f, o, tanhc)


TORCH_NPU_FUNCTIONS = {OP: npu_lstm_cell, BACKWARD_OP: npu_lstm_cell_backward}

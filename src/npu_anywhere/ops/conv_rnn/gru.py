"""torch_npu.npu_gru (DynamicGRUV2, one GRU layer) and npu_gru_backward (DynamicGRUV2Grad).

Sources: seed 004 (npu_gru); op-plugin ``op_plugin/ops/aclops/GruKernelNpu.cpp`` (the host
code: time-major input, ``weight_input = w_ih.t()`` ``[I, 3H]``, ``weight_hidden = w_hh.t()``
``[H, 3H]``, ``gate_order="rzh"``, ``reset_after=True``, seq_length not passed to the kernel,
outputs ``[T, B, H]`` in ``bias_input``'s dtype; the backward reads ``gradh[T - 1]`` only);
hicann ops-nn ``rnn/gru/README.md`` (the step and ``n_h``, the ``hidden_new`` output)::

    [r, z, n] column blocks of  gi = x_t W_i + b_i  and  gh = h_{t-1} W_h + b_h
    r = sigmoid(gi_r + gh_r)     z = sigmoid(gi_z + gh_z)     n = tanh(gi_n + r * gh_n)
    h_t = y_t = (1 - z) * n + z * h_{t-1}                      hidden_new_t = gh_n
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _rnn_common as rnn

OP = "npu_gru"
SCHEMA = ("npu_gru(Tensor input, Tensor hx, Tensor weight_input, Tensor weight_hidden, "
          "Tensor bias_input, Tensor bias_hidden, Tensor seq_length, bool has_biases, "
          "int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> "
          "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_gru_backward"
BACKWARD_SCHEMA = ("npu_gru_backward(Tensor? grady, Tensor? gradh, Tensor input, "
                   "Tensor weight_input, Tensor weight_hidden, Tensor bias_input, "
                   "Tensor bias_hidden, Tensor seq_length, Tensor hx, Tensor y_output, "
                   "Tensor h_output, Tensor output_updata, Tensor output_reset, "
                   "Tensor output_new, Tensor hidden_new) -> "
                   "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING,
                        Product.ATLAS_INFERENCE})


def _sizes(op: str, input, hx, weight_input, weight_hidden, bias_input, bias_hidden):
    """``(T, B, I, H)`` after checking the layer's tensors against each other."""
    length, batch, feat, hidden = rnn.sequence_and_gate_bias(op, input, "bias_input",
                                                             bias_input, 3)
    rnn.expect_shape(op, "bias_hidden", bias_hidden, (3 * hidden,), "[3 * hidden_size]")
    rnn.expect_shape(op, "weight_input", weight_input, (feat, 3 * hidden),
                     "[input_size, 3 * hidden_size]")
    rnn.expect_shape(op, "weight_hidden", weight_hidden, (hidden, 3 * hidden),
                     "[hidden_size, 3 * hidden_size]")
    rnn.expect_shape(op, "hx", hx, rnn.state_shapes(batch, hidden), "[1, B, H] or [B, H]")
    checks.expect_same_dtype({"input": input, "weight_input": weight_input,
                              "weight_hidden": weight_hidden}, op)
    rnn.expect_float(op, "bias_input", bias_input)
    checks.expect_same_dtype({"bias_input": bias_input, "bias_hidden": bias_hidden}, op)
    rnn.expect_float(op, "hx", hx)
    rnn.expect_devices(op, {"input": input, "hx": hx, "weight_input": weight_input,
                            "weight_hidden": weight_hidden, "bias_input": bias_input,
                            "bias_hidden": bias_hidden})
    return length, batch, feat, hidden


def check_gru(input, hx, weight_input, weight_hidden, bias_input, bias_hidden, seq_length,
              has_biases, num_layers, dropout, train, bidirectional, batch_first):
    _sizes(OP, input, hx, weight_input, weight_hidden, bias_input, bias_hidden)
    targets.expect_supported(OP, _SUPPORTED)


def gru_reference(input, hx, weight_input, weight_hidden, bias_input, bias_hidden, seq_length,
                  has_biases, num_layers, dropout, train, bidirectional, batch_first):
    batch, hidden = input.shape[1], bias_input.shape[0] // 3
    return rnn.gru_layer(input, weight_input, weight_hidden, bias_input, bias_hidden,
                         hx.reshape(batch, hidden), bias_input.dtype)


def check_gru_backward(grady, gradh, input, weight_input, weight_hidden, bias_input,
                       bias_hidden, seq_length, hx, y_output, h_output, output_updata,
                       output_reset, output_new, hidden_new):
    op = BACKWARD_OP
    length, batch, _, hidden = _sizes(op, input, hx, weight_input, weight_hidden, bias_input,
                                      bias_hidden)
    seq = {"y_output": y_output, "h_output": h_output, "output_updata": output_updata,
           "output_reset": output_reset, "output_new": output_new, "hidden_new": hidden_new,
           "grady": grady, "gradh": gradh}
    for name, t in seq.items():
        if t is not None:
            rnn.expect_shape(op, name, t, (length, batch, hidden), "[T, B, hidden_size]")
            rnn.expect_float(op, name, t)
    rnn.expect_devices(op, {"input": input, **seq})
    targets.expect_supported(op, _SUPPORTED)


def gru_backward_reference(grady, gradh, input, weight_input, weight_hidden, bias_input,
                           bias_hidden, seq_length, hx, y_output, h_output, output_updata,
                           output_reset, output_new, hidden_new):
    length, batch, _ = input.shape
    hidden = bias_input.shape[0] // 3
    cd = rnn.compute_dtype(input.dtype)
    dy = grady if grady is not None else input.new_zeros((length, batch, hidden), dtype=cd)
    dh = gradh[length - 1] if gradh is not None else input.new_zeros((batch, hidden), dtype=cd)
    dx, dw_x, dw_h, db_x, db_h, dh0 = rnn.gru_layer_backward(
        input, weight_input, weight_hidden, hx.reshape(batch, hidden), h_output, output_updata,
        output_reset, output_new, hidden_new, dy, dh)
    dt = input.dtype
    return tuple(t.to(dt).contiguous() for t in (dw_x, dw_h, dx, db_x, db_h,
                                                  dh0.reshape(hx.shape)))


def gru_fake(input, hx, weight_input, weight_hidden, bias_input, *rest):
    shape = (input.shape[0], input.shape[1], bias_input.shape[0] // 3)
    return tuple(input.new_empty(shape, dtype=bias_input.dtype) for _ in range(6))


def gru_backward_fake(grady, gradh, input, weight_input, weight_hidden, bias_input,
                      bias_hidden, seq_length, hx, *saved):
    return tuple(input.new_empty(t.shape) for t in (weight_input, weight_hidden, input,
                                                    bias_input, bias_hidden, hx))


# fake kernels: the output shapes, without tracing the time loop
gru_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_gru, reference=gru_reference,
               fake=gru_fake, metadata_check=True, info=OpInfo(api="torch_npu"))
gru_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_gru_backward,
                        reference=gru_backward_reference, fake=gru_backward_fake,
                        metadata_check=True,
                        info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, hx, weight_input, weight_hidden, bias_input, bias_hidden, seq_length = inputs[:7]
    ctx.mark_non_differentiable(*output[2:])
    ctx.save_for_backward(input, hx, weight_input, weight_hidden, bias_input, bias_hidden,
                          seq_length, *output)


def _backward(ctx, grady, gradh, *_):
    input, hx, w_i, w_h, b_i, b_h, seq_length, *outputs = ctx.saved_tensors
    dw_i, dw_h, dx, db_i, db_h, dh0 = gru_backward_op(grady, gradh, input, w_i, w_h, b_i, b_h,
                                                      seq_length, hx, *outputs)
    # grads follow the schema's argument order; the bias grads take the biases' dtype
    return (dx, dh0.to(hx.dtype), dw_i, dw_h, db_i.to(b_i.dtype), db_h.to(b_h.dtype)) \
        + (None,) * 7


gru_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_gru(input, hx, weight_input, weight_hidden, bias_input, bias_hidden, seq_length,
            has_biases=True, num_layers=1, dropout=0.0, train=True, bidirectional=False,
            batch_first=False):
    """DynamicGRUV2: one GRU layer over a time-major sequence, with its gate intermediates.

    Formula (seed 004; op-plugin GruKernelNpu.cpp; ops-nn rnn/gru README)::

        gi = x_t @ weight_input + bias_input      gh = h_{t-1} @ weight_hidden + bias_hidden
        r = sigmoid(gi_r + gh_r)    z = sigmoid(gi_z + gh_z)    n = tanh(gi_n + r * gh_n)
        h_t = (1 - z) * n + z * h_{t-1}

    with the ``[r, z, n]`` column blocks of hidden_size each (torch.nn.GRU's order).

    Parameters
    ----------
    input : Tensor
        ``[T, B, input_size]``, time-major, float16 (float32 accepted off the NPU).
    hx : Tensor
        Initial hidden state ``[B, hidden_size]`` (or ``[1, B, hidden_size]``).
    weight_input, weight_hidden : Tensor
        ``[input_size, 3H]`` and ``[hidden_size, 3H]`` (``w_ih.t()``, ``w_hh.t()`` of
        torch.nn.GRU), ``input``'s dtype.
    bias_input, bias_hidden : Tensor
        ``[3H]``, float16 or float32; their dtype is the outputs' dtype.  Always added.
    seq_length : Tensor
        Accepted and not read, as on the NPU (its host code passes no sequence lengths).
    has_biases, num_layers, dropout, train, bidirectional, batch_first
        Accepted and ignored, as on the NPU (one unidirectional time-major layer).

    Returns
    -------
    tuple of 6 Tensor
        ``y, output_h, update, reset, new, hidden_new``, each ``[T, B, H]`` in
        ``bias_input``'s dtype: every step's output and hidden state (equal), the z, r, n
        gates and ``hidden_new = h_{t-1} @ weight_hidden[:, 2H:] + bias_hidden[2H:]``.

    Notes
    -----
    float32 math, every step rounded to the output dtype and the rounded state carried on.
    Autograd flows from ``y`` and the last step of ``output_h`` (earlier steps of ``output_h``
    get no gradient, as on the NPU) through :func:`npu_gru_backward`.
    Strict mode: A2, A3, Atlas training and inference series.
    """
    return gru_op(input, hx, weight_input, weight_hidden, bias_input, bias_hidden, seq_length,
                  has_biases, num_layers, dropout, train, bidirectional, batch_first)


def npu_gru_backward(grady, gradh, input, weight_input, weight_hidden, bias_input, bias_hidden,
                     seq_length, hx, y_output, h_output, output_updata, output_reset, output_new,
                     hidden_new):
    """Gradients of :func:`npu_gru` from its saved outputs (DynamicGRUV2Grad).

    Backpropagation through time from ``grady`` ``[T, B, H]`` and ``gradh[T - 1]`` (earlier
    steps of ``gradh`` are not read; ``None`` counts as zero)::

        dh_t = dy_t + dh    dn = dh_t (1 - z)(1 - n^2)    dz = dh_t (h_{t-1} - n) z (1 - z)
        dr = dn * hidden_new * r (1 - r)    dgi = [dr, dz, dn]    dgh = [dr, dz, r * dn]

    Returns ``(grad_weight_input, grad_weight_hidden, grad_input, grad_bias_input,
    grad_bias_hidden, grad_hx)`` in ``input``'s dtype (float32 math).
    """
    return gru_backward_op(grady, gradh, input, weight_input, weight_hidden, bias_input,
                           bias_hidden, seq_length, hx, y_output, h_output, output_updata,
                           output_reset, output_new, hidden_new)


TORCH_NPU_FUNCTIONS = {OP: npu_gru, BACKWARD_OP: npu_gru_backward}

"""_lstm_npu (aclnnLSTM: multi-layer, bidirectional LSTM with its intermediates) and
_lstm_npu_backward (aclnnLSTMBackward).

Sources: seed 004 (_lstm_npu, _lstm_npu_backward: formulas, params layout, output shapes,
"direction first, then layers" stacking); op-plugin ``op_plugin/ops/opapi/LSTMKernelNpuOpApi.cpp``
and ``op_plugin/utils/KernelNpuOutputSize.cpp`` (lstm_npu_output_size & co.: shapes, the
intermediates empty when ``train`` is False, ``batch_sizes`` input ``[T * B, I]``); the layer
step is the DynamicRNN one (``_rnn_common.lstm_layer``, torch.nn.LSTM's i, f, g, o gate
blocks); a reverse direction walks time backwards and stores each step at its own index.
"""

from __future__ import annotations

import torch

from ... import checks, library, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _rnn_common as rnn

OP = "_lstm_npu"
SCHEMA = ("_lstm_npu(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, "
          "int num_layers, float dropout, bool train, bool bidirectional, *, "
          "bool? batch_first=False, Tensor? batch_sizes=None) -> (Tensor, Tensor, Tensor, "
          "Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "_lstm_npu_backward"
BACKWARD_SCHEMA = ("_lstm_npu_backward(Tensor grad_y, Tensor grad_hy, Tensor grad_cy, "
                   "Tensor input, Tensor[] hx, Tensor[] params, Tensor i, Tensor j, Tensor f, "
                   "Tensor o, Tensor h, Tensor c, Tensor tanhc, bool has_biases, "
                   "int num_layers, float dropout, bool train, bool bidirectional, *, "
                   "bool? batch_first=False, Tensor? batch_sizes=None) -> "
                   "(Tensor, Tensor[], Tensor[])")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_TRAINING,
                        Product.ATLAS_INFERENCE})


class _Layout:
    """Sizes of one call: ``T, B, H``, directions ``D``, tensors per (layer, direction)."""

    def __init__(self, input, params, has_biases, num_layers, bidirectional, batch_first,
                 batch_sizes):
        self.dirs = 2 if bidirectional else 1
        self.per_cell = 4 if has_biases else 2
        self.layers = num_layers
        self.batch_first = bool(batch_first)
        self.packed = batch_sizes is not None
        self.hidden = params[0].shape[0] // 4 if params else 0
        if self.packed:
            self.steps = batch_sizes.shape[0]
            self.batch = input.shape[0] // max(self.steps, 1)
        elif self.batch_first:
            self.batch, self.steps = input.shape[0], input.shape[1]
        else:
            self.steps, self.batch = input.shape[0], input.shape[1]

    def cell(self, params, layer: int, direction: int):
        """``(w_ih, w_hh, b_ih, b_hh)`` of one layer and direction (biases None without)."""
        start = (layer * self.dirs + direction) * self.per_cell
        w = params[start:start + self.per_cell]
        return (w[0], w[1], w[2], w[3]) if self.per_cell == 4 else (w[0], w[1], None, None)

    def time_major(self, x):
        """``x`` as ``[T, B, F]``, from batch-first or ``[T * B, F]`` packed input."""
        if self.packed:
            return x.reshape(self.steps, self.batch, x.shape[-1])
        return x.transpose(0, 1) if self.batch_first else x

    def restore(self, y, like_input: bool):
        """A time-major ``[T, B, F]`` result in the caller's layout."""
        if self.packed:
            return y.reshape(-1, y.shape[-1]) if like_input else y
        # the NPU allocates batch-first results as such (contiguous)
        return y.transpose(0, 1).contiguous() if self.batch_first else y

    def mask(self, batch_sizes, device):
        if not self.packed:
            return None
        rows = torch.arange(self.batch, device=device).unsqueeze(0)
        valid = rows < batch_sizes.to(device).unsqueeze(1)
        return valid.unsqueeze(-1).expand(self.steps, self.batch, self.hidden)


def _check_call(op, input, hx, params, has_biases, num_layers, bidirectional, batch_first,
                batch_sizes) -> _Layout:
    checks.expect(num_layers > 0, op, "num_layers", "> 0", num_layers, ValueError)
    rnn.expect_float(op, "input", input)
    if batch_sizes is not None:
        rnn.expect_dim(op, "input", input, 2)
        rnn.expect_dim(op, "batch_sizes", batch_sizes, 1)
        checks.expect_dtype(batch_sizes, (torch.int32, torch.int64), op, "batch_sizes")
        t = batch_sizes.shape[0]
        checks.expect(t > 0 and input.shape[0] % t == 0, op, "input",
                      lambda: f"size(0) divisible by batch_sizes.size(0) = {t}",
                      lambda: f"shape {tuple(input.shape)}", RuntimeError)
    else:
        rnn.expect_dim(op, "input", input, 3)
    dirs = 2 if bidirectional else 1
    per_cell = 4 if has_biases else 2
    count = dirs * per_cell * num_layers
    checks.expect(len(params) == count, op, "params",
                  lambda: f"{count} tensors (num_layers * D * (4 with biases, else 2))",
                  f"{len(params)}", ValueError)
    lay = _Layout(input, params, has_biases, num_layers, bidirectional, batch_first,
                  batch_sizes)
    checks.expect(lay.steps > 0, op, "input", "at least one time step",
                  lambda: f"shape {tuple(input.shape)}", ValueError)
    hidden = lay.hidden
    checks.expect(params[0].dim() == 2 and hidden > 0 and params[0].shape[0] == 4 * hidden,
                  op, "params[0]", "a [4 * hidden_size, input_size] weight",
                  lambda: f"shape {tuple(params[0].shape)}", RuntimeError)
    for layer in range(num_layers):
        feat = input.shape[-1] if layer == 0 else dirs * hidden
        for d in range(dirs):
            base = (layer * dirs + d) * per_cell
            w_ih, w_hh, b_ih, b_hh = lay.cell(params, layer, d)
            rnn.expect_shape(op, f"params[{base}]", w_ih, (4 * hidden, feat),
                             "[4 * hidden_size, this layer's input size]")
            rnn.expect_shape(op, f"params[{base + 1}]", w_hh, (4 * hidden, hidden),
                             "[4 * hidden_size, hidden_size]")
            for k, b in ((2, b_ih), (3, b_hh)):
                if b is not None:
                    rnn.expect_shape(op, f"params[{base + k}]", b, (4 * hidden,),
                                     "[4 * hidden_size]")
    for k, p in enumerate(params):
        rnn.expect_float(op, f"params[{k}]", p)
    checks.expect(len(hx) in (0, 2), op, "hx", "a list of 2 tensors (h_0, c_0) or empty",
                  f"{len(hx)} tensors", ValueError)
    for k, state in enumerate(hx):
        rnn.expect_shape(op, f"hx[{k}]", state, (dirs * num_layers, lay.batch, hidden),
                         "[D * num_layers, batch_size, hidden_size]")
        rnn.expect_float(op, f"hx[{k}]", state)
    rnn.expect_devices(op, {"input": input, **{f"hx[{k}]": s for k, s in enumerate(hx)},
                            **{f"params[{k}]": p for k, p in enumerate(params)}})
    targets.expect_supported(op, _SUPPORTED)
    return lay


def check_lstm_npu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                   batch_first=False, batch_sizes=None):
    _check_call(OP, input, hx, params, has_biases, num_layers, bidirectional, batch_first,
                batch_sizes)


def _initial(hx, lay, input, index: int):
    if hx:
        return hx[0][index], hx[1][index]
    zeros = input.new_zeros((lay.batch, lay.hidden))
    return zeros, zeros


def lstm_npu_reference(input, hx, params, has_biases, num_layers, dropout, train,
                       bidirectional, batch_first=False, batch_sizes=None):
    lay = _Layout(input, params, has_biases, num_layers, bidirectional, batch_first,
                  batch_sizes)
    dt = input.dtype
    mask = lay.mask(batch_sizes, input.device)
    layer_in = lay.time_major(input)
    per_cell = []
    for layer in range(num_layers):
        ys = []
        for d in range(lay.dirs):
            w_ih, w_hh, b_ih, b_hh = lay.cell(params, layer, d)
            bias = w_ih.new_zeros(w_ih.shape[0]) if b_ih is None else b_ih + b_hh
            h0, c0 = _initial(hx, lay, input, layer * lay.dirs + d)
            outs = rnn.lstm_layer(layer_in, w_ih.t(), w_hh.t(), bias, h0, c0, mask, d == 1, dt)
            per_cell.append(outs)
            ys.append(outs[0])
        layer_in = torch.cat(ys, dim=-1)
    # the final state of a direction is its last step walked: T - 1 forwards, 0 backwards
    finals = [(outs[1][0 if k % lay.dirs else -1], outs[2][0 if k % lay.dirs else -1])
              for k, outs in enumerate(per_cell)]
    hy = torch.stack([h for h, _ in finals])
    cy = torch.stack([c for _, c in finals])
    stacked = {name: torch.stack([outs[k] for outs in per_cell])
               for k, name in ((1, "h"), (2, "c"), (3, "i"), (4, "j"), (5, "f"), (6, "o"),
                               (7, "tanhc"))}
    if not train:
        empty = input.new_empty((0,))
        gates = [empty.clone() for _ in range(4)]
        return (lay.restore(layer_in, False), hy, cy, *gates, hy.clone(), cy.clone(),
                empty.clone())
    return (lay.restore(layer_in, False), hy, cy, stacked["i"], stacked["j"], stacked["f"],
            stacked["o"], stacked["h"], stacked["c"], stacked["tanhc"])


def check_lstm_npu_backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c,
                            tanhc, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first=False, batch_sizes=None):
    op = BACKWARD_OP
    lay = _check_call(op, input, hx, params, has_biases, num_layers, bidirectional,
                      batch_first, batch_sizes)
    cells = lay.dirs * num_layers
    seq = (cells, lay.steps, lay.batch, lay.hidden)
    for name, t in (("i", i), ("j", j), ("f", f), ("o", o), ("h", h), ("c", c),
                    ("tanhc", tanhc)):
        rnn.expect_shape(op, name, t, seq, "[D * num_layers, T, B, hidden_size] (train=True)")
    for name, t in (("grad_hy", grad_hy), ("grad_cy", grad_cy)):
        rnn.expect_shape(op, name, t, (cells, lay.batch, lay.hidden),
                         "[D * num_layers, batch_size, hidden_size]")
    out_numel = lay.steps * lay.batch * lay.dirs * lay.hidden
    checks.expect(grad_y.numel() == out_numel and grad_y.shape[-1] == lay.dirs * lay.hidden, op,
                  "grad_y", lambda: f"the output's shape ({out_numel} elements, last dim "
                  f"{lay.dirs * lay.hidden})", lambda: f"shape {tuple(grad_y.shape)}",
                  RuntimeError)


def lstm_npu_backward_reference(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c,
                                tanhc, has_biases, num_layers, dropout, train, bidirectional,
                                batch_first=False, batch_sizes=None):
    lay = _Layout(input, params, has_biases, num_layers, bidirectional, batch_first,
                  batch_sizes)
    dt = input.dtype
    mask = lay.mask(batch_sizes, input.device)
    x0 = lay.time_major(input)
    dy = grad_y.reshape(lay.steps, lay.batch, -1) if lay.packed else lay.time_major(grad_y)
    # each layer's input: the first layer's is ``input``, later ones the layer below's y
    # (its hidden states, zero at masked steps)
    ys = h if mask is None else h * mask.to(h.dtype)
    dparams = [None] * len(params)
    dh0, dc0 = [None] * (lay.dirs * num_layers), [None] * (lay.dirs * num_layers)
    for layer in range(num_layers - 1, -1, -1):
        layer_in = x0 if layer == 0 else torch.cat(
            [ys[(layer - 1) * lay.dirs + d] for d in range(lay.dirs)], dim=-1)
        d_in = None
        for d in range(lay.dirs):
            k = layer * lay.dirs + d
            w_ih, w_hh, _, _ = lay.cell(params, layer, d)
            h0, c0 = _initial(hx, lay, input, k)
            dy_cell = dy[..., d * lay.hidden:(d + 1) * lay.hidden]
            dx, dw_x, dw_h, db, dh0[k], dc0[k] = rnn.lstm_layer_backward(
                layer_in, w_ih.t(), w_hh.t(), h0, c0, h[k], c[k], i[k], j[k], f[k], o[k],
                tanhc[k], dy_cell, grad_hy[k], grad_cy[k], mask, d == 1)
            d_in = dx if d_in is None else d_in + dx
            base = k * lay.per_cell
            dparams[base] = dw_x.t().to(params[base].dtype).contiguous()
            dparams[base + 1] = dw_h.t().to(params[base + 1].dtype).contiguous()
            if lay.per_cell == 4:
                dparams[base + 2] = db.to(params[base + 2].dtype)
                dparams[base + 3] = db.to(params[base + 3].dtype).clone()   # no aliasing
        dy = d_in
    dx = lay.restore(dy, True).to(dt)
    return dx, [torch.stack(dh0).to(dt), torch.stack(dc0).to(dt)], dparams


def lstm_npu_fake(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                  batch_first=False, batch_sizes=None):
    lay = _Layout(input, params, has_biases, num_layers, bidirectional, batch_first,
                  batch_sizes)
    final = (lay.dirs * num_layers, lay.batch, lay.hidden)
    new = input.new_empty
    # made time-major and restored as the reference does, strides included
    out = lay.restore(new((lay.steps, lay.batch, lay.dirs * lay.hidden)), False)
    if not train:
        return (out, new(final), new(final), *(new((0,)) for _ in range(4)),
                new(final), new(final), new((0,)))
    steps = (final[0], lay.steps, lay.batch, lay.hidden)
    return (out, new(final), new(final), *(new(steps) for _ in range(7)))


def lstm_npu_backward_fake(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c,
                           tanhc, has_biases, num_layers, dropout, train, bidirectional,
                           batch_first=False, batch_sizes=None):
    lay = _Layout(input, params, has_biases, num_layers, bidirectional, batch_first,
                  batch_sizes)
    # dx is made time-major and restored as the reference does, strides included
    dx = lay.restore(input.new_empty((lay.steps, lay.batch, input.shape[-1])), True)
    cells = grad_hy.shape
    return (dx, [input.new_empty(cells), input.new_empty(cells)],
            [p.new_empty(p.shape) for p in params])


# fake kernels: the output shapes, without tracing the layers' time loops
lstm_npu_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_lstm_npu,
                    reference=lstm_npu_reference, fake=lstm_npu_fake, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
lstm_npu_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                             check=check_lstm_npu_backward,
                             reference=lstm_npu_backward_reference,
                             fake=lstm_npu_backward_fake, metadata_check=True,
                             info=OpInfo(api="torch_npu", backward_of=OP))


# -- autograd: hx and params are tensor lists, so the Function takes them flattened ------

class _LstmNpuFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, flags, batch_first, n_hx, batch_sizes, input, *tensors):
        hx, params = list(tensors[:n_hx]), list(tensors[n_hx:])
        with torch._C._AutoDispatchBelowAutograd():
            output = lstm_npu_op.overload(input, hx, params, *flags, batch_first=batch_first,
                                          batch_sizes=batch_sizes)
        ctx.mark_non_differentiable(*output[3:])
        ctx.flags, ctx.batch_first, ctx.n_hx, ctx.n_params = flags, batch_first, n_hx, len(params)
        ctx.save_for_backward(batch_sizes, input, *tensors, *output[3:])
        return output

    @staticmethod
    def backward(ctx, grad_y, grad_hy, grad_cy, *_):
        batch_sizes, input, *rest = ctx.saved_tensors
        hx, rest = rest[:ctx.n_hx], rest[ctx.n_hx:]
        params, inter = rest[:ctx.n_params], rest[ctx.n_params:]
        checks.expect(ctx.flags[3], OP, "train", "True when a gradient is asked for (the "
                      "intermediates are only kept in training mode)", "False", RuntimeError)
        dx, dhx, dparams = lstm_npu_backward_op(
            grad_y, grad_hy, grad_cy, input, hx, params, *inter, *ctx.flags,
            batch_first=ctx.batch_first, batch_sizes=batch_sizes)
        return (None, None, None, None, dx, *(dhx if hx else ()), *dparams)


def _lstm_npu_autograd(input, hx, params, has_biases, num_layers, dropout, train,
                       bidirectional, *, batch_first=False, batch_sizes=None):
    flags = (has_biases, num_layers, dropout, train, bidirectional)
    # a malformed call (None, not a tensor) goes on to the schema's and the check's errors
    wants = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in (input, *(hx or ()), *(params or ())))
    if not wants:
        with torch._C._AutoDispatchBelowAutograd():
            return lstm_npu_op.overload(input, hx, params, *flags, batch_first=batch_first,
                                        batch_sizes=batch_sizes)
    return _LstmNpuFunction.apply(flags, batch_first, len(hx), batch_sizes, input, *hx,
                                  *params)


library._library(TORCH_NPU_NS).impl(lstm_npu_op.key, _lstm_npu_autograd, "Autograd")
lstm_npu_op.autograd = "yes"


def _lstm_npu(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, *,
              batch_first=False, batch_sizes=None):
    """Multi-layer (bidirectional) LSTM over a sequence, with every layer's intermediates.

    Formula (seed 004), per layer and direction, gates in torch.nn.LSTM's i, f, g(j), o
    order::

        [i, f, j, o] = x_t w_ih^T + b_ih + h_{t-1} w_hh^T + b_hh
        c_t = f * c_{t-1} + i * j     tanhc_t = tanh(c_t)     h_t = o * tanhc_t

    Parameters
    ----------
    input : Tensor
        ``[T, B, I]`` (``[B, T, I]`` with ``batch_first``), or ``[T * B, I]`` laid out as
        ``[T, B, I]`` with ``batch_sizes``; float16 or float32.
    hx : list of Tensor
        ``[h_0, c_0]``, each ``[D * num_layers, B, H]``, or ``[]`` for zero states.
    params : list of Tensor
        Per layer, per direction: ``w_ih [4H, in]``, ``w_hh [4H, H]`` and with
        ``has_biases`` ``b_ih [4H]``, ``b_hh [4H]`` (torch.nn.LSTM's ``_flat_weights``).
    has_biases, num_layers, train, bidirectional : bool, int, bool, bool
    dropout : float
        Accepted and not applied (unsupported on the NPU too).
    batch_first : bool, optional
    batch_sizes : Tensor, optional
        ``[T]`` valid batch rows per step (descending): rows ``b >= batch_sizes[t]`` keep
        their state and output 0 at step ``t``.

    Returns
    -------
    tuple of 10 Tensor
        ``output`` (``[T, B, D * H]``, ``[B, T, D * H]`` with ``batch_first``), ``hy``,
        ``cy`` (``[D * num_layers, B, H]``), then ``i, j, f, o, h, c, tanhc`` stacked over
        layers and directions (direction first, then layer) as ``[D * num_layers, T, B, H]``.
        With ``train=False`` the gate tensors are empty and ``h`` / ``c`` are the final
        states ``[D * num_layers, B, H]``.

    Notes
    -----
    float32 math, every step rounded to ``input``'s dtype.  Autograd (``output``, ``hy``,
    ``cy``; needs ``train=True``) runs :func:`_lstm_npu_backward`.
    Strict mode: A2, A3, Atlas training and inference series.
    """
    return lstm_npu_op(input, hx, params, has_biases, num_layers, dropout, train,
                       bidirectional, batch_first=batch_first, batch_sizes=batch_sizes)


def _lstm_npu_backward(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c, tanhc,
                       has_biases, num_layers, dropout, train, bidirectional, *,
                       batch_first=False, batch_sizes=None):
    """Gradients of :func:`_lstm_npu` from its training-mode intermediates.

    The seed doc's recurrence per layer and direction (see ``_rnn_common.lstm_layer_backward``),
    layers from the top down, each layer's input gradient being the gradient of the output of
    the layer below (summed over directions).

    Returns ``(dx, [dh_0, dc_0], dparams)``: ``dx`` in ``input``'s layout, the state
    gradients ``[D * num_layers, B, H]``, ``dparams`` in ``params``' order and shapes
    (``db_ih`` equals ``db_hh``).
    """
    return lstm_npu_backward_op(grad_y, grad_hy, grad_cy, input, hx, params, i, j, f, o, h, c,
                                tanhc, has_biases, num_layers, dropout, train, bidirectional,
                                batch_first=batch_first, batch_sizes=batch_sizes)


TORCH_NPU_FUNCTIONS = {OP: _lstm_npu, BACKWARD_OP: _lstm_npu_backward}

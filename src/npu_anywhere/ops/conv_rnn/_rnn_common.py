"""Checks and the time loops shared by the recurrent ops (npu_lstm, _lstm_npu, npu_gru).

The loops follow the DynamicRNN / DynamicGRUV2 kernels step by step (hicann ops-nn
``rnn/dynamic_rnn/op_kernel/LstmFP32.cpp``, ``rnn/gru/README.md``): the gate pre-activations
are computed in float32 (float64 stays float64), every per-step output is rounded to the
output dtype, and the state carried to the next step is the rounded value the kernel reads
back from memory.  Time-major throughout: ``x`` is ``[T, B, I]``.

Sequence masks are 0/1 tensors ``m`` of shape ``[T, B, H]``, applied as the kernel does::

    c_t = m * c_new + (1 - m) * c_{t-1}      h_t = m * h_new + (1 - m) * h_{t-1}
    y_t = m * h_new

``reverse`` walks the time axis from ``T - 1`` down to 0 and stores every output at its own
time index (the kernels' REDIRECTIONAL direction), so the final state sits at index 0.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes

FLOAT16_32 = (torch.float16, torch.float32)


allowed = dtypes.with_float64


def expect_float(op: str, name: str, t: torch.Tensor, documented: tuple = FLOAT16_32) -> None:
    checks.expect_dtype(t, allowed(documented), op, name)


compute_dtype = dtypes.float_compute


def expect_dim(op: str, name: str, t: torch.Tensor, dim: int) -> None:
    checks.expect_dim(t, dim, op, name)


def sequence_and_gate_bias(op: str, input, bias_name: str, bias, gates: int):
    """``(T, B, I, H)`` of a time-major ``[T, B, I]`` input and a ``[gates * H]`` bias."""
    expect_dim(op, "input", input, 3)
    expect_float(op, "input", input)
    expect_dim(op, bias_name, bias, 1)
    checks.expect(bias.shape[0] % gates == 0 and bias.shape[0] > 0, op, bias_name,
                  f"a positive size divisible by {gates} (the gates of hidden_size)",
                  lambda: f"shape {tuple(bias.shape)}", RuntimeError)
    length, batch, feat = input.shape
    checks.expect(length > 0, op, "input", "at least one time step (size(0) > 0)",
                  lambda: f"shape {tuple(input.shape)}", ValueError)
    return length, batch, feat, bias.shape[0] // gates


def expect_shape(op: str, name: str, t: torch.Tensor, shapes, what: str) -> None:
    """``t`` has one of ``shapes`` (a shape or a list of them); ``what`` names the rule."""
    shapes = [tuple(shapes)] if not shapes or not isinstance(shapes[0], (tuple, list)) \
        else [tuple(s) for s in shapes]
    checks.expect(tuple(t.shape) in shapes, op, name,
                  lambda: f"the shape {what} = {' or '.join(str(s) for s in shapes)}",
                  lambda: f"shape {tuple(t.shape)}", RuntimeError)


def expect_devices(op: str, tensors: dict) -> None:
    present = {k: v for k, v in tensors.items() if v is not None}
    if len(present) > 1:
        checks.expect_same_device(present, op)


def state_shapes(batch: int, hidden: int) -> list:
    """The accepted shapes of one initial state: ``[1, B, H]`` (the NPU's) or ``[B, H]``."""
    return [(1, batch, hidden), (batch, hidden)]


def _steps(length: int, reverse: bool) -> range:
    return range(length - 1, -1, -1) if reverse else range(length)


def _prev(states: list, t: int, init: torch.Tensor, reverse: bool) -> torch.Tensor:
    """The state before step ``t`` (walking forward or backward in time)."""
    p = t + 1 if reverse else t - 1
    return init if p < 0 or p >= len(states) else states[p]


# -- LSTM ---------------------------------------------------------------------------------

def lstm_layer(x, w_x, w_h, bias, h0, c0, mask, reverse: bool, out_dtype: torch.dtype):
    """One LSTM layer, gates in i, f, j, o order (DynamicRNN's ``gate_order="ifjo"``).

    ``x`` ``[T, B, I]``, ``w_x`` ``[I, 4H]``, ``w_h`` ``[H, 4H]``, ``bias`` ``[4H]``, ``h0`` /
    ``c0`` ``[B, H]``, ``mask`` ``[T, B, H]`` or None.  Returns ``(y, h, c, i, j, f, o, tanhc)``,
    each ``[T, B, H]`` in ``out_dtype``.
    """
    cd = compute_dtype(out_dtype)
    x, w_x, w_h, bias = x.to(cd), w_x.to(cd), w_h.to(cd), bias.to(cd)
    # One matmul for every step's input projection; the hidden one is sequential.
    x_gates = torch.matmul(x, w_x) + bias
    length = x.shape[0]
    h_prev, c_prev = h0.to(out_dtype), c0.to(out_dtype)
    outs = {k: [None] * length for k in ("y", "h", "c", "i", "j", "f", "o", "tanhc")}
    for t in _steps(length, reverse):
        gates = x_gates[t] + torch.matmul(h_prev.to(cd), w_h)
        gi, gf, gj, go = gates.chunk(4, dim=-1)
        i, f, j, o = gi.sigmoid(), gf.sigmoid(), gj.tanh(), go.sigmoid()
        c = f * c_prev.to(cd) + i * j
        if mask is not None:
            m = mask[t].to(cd)
            c = m * c + (1 - m) * c_prev.to(cd)
        tanhc = c.tanh()
        h_new = o * tanhc
        if mask is not None:
            y = m * h_new
            h = y + (1 - m) * h_prev.to(cd)
        else:
            y = h = h_new
        for key, value in (("y", y), ("h", h), ("c", c), ("i", i), ("j", j), ("f", f),
                           ("o", o), ("tanhc", tanhc)):
            outs[key][t] = value.to(out_dtype)
        h_prev, c_prev = outs["h"][t], outs["c"][t]
    return tuple(torch.stack(outs[k]) for k in ("y", "h", "c", "i", "j", "f", "o", "tanhc"))


def lstm_layer_backward(x, w_x, w_h, h0, c0, h, c, i, j, f, o, tanhc, dy, dh_last, dc_last,
                        mask, reverse: bool):
    """Backpropagation through time of :func:`lstm_layer` from its saved intermediates.

    The doc's recurrence (seed 004, _lstm_npu_backward): per step, with ``dh`` / ``dc`` the
    gradients arriving from the next step (``dh_last`` / ``dc_last`` at the final one)::

        dh_new = m * (dy_t + dh)                 dc_t = dc + dh_new * o * (1 - tanhc^2)
        do = dh_new * tanhc * o (1 - o)          dc_new = m * dc_t
        di = dc_new * j * i (1 - i)              dj = dc_new * i * (1 - j^2)
        df = dc_new * c_{t-1} * f (1 - f)        dG = [di, df, dj, do]
        dx_t = dG w_x^T     dh <- dG w_h^T + (1 - m) dh     dc <- dc_new * f + (1 - m) dc_t
        dW_x += x_t^T dG    dW_h += h_{t-1}^T dG            db += sum_b dG

    Returns ``(dx, dw_x, dw_h, db, dh0, dc0)`` in the compute dtype of ``x``.
    """
    cd = compute_dtype(x.dtype)
    up = lambda t: t.to(cd)  # noqa: E731
    x, w_x, w_h, h0, c0 = up(x), up(w_x), up(w_h), up(h0), up(c0)
    h_states, c_states = list(up(h).unbind(0)), list(up(c).unbind(0))
    i, j, f, o, tanhc, dy = up(i), up(j), up(f), up(o), up(tanhc), up(dy)
    dh, dc = up(dh_last), up(dc_last)
    length = x.shape[0]
    dx = [None] * length
    dg_all = [None] * length
    h_prev_all = [None] * length
    for t in _steps(length, not reverse):
        m = up(mask[t]) if mask is not None else None
        dh_new = dy[t] + dh if m is None else m * (dy[t] + dh)
        dc_t = dc + dh_new * o[t] * (1 - tanhc[t] * tanhc[t])
        dc_new = dc_t if m is None else m * dc_t
        c_prev = _prev(c_states, t, c0, reverse)
        d_o = dh_new * tanhc[t] * o[t] * (1 - o[t])
        d_i = dc_new * j[t] * i[t] * (1 - i[t])
        d_j = dc_new * i[t] * (1 - j[t] * j[t])
        d_f = dc_new * c_prev * f[t] * (1 - f[t])
        dg = torch.cat([d_i, d_f, d_j, d_o], dim=-1)
        dx[t] = torch.matmul(dg, w_x.t())
        carried_h = torch.matmul(dg, w_h.t())
        carried_c = dc_new * f[t]
        if m is not None:
            carried_h = carried_h + (1 - m) * dh
            carried_c = carried_c + (1 - m) * dc_t
        dh, dc = carried_h, carried_c
        dg_all[t] = dg
        h_prev_all[t] = _prev(h_states, t, h0, reverse)
    dg = torch.stack(dg_all)
    dw_x = torch.einsum("tbi,tbg->ig", x, dg)
    dw_h = torch.einsum("tbh,tbg->hg", torch.stack(h_prev_all), dg)
    return torch.stack(dx), dw_x, dw_h, dg.sum(dim=(0, 1)), dh, dc


# -- GRU ----------------------------------------------------------------------------------

def gru_layer(x, w_x, w_h, b_x, b_h, h0, out_dtype: torch.dtype):
    """One GRU layer, gates in r, z, n order (DynamicGRUV2's ``gate_order="rzh"``, reset after
    the hidden matmul).  Returns ``(y, h, update, reset, new, hidden_new)``, each ``[T, B, H]``
    in ``out_dtype``; ``hidden_new`` is ``h_{t-1} W_hn + b_hn``, the new gate's hidden part."""
    cd = compute_dtype(out_dtype)
    x_gates = torch.matmul(x.to(cd), w_x.to(cd)) + b_x.to(cd)
    w_h, b_h = w_h.to(cd), b_h.to(cd)
    h_prev = h0.to(out_dtype)
    outs = {k: [] for k in ("h", "z", "r", "n", "hn")}
    for t in range(x.shape[0]):
        xr, xz, xn = x_gates[t].chunk(3, dim=-1)
        hr, hz, hn = (torch.matmul(h_prev.to(cd), w_h) + b_h).chunk(3, dim=-1)
        r = (xr + hr).sigmoid()
        z = (xz + hz).sigmoid()
        n = (xn + r * hn).tanh()
        h = (1 - z) * n + z * h_prev.to(cd)
        for key, value in (("h", h), ("z", z), ("r", r), ("n", n), ("hn", hn)):
            outs[key].append(value.to(out_dtype))
        h_prev = outs["h"][-1]
    h = torch.stack(outs["h"])
    return (h, h.clone(), *(torch.stack(outs[k]) for k in ("z", "r", "n", "hn")))


def gru_layer_backward(x, w_x, w_h, h0, h, z, r, n, hn, dy, dh_last):
    """Backpropagation through time of :func:`gru_layer` from its saved intermediates::

        dh_t = dy_t + dh          dn = dh_t (1 - z) (1 - n^2)     dz = dh_t (h_{t-1} - n) z (1 - z)
        dr = dn * hn * r (1 - r)  dG_x = [dr, dz, dn]             dG_h = [dr, dz, dn * r]
        dx_t = dG_x w_x^T         dh <- dG_h w_h^T + dh_t * z
        dW_x += x_t^T dG_x        dW_h += h_{t-1}^T dG_h          db_x, db_h = sum_b dG_x, dG_h

    Returns ``(dx, dw_x, dw_h, db_x, db_h, dh0)`` in the compute dtype of ``x``.
    """
    cd = compute_dtype(x.dtype)
    up = lambda t: t.to(cd)  # noqa: E731
    x, w_x, w_h, h0, h = up(x), up(w_x), up(w_h), up(h0), up(h)
    z, r, n, hn, dy, dh = up(z), up(r), up(n), up(hn), up(dy), up(dh_last)
    length = x.shape[0]
    h_prev = torch.cat([h0.unsqueeze(0), h[:-1]], dim=0)
    dgx_all, dgh_all, dx = [None] * length, [None] * length, [None] * length
    for t in range(length - 1, -1, -1):
        dh_t = dy[t] + dh
        d_n = dh_t * (1 - z[t]) * (1 - n[t] * n[t])
        d_z = dh_t * (h_prev[t] - n[t]) * z[t] * (1 - z[t])
        d_r = d_n * hn[t] * r[t] * (1 - r[t])
        dgx = torch.cat([d_r, d_z, d_n], dim=-1)
        dgh = torch.cat([d_r, d_z, d_n * r[t]], dim=-1)
        dx[t] = torch.matmul(dgx, w_x.t())
        dh = torch.matmul(dgh, w_h.t()) + dh_t * z[t]
        dgx_all[t], dgh_all[t] = dgx, dgh
    dgx, dgh = torch.stack(dgx_all), torch.stack(dgh_all)
    dw_x = torch.einsum("tbi,tbg->ig", x, dgx)
    dw_h = torch.einsum("tbh,tbg->hg", h_prev, dgh)
    return torch.stack(dx), dw_x, dw_h, dgx.sum(dim=(0, 1)), dgh.sum(dim=(0, 1)), dh

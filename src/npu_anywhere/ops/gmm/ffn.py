"""torch_npu.npu_ffn: ``activation(x @ W1 + b1) @ W2 + b2``, per expert when expert_tokens is given.

Numerics follow op-plugin's golden (``test/test_custom_ops/test_npu_ffn.py``, ``calc_ffn``):

* float: both matmuls accumulate in float32; the first matmul's result and the activation are
  rounded to x's dtype (the kernel hands them to the vector unit in that dtype), except for
  float16 with ``inner_precise=0`` (high precision: float32 inside);
* antiquant (int8 weight): ``W' = (W + antiquant_offset) * antiquant_scale`` in x's dtype, then
  float32 matmuls and activation, rounded once at the end;
* quant (int8 x and weights): ``h = out_dtype(int32(x @ W1) * deq_scale1)``, the activation in
  ``out_dtype``, ``int8(clamp(round(h * scale + offset)))`` (float16 output: scale and offset
  cast to float16 and each step rounded to float16, as ``ffn_quant.h``'s AscendQuant does),
  ``y = int32(h8 @ W2) * deq_scale2``;
  int64 deq scales are npu_trans_quant_param words (float32 with 13 mantissa bits cut).

GLU activations (geglu / swiglu / reglu) take the first half of ``x @ W1 + b1`` through the
activation and multiply by the second half, as torch_npu's other GLU ops do.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..matmul import integer
from . import compute

OP = "npu_ffn"
SCHEMA = ("npu_ffn(Tensor x, Tensor weight1, Tensor weight2, str activation, *, "
          "int[]? expert_tokens=None, int[]? expert_tokens_index=None, Tensor? bias1=None, "
          "Tensor? bias2=None, Tensor? scale=None, Tensor? offset=None, "
          "Tensor? deq_scale1=None, Tensor? deq_scale2=None, Tensor? antiquant_scale1=None, "
          "Tensor? antiquant_scale2=None, Tensor? antiquant_offset1=None, "
          "Tensor? antiquant_offset2=None, int? inner_precise=None, "
          "ScalarType? output_dtype=None) -> Tensor")
_SUPPORTED = frozenset({Product.A2, Product.A3})
PLAIN = ("fastgelu", "gelu", "relu", "silu")
GLU = ("geglu", "swiglu", "reglu")
MAX_EXPERTS = 256


def _act(h: torch.Tensor, activation: str) -> torch.Tensor:
    if activation in ("gelu", "geglu"):
        return F.gelu(h, approximate="tanh") if activation == "geglu" else F.gelu(h)
    if activation == "fastgelu":
        return h * torch.sigmoid(1.702 * h)
    if activation in ("relu", "reglu"):
        return torch.relu(h)
    return F.silu(h)


def _apply_activation(h: torch.Tensor, activation: str) -> torch.Tensor:
    if activation in GLU:
        a, b = h.chunk(2, dim=-1)
        return _act(a, activation) * b
    return _act(h, activation)


def _kind(x, weight1) -> str:
    if x.dtype == torch.int8:
        return "quant"
    return "antiquant" if weight1.dtype == torch.int8 else "float"


def check_ffn(x, weight1, weight2, activation, *, expert_tokens=None, expert_tokens_index=None,
              bias1=None, bias2=None, scale=None, offset=None, deq_scale1=None,
              deq_scale2=None, antiquant_scale1=None, antiquant_scale2=None,
              antiquant_offset1=None, antiquant_offset2=None, inner_precise=None,
              output_dtype=None):
    product = targets.expect_supported(OP, _SUPPORTED)
    checks.expect(activation in PLAIN + GLU, OP, "activation",
                  f"one of {list(PLAIN + GLU)}", repr(activation), ValueError)
    floats = (torch.float16, torch.bfloat16) + (() if product else (torch.float32, torch.float64))
    checks.expect_dtype(x, floats + (torch.int8,), OP, "x")
    checks.expect(2 <= x.dim() <= 8, OP, "x", "2 to 8 dims", lambda: f"shape {tuple(x.shape)}",
                  ValueError)
    checks.expect(expert_tokens is None or expert_tokens_index is None, OP, "expert_tokens",
                  "None when expert_tokens_index is given", "both", ValueError)
    experts = expert_tokens if expert_tokens is not None else expert_tokens_index
    wdim = 3 if experts is not None else 2
    checks.expect_dim(weight1, wdim, OP, "weight1")
    checks.expect_dim(weight2, wdim, OP, "weight2")
    kind = _kind(x, weight1)
    wdtype = torch.int8 if kind != "float" else x.dtype
    checks.expect_dtype(weight1, (wdtype,), OP, "weight1")
    checks.expect_dtype(weight2, (wdtype,), OP, "weight2")
    k1, n1 = weight1.shape[-2], weight1.shape[-1]
    k2, n2 = weight2.shape[-2], weight2.shape[-1]
    checks.expect(x.shape[-1] == k1, OP, "weight1", lambda: f"K1 = {x.shape[-1]} rows",
                  lambda: f"shape {tuple(weight1.shape)}")
    want_k2 = n1 // 2 if activation in GLU else n1
    checks.expect(k2 == want_k2, OP, "weight2",
                  lambda: f"K2 = {want_k2} rows (N1{' / 2' if activation in GLU else ''})",
                  lambda: f"shape {tuple(weight2.shape)}")
    checks.expect(n2 == k1, OP, "weight2", lambda: f"N2 = K1 = {k1} columns",
                  lambda: f"shape {tuple(weight2.shape)}")
    if experts is not None:
        e = weight1.shape[0]
        checks.expect(weight2.shape[0] == e and len(experts) == e and e <= MAX_EXPERTS, OP,
                      "expert_tokens", lambda: f"one entry per expert ({e}, at most 256)",
                      lambda: len(experts), ValueError)
        checks.expect(activation not in GLU, OP, "activation",
                      "gelu, fastgelu, relu or silu with experts", repr(activation), ValueError)
        rows = x.shape[0] if x.dim() == 2 else x.numel() // x.shape[-1]
        sizes = _sizes(expert_tokens, expert_tokens_index)
        checks.expect(min(sizes, default=0) >= 0 and sum(sizes) == rows, OP, "expert_tokens",
                      lambda: f"non-negative counts summing to x's {rows} rows", list(experts),
                      ValueError)
    if activation in GLU:
        checks.expect(kind == "float", OP, "activation",
                      "gelu, fastgelu, relu or silu for quantized calls", repr(activation),
                      ValueError)
    lead = (weight1.shape[0],) if experts is not None else ()
    quant_params = (scale, offset, deq_scale1, deq_scale2)
    anti_params = (antiquant_scale1, antiquant_scale2, antiquant_offset1, antiquant_offset2)
    if kind == "float":
        checks.expect(all(p is None for p in quant_params + anti_params), OP, "scale",
                      "no quant or antiquant parameters for float x and weights", "some",
                      ValueError)
        checks.expect(inner_precise in (None, 0, 1), OP, "inner_precise", "0 or 1",
                      repr(inner_precise), ValueError)
        if x.dtype == torch.bfloat16:
            checks.expect(inner_precise in (None, 0), OP, "inner_precise",
                          "0 for bfloat16 (no high-performance mode)", inner_precise,
                          ValueError)
    elif kind == "antiquant":
        checks.expect(all(p is None for p in quant_params), OP, "scale",
                      "no quant parameters for antiquant (int8 weight) calls", "some",
                      ValueError)
        for name, t, n in (("antiquant_scale1", antiquant_scale1, n1),
                           ("antiquant_scale2", antiquant_scale2, n2),
                           ("antiquant_offset1", antiquant_offset1, n1),
                           ("antiquant_offset2", antiquant_offset2, n2)):
            if t is None and "offset" in name:
                continue
            checks.expect(t is not None, OP, name, "a tensor with int8 weights", "None",
                          ValueError)
            checks.expect_dtype(t, (x.dtype,), OP, name)
            checks.expect(tuple(t.shape) == (*lead, n), OP, name,
                          lambda n=n: f"shape {(*lead, n)}", lambda t=t: tuple(t.shape))
    else:
        checks.expect(all(p is None for p in anti_params), OP, "antiquant_scale1",
                      "None for int8 x", "a tensor", ValueError)
        for name, t in (("scale", scale), ("offset", offset), ("deq_scale1", deq_scale1),
                        ("deq_scale2", deq_scale2)):
            checks.expect(t is not None, OP, name, "a tensor for int8 x", "None", ValueError)
        out = output_dtype or torch.float16
        checks.expect(out in (torch.float16, torch.bfloat16), OP, "output_dtype",
                      "None, float16 or bfloat16", out, ValueError)
        want = (torch.int64, torch.float32) if out == torch.float16 else (torch.bfloat16,)
        checks.expect_dtype(deq_scale1, want, OP, "deq_scale1")
        checks.expect_dtype(deq_scale2, (deq_scale1.dtype,), OP, "deq_scale2")
        checks.expect(tuple(deq_scale1.shape) == (*lead, n1), OP, "deq_scale1",
                      lambda: f"shape {(*lead, n1)}", lambda: tuple(deq_scale1.shape))
        checks.expect(tuple(deq_scale2.shape) == (*lead, n2), OP, "deq_scale2",
                      lambda: f"shape {(*lead, n2)}", lambda: tuple(deq_scale2.shape))
        for name, t in (("scale", scale), ("offset", offset)):
            checks.expect_dtype(t, (torch.float32,), OP, name)
            n_e = lead[0] if lead else 1
            checks.expect(t.numel() in (n_e, n_e * n1), OP,
                          name, "per-tensor [E] / [1] or per-channel [E, N1] / [N1] values",
                          lambda t=t: tuple(t.shape), ValueError)
    _check_bias(kind, x, bias1, "bias1", lead, n1)
    _check_bias(kind, x, bias2, "bias2", lead, n2)


def _check_bias(kind, x, bias, name, lead, n):
    if bias is None:
        return
    want = {"quant": torch.int32, "float": x.dtype if x.dtype != torch.bfloat16 else torch.float32,
            "antiquant": torch.float16 if x.dtype == torch.float16 else torch.float32}[kind]
    checks.expect_dtype(bias, (want, torch.float32) if kind == "float" else (want,), OP, name)
    checks.expect(tuple(bias.shape) == (*lead, n), OP, name, lambda: f"shape {(*lead, n)}",
                  lambda: tuple(bias.shape))


def _sizes(expert_tokens, expert_tokens_index) -> list[int]:
    if expert_tokens is not None:
        return list(expert_tokens)
    ends = list(expert_tokens_index)
    return [b - a for a, b in zip([0] + ends[:-1], ends)]


def _pick(t, e):
    return None if t is None else (t if e is None else t[e])


def _per_expert(t: torch.Tensor, e, n: int) -> torch.Tensor:
    """Expert e's requantization values: one per tensor ([E] / [1]) or per channel."""
    groups = t.numel() // n if t.numel() % n == 0 and t.numel() >= n else 0
    if groups:
        return t.reshape(groups, n)[e or 0]
    return t.reshape(-1)[e or 0]


def _deq(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.int64:
        return integer.unpack_scale_word(t)[0]
    return t.to(torch.float32)


def _ffn_one(x2, w1, w2, activation, b1, b2, aq, quant, inner_precise, out_dtype):
    if quant is not None:
        scale, offset, d1, d2 = quant
        acc = integer.int_mm(x2, w1)
        if b1 is not None:
            acc = acc + b1
        h = (acc.to(torch.float32) * _deq(d1)).to(out_dtype)
        a = _apply_activation(h.float(), activation).to(out_dtype)
        if out_dtype == torch.float16:
            # ffn_quant.h: AscendQuant on the float16 activation with the scale and offset cast
            # to float16 -- a float16 multiply, then a float16 add, each rounded.
            p = (a.float() * scale.to(torch.float16).float()).to(torch.float16)
            q = (p.float() + offset.to(torch.float16).float()).to(torch.float16).float()
        else:
            q = (a.float() * scale.float() + offset.float()).to(out_dtype).float()
        q = torch.round(q).clamp(-128, 127)
        acc2 = integer.int_mm(q.to(torch.int8), w2)
        if b2 is not None:
            acc2 = acc2 + b2
        return (acc2.to(torch.float32) * _deq(d2)).to(out_dtype)
    ct = compute.compute_dtype(x2.dtype)
    if aq is not None:
        s1, s2, o1, o2 = aq
        w1 = ((w1.to(x2.dtype) + o1) if o1 is not None else w1.to(x2.dtype)) * s1
        w2 = ((w2.to(x2.dtype) + o2) if o2 is not None else w2.to(x2.dtype)) * s2
    h = x2.to(ct) @ w1.to(ct)
    if b1 is not None:
        h = h + b1.to(ct)
    round_mid = aq is None and not (x2.dtype == torch.float16 and inner_precise == 0)
    if round_mid:
        h = h.to(x2.dtype).to(ct)
    a = _apply_activation(h, activation)
    if round_mid:
        a = a.to(x2.dtype).to(ct)
    y = a @ w2.to(ct)
    if b2 is not None:
        y = y + b2.to(ct)
    return y.to(out_dtype)


def ffn_reference(x, weight1, weight2, activation, *, expert_tokens=None,
                  expert_tokens_index=None, bias1=None, bias2=None, scale=None, offset=None,
                  deq_scale1=None, deq_scale2=None, antiquant_scale1=None, antiquant_scale2=None,
                  antiquant_offset1=None, antiquant_offset2=None, inner_precise=None,
                  output_dtype=None):
    kind = _kind(x, weight1)
    out_dtype = (output_dtype or torch.float16) if kind == "quant" else x.dtype
    x2 = x.reshape(-1, x.shape[-1])
    experts = expert_tokens is not None or expert_tokens_index is not None
    sizes = _sizes(expert_tokens, expert_tokens_index) if experts else [x2.shape[0]]
    outs, start = [], 0
    for i, size in enumerate(sizes):
        e = i if experts else None
        aq = quant = None
        if kind == "antiquant":
            aq = tuple(_pick(t, e) for t in (antiquant_scale1, antiquant_scale2,
                                            antiquant_offset1, antiquant_offset2))
        elif kind == "quant":
            quant = (_per_expert(scale, e, weight1.shape[-1]),
                     _per_expert(offset, e, weight1.shape[-1]),
                     _pick(deq_scale1, e), _pick(deq_scale2, e))
        outs.append(_ffn_one(x2[start:start + size], _pick(weight1, e), _pick(weight2, e),
                             activation, _pick(bias1, e), _pick(bias2, e), aq, quant,
                             inner_precise, out_dtype))
        start += size
    y = outs[0] if len(outs) == 1 else torch.cat(outs)
    return y.reshape(*x.shape[:-1], weight2.shape[-1])


def _fake(x, weight1, weight2, activation, *, output_dtype=None, **kwargs):
    out = (output_dtype or torch.float16) if x.dtype == torch.int8 else x.dtype
    return x.new_empty((*x.shape[:-1], weight2.shape[-1]), dtype=out)


ffn_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_ffn, reference=ffn_reference,
               fake=_fake, info=OpInfo(api="torch_npu"))
ffn_op.forbid_autograd("npu_ffn has no backward in torch_npu (inference only)")


def npu_ffn(x, weight1, weight2, activation, *, expert_tokens=None, expert_tokens_index=None,
            bias1=None, bias2=None, scale=None, offset=None, deq_scale1=None, deq_scale2=None,
            antiquant_scale1=None, antiquant_scale2=None, antiquant_offset1=None,
            antiquant_offset2=None, inner_precise=None, output_dtype=None):
    """Feed-forward block: ``activation(x @ W1 + b1) @ W2 + b2`` (MoE FFN with experts).

    Parameters
    ----------
    x : Tensor
        ``[..., K1]`` (2-8 D): float16 / bfloat16 (float32 / float64 outside strict mode), or
        int8 (quant).
    weight1, weight2 : Tensor
        ``[K1, N1]`` / ``[K2, N2]``, or ``[E, K1, N1]`` / ``[E, K2, N2]`` with experts; x's
        dtype, or int8 (antiquant with float x, quant with int8 x).  N2 = K1; K2 = N1, or
        N1 / 2 for the GLU activations.
    activation : str
        fastgelu, gelu, relu, silu; geglu, swiglu, reglu (no experts, float only).
    expert_tokens, expert_tokens_index : list of int, optional
        Rows per expert, or their cumulative sums; they must cover x's rows exactly.
    bias1, bias2 : Tensor, optional
        ``[N1]`` / ``[N2]`` (``[E, N]`` with experts): float16 for float16 x, float32 for
        bfloat16 x, int32 for int8 x.
    scale, offset, deq_scale1, deq_scale2 : Tensor, optional
        Quant (int8 x): the int8 requantization of the hidden activation (per tensor or per
        channel, float32) and the dequantization scales of both matmuls (int64
        npu_trans_quant_param words or float32 for float16 output; bfloat16 for bfloat16).
    antiquant_scale1, antiquant_scale2, antiquant_offset1, antiquant_offset2 : Tensor, optional
        Antiquant (int8 weights), per channel, x's dtype.
    inner_precise : {0, 1}, optional
        float16 only: 0 keeps the hidden activation in float32, 1 (default) rounds it to
        float16; bfloat16 takes only 0.
    output_dtype : torch.dtype, optional
        Quant only: float16 (default) or bfloat16.

    Returns
    -------
    Tensor
        ``[..., N2]``; x's dtype (output_dtype for int8 x).

    Notes
    -----
    Strict mode: A2 and A3.  No autograd (inference op).  See the module docstring for the
    rounding steps (op-plugin's golden).
    """
    return ffn_op(x, weight1, weight2, activation, expert_tokens=expert_tokens,
                  expert_tokens_index=expert_tokens_index, bias1=bias1, bias2=bias2,
                  scale=scale, offset=offset, deq_scale1=deq_scale1, deq_scale2=deq_scale2,
                  antiquant_scale1=antiquant_scale1, antiquant_scale2=antiquant_scale2,
                  antiquant_offset1=antiquant_offset1, antiquant_offset2=antiquant_offset2,
                  inner_precise=inner_precise, output_dtype=output_dtype)


TORCH_NPU_FUNCTIONS = {"npu_ffn": npu_ffn}

"""Benchmark cases for the Gated DeltaNet ops on Qwen3-Next-shaped inputs (per device at TP 4).

Linear-attention layers of Qwen3-Next-80B: 16 key heads and 32 value heads of size 128, so 4 and
8 per device at tensor parallel 4.  bfloat16 inputs, float32 log-decay ``g``.

* ``npu_chunk_gated_delta_rule``, prefill of one 4096-token sequence.  ``naive`` is the token
  recurrence hand-written in eager PyTorch (float32, all heads at once, one Python step per
  token: what a port of fla's ``naive_recurrent_gated_delta_rule`` does).
* ``npu_recurrent_gated_delta_rule``, speculative decode of 64 sequences with 2 tokens each,
  states in a pool of 256 slots.  ``naive``: the same per-token loop, one step per token.

``reference`` / ``npu_anywhere``: the op (the reference is the only provider today).  Bytes
moved: every input read once, every output (and the written states) written once.
"""

from __future__ import annotations

import torch

from ..ops.linear_attention.chunk_gated_delta_rule import npu_chunk_gated_delta_rule
from ..ops.linear_attention.recurrent_gated_delta_rule import npu_recurrent_gated_delta_rule
from .registry import Case, register, with_reference

NK, NV, D = 4, 8, 128
PREFILL = {"qwen3-next-tp4-prefill-4k": (1, 4096)}          # (sequences, tokens each)
DECODE = {"qwen3-next-tp4-decode-b64-mtp2": (64, 2, 256)}   # (sequences, tokens each, slots)
_TOL = {"naive": 5e-2}


def _inputs(t, device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(t, NK, D, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(t, NK, D, generator=gen), dim=-1)
    v = torch.randn(t, NV, D, generator=gen)
    beta = torch.rand(t, NV, generator=gen)
    g = -torch.rand(t, NV, generator=gen)
    bf16 = dict(device=device, dtype=torch.bfloat16)
    return gen, q.to(**bf16), k.to(**bf16), v.to(**bf16), beta.to(**bf16), g.to(device)


def _naive_steps(s, q, k, v, beta, g, scale):
    """Token recurrence over one sequence; ``s`` (Nv, Dv, Dk) float32; returns o and s."""
    heads = torch.arange(NV, device=q.device) // (NV // NK)
    q = q.float()[:, heads] * scale
    k = k.float()[:, heads]
    v, beta, alpha = v.float(), beta.float(), torch.exp(g)
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for t in range(q.shape[0]):
        s = s * alpha[t][:, None, None]
        delta = (v[t] - (s @ k[t].unsqueeze(-1)).squeeze(-1)) * beta[t][:, None]
        s = s + delta.unsqueeze(-1) * k[t].unsqueeze(-2)
        out[t] = (s @ q[t].unsqueeze(-1)).squeeze(-1)
    return out, s


def naive_chunk(q, k, v, beta, state, lengths, scale, g):
    outs, finals = [], []
    start = 0
    for b, n in enumerate(lengths.tolist()):
        o, s = _naive_steps(state[b].float(), q[start:start + n], k[start:start + n],
                            v[start:start + n], beta[start:start + n], g[start:start + n], scale)
        outs.append(o)
        finals.append(s)
        start += n
    return torch.cat(outs).to(torch.bfloat16), torch.stack(finals).to(state.dtype)


def _chunk(q, k, v, beta, state, lengths, scale, g):
    return npu_chunk_gated_delta_rule(q, k, v, beta=beta, initial_state=state,
                                      actual_seq_lengths=lengths, scale=scale, g=g)


def _chunk_case(preset):
    b, n = PREFILL[preset]
    t = b * n

    def make(device):
        gen, q, k, v, beta, g = _inputs(t, device)
        state = (0.1 * torch.randn(b, NV, D, D, generator=gen)).to(device=device,
                                                                   dtype=torch.bfloat16)
        lengths = torch.full((b,), n, dtype=torch.int32, device=device)
        return q, k, v, beta, state, lengths, D ** -0.5, g

    return Case(
        name=f"npu_chunk_gated_delta_rule {preset} bfloat16", op="npu_chunk_gated_delta_rule",
        preset=preset, dtype=torch.bfloat16, make_inputs=make,
        bytes_moved=2 * t * (2 * NK * D + 2 * NV * D + NV) + 4 * t * NV + 4 * b * NV * D * D,
        tolerance=_TOL,
        contenders={"naive": naive_chunk, "reference": with_reference(_chunk),
                    "npu_anywhere": _chunk})


def naive_decode(q, k, v, beta, state, lengths, slots, scale, g):
    out = torch.empty(v.shape, dtype=torch.bfloat16, device=v.device)
    start = 0
    for n in lengths.tolist():
        s = state[int(slots[start])].float()
        for t in range(start, start + n):
            o, s = _naive_steps(s, q[t:t + 1], k[t:t + 1], v[t:t + 1], beta[t:t + 1],
                                g[t:t + 1], scale)
            out[t] = o[0].to(torch.bfloat16)
            state[int(slots[t])] = s.to(state.dtype)
        start += n
    return out, state


def _decode(q, k, v, beta, state, lengths, slots, scale, g):
    o = npu_recurrent_gated_delta_rule(q, k, v, state, beta=beta, scale=scale,
                                       actual_seq_lengths=lengths, ssm_state_indices=slots, g=g)
    return o, state


def _decode_case(preset):
    b, n, blocks = DECODE[preset]
    t = b * n

    def make(device):
        gen, q, k, v, beta, g = _inputs(t, device, seed=1)
        state = (0.1 * torch.randn(blocks, NV, D, D, generator=gen)).to(device=device,
                                                                        dtype=torch.bfloat16)
        lengths = torch.full((b,), n, dtype=torch.int32, device=device)
        slots = torch.randperm(blocks, generator=gen)[:t].to(device=device, dtype=torch.int32)
        return q, k, v, beta, state, lengths, slots, D ** -0.5, g

    return Case(
        name=f"npu_recurrent_gated_delta_rule {preset} bfloat16",
        op="npu_recurrent_gated_delta_rule", preset=preset, dtype=torch.bfloat16,
        make_inputs=make,
        # q, k, v, beta, g and o; b starting states read, t states written
        bytes_moved=2 * t * (2 * NK * D + 2 * NV * D + NV) + 4 * t * NV
        + 2 * (b + t) * NV * D * D,
        tolerance=_TOL,
        contenders={"naive": naive_decode, "reference": with_reference(_decode),
                    "npu_anywhere": _decode})


for _preset in PREFILL:
    register(_chunk_case(_preset))
for _preset in DECODE:
    register(_decode_case(_preset))

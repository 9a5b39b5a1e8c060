"""Op database entries of the gated-delta-rule ops (linear attention family)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry

_BF16 = torch.bfloat16


def _qkv(lengths, nk, nv, dk, dv, seed):
    gen = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(t, nk, dk, generator=gen), dim=-1)
    v = torch.randn(t, nv, dv, generator=gen)
    beta = torch.rand(t, nv, generator=gen)
    g = -torch.rand(t, nv, generator=gen)
    return gen, q.to(_BF16), k.to(_BF16), v.to(_BF16), beta.to(_BF16), g


def _recurrent(lengths=(2, 1), nk=1, nv=2, dk=4, dv=3, blocks=None, seed=0, full=True, gk=False,
               **override):
    gen, q, k, v, beta, g = _qkv(lengths, nk, nv, dk, dv, seed)
    t = sum(lengths)
    blocks = t + 2 if blocks is None else blocks
    state = torch.randn(blocks, nv, dv, dk, generator=gen).to(_BF16)
    kwargs = dict(actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32),
                  ssm_state_indices=torch.randperm(blocks, generator=gen)[:t].to(torch.int32))
    if full:
        kwargs.update(beta=beta, scale=0.5, g=g,
                      num_accepted_tokens=torch.tensor([max(n, 1) for n in lengths],
                                                       dtype=torch.int32))
    if gk:
        kwargs["gk"] = -torch.rand(t, nv, dk, generator=gen)
    kwargs.update(override)
    return (q, k, v, state), kwargs


def _recurrent_errors(op):
    f32 = torch.float32
    return [
        ErrorSample("query_dtype", lambda: (lambda a, kw: ((a[0].to(f32), *a[1:]), kw))(
            *_recurrent()), TypeError, f"{op}: expected query dtype in \\['bfloat16'\\]"),
        ErrorSample("heads_not_grouped", lambda: _recurrent(nk=2, nv=3), ValueError,
                    f"{op}: expected Nv a multiple of Nk = 2"),
        ErrorSample("no_lengths", lambda: _recurrent(actual_seq_lengths=None), ValueError,
                    f"{op}: expected actual_seq_lengths a tensor"),
        ErrorSample("state_shape", lambda: (lambda a, kw: ((*a[:3], a[3][:, :, :, :2]), kw))(
            *_recurrent()), RuntimeError, f"{op}: expected state shape \\(BlockNum, Nv, Dv, Dk\\)"),
        ErrorSample("g_dtype", lambda: _recurrent(g=torch.zeros(3, 2, dtype=_BF16)), TypeError,
                    f"{op}: expected g dtype in \\['float32'\\]"),
    ]


def _recurrent_entries() -> None:
    for name in ("npu_recurrent_gated_delta_rule", "npu_recurrent_gated_delta_rule_functional"):
        e = _entry(name)
        e.samples += [
            Sample("accepted_tokens_gqa", lambda: _recurrent(lengths=(3, 1, 2), nk=2, nv=4)),
            Sample("defaults", lambda: _recurrent(full=False)),
        ]
        e.errors += _recurrent_errors(name)
    _entry("npu_recurrent_gated_delta_rule_functional").samples.append(
        Sample("per_key_decay", lambda: _recurrent(gk=True)))


_recurrent_entries()


def _chunk(lengths=(3, 70), nk=1, nv=2, dk=4, dv=3, seed=1, state_dtype=_BF16, full=True,
           **override):
    gen, q, k, v, beta, g = _qkv(lengths, nk, nv, dk, dv, seed)
    state = torch.randn(len(lengths), nv, dv, dk, generator=gen).to(state_dtype)
    kwargs = dict(beta=beta, initial_state=state,
                  actual_seq_lengths=torch.tensor(lengths, dtype=torch.int32))
    if full:
        kwargs.update(scale=dk ** -0.5, g=g)
    kwargs.update(override)
    return (q, k, v), kwargs


def _chunk_entries() -> None:
    op = "npu_chunk_gated_delta_rule"
    e = _entry(op)
    e.samples += [
        Sample("two_chunks_gqa", lambda: _chunk(nk=2, nv=4)),
        Sample("fp32_state_defaults", lambda: _chunk(lengths=(5,), state_dtype=torch.float32,
                                                     full=False)),
    ]
    e.errors += [
        ErrorSample("no_beta", lambda: _chunk(beta=None), ValueError,
                    f"{op}: expected beta a tensor \\(required in the TND layout"),
        ErrorSample("too_many_heads", lambda: _chunk(lengths=(2,), nv=65, nk=1), ValueError,
                    f"{op}: expected Nv in \\[1, 64\\], but got 65"),
        ErrorSample("state_dtype", lambda: _chunk(state_dtype=torch.float16), TypeError,
                    f"{op}: expected initial_state dtype in \\['bfloat16', 'float32'\\]"),
        ErrorSample("lengths_shape", lambda: _chunk(
            actual_seq_lengths=torch.tensor([73], dtype=torch.int32)), RuntimeError,
            f"{op}: expected actual_seq_lengths shape \\(2,\\)"),
        ErrorSample("dk_too_big", lambda: _chunk(lengths=(2,), dk=129), ValueError,
                    f"{op}: expected Dk in \\[1, 128\\], but got 129"),
    ]


_chunk_entries()

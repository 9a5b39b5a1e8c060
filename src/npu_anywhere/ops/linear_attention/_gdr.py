"""The gated delta rule (Gated DeltaNet) math shared by the recurrent and the chunked ops.

State layout, as torch_npu's: one ``(Dv, Dk)`` matrix ``S`` per value head, so a token's update
and output read::

    S   <- alpha * S * diag(alpha_k)                    alpha = exp(g), alpha_k = exp(gk)
    S   <- S + beta * (v - S k) k^T
    o    = S (scale * q)

(the first line is the decay, which the docs fold into ``alpha_t S_{t-1}`` of
``S_t = alpha_t S_{t-1} + beta_t (v_t - alpha_t S_{t-1} k_t) k_t^T``).  Key/query head ``h // (Nv
// Nk)`` serves value head ``h`` (grouped heads, as both kernels index them).

Two forms of the same recurrence:

* :func:`recurrent_steps`: token by token, vectorised over sequences and heads (at most a few
  tokens per sequence: the decode / speculative-decode case);
* :func:`chunked`: the chunk (WY / UT-transform) form of arXiv:2412.06464, chunks of ``C``
  tokens; the in-chunk corrections come from one unit-lower-triangular solve per chunk, all
  chunks at once, and only the ``(Dk, Dv)`` state is carried from chunk to chunk.

Both take float tensors and compute in their dtype (the ops pass float32; the tests float64).
"""

from __future__ import annotations

import torch

CHUNK = 64
"""Chunk length of the CANN kernel (ChunkGatedDeltaRule tiling: ``chunkSize = 64``)."""


def head_map(nk: int, nv: int, device) -> torch.Tensor:
    """Key head of each value head: ``h // (Nv // Nk)``."""
    return torch.arange(nv, device=device) // (nv // nk)


def recurrent_steps(state0, q, k, v, beta, alpha, alpha_k, lengths, starts):
    """Run each sequence's tokens through the recurrence, one token position at a time.

    ``state0``: ``(B, Nv, Dv, Dk)``, each sequence's starting state.  ``q``/``k``: ``(T, Nv,
    Dk)`` (already one per value head, ``q`` already scaled), ``v``: ``(T, Nv, Dv)``,
    ``beta``/``alpha``: ``(T, Nv)``, ``alpha_k``: ``(T, Nv, Dk)`` or None.  ``lengths`` and
    ``starts``: Python lists, sequence ``b`` owning tokens ``starts[b] .. starts[b] +
    lengths[b] - 1``.

    Yields ``(position j, token ids, active mask, o, S)`` after each position: ``o`` ``(B, Nv,
    Dv)`` and ``S`` ``(B, Nv, Dv, Dk)`` for every sequence (rows of sequences shorter than
    ``j + 1`` hold nothing meaningful and are masked out by ``active``).
    """
    batch = len(lengths)
    device = q.device
    start = torch.tensor(starts, dtype=torch.long, device=device)
    length = torch.tensor(lengths, dtype=torch.long, device=device)
    last = torch.clamp(start + length - 1, min=0)
    s = state0
    for j in range(max(lengths, default=0)):
        active = length > j
        tok = torch.minimum(start + j, last) if batch else start
        s = s * alpha[tok][..., None, None]
        if alpha_k is not None:
            s = s * alpha_k[tok][..., None, :]
        kt = k[tok]
        predicted = (s @ kt.unsqueeze(-1)).squeeze(-1)                 # S k: (B, Nv, Dv)
        delta = (v[tok] - predicted) * beta[tok][..., None]
        s = s + delta.unsqueeze(-1) * kt.unsqueeze(-2)
        o = (s @ q[tok].unsqueeze(-1)).squeeze(-1)
        yield j, tok, active, o, s


def _chunk_layout(starts, lengths, chunk, device):
    """Where every sequence's chunks go when each is padded to a whole number of chunks.

    Returns ``(gather, first_chunk, n_chunks, token_slot)``: ``gather`` ``(N,)`` maps each
    padded position (sequence by sequence, ``N`` = sum of the padded lengths) to its token, or
    to ``T`` (a zero row) for padding; ``first_chunk[b]`` / ``n_chunks[b]`` say which chunks
    are sequence ``b``'s; ``token_slot`` ``(T,)`` is each token's padded position.
    """
    n_chunks = [-(-n // chunk) for n in lengths]
    first_chunk, total = [], 0
    for n in n_chunks:
        first_chunk.append(total)
        total += n
    padded = torch.tensor([n * chunk for n in n_chunks], dtype=torch.long, device=device)
    start = torch.tensor(starts, dtype=torch.long, device=device)
    length = torch.tensor(lengths, dtype=torch.long, device=device)
    pad_start = torch.tensor(first_chunk, dtype=torch.long, device=device) * chunk
    n_padded = total * chunk
    t = int(sum(lengths))
    seq = torch.repeat_interleave(torch.arange(len(lengths), device=device), padded,
                                  output_size=n_padded)
    offset = torch.arange(n_padded, device=device) - pad_start[seq]
    gather = torch.where(offset < length[seq], start[seq] + offset, t)
    token_seq = torch.repeat_interleave(torch.arange(len(lengths), device=device), length,
                                        output_size=t)
    token_slot = pad_start[token_seq] + torch.arange(t, device=device) - start[token_seq]
    return gather, first_chunk, n_chunks, token_slot


def chunked(state0, q, k, v, beta, g, lengths, starts, chunk: int = CHUNK):
    """The chunk form; returns ``o`` ``(T, Nv, Dv)`` and the final states ``(B, Nv, Dv, Dk)``.

    Inputs as :func:`recurrent_steps` (``g`` is the log-decay, ``(T, Nv)``).  Every sequence is
    padded to a whole number of chunks with ``k = v = beta = g = 0`` tokens, which leave the
    state as it is (decay exp(0) = 1, no update) and whose outputs are dropped; the chunks of
    all sequences are stacked (no sequence is padded to the longest one).

    Per chunk, with ``G_i = g_1 + ... + g_i`` (cumulative inside the chunk), ``H = S^T`` at
    the chunk's start::

        L      = strictly-lower(diag(beta) K K^T * exp(G_i - G_j))
        U      = (I + L)^-1 diag(beta) V              W0 = (I + L)^-1 diag(beta exp(G)) K
        W      = U - W0 H                             (the beta-scaled deltas of the chunk)
        O      = diag(exp(G)) Q H + (lower(Q K^T * exp(G_i - G_j))) W
        H_next = exp(G_C) H + (diag(exp(G_C - G)) K)^T W

    ``U`` and ``W0`` need no state, so they are computed for all chunks together; the loop
    over chunk positions carries only ``H``, for every sequence that has a chunk there.
    """
    t, nv, dv = v.shape
    device = q.device
    gather, first_chunk, n_chunks, token_slot = _chunk_layout(starts, lengths, chunk, device)
    total = sum(n_chunks)

    def blocks(x):   # (T, Nv, ...) -> (chunks, Nv, C, ...)
        rows = torch.cat([x, x.new_zeros((1, *x.shape[1:]))])[gather]
        return rows.reshape(total, chunk, *x.shape[1:]).movedim(1, 2)

    qc, kc, vc = blocks(q), blocks(k), blocks(v)
    bc, gc = blocks(beta), blocks(g)                           # (chunks, Nv, C)
    cum = gc.cumsum(-1)
    lower = torch.ones(chunk, chunk, dtype=torch.bool, device=device).tril()
    strict = lower.clone().fill_diagonal_(False)
    diff = cum.unsqueeze(-1) - cum.unsqueeze(-2)               # G_i - G_j
    decay = torch.exp(diff.masked_fill(~lower, float("-inf")))  # 0 above the diagonal
    ll = (bc.unsqueeze(-1) * (kc @ kc.transpose(-1, -2)) * decay).masked_fill(~strict, 0)
    system = torch.eye(chunk, dtype=q.dtype, device=device) + ll
    rhs = torch.cat([bc.unsqueeze(-1) * vc,
                     (bc * torch.exp(cum)).unsqueeze(-1) * kc], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    u, w0 = solved[..., :dv], solved[..., dv:]
    attn = (qc @ kc.transpose(-1, -2)) * decay                 # lower triangle, diagonal kept
    q_decayed = torch.exp(cum).unsqueeze(-1) * qc
    last = cum[..., -1]                                        # G_C per chunk
    k_to_end = torch.exp(last.unsqueeze(-1) - cum).unsqueeze(-1) * kc

    h = state0.transpose(-1, -2).clone()                       # (B, Nv, Dk, Dv)
    out = torch.empty_like(vc)
    for c in range(max(n_chunks, default=0)):
        seqs = [b for b, n in enumerate(n_chunks) if n > c]
        every = len(seqs) == len(n_chunks)
        ids = torch.tensor([first_chunk[b] + c for b in seqs], dtype=torch.long, device=device)
        hs = h if every else h[seqs]
        w = u[ids] - w0[ids] @ hs
        out[ids] = q_decayed[ids] @ hs + attn[ids] @ w
        hs = torch.exp(last[ids])[..., None, None] * hs + k_to_end[ids].transpose(-1, -2) @ w
        if every:
            h = hs
        else:
            h[seqs] = hs

    # (chunks, Nv, C, Dv) -> (padded positions, Nv, Dv) -> the real tokens, in token order
    o = out.movedim(2, 1).reshape(total * chunk, nv, dv)[token_slot]
    return o, h.transpose(-1, -2)

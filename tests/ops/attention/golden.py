"""Float64 goldens for the inference-attention ops, written from the seed-004 page.

Independent of the implementation: one batch at a time, explicit loops over heads, visibility
built from the page's sentences (not from ``problem.visible``), layouts read by explicit indexing.
"""

from __future__ import annotations

import math

import torch

INF = 2147483647


def attend(q, k, v, scale, allowed, pse=None, *, base=None, rule="zero", fill=0.0):
    """One batch.  q [N, Sq, D], k [Nkv, Skv, D], v [Nkv, Skv, Dv], allowed bool [N or 1, Sq, Skv]
    -> out [N, Sq, Dv] float64 (0 on rows that see nothing), lse [N, Sq] (-inf there).

    ``base`` (like ``allowed``, but without the user mask) marks the rows the mask alone
    empties; the NPU gives them (``rule``): "uniform" -- every masked score is the finite
    ``fill``, so the softmax is flat: the mean of v over the base keys, lse fill + log(count);
    "invalid" -- the row-invalid correction: 0 and lse +inf; "zero" -- 0 and -inf."""
    n, sq, _ = q.shape
    nkv = k.shape[0]
    g = n // nkv
    out = torch.zeros(n, sq, v.shape[-1], dtype=torch.float64)
    lse = torch.full((n, sq), -math.inf, dtype=torch.float64)
    for h in range(n):
        kh, vh = k[h // g].double(), v[h // g].double()
        ok = allowed[h if allowed.shape[0] > 1 else 0]
        for i in range(sq):
            cols = ok[i].nonzero().flatten()
            if len(cols) == 0:
                left = [] if base is None else \
                    base[h if base.shape[0] > 1 else 0][i].nonzero().flatten()
                if len(left) and rule == "uniform":
                    out[h, i] = vh[left].mean(0)
                    lse[h, i] = fill + math.log(len(left))
                elif len(left) and rule == "invalid":
                    lse[h, i] = math.inf
                continue
            s = (q[h, i].double() @ kh[cols].T) * scale
            if pse is not None:
                s = s + pse[h if pse.shape[0] > 1 else 0, i, cols].double()
            w = torch.softmax(s, dim=0)
            out[h, i] = w @ vh[cols]
            lse[h, i] = torch.logsumexp(s, dim=0)
    return out, lse


def prompt_allowed(sq, skv, q_len, kv_len, sparse_mode=0, pre=INF, nxt=INF, mask=None):
    """Visibility [Sq, Skv] of one batch on the prompt path (seed 004, sparse_mode):

    0: mask given -> not masked and -pre <= j - i <= next; no mask -> everything;
    1: not masked;  2: j <= i;  3: j <= i + (kv_len - q_len);
    4: -pre <= j - i - (kv_len - q_len) <= next.
    Always i < q_len and j < kv_len.
    """
    ok = torch.zeros(sq, skv, dtype=torch.bool)
    for i in range(q_len):
        for j in range(kv_len):
            if sparse_mode == 0:
                good = mask is None or (not bool(mask[i, j]) and -pre <= j - i <= nxt)
            elif sparse_mode == 1:
                good = not bool(mask[i, j])
            elif sparse_mode == 2:
                good = j <= i
            elif sparse_mode == 3:
                good = j <= i + kv_len - q_len
            else:
                good = -pre <= j - i - (kv_len - q_len) <= nxt
            ok[i, j] = good
    return ok


def decode_allowed(skv, kv_len, mask_row=None):
    """Visibility [1, Skv] of a decode row: j < kv_len and not masked."""
    ok = torch.zeros(1, skv, dtype=torch.bool)
    for j in range(kv_len):
        ok[0, j] = mask_row is None or not bool(mask_row[j])
    return ok


# -- inputs and comparison shared by the op tests ------------------------------------------

def rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def close(out, golden, atol=2e-5):
    torch.testing.assert_close(out.double(), golden, atol=atol, rtol=atol)

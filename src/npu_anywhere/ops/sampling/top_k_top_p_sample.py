"""torch_npu.npu_top_k_top_p_sample: top-k, top-p and min-p filtering, then one token per row.

Sources: seed 004 and op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_top_k_top_p_sample.md
(formulas, modes), op_plugin/ops/opapi/TopKTopPSampleKernelNpuOpApi.cpp (the multinomial path
and output shapes), and op-plugin's CPU golden test/test_custom_ops/test_top_k_top_p_sample.py,
which this reference follows step for step (vectorised over rows), in float32::

    x = float32(logits[b]);  s, order = sort(x, descending, stable)
    top-k   when 1 <= top_k[b] <= min(align8(ks_max), 1024, V): keep s[:top_k[b]]
    probs = softmax(kept) if input_is_logits else kept
    top-p   when top_p[b] < 1: keep the prefix where cumsum(probs) - probs < top_p[b]
            (top_p[b] <= 0: the first entry only, whose prob becomes 1 if input_is_logits)
    no top-k, no top-p and min_ps[b] < 1: the row is not sorted (original order, all entries)
    min-p   0 < min_ps[b] < 1: keep probs >= max(kept probs) * min_ps[b];
            min_ps[b] >= 1: the first kept entry only;  <= 0 or min_ps None: unchanged
    kept entries are packed to the front, in order: (probs_c, idx_c), n of them
    choice  'None' (or q None): argmax(probs_c);   'qSample': argmax(probs_c / (|q[b, :n]| + eps))
            'multiNomial': torch.multinomial(probs_c, 1, generator)   (argmax: first maximum)
    logits_select_idx[b] = idx_c[choice]
    logits_top_kp_select[b] = x where kept, else -inf (input_is_logits) or 0

``top_k_guess`` only speeds the NPU's top-p search up (the guessed top-k holds the whole
nucleus whenever it is used), so it changes no result here.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_top_k_top_p_sample"
SCHEMA = ("npu_top_k_top_p_sample(Tensor logits, Tensor top_k, Tensor top_p, Tensor? q=None, "
          "float? eps=1e-8, bool? is_need_logits=False, int? top_k_guess=32, "
          "Tensor? min_ps=None, int? ks_max=1024, bool? input_is_logits=True, "
          "str? post_sample='qSample', Generator? generator=None) -> (Tensor, Tensor)")

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
_SUPPORTED = frozenset({Product.A2, Product.A3})
_K_CAP = 1024
# op-plugin's C++ tests for "multiNomial"; the doc spells it "multinomial" too.
_MODES = {"qSample": "qSample", "multiNomial": "multiNomial", "multinomial": "multiNomial",
          "None": "None"}


def _mode(post_sample, q) -> str:
    mode = _MODES[post_sample if post_sample is not None else "qSample"]
    if mode == "qSample" and q is None:
        return "None"       # seed 004: q = None forces the plain argmax whatever post_sample says
    return mode


def _row_vector(t, rows, name, dtypes) -> None:
    checks.expect_dtype(t, dtypes, OP, name)
    checks.expect(t.dim() == 1 and t.shape[0] == rows, OP, name,
                  lambda: f"a 1-D tensor of logits.size(0) = {rows} values",
                  lambda: f"shape {tuple(t.shape)}", RuntimeError)


def check_top_k_top_p_sample(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False,
                             top_k_guess=32, min_ps=None, ks_max=1024, input_is_logits=True,
                             post_sample="qSample", generator=None) -> None:
    targets.expect_supported(OP, _SUPPORTED)
    checks.expect_dtype(logits, FLOATS, OP, "logits")
    checks.expect_dim(logits, 2, OP, "logits")
    checks.expect_nonempty(logits, OP, "logits")
    rows = logits.shape[0]
    _row_vector(top_k, rows, "top_k", (torch.int32,))
    _row_vector(top_p, rows, "top_p", FLOATS)
    checks.expect_same_dtype({"logits": logits, "top_p": top_p}, OP)
    tensors = {"logits": logits, "top_k": top_k, "top_p": top_p}
    if min_ps is not None:
        _row_vector(min_ps, rows, "min_ps", FLOATS)
        checks.expect_same_dtype({"logits": logits, "min_ps": min_ps}, OP)
        tensors["min_ps"] = min_ps
    checks.expect(post_sample is None or post_sample in _MODES, OP, "post_sample",
                  "one of 'qSample', 'multiNomial' (or 'multinomial'), 'None'",
                  repr(post_sample), ValueError)
    checks.expect(ks_max is None or ks_max >= 1, OP, "ks_max", "a positive int",
                  repr(ks_max), ValueError)
    mode = _mode(post_sample, q)
    if mode == "qSample":
        checks.expect_dtype(q, (torch.float32,), OP, "q")
        checks.expect(tuple(q.shape) == tuple(logits.shape), OP, "q",
                      lambda: f"logits' shape {tuple(logits.shape)} (post_sample='qSample')",
                      lambda: f"shape {tuple(q.shape)}", RuntimeError)
        tensors["q"] = q
    elif mode == "multiNomial" and q is not None:
        checks.expect_dtype(q, (torch.int64,), OP, "q")
        checks.expect(q.dim() == 2 and q.shape[0] >= 1 and q.shape[1] == 2, OP, "q",
                      "a (q_row >= 1, 2) tensor of seeds and offsets (post_sample="
                      "'multiNomial')", lambda: f"shape {tuple(q.shape)}", RuntimeError)
        tensors["q"] = q
    checks.expect_same_device(tensors, OP)
    if generator is not None:
        checks.expect(generator.device.type == logits.device.type, OP, "generator",
                      lambda: f"a generator of logits' device type ({logits.device.type})",
                      lambda: f"one of {generator.device}", RuntimeError)


def _k_limit(ks_max, vocab: int) -> int:
    ks = _K_CAP if ks_max is None else min(int(ks_max), _K_CAP)
    aligned = (ks + 7) // 8 * 8
    return min(aligned, _K_CAP, vocab)


def _safe_softmax(x: torch.Tensor) -> torch.Tensor:
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _row_flags(x, top_k, top_p, min_ps, ks_max):
    rows, vocab = x.shape
    k = top_k.to(torch.int64).unsqueeze(1)
    p = top_p.to(torch.float32).unsqueeze(1)
    min_p = (min_ps.to(torch.float32) if min_ps is not None
             else torch.full((rows,), -1.0, device=x.device)).unsqueeze(1)
    use_k = (k >= 1) & (k <= _k_limit(ks_max, vocab))
    return k, p, min_p, use_k


def filter_rows(logits, top_k, top_p, min_ps, ks_max, input_is_logits):
    """The kept entries of each row: (x, order, probs, keep) over positions in the row's order.

    ``x`` is float32 ``logits``; ``order[b, j]`` is the vocabulary index at position ``j``
    (descending-sorted rows, or the identity for the rows that are not sorted), ``probs[b, j]``
    its float32 probability (or value when ``input_is_logits`` is False) and ``keep[b, j]``
    whether it survives.
    """
    rows, vocab = logits.shape
    x = logits.to(torch.float32)
    k, p, min_p, use_k = _row_flags(x, top_k, top_p, min_ps, ks_max)
    unsorted = ~use_k & (p >= 1.0) & (min_p < 1.0)
    values, index = torch.sort(x, dim=-1, descending=True, stable=True)
    identity = torch.arange(vocab, device=x.device).expand(rows, vocab)
    order = torch.where(unsorted, identity, index)
    ordered = torch.where(unsorted, x, values)
    probs, keep = _filter_ordered(ordered, k, p, min_p, use_k, input_is_logits)
    return x, order, probs, keep


def _filter_ordered(ordered, k, p, min_p, use_k, input_is_logits):
    """Top-k, top-p and min-p over rows already in their order: (probs, keep)."""
    position = torch.arange(ordered.shape[1], device=ordered.device).unsqueeze(0)
    in_k = ~use_k | (position < k)
    first = position == 0
    use_p = p < 1.0
    if input_is_logits:
        probs = _safe_softmax(ordered.masked_fill(~in_k, float("-inf")))
    else:
        probs = ordered.masked_fill(~in_k, 0.0)
    # top-p: the prefix whose running sum before the entry is below p (at least one entry)
    before = probs.cumsum(dim=-1) - probs
    nucleus = torch.where(p <= 0.0, first, before < p)
    keep = in_k & (nucleus | ~use_p)
    if input_is_logits:
        probs = torch.where(use_p & (p <= 0.0) & first, torch.ones_like(probs), probs)
    # min-p, relative to the largest kept probability
    largest = probs.masked_fill(~keep, float("-inf")).amax(dim=-1, keepdim=True)
    salient = keep & (probs >= largest * min_p)
    keep = torch.where((min_p > 0.0) & (min_p < 1.0), salient,
                       torch.where(min_p >= 1.0, keep & first, keep))
    return probs, keep


def _pack(order, probs, keep):
    """Kept entries moved to the front of each row, in order; the rest zero / index 0."""
    rows, vocab = probs.shape
    slot = torch.where(keep, keep.to(torch.int64).cumsum(dim=-1) - 1,
                       torch.full_like(order, vocab))
    packed_probs = probs.new_zeros(rows, vocab + 1).scatter_(1, slot, probs)[:, :vocab]
    packed_idx = order.new_zeros(rows, vocab + 1).scatter_(1, slot, order)[:, :vocab]
    count = keep.sum(dim=-1, keepdim=True)
    return packed_probs, packed_idx, count


def top_k_top_p_sample_reference(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False,
                                 top_k_guess=32, min_ps=None, ks_max=1024,
                                 input_is_logits=True, post_sample="qSample", generator=None):
    input_is_logits = True if input_is_logits is None else bool(input_is_logits)
    x, order, probs, keep = filter_rows(logits, top_k, top_p, min_ps, ks_max, input_is_logits)
    return _choose(x, order, probs, keep, q, eps, is_need_logits, input_is_logits,
                   _mode(post_sample, q), generator)


def _choose(x, order, probs, keep, q, eps, is_need_logits, input_is_logits, mode, generator):
    """Pack the kept entries, pick one per row, and build both outputs."""
    rows, vocab = x.shape
    eps = 1e-8 if eps is None else eps
    packed_probs, packed_idx, count = _pack(order, probs, keep)
    width = packed_probs.shape[1]
    live = torch.arange(width, device=x.device).unsqueeze(0) < count
    if mode == "multiNomial":
        weights = packed_probs.masked_fill(~live, 0.0)
        if width < vocab:
            # torch.multinomial draws one number per column: a full-width row keeps the
            # stream (and so the samples for a seed) independent of the provider.
            weights = torch.cat([weights, weights.new_zeros(rows, vocab - width)], dim=1)
        choice = torch.multinomial(weights, 1, replacement=True, generator=generator)
    else:
        score = packed_probs
        if mode == "qSample":
            score = packed_probs / (q[:, :width].abs() + eps)
        choice = score.masked_fill(~live, float("-inf")).argmax(dim=-1, keepdim=True)
    select_idx = packed_idx.gather(1, choice).squeeze(1)

    fill = float("-inf") if input_is_logits else 0.0
    if is_need_logits:
        kept = torch.zeros_like(x, dtype=torch.bool).scatter_(1, order, keep)
        selected = torch.where(kept, x, torch.full_like(x, fill))
    else:
        # Not computed on the NPU either (an output of the documented size is returned).
        selected = torch.full_like(x, fill)
    return select_idx, selected


# -- the partial-sort provider -----------------------------------------------------------------
#
# When every row applies a top-k, only its k largest entries can survive any later step, so a
# ``topk`` of the largest max(k) entries, put in the stable descending order (sorted by index,
# then stably by value), replaces the full sort of every row.

PARTIAL_MIN_VOCAB = 4096


def _partial_supports(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False,
                      top_k_guess=32, min_ps=None, ks_max=1024, input_is_logits=True,
                      post_sample="qSample", generator=None):
    if logits.shape[-1] < PARTIAL_MIN_VOCAB:
        return f"vocab below {PARTIAL_MIN_VOCAB}: the full sort is as fast"
    return None


def _partial_top_k_top_p_sample(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False,
                                top_k_guess=32, min_ps=None, ks_max=1024, input_is_logits=True,
                                post_sample="qSample", generator=None):
    args = (logits, top_k, top_p, q, eps, is_need_logits, top_k_guess, min_ps, ks_max,
            input_is_logits, post_sample, generator)
    x = logits.to(torch.float32)
    k, p, min_p, use_k = _row_flags(x, top_k, top_p, min_ps, ks_max)
    if not bool(use_k.all()):
        return top_k_top_p_sample_reference(*args)       # a row without top-k: full sort
    k_max = int(k.max())
    top_values, top_index = torch.topk(x, k_max, dim=-1, sorted=True)
    if bool(((x >= top_values[:, -1:]).sum(dim=-1) > k_max).any()):
        return top_k_top_p_sample_reference(*args)       # ties straddle the k_max-th entry
    by_index, perm = torch.sort(top_index, dim=-1)
    ordered, perm2 = torch.sort(top_values.gather(1, perm), dim=-1, descending=True,
                                stable=True)
    order = by_index.gather(1, perm2)
    input_is_logits = True if input_is_logits is None else bool(input_is_logits)
    probs, keep = _filter_ordered(ordered, k, p, min_p, use_k, input_is_logits)
    return _choose(x, order, probs, keep, q, eps, is_need_logits, input_is_logits,
                   _mode(post_sample, q), generator)


def _fake(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False, top_k_guess=32,
          min_ps=None, ks_max=1024, input_is_logits=True, post_sample="qSample",
          generator=None):
    rows, vocab = logits.shape
    return (logits.new_empty((rows,), dtype=torch.int64),
            logits.new_empty((rows, vocab), dtype=torch.float32))


top_k_top_p_sample_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_top_k_top_p_sample,
                              reference=top_k_top_p_sample_reference, fake=_fake, random=True,
                              info=OpInfo(api="torch_npu"))
top_k_top_p_sample_op.forbid_autograd("an inference-only sampler; torch_npu defines no backward")
top_k_top_p_sample_op.add_provider("partial_sort", _partial_top_k_top_p_sample,
                                   _partial_supports)


def npu_top_k_top_p_sample(logits, top_k, top_p, q=None, eps=1e-8, is_need_logits=False,
                           top_k_guess=32, min_ps=None, ks_max=1024, input_is_logits=True,
                           post_sample="qSample", generator=None):
    """Top-k, top-p and min-p filtering of each row, then one token: argmax, exponential
    q-sampling or a multinomial draw.

    Formula (seed 004; op-plugin's golden test_top_k_top_p_sample.py, followed exactly)::

        s, order = sort(float32(logits[b]), descending, stable)
        top-k:  1 <= top_k[b] <= min(align8(ks_max), 1024, V)  ->  keep s[:top_k[b]]
        probs = softmax(kept) if input_is_logits else kept
        top-p:  top_p[b] < 1  ->  keep the prefix with cumsum(probs) - probs < top_p[b]
                (top_p[b] <= 0: only the largest; its prob is set to 1 when input_is_logits)
        min-p:  0 < min_ps[b] < 1  ->  keep probs >= max(probs) * min_ps[b]
                min_ps[b] >= 1     ->  only the first kept entry
        packed kept entries (probs_c, idx_c) in order, n of them:
        None:        idx_c[argmax(probs_c)]
        qSample:     idx_c[argmax(probs_c / (|q[b, :n]| + eps))]
        multiNomial: idx_c[multinomial(probs_c, 1, generator)]

    A row with neither top-k nor top-p (and ``min_ps[b] < 1``) is not sorted: its positions
    are the vocabulary order, which is the order ``q[b, :n]`` is read in.

    Parameters
    ----------
    logits : Tensor
        ``(B, V)``, float16, bfloat16 or float32, non-empty; non-contiguous is fine.
    top_k : Tensor
        ``(B,)`` int32.  Out of ``[1, min(align8(ks_max), 1024, V)]`` skips top-k for the row.
    top_p : Tensor
        ``(B,)``, logits' dtype.  ``>= 1`` skips top-p; ``<= 0`` keeps one token.
    q : Tensor, optional
        ``post_sample='qSample'``: float32 ``(B, V)`` exponential weights (e.g. filled by
        :func:`npu_sim_exponential_`).  ``'multiNomial'``: int64 ``(q_row, 2)`` seeds/offsets,
        accepted and not used (op-plugin draws from ``generator``).  None: plain argmax.
    eps : float
        Added to ``|q|`` before the division.
    is_need_logits : bool
        Whether ``logits_top_kp_select`` is computed.
    top_k_guess : int
        An NPU speed-up for top-p without top-k; no effect on the result.
    min_ps : Tensor, optional
        ``(B,)``, logits' dtype.  ``<= 0`` (or None) skips min-p.
    ks_max : int
        Positive; rounded up to a multiple of 8, at most 1024: the largest top-k applied.
    input_is_logits : bool
        True: softmax before top-p, and removed entries read ``-inf``.  False: the input is
        already probabilities (no softmax), removed entries read 0.
    post_sample : str
        ``'qSample'`` (default), ``'multiNomial'`` (``'multinomial'`` also accepted) or
        ``'None'``.  ``q=None`` means ``'None'`` unless ``'multiNomial'`` is asked for.
    generator : torch.Generator, optional
        The multinomial draw's generator (default: the device's default generator).

    Returns
    -------
    (logits_select_idx, logits_top_kp_select)
        int64 ``(B,)`` vocabulary indices, and float32 ``(B, V)``: ``logits`` (as float32)
        where the token survived every filter, ``-inf`` / 0 elsewhere.  With
        ``is_need_logits=False`` the second output is all ``-inf`` / 0 (the NPU leaves it
        unwritten).

    Constraints
    -----------
    Values of ``top_k``, ``top_p`` and ``min_ps`` are not checked (the rules above say what
    each range does).  Strict mode: A2 and A3.

    Notes
    -----
    Modes without ``'multiNomial'`` are deterministic and follow op-plugin's golden exactly
    (float32 softmax as ``exp(x - max) / sum``, stable sorts, first maximum on ties).
    ``'multiNomial'`` matches in distribution: ``torch.multinomial`` with the given generator
    over the packed float32 probabilities, as op-plugin's golden calls it (the NPU's Philox
    stream differs).  ``post_sample='None'`` ignores a given ``q`` (the doc's rule).  The
    doc's NPU kernel steps (rolling top-k in ``8 * ks_max`` segments, the ``top_k_guess``
    shortcut) are speed-ups with the same result.  No backward.  Under ``torch.compile`` pass
    no ``generator`` (Dynamo cannot put a Generator object into a graph).

    Speed: with a top-k in every row and ``V >= 4096`` the ``partial_sort`` provider ranks
    only the ``max(top_k)`` largest entries (``torch.topk``) instead of sorting whole rows;
    other calls, and ties straddling the ``max(top_k)``-th entry, take the reference.  Its
    multinomial draw runs over a full-width row, so a seed gives the same samples either way.

    Examples
    --------
    >>> logits = torch.tensor([[0.1, 2.0, 1.0, 3.0]])
    >>> idx, _ = npu_anywhere.npu_top_k_top_p_sample(
    ...     logits, torch.tensor([2], dtype=torch.int32), torch.tensor([1.0]), post_sample="None")
    >>> idx
    tensor([3])
    """
    return top_k_top_p_sample_op(logits, top_k, top_p, q, eps, is_need_logits, top_k_guess,
                                 min_ps, ks_max, input_is_logits, post_sample, generator)


TORCH_NPU_FUNCTIONS = {OP: npu_top_k_top_p_sample}

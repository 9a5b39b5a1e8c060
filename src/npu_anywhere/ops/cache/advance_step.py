"""torch_npu.npu_advance_step_flashattn: vLLM's advance_step for the next decode step, in place.

Formula of the NPU kernel (the aclnnAdvanceStep kernel, hicann/ops-nn
``optim/advance_step/op_kernel/advance_step.h``, and op-plugin's golden
``test/test_custom_ops/test_npu_advance_step_flashattn.py`` agree; op-plugin's doc
``docs/zh/custom_APIs/torch_npu/torch_npu-npu_advance_step_flashattn.md`` writes it as
``slotMapping = (blockTables[..] + blockTablesStride * blockIdx) * blockSize + ...``), for each
query ``i < num_queries``, with ``W = block_tables.shape[1]`` and ``p = seq_lens[i]`` (before
the update)::

    input_tokens[i]    = sampled_token_ids[i, 0]
    input_positions[i] = p
    seq_lens[i]        = p + 1
    slot_mapping[i]    = (block_tables.flatten()[p // block_size] + W * i) * block_size
                         + p % block_size

and for the padded sequences ``num_queries <= i < num_seqs``: ``input_tokens[i] = 0``,
``input_positions[i] = 0``, ``slot_mapping[i] = -1`` (seq_lens untouched).

Speculative mode (``spec_token`` and ``accepted_num``; aclnnAdvanceStepV2, kernel
``advance_step_spec.h``), every request ``i < num_seqs`` owning ``t = 1 + spec_num`` entries::

    input_positions[i, j] += accepted_num[i] + 1;   seq_lens[i, j] = input_positions[i, j] + 1
    slot_mapping[i, j] = block_tables[i, pos // block_size] * block_size + pos % block_size
    input_tokens[i, 0]  = the token before the first minimum of (sampled_token_ids[i, :], -1),
                          or -1 when that minimum is at position 0
    input_tokens[i, 1:] = spec_token[i]
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ._common import expect_nonnegative

OP = "npu_advance_step_flashattn"
SCHEMA = ("npu_advance_step_flashattn(Tensor(a!) input_tokens, Tensor sampled_token_ids, "
          "Tensor(b!) input_positions, Tensor(c!) seq_lens, Tensor(d!) slot_mapping, "
          "Tensor block_tables, int num_seqs, int num_queries, int block_size, *, "
          "Tensor? spec_token=None, Tensor? accepted_num=None) -> ()")

_SUPPORTED = frozenset({Product.A2, Product.A3})
MAX_NUM_SEQS = 200_000_000          # the tiling rejects num_seqs >= 200000000
_STATE = ("input_tokens", "input_positions", "seq_lens", "slot_mapping")


def _shape(t):
    return lambda: f"shape {tuple(t.shape)}"


def check_advance_step_flashattn(input_tokens, sampled_token_ids, input_positions, seq_lens,
                                 slot_mapping, block_tables, num_seqs, num_queries, block_size,
                                 *, spec_token=None, accepted_num=None):
    op = OP
    targets.expect_supported(op, _SUPPORTED)
    named = {"input_tokens": input_tokens, "sampled_token_ids": sampled_token_ids,
             "input_positions": input_positions, "seq_lens": seq_lens,
             "slot_mapping": slot_mapping, "block_tables": block_tables}
    if spec_token is not None:
        named["spec_token"] = spec_token
    if accepted_num is not None:
        named["accepted_num"] = accepted_num
    for name, t in named.items():
        checks.expect_dtype(t, (torch.int64,), op, name)
    checks.expect_same_device(named, op)
    for name, t in named.items():
        checks.expect_nonempty(t, op, name)
    for name, v in (("num_seqs", num_seqs), ("num_queries", num_queries),
                    ("block_size", block_size)):
        checks.expect(v >= 1, op, name, "a positive integer", v, ValueError)
    checks.expect(num_seqs < MAX_NUM_SEQS, op, "num_seqs", f"< {MAX_NUM_SEQS}", num_seqs,
                  ValueError)
    checks.expect(block_tables.dim() == 2 and block_tables.shape[0] == num_seqs, op,
                  "block_tables", lambda: f"a 2-D tensor with num_seqs ({num_seqs}) rows",
                  _shape(block_tables), RuntimeError)
    state = {name: named[name] for name in _STATE}
    if spec_token is None and accepted_num is None:
        checks.expect(num_seqs > num_queries, op, "num_seqs",
                      lambda: f"> num_queries ({num_queries}) without spec_token", num_seqs,
                      ValueError)
        for name, t in state.items():
            checks.expect(t.dim() >= 1 and t.shape[0] == num_seqs and t.numel() == num_seqs,
                          op, name,
                          lambda: f"shape ({num_seqs},) (num_seqs)", _shape(t), RuntimeError)
        checks.expect(tuple(sampled_token_ids.shape) == (num_queries, 1), op,
                      "sampled_token_ids", lambda: f"shape ({num_queries}, 1) (num_queries, 1)",
                      _shape(sampled_token_ids), RuntimeError)
        return
    checks.expect(spec_token is not None and accepted_num is not None, op,
                  "spec_token and accepted_num", "to be both given (speculative mode) or both None",
                  f"spec_token {'None' if spec_token is None else 'given'}, accepted_num "
                  f"{'None' if accepted_num is None else 'given'}", ValueError)
    checks.expect(num_queries == num_seqs, op, "num_queries",
                  lambda: f"equal to num_seqs ({num_seqs}) in speculative mode", num_queries,
                  ValueError)
    checks.expect(spec_token.dim() == 2 and spec_token.shape[0] == num_seqs, op, "spec_token",
                  lambda: f"shape ({num_seqs}, spec_num)", _shape(spec_token), RuntimeError)
    per = 1 + spec_token.shape[1]
    checks.expect(tuple(accepted_num.shape) == (num_seqs,), op, "accepted_num",
                  lambda: f"shape ({num_seqs},)", _shape(accepted_num), RuntimeError)
    checks.expect(tuple(input_tokens.shape) in ((num_seqs * per,), (num_seqs, per)), op,
                  "input_tokens", lambda: f"shape ({num_seqs * per},) or ({num_seqs}, {per}) "
                  "(num_seqs * (1 + spec_num))", _shape(input_tokens), RuntimeError)
    for name in _STATE[1:]:
        t = state[name]
        checks.expect(t.shape == input_tokens.shape, op, name,
                      lambda: f"the shape of input_tokens {tuple(input_tokens.shape)} (one entry "
                      "per token of each request)", _shape(t), RuntimeError)
    checks.expect(tuple(sampled_token_ids.shape) == (num_seqs, per), op, "sampled_token_ids",
                  lambda: f"shape ({num_seqs}, {per}) (num_seqs, 1 + spec_num)",
                  _shape(sampled_token_ids), RuntimeError)


def _check_table_width(seq_lens, block_tables, block_size):
    """Seed 004 constraint 4: block_tables.shape[1] > max(seq_lens) // block_size."""
    expect_nonnegative(seq_lens, OP, "seq_lens")
    width = block_tables.shape[1]
    most = int(seq_lens.max())
    checks.expect(most // block_size < width, op=OP, param="block_tables",
                  requirement=f"a second dim larger than max(seq_lens) // block_size "
                  f"({most} // {block_size} = {most // block_size})",
                  actual=f"shape {tuple(block_tables.shape)}", error=ValueError)


_INT64_MAX = 2 ** 63 - 1


def _expect_slots_fit(entry, added, block_size):
    """``(entry + added) * block_size + offset`` (offset < block_size) must not wrap around
    int64: a block_tables entry near 2**62 would otherwise give a plausible wrong slot."""
    bound = (_INT64_MAX - (block_size - 1)) // block_size       # |block number| allowed
    # added >= 0, so bound - added cannot wrap, and entry + added is formed only for negative
    # entries, where it cannot wrap either
    low = torch.where(entry < 0, entry + added, torch.zeros_like(entry))
    bad = (entry > bound - added) | (low < -bound)
    if bool(bad.any()):
        value = int(entry[bad][0])
        checks.expect(False, OP, "block_tables", "entries whose slots (entry + block_tables."
                      f"shape[1] * row) * block_size fit in int64 (|block number| <= {bound})",
                      f"an entry {value}", ValueError)


def advance_step_reference(input_tokens, sampled_token_ids, input_positions, seq_lens,
                           slot_mapping, block_tables, num_seqs, num_queries, block_size, *,
                           spec_token=None, accepted_num=None):
    _check_table_width(seq_lens, block_tables, block_size)
    table = block_tables.reshape(-1)            # the kernel reads the table as one flat array
    width = block_tables.shape[1]
    if spec_token is None:
        _advance(input_tokens, sampled_token_ids, input_positions, seq_lens, slot_mapping, table,
                 width, num_seqs, num_queries, block_size)
    else:
        _advance_spec(input_tokens, sampled_token_ids, input_positions, seq_lens, slot_mapping,
                      table, width, num_seqs, block_size, spec_token, accepted_num)


def _advance(input_tokens, sampled, input_positions, seq_lens, slot_mapping, table, width,
             num_seqs, num_queries, block_size):
    tokens, positions, lens, slots = (t.view(num_seqs) for t in
                                      (input_tokens, input_positions, seq_lens, slot_mapping))
    q = num_queries
    pos = lens[:q].clone()
    rows = torch.arange(q, device=pos.device)
    # The documented/kernel formula (not vLLM's block_tables[i, p // bs]): see the module doc.
    entry = table[torch.div(pos, block_size, rounding_mode="floor")]
    _expect_slots_fit(entry, width * rows, block_size)
    slot = (entry + width * rows) * block_size + torch.remainder(pos, block_size)
    new_tokens = sampled[:, 0].clone()
    tokens[:q] = new_tokens
    tokens[q:] = 0
    positions[:q] = pos
    positions[q:] = 0
    lens[:q] = pos + 1
    slots[:q] = slot
    slots[q:] = -1


def _advance_spec(input_tokens, sampled, input_positions, seq_lens, slot_mapping, table, width,
                  num_seqs, block_size, spec_token, accepted_num):
    per = sampled.shape[1]
    tokens, positions, lens, slots = (t.view(num_seqs, per) for t in
                                      (input_tokens, input_positions, seq_lens, slot_mapping))
    pos = positions + accepted_num[:, None] + 1
    # The kernel divides with C semantics (truncation) on int32 values.
    block = torch.div(pos, block_size, rounding_mode="trunc")
    within = pos - block * block_size
    flat = torch.arange(num_seqs, device=pos.device)[:, None] * width + block
    bad = (flat < 0) | (flat >= table.numel())
    if bool(bad.any()):
        i, j = (int(v) for v in bad.nonzero()[0])
        checks.expect(False, OP, "block_tables",
                      "an entry for every new position (row * block_tables.shape[1] + position "
                      f"// block_size within its {table.numel()} elements)",
                      f"position {int(pos[i, j])} of request {i} (flat entry {int(flat[i, j])})",
                      IndexError)
    entry = table[flat]
    _expect_slots_fit(entry, torch.zeros_like(entry), block_size)
    slot = entry * block_size + within
    extended = torch.cat((sampled, torch.full_like(sampled[:, :1], -1)), dim=1)
    first_min = torch.argmin(extended, dim=1)          # the first minimum, as the kernel finds
    before = sampled.gather(1, torch.clamp(first_min - 1, min=0)[:, None])[:, 0]
    last = torch.where(first_min == 0, torch.full_like(before, -1), before)
    positions.copy_(pos)
    lens.copy_(pos + 1)
    slots.copy_(slot)
    tokens[:, 0] = last
    tokens[:, 1:] = spec_token


def _fake(input_tokens, sampled_token_ids, input_positions, seq_lens, slot_mapping, block_tables,
          num_seqs, num_queries, block_size, *, spec_token=None, accepted_num=None):
    return None


advance_step_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_advance_step_flashattn,
                        reference=advance_step_reference, fake=_fake, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
advance_step_op.forbid_autograd("npu_advance_step_flashattn updates integer bookkeeping "
                                "tensors (no backward)")


def npu_advance_step_flashattn(input_tokens, sampled_token_ids, input_positions, seq_lens,
                               slot_mapping, block_tables, num_seqs, num_queries, block_size, *,
                               spec_token=None, accepted_num=None):
    """vLLM's ``advance_step_flashattn``: update the decode-step bookkeeping in place.

    Formula (the NPU kernel; op-plugin's doc and golden), per query ``i < num_queries`` with
    ``p = seq_lens[i]`` before the call and ``W = block_tables.shape[1]``::

        input_tokens[i]    = sampled_token_ids[i, 0]
        input_positions[i] = p
        seq_lens[i]        = p + 1
        slot_mapping[i]    = (block_tables.flatten()[p // block_size] + W * i) * block_size
                             + p % block_size

    and for the padding ``num_queries <= i < num_seqs``: input_tokens 0, input_positions 0,
    slot_mapping -1.  Speculative mode (``spec_token`` and ``accepted_num`` given), for every
    request ``i`` and each of its ``1 + spec_num`` entries ``j``::

        input_positions[i, j] += accepted_num[i] + 1
        seq_lens[i, j]         = input_positions[i, j] + 1
        slot_mapping[i, j]     = block_tables[i, pos // block_size] * block_size
                                 + pos % block_size                     (pos: the new position)
        input_tokens[i, 0]     = sampled_token_ids[i, m - 1], m = first index of the minimum of
                                 (sampled_token_ids[i, 0], ..., sampled_token_ids[i, spec_num], -1);
                                 -1 when m == 0
        input_tokens[i, 1:]    = spec_token[i]

    Parameters
    ----------
    input_tokens, input_positions, seq_lens, slot_mapping : Tensor
        int64, updated in place.  ``[num_seqs]`` (also ``[num_seqs, 1]``); in speculative mode
        ``[num_seqs * (1 + spec_num)]`` or ``[num_seqs, 1 + spec_num]``, all four alike.
    sampled_token_ids : Tensor
        int64, ``[num_queries, 1]``; speculative: ``[num_seqs, 1 + spec_num]``.
    block_tables : Tensor
        int64, ``[num_seqs, W]`` with ``W > max(seq_lens) // block_size``.
    num_seqs, num_queries, block_size : int
        Positive.  ``num_seqs > num_queries`` without speculation, ``num_queries == num_seqs``
        with it.
    spec_token : Tensor, optional
        int64 ``[num_seqs, spec_num]``, the draft tokens.
    accepted_num : Tensor, optional
        int64 ``[num_seqs]``, the accepted draft tokens per request.

    Returns
    -------
    None
        The four state tensors are updated in place; a call that raises changes nothing.

    Constraints
    -----------
    Seed 004 constraints 1-5 (shapes, ``W > max(seq_lens) // block_size``, num_seqs vs
    num_queries), no empty tensors, non-negative seq_lens.  In speculative mode a new
    position may lie beyond row ``i`` of block_tables (the doc's example sizes the table from
    the old seq_lens): the kernel then reads on into the following rows, and so do we; reading
    past the whole table raises IndexError.  Strict mode: A2 and A3.

    Notes
    -----
    The slot formula is the NPU's, which differs from vLLM's
    ``block_tables[i, p // block_size] * block_size + p % block_size`` for every query but the
    first: the aclnnAdvanceStep kernel and op-plugin's golden read the table's first row and add
    ``W * i`` to the block *number* (op-plugin's doc writes the same expression for both modes;
    only the speculative kernel adds ``W * i`` to the *index*, reading row ``i``).  Not
    emulated (hardware-dependent): the kernel only advances the first C queries and resets
    only every C-th padded entry, C being the number of AI vector cores; we advance every
    query and reset every padded entry (vLLM's behaviour).  The seed doc gives seq_lens and
    slot_mapping as ``[num_seqs]`` in speculative mode, but the kernel, the doc's own example
    and op-plugin's current doc use one entry per token (``[num_seqs * (1 + spec_num)]``).
    Sources: seed 004; op-plugin's doc and golden;
    hicann/ops-nn ``optim/advance_step`` (kernels ``advance_step.h`` and ``advance_step_spec.h``,
    tiling checks in ``op_host/advance_step_tiling.cpp``).
    """
    advance_step_op(input_tokens, sampled_token_ids, input_positions, seq_lens,
                    slot_mapping, block_tables, num_seqs, num_queries, block_size,
                    spec_token=spec_token, accepted_num=accepted_num)


TORCH_NPU_FUNCTIONS = {"npu_advance_step_flashattn": npu_advance_step_flashattn}

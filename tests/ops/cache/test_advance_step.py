"""npu_advance_step_flashattn against goldens written from the documented formula.

Non-speculative (op-plugin doc formula, with blockIdx = query i and p = seq_lens[i])::

    blockTablesStride = blockTables.stride(0)
    inputTokens[i]    = sampledTokenIds[i]
    inputPositions[i] = seqLens[i]
    seqLens[i]        = seqLens[i] + 1
    slotMapping[i]    = (blockTables[p // blockSize] + blockTablesStride * i) * blockSize
                        + p % blockSize            (blockTables read as one flat array)

padding (num_queries <= i < num_seqs): tokens 0, positions 0, slot -1.  Speculative (aclnn
AdvanceStepV2): positions += accepted_num + 1, seq_lens = positions + 1,
slot = block_tables[i][pos // bs] * bs + pos % bs, input_tokens[i] = (token before the first
minimum of sampled[i] + [-1], or -1, then spec_token[i]).
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na

OP = "npu_advance_step_flashattn: expected"


def golden(tokens, sampled, positions, lens, slots, table, num_seqs, num_queries, bs):
    tokens, positions, lens, slots = (t.clone().reshape(-1).tolist()
                                      for t in (tokens, positions, lens, slots))
    flat = table.reshape(-1).tolist()
    width = table.shape[1]
    for i in range(num_queries):
        p = lens[i]
        tokens[i] = int(sampled[i][0])
        positions[i] = p
        lens[i] = p + 1
        slots[i] = (flat[p // bs] + width * i) * bs + p % bs
    for i in range(num_queries, num_seqs):
        tokens[i], positions[i], slots[i] = 0, 0, -1
    return [torch.tensor(v) for v in (tokens, positions, lens, slots)]


def golden_spec(tokens, sampled, positions, lens, slots, table, num_seqs, bs, spec, accepted):
    per = 1 + spec.shape[1]
    tokens, positions, lens, slots = (t.clone().reshape(-1).tolist()
                                      for t in (tokens, positions, lens, slots))
    for i in range(num_seqs):
        for j in range(per):
            k = i * per + j
            pos = positions[k] + int(accepted[i]) + 1
            positions[k], lens[k] = pos, pos + 1
            slots[k] = int(table[i][pos // bs]) * bs + pos % bs
        row = [int(v) for v in sampled[i]] + [-1]
        first_min = row.index(min(row))
        tokens[i * per] = -1 if first_min == 0 else row[first_min - 1]
        for j in range(per - 1):
            tokens[i * per + 1 + j] = int(spec[i][j])
    return [torch.tensor(v) for v in (tokens, positions, lens, slots)]


def make(num_seqs=9, num_queries=6, bs=4, column=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 30, (num_seqs,), generator=gen)
    width = int(lens.max()) // bs + 1
    shape = (num_seqs, 1) if column else (num_seqs,)
    state = [torch.randint(0, 100, (num_seqs,), generator=gen).reshape(shape) for _ in range(3)]
    return [state[0], torch.randint(0, 1000, (num_queries, 1), generator=gen), state[1],
            lens.reshape(shape), state[2], torch.randint(0, 50, (num_seqs, width), generator=gen),
            num_seqs, num_queries, bs]


def make_spec(num_seqs=5, spec_num=3, bs=4, two_d=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    per = 1 + spec_num
    shape = (num_seqs, per) if two_d else (num_seqs * per,)
    positions = torch.randint(0, 20, shape, generator=gen)
    sampled = torch.randint(0, 1000, (num_seqs, per), generator=gen)
    sampled[1, 2:] = -1          # two drafts rejected
    sampled[3, 0] = -1           # nothing accepted: input_tokens gets -1
    spec = torch.randint(0, 1000, (num_seqs, spec_num), generator=gen)
    accepted = torch.randint(0, per, (num_seqs,), generator=gen)
    width = (20 + per + 1) // bs + 1
    args = [torch.randint(0, 9, shape, generator=gen), sampled, positions, positions + 1,
            torch.zeros(shape, dtype=torch.int64), torch.randint(0, 50, (num_seqs, width),
                                                                 generator=gen),
            num_seqs, num_seqs, bs]
    return args, {"spec_token": spec, "accepted_num": accepted}


def state(args):
    return [args[i].reshape(-1) for i in (0, 2, 3, 4)]


@pytest.mark.parametrize("column", [False, True], ids=["1d", "column"])
@pytest.mark.parametrize("bs", [1, 4, 16])
def test_decode_matches_golden(column, bs):
    args = make(bs=bs, column=column, seed=bs)
    want = golden(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    sampled0, table0 = args[1].clone(), args[5].clone()
    assert na.npu_advance_step_flashattn(*args) is None
    for got, exp in zip(state(args), want):
        assert torch.equal(got, exp), (got, exp)
    assert torch.equal(args[1], sampled0) and torch.equal(args[5], table0)


def test_slot_formula_is_the_documented_one_not_vllms():
    """Query 1 at position 5 with block_size 4: the NPU reads block_tables.flatten()[1] (row 0)
    and adds W * 1 to it; vLLM would read block_tables[1][1]."""
    tokens = torch.zeros(3, dtype=torch.int64)
    lens = torch.tensor([2, 5, 0])
    table = torch.tensor([[10, 11], [20, 21], [30, 31]])
    slots = torch.zeros(3, dtype=torch.int64)
    positions = torch.zeros(3, dtype=torch.int64)
    na.npu_advance_step_flashattn(tokens, torch.tensor([[7], [8]]), positions, lens, slots, table,
                                  3, 2, 4)
    assert slots.tolist() == [10 * 4 + 2, (11 + 2 * 1) * 4 + 1, -1]
    assert lens.tolist() == [3, 6, 0] and tokens.tolist() == [7, 8, 0]


@pytest.mark.parametrize("two_d", [False, True], ids=["flat", "2d"])
@pytest.mark.parametrize("spec_num,bs", [(1, 2), (3, 4), (2, 8)])
def test_speculative_matches_golden(two_d, spec_num, bs):
    args, kw = make_spec(spec_num=spec_num, bs=bs, two_d=two_d, seed=spec_num)
    want = golden_spec(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args[:6]],
                       args[6], bs, kw["spec_token"], kw["accepted_num"])
    na.npu_advance_step_flashattn(*args, **kw)
    for got, exp in zip(state(args), want):
        assert torch.equal(got, exp), (got, exp)


def test_speculative_last_token_cases():
    """(5, 6, 7) -> 7;  (5, -1, 9) -> 5 (first -1 ends the accepted run);  (-1, 3, 4) -> -1."""
    sampled = torch.tensor([[5, 6, 7], [5, -1, 9], [-1, 3, 4]])
    tokens = torch.zeros(9, dtype=torch.int64)
    pos = torch.zeros(9, dtype=torch.int64)
    na.npu_advance_step_flashattn(tokens, sampled, pos, torch.zeros(9, dtype=torch.int64),
                                  torch.zeros(9, dtype=torch.int64), torch.zeros(3, 4,
                                                                                 dtype=torch.int64),
                                  3, 3, 4, spec_token=torch.tensor([[1, 2], [3, 4], [5, 6]]),
                                  accepted_num=torch.tensor([2, 0, 1]))
    assert tokens.tolist() == [7, 1, 2, 5, 3, 4, -1, 5, 6]
    assert pos.tolist() == [3, 3, 3, 1, 1, 1, 2, 2, 2]


def test_speculative_positions_spill_into_the_next_row_like_the_kernel():
    """The doc example sizes block_tables from the old seq_lens; a new position past row i's
    width reads on into row i + 1 (flat addressing), as the kernel does."""
    table = torch.tensor([[1, 2], [3, 4]])
    slots = torch.zeros(4, dtype=torch.int64)
    pos = torch.tensor([1, 2, 0, 0])
    na.npu_advance_step_flashattn(torch.zeros(4, dtype=torch.int64), torch.ones(2, 2,
                                                                               dtype=torch.int64),
                                  pos, torch.zeros(4, dtype=torch.int64), slots, table, 2, 2, 2,
                                  spec_token=torch.ones(2, 1, dtype=torch.int64),
                                  accepted_num=torch.tensor([2, 0]))
    # request 0: positions 4 and 5 -> flat entry 0 * 2 + 2 = table[1][0] = 3
    assert slots.tolist() == [3 * 2 + 0, 3 * 2 + 1, 3 * 2 + 1, 3 * 2 + 1]


def _untouched(args, before):
    for got, exp in zip(state(args), before):
        assert torch.equal(got, exp)


def test_reading_past_the_table_raises_and_changes_nothing():
    table = torch.zeros(2, 3, dtype=torch.int64)       # W = 3 > max(seq_lens) // 2 = 0
    positions = torch.tensor([0, 0, 5, 5])             # request 1 moves to 7: 7 // 2 = 3, and
    args = [torch.zeros(4, dtype=torch.int64), torch.ones(2, 2, dtype=torch.int64), positions,
            torch.ones(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int64), table, 2, 2, 2]
    kw = {"spec_token": torch.ones(2, 1, dtype=torch.int64),
          "accepted_num": torch.tensor([0, 1])}        # flat entry 1 * 3 + 3 = 6: past the end
    before = [t.clone() for t in state(args)]
    with pytest.raises(IndexError, match=f"{OP} block_tables an entry for every new position"):
        na.npu_advance_step_flashattn(*args, **kw)
    _untouched(args, before)


@pytest.mark.parametrize("change,error,match", [
    ("narrow_table", ValueError, "block_tables a second dim larger than max\\(seq_lens\\) // "
                                 "block_size"),
    ("negative_len", ValueError, "seq_lens non-negative values"),
    ("huge_entry", ValueError, "block_tables entries whose slots .* fit in int64"),
    ("huge_negative_entry", ValueError, "block_tables entries whose slots .* fit in int64"),
])
def test_bad_values_raise_and_change_nothing(change, error, match):
    args = make()
    if change == "narrow_table":
        args[5] = args[5][:, :-1]
    elif change in ("huge_entry", "huge_negative_entry"):
        # every entry: (2**62 + W * i) * block_size would wrap around int64 into a small slot
        args[5] = args[5].clone().fill_(2 ** 62 if change == "huge_entry" else -2 ** 62)
    else:
        args[3][-1] = -3
    before = [t.clone() for t in state(args)]
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_advance_step_flashattn(*args)
    _untouched(args, before)


@pytest.mark.parametrize("change,error,match", [
    ("int32", TypeError, "seq_lens dtype in \\['int64'\\]"),
    ("queries_equal", ValueError, "num_seqs > num_queries"),
    ("zero_block", ValueError, "block_size a positive integer"),
    ("tokens_len", RuntimeError, "input_tokens shape \\(9,\\)"),
    ("sampled", RuntimeError, "sampled_token_ids shape \\(6, 1\\)"),
    ("table_rows", RuntimeError, "block_tables a 2-D tensor with num_seqs \\(9\\) rows"),
    ("empty_table", ValueError, "block_tables a non-empty tensor"),
    ("huge", ValueError, "num_seqs < 200000000"),
    ("scalar_state", RuntimeError, "slot_mapping shape \\(9,\\) \\(num_seqs\\), but got shape "
                                   "\\(\\)"),
    ("matrix_state", RuntimeError, "input_positions shape \\(9,\\) \\(num_seqs\\)"),
])
def test_bad_metadata(change, error, match):
    args = make()
    if change == "int32":
        args[3] = args[3].int()
    elif change == "queries_equal":
        args[7] = 9
        args[1] = torch.zeros(9, 1, dtype=torch.int64)
    elif change == "zero_block":
        args[8] = 0
    elif change == "tokens_len":
        args[0] = args[0][:8]
    elif change == "sampled":
        args[1] = args[1].reshape(1, -1)
    elif change == "table_rows":
        args[5] = args[5][:4]
    elif change == "empty_table":
        args[5] = args[5][:, :0]
    elif change == "scalar_state":
        args[4] = torch.tensor(0)
    elif change == "matrix_state":
        args[2] = args[2].reshape(3, 3)
    else:
        args[6] = 200_000_000
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_advance_step_flashattn(*args)


@pytest.mark.parametrize("change,error,match", [
    ("no_accepted", ValueError, "spec_token and accepted_num to be both given"),
    ("queries", ValueError, "num_queries equal to num_seqs \\(5\\)"),
    ("seq_lens_per_request", RuntimeError, "seq_lens the shape of input_tokens"),
    ("sampled", RuntimeError, "sampled_token_ids shape \\(5, 4\\)"),
    ("accepted", RuntimeError, "accepted_num shape \\(5,\\)"),
    ("tokens", RuntimeError, "input_tokens shape \\(20,\\) or \\(5, 4\\)"),
])
def test_bad_speculative_metadata(change, error, match):
    args, kw = make_spec()
    if change == "no_accepted":
        del kw["accepted_num"]
    elif change == "queries":
        args[7] = 4
    elif change == "seq_lens_per_request":
        args[3] = args[3][:5]
    elif change == "sampled":
        args[1] = args[1][:, :3]
    elif change == "accepted":
        kw["accepted_num"] = kw["accepted_num"][None]
    else:
        args[0] = args[0][:10]
    with pytest.raises(error, match=f"{OP} {match}"):
        na.npu_advance_step_flashattn(*args, **kw)


def test_speculative_huge_table_entry_raises_and_changes_nothing():
    args, kw = make_spec()
    args[5] = args[5].clone().fill_(2 ** 62)
    before = [t.clone() for t in state(args)]
    with pytest.raises(ValueError, match=f"{OP} block_tables entries whose slots"):
        na.npu_advance_step_flashattn(*args, **kw)
    _untouched(args, before)


def test_largest_table_entry_that_fits_gives_the_exact_slot():
    """The bound is exact: the largest block number whose slots fit runs and its slot is the
    formula's, computed here in Python integers."""
    args = make(num_seqs=3, num_queries=1, bs=4)
    bound = (2 ** 63 - 1 - 3) // 4
    args[5] = args[5].clone().fill_(bound)            # row 0: no W * i added
    p = int(args[3][0])
    na.npu_advance_step_flashattn(*args)
    assert int(args[4][0]) == bound * 4 + p % 4


def test_strict_mode_and_autograd():
    with na.strict("A3"):
        na.npu_advance_step_flashattn(*make())
    with na.strict("950"), pytest.raises(RuntimeError, match=f"{OP} a product the op supports"):
        na.npu_advance_step_flashattn(*make())
    args = make()
    args[5] = args[5].float().requires_grad_()
    with pytest.raises(RuntimeError, match=f"{OP} inputs that do not require grad"):
        na.npu_advance_step_flashattn(*args)


def test_fake_tensor_and_compile():
    from torch._subclasses.fake_tensor import FakeTensorMode
    args = make()
    mode = FakeTensorMode()
    fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
    with mode:
        assert torch.ops.npu.npu_advance_step_flashattn(*fake) is None

    def step(*a):
        torch.ops.npu.npu_advance_step_flashattn(*a)
        return a[4] + 0

    eager = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    torch._dynamo.reset()
    out = torch.compile(step, fullgraph=True, backend="aot_eager")(*args)
    step(*eager)
    assert torch.equal(out, eager[4])
    for got, exp in zip(state(args), state(eager)):
        assert torch.equal(got, exp)

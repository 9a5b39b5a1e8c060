"""npu_moe_gating_top_k (+ npu_moe_gating_top_k_backward) against goldens written from the docs.

Seed 004 / op-plugin's doc and golden (test_npu_moe_gating_topk.py)::

    norm = softmax(x) (norm_type 0) | sigmoid(x) (norm_type 1);  score = norm + bias
    group score: max (mode 0) | sum of the 2 largest (mode 1) over E / group_count experts
    keep the k_group best groups (stable: lower group first), expert_idx = top-k of score over
    the kept experts (stable: lower expert first);  y = norm[expert_idx]
    sigmoid: y = y / (sum(y) + eps);  y = y * routed_scaling_factor

The golden is a plain per-row Python loop in float64.  The backward golden is float64 autograd
of that formula (what op-plugin's backward test compares against).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.dispatch import use_providers
from npu_anywhere.testing.tolerances import assert_close_to_golden
from npu_anywhere.kernels import compiled as compiled_kernels


def sigmoid64(v):
    return 1.0 / (1.0 + math.exp(-v))


def softmax64(row):
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


def ranked(values, indices, n):
    """The n best of ``indices`` by ``values``: descending, ties by ascending index."""
    return sorted(indices, key=lambda i: (-values[i], i))[:n]


def golden(x, k, bias=None, k_group=1, group_count=1, group_select_mode=0, norm_type=0,
           routed_scaling_factor=1.0, eps=1e-20):
    experts = x.shape[1]
    per = experts // group_count
    b = [0.0] * experts if bias is None else bias.double().tolist()
    ys, ids, norms = [], [], []
    for row in x.double().tolist():
        norm = softmax64(row) if norm_type == 0 else [sigmoid64(v) for v in row]
        score = [n + c for n, c in zip(norm, b)]
        group_score = []
        for g in range(group_count):
            members = sorted((score[i] for i in range(g * per, (g + 1) * per)), reverse=True)
            group_score.append(members[0] if group_select_mode == 0 else members[0] + members[1])
        kept = ranked(group_score, range(group_count), k_group)
        candidates = [i for g in kept for i in range(g * per, (g + 1) * per)]
        top = ranked(score, candidates, k)
        y = [norm[i] for i in top]
        if norm_type == 1:
            total = sum(y) + eps
            y = [v / total for v in y]
        ys.append([v * routed_scaling_factor for v in y])
        ids.append(top)
        norms.append(norm)
    return (torch.tensor(ys, dtype=torch.float64), torch.tensor(ids, dtype=torch.int32),
            torch.tensor(norms, dtype=torch.float64))


def make(shape, dtype=torch.float32, seed=0, lo=-2.0, hi=2.0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


CONFIGS = {
    # name: (rows, E, k, k_group, group_count, with bias)
    "grouped": (7, 32, 4, 2, 8, True),
    "odd_groups": (5, 15, 5, 3, 5, True),     # 3 experts per group (not 32-aligned)
    "no_groups": (4, 12, 3, 1, 1, False),
    "all_groups_kept": (3, 24, 6, 4, 4, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=str)
@pytest.mark.parametrize("norm_type", [0, 1])
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_matches_golden(dtype, norm_type, mode, config):
    rows, e, k, k_group, groups, with_bias = CONFIGS[config]
    x = make((rows, e), dtype, seed=e + rows)
    bias = make((e,), dtype, seed=1, lo=-0.5, hi=0.5) if with_bias else None
    y, ids, norm = na.npu_moe_gating_top_k(x, k, bias=bias, k_group=k_group, group_count=groups,
                                           group_select_mode=mode, norm_type=norm_type,
                                           out_flag=True, routed_scaling_factor=1.5)
    gy, gids, gnorm = golden(x, k, bias, k_group, groups, mode, norm_type, 1.5)
    assert y.dtype == dtype and ids.dtype == torch.int32
    assert norm.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert y.shape == (rows, k) and ids.shape == (rows, k) and norm.shape == (rows, e)
    assert torch.equal(ids, gids)
    assert_close_to_golden(y, gy)
    assert_close_to_golden(norm, gnorm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("norm_type,mode", [(0, 0), (1, 1)])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_cpp_provider_matches_golden_and_reference(built_cpu_top_k, monkeypatch, dtype,
                                                   norm_type, mode, config):
    """The CPU C++ top-k provider: the golden's ids, and every output bit-identical to the
    reference (it reuses the reference's ATen steps and only swaps the ranking)."""
    from npu_anywhere.kernels import cpu_top_k
    rows, e, k, k_group, groups, with_bias = CONFIGS[config]
    x = make((rows, e), dtype, seed=e + rows)
    bias = make((e,), dtype, seed=1, lo=-0.5, hi=0.5) if with_bias else None
    kwargs = dict(bias=bias, k_group=k_group, group_count=groups, group_select_mode=mode,
                  norm_type=norm_type, out_flag=True, routed_scaling_factor=1.5)
    with use_providers("reference", op="npu_moe_gating_top_k"):
        want = na.npu_moe_gating_top_k(x, k, **kwargs)
    calls = []
    real = cpu_top_k.top_k
    monkeypatch.setattr(cpu_top_k, "top_k", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with compiled_kernels.compiling_after(0), \
            use_providers("cpp_top_k", op="npu_moe_gating_top_k"):
        got = na.npu_moe_gating_top_k(x, k, **kwargs)
    assert calls, "the C++ top-k did not run"
    assert torch.equal(got[1], golden(x, k, bias, k_group, groups, mode, norm_type, 1.5)[1])
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)


def golden_hash(x, input_ids, tid2eid, bias=None, norm_type=0, routed_scaling_factor=1.0,
                eps=1e-20):
    """Hash mode (the doc; Huawei's hash-kernel golden): the table row is the expert list."""
    ys, norms = [], []
    table = tid2eid.tolist()
    for row, tid in zip(x.double().tolist(), input_ids.tolist()):
        norm = softmax64(row) if norm_type == 0 else [sigmoid64(v) for v in row]
        y = [norm[e] for e in table[tid]]
        if norm_type == 1:
            total = sum(y) + eps
            y = [v / total for v in y]
        ys.append([v * routed_scaling_factor for v in y])
        norms.append(norm)
    ids = torch.tensor([table[t] for t in input_ids.tolist()], dtype=torch.int32)
    return torch.tensor(ys, dtype=torch.float64), ids, torch.tensor(norms, dtype=torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("norm_type", [0, 1])
@pytest.mark.parametrize("grouped", [False, True])
def test_hash_mode_takes_experts_from_the_table(dtype, norm_type, grouped):
    x = make((6, 16), dtype, seed=4)
    bias = make((16,), dtype, seed=5)              # steers rankings only: no part in hash mode
    # int64 ids read through a stride, an int32 table with a repeated expert and a reversed row.
    input_ids = torch.tensor([3, 0, 5, 3, 1, 4, 2, 1, 5, 0, 0, 1])[::2]
    tid2eid = torch.tensor([[15, 2, 7], [0, 1, 2], [5, 5, 9], [12, 8, 3], [4, 14, 6],
                            [11, 10, 13]], dtype=torch.int32)
    groups = dict(k_group=2, group_count=4, group_select_mode=1) if grouped else {}
    y, idx, norm = na.npu_moe_gating_top_k(
        x, 3, bias=bias, input_ids=input_ids, tid2eid=tid2eid, norm_type=norm_type,
        routed_scaling_factor=2.0, out_flag=True, **groups)
    want_y, want_idx, want_norm = golden_hash(x, input_ids, tid2eid, norm_type=norm_type,
                                              routed_scaling_factor=2.0)
    assert idx.dtype == torch.int32 and torch.equal(idx, want_idx)
    assert y.dtype == dtype
    assert_close_to_golden(y, want_y)
    assert_close_to_golden(norm, want_norm)


def test_selection_uses_bias_but_weights_do_not():
    # Expert 3 has the smallest sigmoid but a bias that makes it the best choice.
    x = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 5.0])
    y, ids, _ = na.npu_moe_gating_top_k(x, 2, bias=bias, norm_type=1)
    assert ids.tolist() == [[3, 0]]
    s = [sigmoid64(-1.0), sigmoid64(2.0)]
    torch.testing.assert_close(y.double(), torch.tensor([[v / sum(s) for v in s]],
                                                        dtype=torch.float64), rtol=1e-6, atol=0)


def test_softmax_weights_are_not_renormalised_and_scale_applies():
    x = make((3, 8), seed=4)
    y, ids, _ = na.npu_moe_gating_top_k(x, 2, routed_scaling_factor=3.0)
    for r, row in enumerate(x.double().tolist()):
        p = softmax64(row)
        top = ranked(p, range(8), 2)
        assert ids[r].tolist() == top
        torch.testing.assert_close(y[r].double(), torch.tensor([3.0 * p[i] for i in top],
                                                               dtype=torch.float64),
                                   rtol=1e-6, atol=0)
    # routed_scaling_factor 0 (op-plugin's test 4): all weights zero.
    y0, _, _ = na.npu_moe_gating_top_k(x, 2, norm_type=1, routed_scaling_factor=0.0)
    assert torch.count_nonzero(y0) == 0


def test_eps_enters_the_sigmoid_denominator():
    x = make((2, 6), seed=5)
    y, ids, _ = na.npu_moe_gating_top_k(x, 3, norm_type=1, eps=0.5)
    gy, gids, _ = golden(x, 3, norm_type=1, eps=0.5)
    assert torch.equal(ids, gids)
    assert_close_to_golden(y, gy)
    assert float(y.double().sum(-1).max()) < 0.9      # eps = 0.5 visibly shrinks the sum


@pytest.mark.parametrize("provider", ["reference", "compiled", "cpp_top_k"])
def test_ties_lower_group_and_lower_expert_first(request, provider):
    if provider == "cpp_top_k":
        request.getfixturevalue("built_cpu_top_k")
    with compiled_kernels.compiling_after(0), \
            use_providers(provider, "reference", op="npu_moe_gating_top_k"):
        # All equal: groups 0 and 1 win the group tie, experts 0.. win the expert tie.
        x = torch.zeros(1, 8)
        _, ids, _ = na.npu_moe_gating_top_k(x, 3, k_group=2, group_count=4)
        assert ids.tolist() == [[0, 1, 2]]
        # Group 2 has the best group score; expert 1 (group 0) ties with expert 4 (group 2)
        # and comes first, as the stable expert ranking over all kept experts says.
        x = torch.tensor([[0.0, 1.0, -3.0, -3.0, 1.0, 2.0, -3.0, -3.0]])
        _, ids, _ = na.npu_moe_gating_top_k(x, 3, k_group=2, group_count=4, norm_type=1)
        assert ids.tolist() == [[5, 1, 4]]
        # Mode 1: groups (1, 1) and (2, 0) tie on the sum; the lower group is kept.
        x = torch.tensor([[1.0, 1.0, 2.0, 0.0, -5.0, -5.0]])
        _, ids, _ = na.npu_moe_gating_top_k(x, 2, k_group=1, group_count=3,
                                            group_select_mode=1, norm_type=1)
        assert ids.tolist() == [[0, 1]]


def test_providers_agree_on_tie_heavy_bfloat16():
    x = make((64, 32), torch.bfloat16, seed=6, lo=-0.5, hi=0.5)   # bf16: many equal values
    bias = torch.zeros(32, dtype=torch.bfloat16)
    kwargs = dict(bias=bias, k_group=3, group_count=8, group_select_mode=0, norm_type=1)
    outs = {}
    for p in ("reference", "compiled"):
        with compiled_kernels.compiling_after(0), \
                use_providers(p, "reference", op="npu_moe_gating_top_k"):
            outs[p] = na.npu_moe_gating_top_k(x, 5, **kwargs)
    assert torch.equal(outs["reference"][1], outs["compiled"][1])
    for a, b in zip(outs["reference"], outs["compiled"]):   # Inductor's sigmoid: ulps apart
        torch.testing.assert_close(a, b, rtol=1e-2 if a.dtype == torch.bfloat16 else 1e-6, atol=0)
    assert torch.equal(outs["reference"][1], golden(x, 5, bias, 3, 8, 0, 1)[1])


def test_non_contiguous_inputs_untouched():
    base = make((6, 64), seed=7)
    x = base[:, ::2]
    bias = make((64,), seed=8, lo=-0.3, hi=0.3)[1::2]
    before = (x.clone(), bias.clone())
    y, ids, _ = na.npu_moe_gating_top_k(x, 4, bias=bias, k_group=2, group_count=4,
                                        group_select_mode=1, norm_type=1)
    gy, gids, _ = golden(x, 4, bias, 2, 4, 1, 1)
    assert torch.equal(ids, gids)
    assert_close_to_golden(y, gy)
    assert torch.equal(x, before[0]) and torch.equal(bias, before[1])


def test_deepseek_v3_shape():
    # The doc example's shape: E=256, 8 groups, 4 kept, top-2-sum groups, sigmoid, fp16.
    x = make((16, 256), torch.float16, seed=9, lo=0.0, hi=2.0)
    bias = make((256,), torch.float16, seed=10, lo=0.0, hi=2.0)
    y, ids, _ = na.npu_moe_gating_top_k(x, 8, bias=bias, k_group=4, group_count=8,
                                        group_select_mode=1, norm_type=1)
    gy, gids, _ = golden(x, 8, bias, 4, 8, 1, 1)
    assert torch.equal(ids, gids)
    assert_close_to_golden(y, gy)


def test_op_namespace_matches_function():
    x = make((3, 16), seed=11)
    a = na.npu_moe_gating_top_k(x, 2, k_group=2, group_count=4, norm_type=1)
    b = torch.ops.npu.npu_moe_gating_top_k(x, 2, k_group=2, group_count=4, norm_type=1)
    for p, q in zip(a, b):
        assert torch.equal(p, q)


# -- backward ----------------------------------------------------------------------------------

def golden_grad(x, ids, grad, scale=1.0, eps=1e-20):
    """float64 autograd of y = scale * s / (sum(s) + eps), s = sigmoid(x)[ids]."""
    xs = x.detach().double().requires_grad_(True)
    s = torch.sigmoid(xs).gather(1, ids.long())
    y = scale * s / (s.sum(-1, keepdim=True) + eps)
    (g,) = torch.autograd.grad(y, xs, grad.double())
    return g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_backward_op_matches_autograd_golden(dtype):
    x = make((9, 20), seed=12)
    gen = torch.Generator().manual_seed(13)
    ids = torch.stack([torch.randperm(20, generator=gen)[:4] for _ in range(9)]).to(torch.int32)
    grad = make((9, 4), dtype, seed=14, lo=-1.0, hi=1.0)
    got = na.npu_moe_gating_top_k_backward(torch.sigmoid(x.double()).float(), grad, ids,
                                           norm_type=1, routed_scaling_factor=2.0)
    assert got.dtype == dtype and got.shape == (9, 20)
    assert_close_to_golden(got, golden_grad(x, ids, grad, 2.0), dtype=dtype)


def test_backward_op_repeated_ids_accumulate():
    # The seed's example draws ids with randint, so a row may repeat an expert.
    x = make((2, 5), seed=15)
    ids = torch.tensor([[1, 1, 3], [0, 4, 2]], dtype=torch.int32)
    grad = make((2, 3), seed=16)
    got = na.npu_moe_gating_top_k_backward(torch.sigmoid(x.double()).float(), grad, ids,
                                           norm_type=1)
    assert_close_to_golden(got, golden_grad(x, ids, grad))


@pytest.mark.parametrize("mode,k_group,groups", [(1, 2, 4), (0, 1, 1)])
def test_gradcheck_sigmoid(mode, k_group, groups):
    x = make((4, 16), torch.float64, seed=17).requires_grad_(True)
    bias = make((16,), torch.float64, seed=18, lo=-0.2, hi=0.2)
    assert torch.autograd.gradcheck(
        lambda t: na.npu_moe_gating_top_k(t, 3, bias=bias, k_group=k_group, group_count=groups,
                                          group_select_mode=mode, norm_type=1,
                                          routed_scaling_factor=1.7)[0], (x,))


def test_autograd_goes_through_backward_op_and_matches_golden():
    x = make((5, 16), seed=19).requires_grad_(True)
    bias = make((16,), seed=20, lo=-0.2, hi=0.2).requires_grad_(True)
    y, ids, norm = na.npu_moe_gating_top_k(x, 3, bias=bias, k_group=2, group_count=4,
                                           norm_type=1, routed_scaling_factor=2.5)
    assert y.requires_grad and not ids.requires_grad and not norm.requires_grad
    grad = make((5, 3), seed=21)
    y.backward(grad)
    assert bias.grad is None                       # derivatives.yaml differentiates x only
    assert_close_to_golden(x.grad, golden_grad(x, ids, grad, 2.5))


def test_softmax_gradient_raises_at_backward():
    x = make((3, 8), seed=22).requires_grad_(True)
    y, _, _ = na.npu_moe_gating_top_k(x, 2)          # the forward itself is fine
    with pytest.raises(ValueError, match="npu_moe_gating_top_k_backward: expected norm_type 1"):
        y.sum().backward()


# -- bad inputs and strict mode ----------------------------------------------------------------

def _x(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize("call,exc,prefix", [
    (lambda: na.npu_moe_gating_top_k(_x(2, 3, 8), 1), ValueError,
     "npu_moe_gating_top_k: expected x a 2-D tensor"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8, dtype=torch.int32), 1), TypeError,
     "npu_moe_gating_top_k: expected x dtype"),
    (lambda: na.npu_moe_gating_top_k(_x(1, 2050), 1, group_count=2), ValueError,
     "npu_moe_gating_top_k: expected x at most 2048 experts"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, bias=_x(1, 8)), ValueError,
     "npu_moe_gating_top_k: expected bias a 1-D tensor"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, bias=_x(4)), RuntimeError,
     "npu_moe_gating_top_k: expected bias the shape (x.size(-1),) = (8,)"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, bias=_x(8, dtype=torch.bfloat16)), TypeError,
     "npu_moe_gating_top_k: expected bias the same dtype as x"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 0), ValueError,
     "npu_moe_gating_top_k: expected k in [1,"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 5, k_group=2, group_count=4), ValueError,
     "npu_moe_gating_top_k: expected k in [1, x.size(-1) / group_count * k_group] = [1, 4]"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, k_group=0, group_count=4), ValueError,
     "npu_moe_gating_top_k: expected k_group in [1, group_count] = [1, 4]"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, k_group=3, group_count=2), ValueError,
     "npu_moe_gating_top_k: expected k_group in"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, group_count=0), ValueError,
     "npu_moe_gating_top_k: expected group_count > 0"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, group_count=3), ValueError,
     "npu_moe_gating_top_k: expected group_count a divisor of x.size(-1) = 8"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, group_count=8, group_select_mode=1),
     ValueError, "npu_moe_gating_top_k: expected group_count to leave at least 2 experts"),
    (lambda: na.npu_moe_gating_top_k(_x(1, 2048), 1, k_group=2, group_count=128), ValueError,
     "npu_moe_gating_top_k: expected group_count with align32"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, group_select_mode=2), ValueError,
     "npu_moe_gating_top_k: expected group_select_mode one of [0, 1]"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, norm_type=2), ValueError,
     "npu_moe_gating_top_k: expected norm_type one of [0, 1]"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, renorm=1), ValueError,
     "npu_moe_gating_top_k: expected renorm 0"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, input_ids=torch.zeros(2, dtype=torch.int32)),
     ValueError, "npu_moe_gating_top_k: expected input_ids given together with tid2eid"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, input_ids=torch.zeros(3, dtype=torch.int32),
                                     tid2eid=torch.zeros(4, 1, dtype=torch.int32)),
     RuntimeError, "npu_moe_gating_top_k: expected input_ids the shape (x.size(0),) = (2,)"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 2, input_ids=torch.zeros(2, dtype=torch.int32),
                                     tid2eid=torch.zeros(4, 1, dtype=torch.int32)),
     RuntimeError, "npu_moe_gating_top_k: expected tid2eid a last dim equal to k = 2"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, input_ids=torch.zeros(2),
                                     tid2eid=torch.zeros(4, 1, dtype=torch.int32)),
     TypeError, "npu_moe_gating_top_k: expected input_ids dtype"),
    (lambda: na.npu_moe_gating_top_k(_x(2, 8), 1, input_ids=torch.zeros(2, dtype=torch.int64),
                                     tid2eid=torch.zeros(4, dtype=torch.int64)),
     ValueError, "npu_moe_gating_top_k: expected tid2eid a 2-D tensor"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 8, dtype=torch.float16), _x(2, 3),
                                              _x(2, 3, dtype=torch.int32), norm_type=1), TypeError,
     "npu_moe_gating_top_k_backward: expected x_norm dtype"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 1), _x(2, 1), _x(2, 1, dtype=torch.int32),
                                              norm_type=1), ValueError,
     "npu_moe_gating_top_k_backward: expected x_norm a last dim (experts) in [2, 2048]"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 8), _x(2, 9), _x(2, 9, dtype=torch.int32),
                                              norm_type=1), RuntimeError,
     "npu_moe_gating_top_k_backward: expected grad_y the shape"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 8), _x(2, 3), _x(2, 4, dtype=torch.int32),
                                              norm_type=1), RuntimeError,
     "npu_moe_gating_top_k_backward: expected expertIdx grad_y's shape"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 8), _x(2, 3), _x(2, 3, dtype=torch.int32),
                                              norm_type=1, renorm=2), ValueError,
     "npu_moe_gating_top_k_backward: expected renorm one of [0, 1]"),
    (lambda: na.npu_moe_gating_top_k_backward(_x(2, 8), _x(2, 3), _x(2, 3, dtype=torch.int32)),
     ValueError, "npu_moe_gating_top_k_backward: expected norm_type 1"),
])
def test_bad_inputs(call, exc, prefix):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(prefix), str(info.value)
    assert isinstance(info.value, (RuntimeError, NotImplementedError))


def test_kernel_rules_accept_what_it_runs():
    # One expert per group in mode 0; all groups kept lifts the 32-alignment rule.
    x = make((2, 8), seed=23)
    _, ids, _ = na.npu_moe_gating_top_k(x, 2, k_group=4, group_count=8)
    assert torch.equal(ids, golden(x, 2, None, 4, 8)[1])
    x = make((1, 2040), seed=24)
    _, ids, _ = na.npu_moe_gating_top_k(x, 2, k_group=60, group_count=60)
    assert torch.equal(ids, golden(x, 2, None, 60, 60)[1])


def test_strict_mode_rules():
    x = make((2, 8), seed=25)
    na.npu_moe_gating_top_k(x, 2, k_group=2, group_count=4, group_select_mode=1)  # 2 per group
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected group_count to leave at least 3"):
            na.npu_moe_gating_top_k(x, 2, k_group=2, group_count=4, group_select_mode=1)
        with pytest.raises(ValueError, match="expected group_count with align32"):
            # 34 experts per group pad to 64: 64 * 60 > 2048, though every group is kept.
            na.npu_moe_gating_top_k(make((1, 2040)), 2, k_group=60, group_count=60)
        with pytest.raises(TypeError, match="npu_moe_gating_top_k: expected x dtype"):
            na.npu_moe_gating_top_k(x.double(), 2)
        na.npu_moe_gating_top_k(make((2, 24)).bfloat16(), 2, k_group=2, group_count=8)
    with na.strict("A3"):
        na.npu_moe_gating_top_k_backward(torch.rand(2, 8), torch.rand(2, 2),
                                         torch.zeros(2, 2, dtype=torch.int32), norm_type=1)
    with na.strict("910"):
        with pytest.raises(RuntimeError, match="npu_moe_gating_top_k: expected a product"):
            na.npu_moe_gating_top_k(x, 2)

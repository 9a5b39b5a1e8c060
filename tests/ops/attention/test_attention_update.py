"""npu_attention_update against a float64 golden written from the doc formula.

Spec (seed 004, aclnnAttentionUpdate.md)::

    lse_max = max_i lse_i;  lse_m = lse_max + log(sum_i exp(lse_i - lse_max))
    O = sum_i O_i * exp(lse_i - lse_m)

Kernel facts (attention_update_with_lse_regbase.h): +inf lse counts as -inf; float32 math,
one rounding to local_out's dtype.  The golden below forms the weights as a softmax over the rank
axis in float64 (an independent route to exp(lse_i - lse_m)).
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def golden(lse, local_out):
    stacked = torch.stack([x.double() for x in lse])
    stacked = torch.where(stacked == float("inf"), torch.full_like(stacked, float("-inf")), stacked)
    weights = torch.softmax(stacked, dim=0)                     # exp(lse_i - lse_m)
    out = sum(o.double() * w.unsqueeze(-1) for o, w in zip(local_out, weights))
    lse_m = torch.logsumexp(stacked, dim=0)
    return out, lse_m


def make(sp, rows, head_dim, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    lse = [torch.randn(rows, generator=g) * 3 for _ in range(sp)]
    out = [torch.randn(rows, head_dim, generator=g).to(dtype) for _ in range(sp)]
    return lse, out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("sp,rows,head_dim", [(1, 3, 8), (2, 7, 24), (5, 4, 64), (16, 2, 512)])
def test_matches_doc_formula(sp, rows, head_dim, dtype):
    lse, local_out = make(sp, rows, head_dim, dtype, seed=sp + rows)
    before = [t.clone() for t in lse + local_out]
    out, lse_out = na.npu_attention_update(lse, local_out, 1)
    want, want_lse = golden(lse, local_out)
    assert out.dtype == dtype and out.shape == (rows, head_dim)
    assert lse_out.dtype == torch.float32 and lse_out.shape == (rows,)
    assert_close_to_golden(out, want, dtype=dtype)
    assert_close_to_golden(lse_out, want_lse, dtype=torch.float32)
    for a, b in zip(lse + local_out, before):
        assert torch.equal(a, b)


def test_update_type_zero_still_gives_out():
    lse, local_out = make(3, 5, 16, torch.float32)
    out0, _ = na.npu_attention_update(lse, local_out, 0)
    out1, _ = na.npu_attention_update(lse, local_out, 1)
    assert torch.equal(out0, out1)


def test_float64_is_exact_to_the_golden():
    lse, local_out = make(4, 6, 32, torch.float64)
    lse = [x.double() for x in lse]
    out, lse_out = na.npu_attention_update(lse, local_out, 1)
    want, want_lse = golden(lse, local_out)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse_out, want_lse, rtol=1e-12, atol=1e-12)


def test_infinite_lse():
    """A rank with +inf (no keys) is ignored; rows where every rank is -inf are NaN (kernel)."""
    lse = [torch.tensor([float("inf"), 0.5, float("-inf")]),
           torch.tensor([1.0, float("-inf"), float("-inf")])]
    local_out = [torch.full((3, 8), 7.0), torch.full((3, 8), 2.0)]
    out, lse_out = na.npu_attention_update(lse, local_out, 1)
    torch.testing.assert_close(out[0], torch.full((8,), 2.0))     # rank 0 ignored
    torch.testing.assert_close(out[1], torch.full((8,), 7.0))     # rank 1 ignored
    assert torch.isnan(out[2]).all() and torch.isnan(lse_out[2])
    assert lse_out[0] == 1.0 and lse_out[1] == 0.5


def test_non_contiguous_inputs():
    lse, local_out = make(3, 6, 32, torch.float32)
    wide = [torch.randn(6, 64) for _ in range(3)]
    strided = [w[:, ::2] for w in wide]
    lse_strided = [torch.randn(12)[::2] for _ in range(3)]
    out, lse_out = na.npu_attention_update(lse_strided, strided, 1)
    want, want_lse = golden(lse_strided, strided)
    assert_close_to_golden(out, want, dtype=torch.float32)
    assert_close_to_golden(lse_out, want_lse, dtype=torch.float32)


def test_torch_ops_and_opcheck():
    lse, local_out = make(2, 4, 16, torch.bfloat16)
    a = torch.ops.npu.npu_attention_update(lse, local_out, 1)
    b = na.npu_attention_update(lse, local_out, 1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    torch.library.opcheck(torch.ops.npu.npu_attention_update.default, (lse, local_out, 1))


@pytest.mark.parametrize("args,error,match", [
    (lambda: ([], [], 0), ValueError, "lse a list of 1 to 16 tensors"),
    (lambda: ([torch.randn(2)] * 17, [torch.randn(2, 8)] * 17, 0), ValueError, "1 to 16"),
    (lambda: ([torch.randn(2)], [torch.randn(2, 8)], 3), ValueError, "update_type"),
    (lambda: ([torch.randn(2, 1)], [torch.randn(2, 8)], 0), ValueError, "lse\\[0\\] a 1-D"),
    (lambda: ([torch.randn(2)], [torch.randn(2, 8, 1)], 0), ValueError, "a 2-D tensor"),
    (lambda: ([torch.randn(2)], [torch.randn(2, 520)], 0), ValueError, "multiple of 8"),
    (lambda: ([torch.randn(2)], [torch.randn(2, 4)], 0), ValueError, "multiple of 8"),
    (lambda: ([torch.randn(2), torch.randn(3)], [torch.randn(2, 8)] * 2, 0), RuntimeError,
     "lse\\[1\\] the shape of lse\\[0\\]"),
    (lambda: ([torch.randn(2)] * 2, [torch.randn(2, 8), torch.randn(2, 16)], 0), RuntimeError,
     "local_out\\[1\\] the shape"),
    (lambda: ([torch.randn(2)] * 2, [torch.randn(2, 8), torch.randn(2, 8).half()], 0),
     TypeError, "local_out\\[1\\] the dtype of local_out\\[0\\]"),
    (lambda: ([torch.randn(2)], [torch.ones(2, 8, dtype=torch.int32)], 0), TypeError,
     "local_out\\[0\\] dtype in"),
])
def test_bad_inputs_raise_identically_in_eager_and_fake(args, error, match):
    with pytest.raises(error, match="npu_attention_update: expected .*" + match):
        torch.ops.npu.npu_attention_update(*args())
    with FakeTensorMode() as mode:
        lse, out, u = args()
        lse = [mode.from_tensor(t) for t in lse]
        out = [mode.from_tensor(t) for t in out]
        with pytest.raises(error, match="npu_attention_update: expected .*" + match):
            torch.ops.npu.npu_attention_update(lse, out, u)


def test_strict_products():
    lse, local_out = make(2, 3, 8, torch.float16)
    for product in ("A2", "A3", "950"):
        with na.strict(product):
            na.npu_attention_update(lse, local_out, 0)
    for product in ("910", "310P"):
        with na.strict(product), pytest.raises(RuntimeError, match="expected a product"):
            na.npu_attention_update(lse, local_out, 0)
    with na.strict("A2"), pytest.raises(TypeError, match="local_out\\[0\\] dtype in"):
        na.npu_attention_update(lse, [x.double() for x in local_out], 0)


def test_no_backward():
    lse, local_out = make(2, 3, 8, torch.float32)
    local_out[0].requires_grad_()
    with pytest.raises(RuntimeError, match="npu_attention_update: expected inputs that do not"):
        na.npu_attention_update(lse, local_out, 0)


def test_compile_fullgraph():
    lse, local_out = make(2, 3, 8, torch.float32)
    fn = torch.compile(lambda a, b: torch.ops.npu.npu_attention_update(a, b, 1), fullgraph=True,
                       backend="eager")
    got = fn(lse, local_out)
    want = na.npu_attention_update(lse, local_out, 1)
    torch.testing.assert_close(got[0], want[0])

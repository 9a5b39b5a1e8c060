"""npu_layer_norm_eval against a float64 golden of the LayerNorm formula (seed 004: "the same as
torch.nn.functional.layer_norm")::

    out = (x - E[x]) / sqrt(Var[x] + eps) * weight + bias      (biased variance)
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def make(shape, dtype=F32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=F64).to(dtype)


def golden(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    x = x.double()
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dims, keepdim=True)
    out = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        out = out * weight.double().reshape(normalized_shape)
    if bias is not None:
        out = out + bias.double().reshape(normalized_shape)
    return out


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=str)
@pytest.mark.parametrize("shape,ns", [((6, 4), [4]), ((3, 5, 7), [5, 7]), ((2, 1, 33), [33]),
                                      ((9,), [9])])
@pytest.mark.parametrize("affine", ["none", "weight", "both"])
def test_matches_formula(shape, ns, affine, dtype):
    x = make(shape, dtype, 1)
    w = make(ns, dtype, 2) if affine != "none" else None
    b = make(ns, dtype, 3) if affine == "both" else None
    x0 = x.clone()
    out = na.npu_layer_norm_eval(x, ns, w, b, 1e-5)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close_to_golden(out, golden(x, ns, w, b), dtype=dtype, atol=1e-4)
    assert torch.equal(x, x0)


def test_doc_example_weight_nan_propagates():
    x = torch.rand(6, 4)
    ns = x.size()[1:]
    w = torch.tensor([float("nan"), 1.0, -2.0, 0.5])
    b = torch.tensor([0.0, 1.0, 0.0, -1.0])
    out = na.npu_layer_norm_eval(x, ns, w, b, 1e-5)
    assert torch.isnan(out[:, 0]).all()
    assert_close_to_golden(out[:, 1:], golden(x, [4], w, b)[:, 1:])


def test_torch_size_normalized_shape_and_flat_weight():
    x = make((2, 3, 4), F32, 4)
    w, b = make((12,), F32, 5), make((3, 4), F32, 6)
    out = na.npu_layer_norm_eval(x, x.shape[1:], w, b)
    assert_close_to_golden(out, golden(x, [3, 4], w, b), atol=1e-5)


def test_non_contiguous():
    x = make((5, 8, 6), F32, 7).transpose(0, 2)
    out = na.npu_layer_norm_eval(x, [5])
    assert_close_to_golden(out, golden(x.contiguous(), [5]), atol=1e-5)


def test_inference_only():
    x = make((2, 4), F64, 8).requires_grad_(True)
    with pytest.raises(RuntimeError, match="npu_layer_norm_eval: expected inputs that do not"):
        na.npu_layer_norm_eval(x, [4])
    with torch.no_grad():
        na.npu_layer_norm_eval(x, [4])


@pytest.mark.parametrize("args,error,match", [
    ((torch.randn(6, 4), [5]), RuntimeError, "expected normalized_shape the trailing dims"),
    ((torch.randn(6, 4), [2, 6, 4]), RuntimeError, "expected normalized_shape the trailing"),
    ((torch.randn(6, 4), []), ValueError, "expected normalized_shape at least one dim"),
    ((torch.randn(6, 4), [4], torch.randn(3)), RuntimeError, "expected weight 4 elements"),
    ((torch.randn(6, 4), [4], None, torch.ones(4, dtype=torch.int32)), TypeError,
     "expected bias dtype in"),
])
def test_bad_inputs(args, error, match):
    with pytest.raises(error, match="^npu_layer_norm_eval: " + match):
        na.npu_layer_norm_eval(*args)


def test_strict_rejects_float64():
    with na.strict("A2"), pytest.raises(TypeError, match="expected input dtype in"):
        na.npu_layer_norm_eval(torch.randn(2, 4, dtype=F64), [4])

"""Op database entry of npu_fused_attention_score_grad (the kernel-layout twin of
npu_fused_attention_score_backward, whose entries live in ``fused_softmax.py``)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry


def _g(*shape, dtype=torch.float16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype)


def _args(dtype=torch.float16, grad_shape=(16, 12), mask_len=2 * 3 * 8 * 8):
    def make():
        q, k, v = (_g(2, 3, 8, 4, dtype=dtype, seed=i) for i in range(3))
        probs = torch.softmax(_g(2, 3, 8, 8, seed=3).float(), -1).to(dtype)
        keep = (torch.rand(mask_len, generator=torch.Generator().manual_seed(4)) < 0.9)
        return (_g(*grad_shape, dtype=dtype, seed=5), probs, q, k, v, keep.to(torch.uint8),
                0.125, 0.9), {}
    return make


e = entry("npu_fused_attention_score_grad")
e.samples += [Sample("fp16", _args())]   # _backward's entries cover float64
e.errors += [ErrorSample("grad_shape", _args(grad_shape=(2, 3, 8, 4)), RuntimeError,
                         "npu_fused_attention_score_grad: expected grad_output the shape"),
             ErrorSample("mask_len", _args(mask_len=383), RuntimeError,
                         "npu_fused_attention_score_grad: expected mask a 1-D tensor")]

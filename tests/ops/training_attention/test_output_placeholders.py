"""Return arity, placeholder and flag-dependent output shapes of the training-attention ops,
against op-plugin's ``op_plugin/python/meta/_meta_registrations.py`` and kernels
(``FlashAttentionKernelNpuOpApi.cpp``, ``BlockSparseAttentionKernelNpuOpApi.cpp``).

The expected shapes are op-plugin's rules written out here; every case runs in eager and under
FakeTensor, which must agree.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere  # noqa: F401  (registers the ops)

NPU = torch.ops.npu


def _r(*shape, dtype=torch.float16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)


def _both(fn, *tensors):
    """fn's outputs in eager and under FakeTensor, as (shape, dtype) / plain values."""
    def describe(o):
        if isinstance(o, torch.Tensor):
            return tuple(o.shape), o.dtype
        return o
    eager = [describe(o) for o in fn(*tensors)]
    with FakeTensorMode() as mode:
        fake = [describe(o) for o in fn(*(mode.from_tensor(t) for t in tensors))]
    return eager, fake


@pytest.mark.parametrize("layout", ["BSH", "TND"])
def test_fusion_attention_seven_outputs_and_empty_softmax_out(layout):
    if layout == "BSH":
        q, kv = _r(2, 5, 4 * 8), _r(2, 6, 2 * 8)
        stats = (2, 4, 5, 8)                        # [B, head_num, S1, 8]
        kw = {}
    else:
        q, kv = _r(5, 4, 8), _r(6, 2, 8)
        stats = (5, 4, 8)                           # [T, N, 8]
        kw = dict(actual_seq_qlen=[2, 5], actual_seq_kvlen=[3, 6])
    eager, fake = _both(lambda q, k: NPU.npu_fusion_attention(q, k, k, 4, layout, **kw), q, kv)
    assert eager == [(tuple(q.shape), torch.float16), (stats, torch.float32),
                     (stats, torch.float32), ((0,), torch.float16), 0, 0, 0]
    assert fake == eager


def test_fusion_attention_grad_dpse_absent_dsink_empty():
    q, kv = _r(1, 2, 4, 8), _r(1, 2, 3, 8)
    out, smax, ssum = NPU.npu_fusion_attention(q, kv, kv, 2, "BNSD")[:3]

    def grad(q, k, dy, smax, ssum, out):
        return NPU.npu_fusion_attention_grad(q, k, k, dy, 2, "BNSD", softmax_max=smax,
                                             softmax_sum=ssum, attention_in=out)
    eager, fake = _both(grad, q, kv, torch.ones_like(out), smax, ssum, out)
    assert eager == [((1, 2, 4, 8), torch.float16), ((1, 2, 3, 8), torch.float16),
                     ((1, 2, 3, 8), torch.float16), None, ((0,), torch.float32)]
    assert fake == eager


@pytest.mark.parametrize("flag", [0, 1])
@pytest.mark.parametrize("layout", ["BNSD", "TND"])
def test_block_sparse_lse_shape_whatever_the_flag(layout, flag):
    # softmax_lse_flag 0: the NPU leaves softmax_lse unwritten, but allocates it all the same
    if layout == "BNSD":
        q, kv = _r(1, 2, 5, 64), _r(1, 1, 130, 64)
        mask = torch.ones(1, 2, 3, 2, dtype=torch.int8)
        kw = dict(q_input_layout="BNSD", kv_input_layout="BNSD")
        lse = (1, 2, 5, 1)
    else:
        q, kv = _r(6, 2, 64), _r(132, 1, 64)
        mask = torch.ones(2, 2, 2, 2, dtype=torch.int8)
        kw = dict(actual_seq_lengths=[4, 2], actual_seq_lengths_kv=[130, 2])
        lse = (6, 2, 1)
    eager, fake = _both(lambda q, k, m: NPU.npu_block_sparse_attention(
        q, k, k, m, [2, 128], num_key_value_heads=1, scale_value=0.1, softmax_lse_flag=flag,
        **kw), q, kv, mask)
    assert eager == [(tuple(q.shape), torch.float16), (lse, torch.float32)]
    assert fake == eager


def test_floyd_statistics_come_first():
    q, k1, k2 = _r(1, 2, 3, 4, 32), _r(1, 2, 3, 5, 32), _r(1, 2, 5, 4, 32)
    eager, fake = _both(lambda q, a, b: NPU.npu_fused_floyd_attention(q, a, a, b, b), q, k1, k2)
    assert eager == [((1, 2, 3, 4, 8), torch.float32), ((1, 2, 3, 4, 8), torch.float32),
                     ((1, 2, 3, 4, 32), torch.float16)]
    assert fake == eager

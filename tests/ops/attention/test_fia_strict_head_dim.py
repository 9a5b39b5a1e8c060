"""Strict mode's head-dim rules of the inference-attention ops on Atlas A2 / A3 (seed 004
约束说明; int4 from op-plugin's newer pages): 16 / 32 / 64 alignment of D on the prompt branch
(32 also for an int8 output), int4 KV and pse_shift on the decode branch, MLA rope dims."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na

FIA = na.npu_fused_infer_attention_score
NPU = getattr(torch.ops, na.library.TORCH_NPU_NS)


def h(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype)


def test_prompt_d_alignment_by_input_dtype():
    with na.strict("A2"):
        FIA(h(1, 1, 2, 48), h(1, 1, 3, 48), h(1, 1, 3, 48), num_heads=1, input_layout="BNSD")
        with pytest.raises(ValueError, match="D a multiple of 16 on A2"):
            FIA(h(1, 1, 2, 24), h(1, 1, 3, 24), h(1, 1, 3, 24), num_heads=1,
                input_layout="BNSD")
        k8 = h(1, 1, 3, 48, dtype=torch.int8)                 # int8 KV: 32-aligned
        with pytest.raises(ValueError, match="D a multiple of 32 on A2"):
            FIA(h(1, 1, 2, 48), k8, k8, num_heads=1, input_layout="BNSD",
                antiquant_scale=torch.ones(2, 48).half())
        k8 = h(1, 1, 3, 64, dtype=torch.int8)
        FIA(h(1, 1, 2, 64), k8, k8, num_heads=1, input_layout="BNSD",
            antiquant_scale=torch.ones(2, 64).half())
        k4 = h(1, 1, 3, 4, dtype=torch.int32)                 # int4 x 8: D 32, not 64-aligned
        with pytest.raises(ValueError, match="D a multiple of 64 on A3"), na.strict("A3"):
            FIA(h(1, 1, 2, 32), k4, k4, num_heads=1, input_layout="BNSD",
                key_antiquant_scale=torch.ones(1), value_antiquant_scale=torch.ones(1))


def test_prompt_int8_output_needs_32_alignment():
    with na.strict("A2"):
        with pytest.raises(ValueError, match="D a multiple of 32 on A2"):
            FIA(h(1, 1, 2, 48), h(1, 1, 3, 48), h(1, 1, 3, 48), num_heads=1,
                input_layout="BNSD", quant_scale2=torch.ones(1))
        out, _ = FIA(h(1, 1, 2, 64), h(1, 1, 3, 64), h(1, 1, 3, 64), num_heads=1,
                     input_layout="BNSD", quant_scale2=torch.ones(1))
        assert out.dtype == torch.int8


def test_decode_int4_and_pse_rules():
    with na.strict("A2"):
        k4 = h(1, 1, 4, 4, dtype=torch.int32)
        with pytest.raises(ValueError, match="int4 KV only with D a multiple of 64"):
            FIA(h(1, 1, 1, 32), k4, k4, num_heads=1, input_layout="BNSD",
                key_antiquant_scale=torch.ones(1), value_antiquant_scale=torch.ones(1))
        # D 24 decode is fine without pse, and rejected with it.
        FIA(h(1, 1, 1, 24), h(1, 1, 4, 24), h(1, 1, 4, 24), num_heads=1, input_layout="BNSD")
        with pytest.raises(ValueError, match="pse_shift None unless D is a multiple of 16"):
            FIA(h(1, 1, 1, 24), h(1, 1, 4, 24), h(1, 1, 4, 24), num_heads=1,
                input_layout="BNSD", pse_shift=h(1, 1, 1, 4))


def test_mla_rope_dims_in_eager_and_fake():
    q, k = h(1, 2, 2, 256), h(1, 3, 1, 256)                 # BSND, D 256: neither 512 nor 128
    kw = dict(query_rope=h(1, 2, 2, 64), key_rope=h(1, 3, 1, 64), num_heads=2,
              num_key_value_heads=1, input_layout="BSND")
    with na.strict("A2"):
        with pytest.raises(ValueError, match=r"D in \[512, 128\] with query_rope"):
            FIA(q, k, k, **kw)
        with FakeTensorMode() as mode:
            fkw = {n: mode.from_tensor(t) if isinstance(t, torch.Tensor) else t
                   for n, t in kw.items()}
            with pytest.raises(ValueError, match=r"D in \[512, 128\] with query_rope"):
                NPU.npu_fused_infer_attention_score(mode.from_tensor(q), mode.from_tensor(k),
                                                    mode.from_tensor(k), **fkw)
        # D 128 with a D-64 rope part is an MLA form of the newer pages; a D-32 rope is not.
        q, k = h(1, 2, 2, 128), h(1, 3, 1, 128)
        na.npu_fused_infer_attention_score_v2(
            q, k, k, query_rope=kw["query_rope"], key_rope=kw["key_rope"], num_query_heads=2,
            num_key_value_heads=1, input_layout="BSND")
        with pytest.raises(ValueError, match="query_rope D 64"):
            na.npu_fused_infer_attention_score_v2(
                q, k, k, query_rope=h(1, 2, 2, 32), key_rope=h(1, 3, 1, 32),
                num_query_heads=2, num_key_value_heads=1, input_layout="BSND")

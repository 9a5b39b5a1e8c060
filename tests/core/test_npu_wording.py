"""torch_npu's wording rides along in the messages op-plugin's tests match (npu_wording)."""

from __future__ import annotations

import re

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import checks, npu_wording

SHAPE = re.compile(r"^\w+: expected .+, but got .+", re.S)


def _raise(call):
    with pytest.raises(RuntimeError) as info:
        call()
    text = str(info.value)
    assert SHAPE.match(text), text
    return text


def test_rotary_mode_carries_torch_npus_sentence():
    x, r = torch.rand(2, 2, 5, 128), torch.rand(1, 2, 1, 128)
    text = _raise(lambda: na.npu_rotary_mul(x, r, r, "quarter"))
    # op-plugin test_npu_rotary_mul.py matches this prefix
    assert re.search("The rotary_mode of npu_rotary_mul should be half or interleave, but got ",
                     text)
    assert text.endswith("but got quarter)")


def test_mrope_cache_mode_and_quant_matmul_gelu_approximate():
    q = torch.randn(4, 128, dtype=torch.float16)
    text = _raise(lambda: na.npu_mrope(torch.arange(4), q, q.clone(),
                                       torch.rand(4, 128, dtype=torch.float16), 128,
                                       mrope_section=[0, 0, 0], cache_mode="invalid_mode"))
    assert re.search("cache_mode only support default or interleave", text)
    x1, x2 = torch.randint(-5, 5, (4, 32), dtype=torch.int8), torch.randint(-5, 5, (32, 8),
                                                                                dtype=torch.int8)
    text = _raise(lambda: na.npu_quant_matmul_gelu(x1, x2, torch.rand(4), torch.rand(8),
                                                   approximate="tanh"))
    assert re.search("approximate must be 'gelu_tanh' or 'gelu_erf'", text)


def test_pairs_without_wording_keep_the_plain_message():
    assert checks.message("npu_x", "mode", "one of ['a']", "'b'") == \
        "npu_x: expected mode one of ['a'], but got 'b'"
    assert npu_wording.suffix("npu_rotary_mul", "x", 1) == ""

"""Op database entries of the two attention-update ops (LSE merge, ring attention merge)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry, randn as _g

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _stat(*shape):
    """A softmax max/sum tensor: positive values repeated over the 8 lanes."""
    return (torch.rand(*shape, 1) + 0.25).repeat(*([1] * len(shape)), 8)


def _attention_update() -> None:
    e = _entry("npu_attention_update")
    for dtype in _DTYPES:
        for update_type in (0, 1):
            e.samples.append(Sample(f"sp3_{str(dtype)[6:]}_type{update_type}",
                                    lambda dtype=dtype, u=update_type: (
                                        ([_g(6), _g(6), _g(6)],
                                         [_g(6, 16, dtype=dtype) for _ in range(3)], u), {})))
    e.samples.append(Sample("sp1", lambda: (([_g(4)], [_g(4, 8)], 1), {})))
    e.samples.append(Sample("empty_rows", lambda: (([_g(0), _g(0)], [_g(0, 8), _g(0, 8)], 0), {})))
    e.errors += [
        ErrorSample("head_dim", lambda: (([_g(4)], [_g(4, 12)], 0), {}), ValueError,
                    "npu_attention_update: expected local_out\\[0\\] a head_dim"),
        ErrorSample("update_type", lambda: (([_g(4)], [_g(4, 8)], 2), {}), ValueError,
                    "npu_attention_update: expected update_type 0"),
        ErrorSample("lengths", lambda: (([_g(4), _g(4)], [_g(4, 8)], 0), {}), ValueError,
                    "npu_attention_update: expected local_out as many tensors"),
        ErrorSample("lse_dtype", lambda: (([_g(4, dtype=torch.float16)], [_g(4, 8)], 0), {}),
                    TypeError, "npu_attention_update: expected lse\\[0\\] dtype in"),
        ErrorSample("rows", lambda: (([_g(5)], [_g(4, 8)], 0), {}), RuntimeError,
                    "npu_attention_update: expected lse\\[0\\] one value per row"),
    ]


def _ring_attention_update() -> None:
    e = _entry("npu_ring_attention_update")
    for dtype in _DTYPES:
        e.samples.append(Sample(f"sbh_{str(dtype)[6:]}", lambda dtype=dtype: (
            (_g(3, 2, 32, dtype=dtype), _stat(2, 2, 3), _stat(2, 2, 3),
             _g(3, 2, 32, dtype=dtype), _stat(2, 2, 3), _stat(2, 2, 3)), {})))
    for layout in ("", "TND"):
        e.samples.append(Sample(f"tnd_softmax_{layout or 'v1'}", lambda layout=layout: (
            (_g(5, 2, 64), _stat(5, 2), _stat(5, 2), _g(5, 2, 64), _stat(5, 2), _stat(5, 2)),
            {"actual_seq_qlen": torch.tensor([0, 2, 5]), "input_layout": "TND",
             "input_softmax_layout": layout})))
    e.errors += [
        ErrorSample("layout", lambda: (
            (_g(3, 2, 32), _stat(2, 2, 3), _stat(2, 2, 3), _g(3, 2, 32), _stat(2, 2, 3),
             _stat(2, 2, 3)), {"input_layout": "BSH"}), ValueError,
            "npu_ring_attention_update: expected input_layout one of"),
        ErrorSample("lanes", lambda: (
            (_g(3, 2, 32), _g(2, 2, 3, 4), _g(2, 2, 3, 4), _g(3, 2, 32), _g(2, 2, 3, 4),
             _g(2, 2, 3, 4)), {}), ValueError,
            "npu_ring_attention_update: expected prev_softmax_max a last dim of 8"),
        ErrorSample("tnd_needs_lengths", lambda: (
            (_g(5, 2, 64), _stat(5, 2), _stat(5, 2), _g(5, 2, 64), _stat(5, 2), _stat(5, 2)),
            {"input_layout": "TND"}), ValueError,
            "npu_ring_attention_update: expected actual_seq_qlen a tensor"),
        ErrorSample("tnd_head_dim", lambda: (
            (_g(5, 2, 32), _stat(5, 2), _stat(5, 2), _g(5, 2, 32), _stat(5, 2), _stat(5, 2)),
            {"actual_seq_qlen": torch.tensor([0, 5]), "input_layout": "TND"}), ValueError,
            "npu_ring_attention_update: expected prev_attn_out a head dim D"),
        ErrorSample("softmax_dtype", lambda: (
            (_g(3, 2, 32), _stat(2, 2, 3).half(), _stat(2, 2, 3), _g(3, 2, 32), _stat(2, 2, 3),
             _stat(2, 2, 3)), {}), TypeError,
            "npu_ring_attention_update: expected prev_softmax_max dtype in"),
    ]


_attention_update()
_ring_attention_update()

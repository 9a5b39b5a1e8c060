"""npu_iou / npu_ptiou: op-plugin's goldens, the kernel's float16 steps written out here, the
float64 formula, the Ascend 950 form, dtypes, layouts and bad inputs."""

from __future__ import annotations

import re

import pytest
import torch

import npu_anywhere

EPS = 0.01
BBOXES = torch.tensor([[0, 0, 10, 10], [10, 10, 20, 20], [32, 32, 38, 42]], dtype=torch.float16)
GTBOXES = torch.tensor([[0, 0, 10, 20], [0, 10, 10, 10], [10, 10, 20, 20]], dtype=torch.float16)


def _golden64(b, g, mode, inter_eps=0.0):
    """The documented formula in float64, one (gt j, box i) pair at a time."""
    out = torch.zeros(g.shape[0], b.shape[0], dtype=torch.float64)
    for j, (X1, Y1, X2, Y2) in enumerate(g.double().tolist()):
        for i, (x1, y1, x2, y2) in enumerate(b.double().tolist()):
            iw = max(min(x2, X2) - max(x1, X1) + inter_eps, 0.0)
            ih = max(min(y2, Y2) - max(y1, Y1) + inter_eps, 0.0)
            inter = iw * ih
            area_b = (x2 - x1 + EPS) * (y2 - y1 + EPS)
            area_g = (X2 - X1 + EPS) * (Y2 - Y1 + EPS)
            out[j, i] = inter / (area_g if mode == 1 else area_b + area_g - inter)
    return out


def _kernel_steps(b, g, mode):
    """The aclop kernel's order: float16 widths, heights, areas and intersection; float32
    union and quotient; float16 result."""
    h = torch.float16
    eps = torch.tensor(EPS, dtype=h)
    out = torch.zeros(g.shape[0], b.shape[0], dtype=h)
    for j in range(g.shape[0]):
        for i in range(b.shape[0]):
            x1, y1, x2, y2 = b[i].to(h)
            X1, Y1, X2, Y2 = g[j].to(h)
            iw = (torch.minimum(x2, X2) - torch.maximum(x1, X1)).clamp_min(0)
            ih = (torch.minimum(y2, Y2) - torch.maximum(y1, Y1)).clamp_min(0)
            inter = (iw * ih).float()
            area_b = (((x2 - x1) + eps) * ((y2 - y1) + eps)).float()
            area_g = (((X2 - X1) + eps) * ((Y2 - Y1) + eps)).float()
            out[j, i] = (inter / (area_g if mode == 1 else area_b + area_g - inter)).to(h)
    return out


def _random_boxes(n, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    lo = torch.randint(0, 40, (n, 2), generator=gen).double()
    wh = torch.randint(1, 30, (n, 2), generator=gen).double()
    return torch.cat([lo, lo + wh], 1).to(dtype)


def test_opplugin_and_doc_goldens_exactly():
    # op-plugin test/test_base_ops/test_iou.py and the doc example (float16 results).
    iou = torch.tensor([[0.4985, 0, 0], [0, 0, 0], [0, 0.9961, 0]], dtype=torch.float16)
    iof = torch.tensor([[0.4990, 0, 0], [0, 0, 0], [0, 0.9980, 0]], dtype=torch.float16)
    assert torch.equal(npu_anywhere.npu_iou(BBOXES, GTBOXES, 0), iou)
    assert torch.equal(npu_anywhere.npu_iou(BBOXES, GTBOXES, 1), iof)
    boxes = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]],
                         dtype=torch.float16)
    out = npu_anywhere.npu_ptiou(boxes, boxes[:2], 1)
    torch.testing.assert_close(out, torch.tensor([[0.9902, 0, 0, 0], [0, 0.9902, 0, 0]],
                                                 dtype=torch.float16), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("op", ["npu_iou", "npu_ptiou"])
@pytest.mark.parametrize("mode", [0, 1])
def test_float16_steps_and_float64_formula(op, mode):
    b, g = _random_boxes(7, 1, torch.float16), _random_boxes(5, 2, torch.float16)
    out = getattr(npu_anywhere, op)(b, g, mode)
    assert out.shape == (5, 7) and out.dtype == torch.float16
    assert torch.equal(out, _kernel_steps(b, g, mode))
    torch.testing.assert_close(out.double(), _golden64(b, g, mode), rtol=2e-3, atol=1e-3)
    assert (out > 0).sum() >= 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_other_dtypes_pass_through_float16(dtype):
    b, g = _random_boxes(3, 3, dtype), _random_boxes(4, 4, dtype)
    b_t = b.t().contiguous().t()                            # non-contiguous (column-major)
    assert not b_t.is_contiguous()
    out = torch.ops.npu.npu_iou(b_t, g, 0)
    assert out.dtype == dtype
    assert torch.equal(out, _kernel_steps(b, g, 0).to(dtype))


def test_strict_950_form():
    # op-plugin test_iou_fp16_950: eps inside the intersection as well, float32 steps.
    g = torch.tensor([[0, 0, 10, 20], [0, 0, 10, 10], [10, 10, 20, 20]], dtype=torch.float16)
    with npu_anywhere.strict("950"):
        for mode in (0, 1):
            out = npu_anywhere.npu_iou(BBOXES, g, mode)
            assert out.dtype == torch.float16
            torch.testing.assert_close(out.double(), _golden64(BBOXES, g, mode, EPS),
                                       rtol=1e-3, atol=1e-4)
        b32 = _random_boxes(4, 5, torch.float32)
        torch.testing.assert_close(npu_anywhere.npu_iou(b32, b32[:3], 0).double(),
                                   _golden64(b32, b32[:3], 0, EPS), rtol=1e-6, atol=1e-7)
        with pytest.raises(RuntimeError, match="npu_ptiou"):
            npu_anywhere.npu_ptiou(BBOXES, g, 0)


def test_bad_inputs():
    ok = torch.zeros(3, 4)
    for fn in ("npu_iou", "npu_ptiou"):
        op = getattr(npu_anywhere, fn)
        with pytest.raises(ValueError, match=re.escape(f"{fn}: expected bboxes a 2-D tensor")):
            op(torch.zeros(3, 5), ok)
        with pytest.raises(ValueError, match=re.escape(f"{fn}: expected gtboxes a 2-D tensor")):
            op(ok, torch.zeros(4))
        with pytest.raises(ValueError, match=re.escape(f"{fn}: expected mode 0 (IoU) or 1")):
            op(ok, ok, 2)
        with pytest.raises(TypeError, match=f"{fn}: expected bboxes dtype in"):
            op(ok.int(), ok)
    with pytest.raises(RuntimeError, match="npu_iou: expected inputs that do not require grad"):
        npu_anywhere.npu_iou(ok.requires_grad_(), ok.detach())

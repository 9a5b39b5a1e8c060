"""torch_npu.contrib's box-overlap helpers (ops/vision/iou_contrib.py): result layout, dtype
casts, the normalised-box scaling and the layouts they hand the ops, against float64 formulas."""

from __future__ import annotations

import pytest
import torch

from npu_anywhere.ops.vision import iou_contrib


def _iou64(b1, b2, eps=0.01):
    """[N, M] IoU of xyxy rows with the ops' eps of 0.01 on every side (not the overlap)."""
    b1, b2 = b1.double()[:, None], b2.double()[None]
    side = (torch.minimum(b1[..., 2:], b2[..., 2:]) - torch.maximum(b1[..., :2], b2[..., :2]))
    inter = side.clamp(min=0).prod(-1)
    area1 = (b1[..., 2:] - b1[..., :2] + eps).prod(-1)
    area2 = (b2[..., 2:] - b2[..., :2] + eps).prod(-1)
    return inter / (area1 + area2 - inter)


def _xyxy(n, seed, scale=200):
    gen = torch.Generator().manual_seed(seed)
    lo = torch.randint(0, scale, (n, 2), generator=gen)
    return torch.cat([lo, lo + torch.randint(1, scale // 2, (n, 2), generator=gen)], 1)


@pytest.mark.parametrize("name,mode", [("npu_iou", "iou"), ("npu_ptiou", "ptiou")])
def test_pairwise_helpers_rows_are_boxes1(name, mode):
    b1, b2 = _xyxy(5, 0), _xyxy(3, 1)                     # int64, as in the contrib doc
    out = getattr(iou_contrib, name)(b1, b2, mode=mode)
    assert out.shape == (5, 3) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), _iou64(b1, b2), rtol=2e-3, atol=1e-3)
    assert (out > 0).any()


def test_normalized_boxes_are_scaled_first():
    b1, b2 = _xyxy(4, 2).float() / 400, _xyxy(6, 3).float() / 400
    out = iou_contrib.npu_iou(b1, b2, is_normalized=True, normalized_scale=400.0)
    torch.testing.assert_close(out.double(), _iou64(b1 * 400, b2 * 400), rtol=2e-3, atol=1e-3)
    with pytest.raises(ValueError, match="npu_iou: expected mode one of"):
        iou_contrib.npu_iou(b1, b2, mode="giou")


def test_loss_helpers_layouts():
    gen = torch.Generator().manual_seed(4)
    xywh = torch.rand(6, 4, generator=gen) + torch.tensor([0, 0, 0.5, 0.5])
    gt = torch.rand(6, 4, generator=gen) + torch.tensor([0, 0, 0.5, 0.5])
    permuted = iou_contrib.npu_giou(xywh, gt)                    # (n, 4) rows
    assert permuted.shape == (6, 1)
    torch.testing.assert_close(permuted, iou_contrib.npu_giou(xywh.t(), gt.t(), False))
    # Identical boxes: GIoU and DIoU are 1 (up to the 1e-9 eps terms); CIoU subtracts a
    # non-negative penalty from DIoU (trans=True, aligned pairs: the contrib defaults).
    ones = torch.ones(6, 1)
    torch.testing.assert_close(iou_contrib.npu_giou(xywh, xywh), ones)
    torch.testing.assert_close(iou_contrib.npu_diou(xywh.t(), xywh.t()), ones.t())
    ciou = iou_contrib.npu_ciou(xywh.t(), gt.t())
    assert ciou.shape == (1, 6) and (ciou <= iou_contrib.npu_diou(xywh.t(), gt.t()) + 1e-6).all()
    box = xywh.t().double().requires_grad_()
    iou_contrib.npu_ciou(box, gt.t().double()).sum().backward()
    assert box.grad.shape == (4, 6) and torch.isfinite(box.grad).all()

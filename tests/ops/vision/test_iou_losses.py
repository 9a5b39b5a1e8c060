"""npu_giou / npu_diou / npu_ciou and their backward ops against float64 goldens written here
(op-plugin's CPU formulas, one box pair at a time), plus op-plugin's GIoU gradient golden."""

from __future__ import annotations

import math
import re

import pytest
import torch

import npu_anywhere

EPS = 1e-9


def _corners(box, trans):
    x, y, c, d = box
    return (x - c / 2, y - d / 2, x + c / 2, y + d / 2) if trans else (x, y, c, d)


def _pair(kind, a, b, trans, mode, alpha_const=False):
    """One pair's value (torch float64 scalars, so the test can differentiate it)."""
    x1, y1, x2, y2 = _corners(a, trans)
    X1, Y1, X2, Y2 = _corners(b, trans)
    inter = ((torch.minimum(x2, X2) - torch.maximum(x1, X1)).clamp(min=0)
             * (torch.minimum(y2, Y2) - torch.maximum(y1, Y1)).clamp(min=0))
    cw = torch.maximum(x2, X2) - torch.minimum(x1, X1)
    ch = torch.maximum(y2, Y2) - torch.minimum(y1, Y1)
    if kind == "giou":
        union = (x2 - x1) * (y2 - y1) + (X2 - X1) * (Y2 - Y1) - inter
        base = (X2 - X1) * (Y2 - Y1) if mode == 1 else union
        hull = cw.abs() * ch.abs()
        return inter / base - (hull - union) / hull
    w1, h1, w2, h2 = x2 - x1, y2 - y1 + EPS, X2 - X1, Y2 - Y1 + EPS
    base = (w2 * h2 if mode == 1 else w1 * h1 + w2 * h2 - inter) + EPS
    iou = inter / base
    rho2 = ((X1 + X2 - x1 - x2) ** 2 + (Y1 + Y2 - y1 - y2) ** 2) / 4
    out = iou - rho2 / (cw ** 2 + ch ** 2 + EPS)
    if kind == "ciou":
        v = 4 / math.pi ** 2 * (torch.atan(w2 / h2) - torch.atan(w1 / h1)) ** 2
        alpha = v / (1 + EPS - iou + v)
        out = out - (alpha.detach() if alpha_const else alpha) * v
    return out


def _golden(kind, boxes, gt, trans, is_cross, mode, alpha_const=False):
    b, g = boxes.double(), gt.double()
    n, m = b.shape[1], g.shape[1]
    if not is_cross:
        vals = torch.stack([_pair(kind, b[:, i], g[:, i], trans, mode, alpha_const)
                            for i in range(n)])
        return vals.reshape(n, 1) if kind == "giou" else vals.reshape(1, n)
    vals = torch.stack([torch.stack([_pair(kind, b[:, i], g[:, j], trans, mode)
                                     for j in range(m)]) for i in range(n)])       # (n, m)
    return vals if kind == "giou" else vals.t()


def _xywh(n, seed, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    centre = torch.rand(2, n, generator=gen, dtype=torch.float64) * 4
    size = torch.rand(2, n, generator=gen, dtype=torch.float64) * 3 + 0.5
    return torch.cat([centre, size]).to(dtype)


def _xyxy(n, seed, dtype=torch.float32):
    x, y, w, h = _xywh(n, seed, torch.float64)
    return torch.stack([x - w / 2, y - h / 2, x + w / 2, y + h / 2]).to(dtype)


@pytest.mark.parametrize("kind", ["giou", "diou", "ciou"])
@pytest.mark.parametrize("trans,is_cross,mode", [(True, False, 0), (False, True, 0),
                                                 (True, True, 1), (False, False, 1)])
def test_forward_matches_golden(kind, trans, is_cross, mode):
    make = _xywh if trans else _xyxy
    boxes, gt = make(5, 1), make(5 if not is_cross else 3, 2)
    op = getattr(npu_anywhere, f"npu_{kind}")
    out = op(boxes, gt, trans, is_cross, mode)
    want = _golden(kind, boxes, gt, trans, is_cross, mode)
    assert out.shape == want.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["giou", "diou", "ciou"])
def test_float16_non_contiguous(kind):
    boxes = _xywh(6, 3).t().contiguous().t().half()[:, 1:]      # strided (4, 5)
    gt = _xywh(5, 4, torch.float16)
    assert not boxes.is_contiguous()
    out = getattr(torch.ops.npu, f"npu_{kind}")(boxes, gt, True, False, 0)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.double(), _golden(kind, boxes, gt, True, False, 0),
                               rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kind", ["giou", "diou"])
def test_gradcheck_and_backward_op(kind):
    boxes = _xywh(3, 5, torch.float64).requires_grad_()
    gt = _xywh(3, 6, torch.float64).requires_grad_()
    op = getattr(npu_anywhere, f"npu_{kind}")
    assert torch.autograd.gradcheck(lambda a, b: op(a, b, True, False, 0), (boxes, gt))
    grad = torch.linspace(-1, 2, 3, dtype=torch.float64).reshape(
        (3, 1) if kind == "giou" else (1, 3))
    want = torch.autograd.grad(_golden(kind, boxes, gt, True, False, 0), (boxes, gt), grad)
    got = getattr(npu_anywhere, f"npu_{kind}_backward")(grad, boxes.detach(), gt.detach(),
                                                         True, False, 0)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)


def test_ciou_backward_holds_alpha_constant():
    boxes = _xywh(4, 7, torch.float64).requires_grad_()
    gt = _xywh(4, 8, torch.float64).requires_grad_()
    out = npu_anywhere.npu_ciou(boxes, gt, True, False, 0)
    grad = torch.rand(1, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    got = torch.autograd.grad(out, (boxes, gt), grad)
    ref = _golden("ciou", boxes, gt, True, False, 0, alpha_const=True)
    want = torch.autograd.grad(ref, (boxes, gt), grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)
    # The backward op with and without the forward's atan_sub.
    pair, atan_sub = torch.ops.npu._npu_ciou(boxes.detach(), gt.detach(), True, False, 0, True)
    w1, h1, w2, h2 = boxes[2], boxes[3] + EPS, gt[2], gt[3] + EPS
    torch.testing.assert_close(atan_sub[0], (torch.atan(w2 / h2) - torch.atan(w1 / h1)).detach())
    torch.testing.assert_close(pair, out.detach())
    for sub in (None, atan_sub):
        got2 = npu_anywhere.npu_ciou_backward(grad, boxes.detach(), gt.detach(), sub, True,
                                              False, 0)
        for g, w in zip(got2, want):
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)


def test_opplugin_giou_gradient_golden():
    # test/test_base_ops/test_npu_giou_backward.py: numpy seed 1234, one box each.
    np = pytest.importorskip("numpy")
    np.random.seed(1234)

    def make():
        rows = [i // 2 + (-1) ** (i // 2) * 0.5 * np.random.rand(1, 1).astype(np.float32)
                for i in range(4)]
        return torch.from_numpy(np.concatenate(rows).reshape(4, 1).astype(np.float32))
    boxes, gt = make().requires_grad_(), make().requires_grad_()
    out = npu_anywhere.npu_giou(boxes, gt, True, False, 0)
    out.backward(torch.ones_like(out))
    torch.testing.assert_close(boxes.grad[:, 0], torch.tensor(
        [1.0218241, -1.4181931, 0.18631615, 0.1747725]), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gt.grad[:, 0], torch.tensor(
        [-1.0218241, 1.4181931, 0.17999186, 0.23653218]), rtol=1e-4, atol=1e-5)


def test_bad_inputs_and_product_rules():
    ok = _xywh(3, 9)
    with pytest.raises(ValueError, match=re.escape("npu_diou: expected self a 2-D tensor")):
        npu_anywhere.npu_diou(ok.t(), ok)
    with pytest.raises(ValueError, match="npu_giou: expected gtboxes as many boxes as self"):
        npu_anywhere.npu_giou(ok, _xywh(4, 1), True, False)
    with pytest.raises(ValueError, match=re.escape("npu_ciou: expected mode 0 (IoU) or 1")):
        npu_anywhere.npu_ciou(ok, ok, True, False, 2)
    for kind in ("giou", "diou", "ciou"):
        args = (torch.ones(1, 3), ok, ok) + ((None,) if kind == "ciou" else ())
        with pytest.raises(ValueError, match=f"npu_{kind}_backward: expected trans, is_cross"):
            getattr(npu_anywhere, f"npu_{kind}_backward")(*args, trans=True, is_cross=True)
    with pytest.raises(ValueError, match="npu_diou_backward: expected grad the forward"):
        npu_anywhere.npu_diou_backward(torch.ones(3, 1), ok, ok, True, False, 0)
    with npu_anywhere.strict("A2"):
        assert npu_anywhere.npu_giou(ok, ok, True, False, 0).shape == (3, 1)
        with pytest.raises(ValueError, match="npu_giou: expected trans, is_cross, mode trans="):
            npu_anywhere.npu_giou(ok, ok, False, False, 0)
        assert npu_anywhere.npu_diou(ok, ok, False, True, 1).shape == (3, 3)
    with npu_anywhere.strict("950"):
        big = _xywh(1024, 0)
        assert npu_anywhere.npu_ciou(big, big, True, False, 0).shape == (1, 1024)
        with pytest.raises(ValueError, match="npu_ciou: expected self a multiple of 1024"):
            npu_anywhere.npu_ciou(ok, ok, True, False, 0)
        with pytest.raises(ValueError, match="npu_ciou: expected is_cross False on Ascend"):
            npu_anywhere.npu_ciou(big, big, True, True, 0)
        with pytest.raises(RuntimeError, match="npu_giou"):
            npu_anywhere.npu_giou(ok, ok, True, False, 0)
        with pytest.raises(RuntimeError, match="npu_ciou_backward"):
            npu_anywhere.npu_ciou_backward(torch.ones(1, 3), ok, ok, None, True, False, 0)

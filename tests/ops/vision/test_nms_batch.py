"""npu_batch_nms against a plain-Python golden of per-class NMS and per-image ranking."""

import pytest
import torch

import npu_anywhere as na


def golden(boxes, scores, score_thr, iou_thr, per_class, total, transpose=False):
    """Lists per image: [(score, class, box)] in output order, float64 Python math."""
    b = boxes.double()
    b = b.permute(0, 3, 1, 2) if transpose else b                   # [B, N, q, 4]
    s = scores.double()
    out = []
    for img in range(s.shape[0]):
        picked = []
        for c in range(s.shape[2]):
            cls = b[img, :, 0 if b.shape[2] == 1 else c].tolist()
            sc = s[img, :, c].tolist()
            order = sorted((i for i in range(len(sc)) if sc[i] > score_thr
                            and cls[i][2] > cls[i][0] and cls[i][3] > cls[i][1]),
                           key=lambda i: (-sc[i], i))
            kept = []
            for i in order:
                ok = True
                for k in kept:
                    p, q = cls[i], cls[k]
                    inter = max(0, min(p[2], q[2]) - max(p[0], q[0])) * \
                        max(0, min(p[3], q[3]) - max(p[1], q[1]))
                    union = (p[2] - p[0]) * (p[3] - p[1]) + (q[2] - q[0]) * (q[3] - q[1]) - inter
                    if inter / max(union, 1e-12) > iou_thr:
                        ok = False
                        break
                if ok:
                    kept.append(i)
                    if len(kept) == per_class:
                        break
            picked += [(sc[i], c, cls[i]) for i in kept]
        picked.sort(key=lambda t: -t[0])           # stable: class, then keep order, on ties
        out.append(picked[:total])
    return out


def _inputs(q, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    lo = torch.rand(2, 17, q, 2, generator=g) * 10
    boxes = torch.cat([lo, lo + torch.rand(2, 17, q, 2, generator=g) * 6], -1)
    boxes[0, 3, 0, 2] = boxes[0, 3, 0, 0] - 1.0           # an inverted box is never a candidate
    return boxes.to(dtype), torch.rand(2, 17, 3, generator=g).to(dtype)


@pytest.mark.parametrize("q,transpose,dtype", [(1, False, torch.float32),
                                               (3, True, torch.float16)])
def test_against_golden(q, transpose, dtype):
    boxes, scores = _inputs(q, dtype)
    given = boxes.permute(0, 2, 3, 1).contiguous() if transpose else boxes
    total = 9
    nb, ns, nc, nn = na.npu_batch_nms(given, scores, 0.3, 0.35, 2, total, False, transpose)
    assert nb.shape == (2, total, 4) and ns.shape == nc.shape == (2, total)
    assert nb.dtype == ns.dtype == nc.dtype == dtype and nn.dtype == torch.int32
    ref = golden(boxes.float(), scores.float(), 0.3, 0.35, 2, total)
    for img, rows in enumerate(ref):
        k = len(rows)
        assert nn[img].item() == k
        assert nc[img, :k].tolist() == [float(c) for _, c, _ in rows]
        torch.testing.assert_close(ns[img, :k].double(), torch.tensor([r[0] for r in rows],
                                   dtype=torch.float64).to(dtype).double())
        torch.testing.assert_close(nb[img, :k].double(), torch.tensor([r[2] for r in rows],
                                   dtype=torch.float64).to(dtype).double())
        assert not nb[img, k:].any() and not ns[img, k:].any() and not nc[img, k:].any()


def test_op_plugin_single_class_and_errors():
    # op-plugin test_batch_nms.py: one class, so every class id is 0
    boxes, scores = torch.randn(8, 4, 1, 4), torch.randn(8, 4, 1)
    out = na.npu_batch_nms(boxes, scores, 0.3, 0.5, 4, 4)
    assert not out[2].any() and out[3].shape == (8,)
    with pytest.raises(RuntimeError, match="npu_batch_nms: expected scores of shape"):
        torch.ops.npu.npu_batch_nms(torch.randn(8, 2, 4, 4), torch.randn(3, 2, 4), 0.3, 0.5, 3, 4)
    with pytest.raises(RuntimeError, match="npu_batch_nms: expected self a non-empty tensor"):
        na.npu_batch_nms(torch.zeros(1, 0, 1, 4), torch.zeros(1, 0, 1), 0.3, 0.5, 3, 4)

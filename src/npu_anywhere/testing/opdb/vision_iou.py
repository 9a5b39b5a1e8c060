"""Op database entries of the vision overlap ops (IoU, GIoU, DIoU, CIoU, rotated IoU)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _xyxy(n, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    lo = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 10
    wh = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 6 + 0.5
    return torch.cat([lo, lo + wh], 1).to(dtype)


def _xywh_4n(n, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    c = torch.rand(2, n, generator=gen, dtype=torch.float64) * 4
    wh = torch.rand(2, n, generator=gen, dtype=torch.float64) * 3 + 0.5
    return torch.cat([c, wh], 0).to(dtype)


def _iou() -> None:
    for name in ("npu_iou", "npu_ptiou"):
        e = _entry(name)
        # One sample each (suite budget); tests/ops/vision covers both modes and dtypes.
        if name == "npu_iou":
            e.samples.append(Sample("fp16_iou", lambda: ((_xyxy(5, 0, torch.float16),
                                                          _xyxy(3, 1, torch.float16)),
                                                         dict(mode=0))))
        else:
            e.samples.append(Sample("fp32_iof", lambda: ((_xyxy(4, 2), _xyxy(6, 3)),
                                                         dict(mode=1))))
        e.errors += [
            ErrorSample("cols", lambda: ((torch.zeros(3, 5), torch.zeros(2, 4)), {}), ValueError,
                        f"{name}: expected bboxes a 2-D tensor of shape"),
            ErrorSample("mode", lambda: ((torch.zeros(3, 4), torch.zeros(2, 4)), dict(mode=2)),
                        ValueError, f"{name}: expected mode 0"),
            ErrorSample("dtype", lambda: ((torch.zeros(3, 4, dtype=torch.int32),
                                           torch.zeros(2, 4)), {}), TypeError,
                        f"{name}: expected bboxes dtype in"),
        ]


def _overlaps() -> None:
    for name in ("npu_giou", "npu_diou", "npu_ciou"):
        e = _entry(name)
        # One sample each (suite budget): the differentiable float64 one where the gradient
        # is the formula's; CIoU's backward holds alpha constant, so its sample is the
        # float16 every-pair form instead (tests/ops/vision covers the other layouts).
        if name == "npu_ciou":
            e.samples.append(Sample(
                "xyxy_cross_fp16", lambda: ((_xyxy(3, 2, torch.float16).t().contiguous(),
                                             _xyxy(4, 3, torch.float16).t().contiguous()),
                                            dict(trans=False, is_cross=True, mode=0))))
        else:
            e.samples.append(Sample(
                "xywh_pairs_fp64", lambda: ((_xywh_4n(5, 0, torch.float64),
                                             _xywh_4n(5, 1, torch.float64)),
                                            dict(trans=True, is_cross=False, mode=0)),
                differentiable=True))
        e.errors += [
            ErrorSample("rows", lambda: ((torch.zeros(5, 4), torch.zeros(4, 4)), {}),
                        ValueError, f"{name}: expected self a 2-D tensor of shape"),
            ErrorSample("pairs", lambda: ((torch.zeros(4, 3), torch.zeros(4, 5)),
                                          dict(is_cross=False)), ValueError,
                        f"{name}: expected gtboxes as many boxes as self"),
            ErrorSample("mode", lambda: ((torch.zeros(4, 3), torch.zeros(4, 3)), dict(mode=3)),
                        ValueError, f"{name}: expected mode 0"),
        ]
        bw = _entry(f"{name}_backward")
        out = (lambda n: (n, 1)) if name == "npu_giou" else (lambda n: (1, n))
        extra = (None,) if name == "npu_ciou" else ()

        def args(out=out, extra=extra, dtype=torch.float32):
            grad = torch.linspace(-1, 1, 5, dtype=torch.float64).reshape(out(5)).to(dtype)
            return ((grad, _xywh_4n(5, 4, dtype), _xywh_4n(5, 5, dtype), *extra),
                    dict(trans=True, is_cross=False, mode=0))
        bw.samples.append(Sample("xywh_fp32", args))
        bw.errors.append(ErrorSample(
            "cross", lambda args=args: (args()[0], dict(trans=True, is_cross=True, mode=0)),
            ValueError, f"{name}_backward: expected trans, is_cross, mode trans=True"))


_iou()
_overlaps()


def _rotated(b, n, seed, dtype=torch.float32):
    """(b, n, 5) rotated boxes (cx, cy, w, h, theta in degrees) around one area, so that
    pairs overlap."""
    gen = torch.Generator().manual_seed(seed)
    centre = torch.rand(b, n, 2, generator=gen, dtype=torch.float64) * 4
    size = torch.rand(b, n, 2, generator=gen, dtype=torch.float64) * 3 + 1
    theta = torch.rand(b, n, 1, generator=gen, dtype=torch.float64) * 360 - 180
    return torch.cat([centre, size, theta], -1).to(dtype)


def _rotated_xyxy(b, n, seed, dtype=torch.float32):
    """The same boxes as (x1, y1, x2, y2, theta) rows."""
    cx, cy, w, h, theta = _rotated(b, n, seed, torch.float64).unbind(-1)
    return torch.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, theta], -1).to(dtype)


def _rotated_ops() -> None:
    # One sample per rotated op (their traces are long; tests/ops/vision covers the modes).
    e = _entry("npu_rotated_iou")
    e.samples.append(Sample("fp32_cross_iof", lambda: ((_rotated(2, 3, 0), _rotated(2, 4, 1)),
                                                       dict(trans=False, mode=1, is_cross=True))))
    e.errors += [
        ErrorSample("cols", lambda: ((torch.zeros(1, 3, 4), torch.zeros(1, 2, 5)), {}),
                    ValueError, "npu_rotated_iou: expected self a 3-D tensor of shape"),
        ErrorSample("batch", lambda: ((torch.zeros(2, 3, 5), torch.zeros(1, 2, 5)), {}),
                    RuntimeError, "npu_rotated_iou: expected query_boxes the batch size"),
        ErrorSample("mode", lambda: ((torch.zeros(1, 3, 5), torch.zeros(1, 2, 5)),
                                     dict(mode=2)), ValueError, "npu_rotated_iou: expected mode"),
        ErrorSample("aligned", lambda: ((torch.zeros(1, 3, 5), torch.zeros(1, 2, 5)),
                                        dict(is_cross=False)), RuntimeError,
                    "npu_rotated_iou: expected query_boxes as many boxes as self"),
    ]
    e = _entry("npu_rotated_overlaps")
    e.samples.append(Sample("fp16_xyxyt", lambda: ((_rotated_xyxy(1, 2, 6, torch.float16),
                                                    _rotated_xyxy(1, 3, 7, torch.float16)),
                                                   dict(trans=True))))
    e.errors += [
        ErrorSample("dims", lambda: ((torch.zeros(3, 5), torch.zeros(1, 2, 5)), {}),
                    ValueError, "npu_rotated_overlaps: expected self a 3-D tensor"),
        ErrorSample("dtype", lambda: ((torch.zeros(1, 3, 5, dtype=torch.int32),
                                       torch.zeros(1, 2, 5)), {}), TypeError,
                    "npu_rotated_overlaps: expected self dtype in"),
    ]


def _ciou_pair() -> None:
    e = _entry("_npu_ciou")
    e.samples.append(Sample("xywh_fp64", lambda: ((_xywh_4n(4, 8, torch.float64),
                                                   _xywh_4n(4, 9, torch.float64)),
                                                  dict(trans=True, is_cross=False, mode=0,
                                                       atan_sub_flag=True))))
    e.errors.append(ErrorSample("rows", lambda: ((torch.zeros(5, 4), torch.zeros(4, 4)), {}),
                                ValueError, "_npu_ciou: expected self a 2-D tensor of shape"))


_rotated_ops()
_ciou_pair()

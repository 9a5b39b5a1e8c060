"""The rule of torch_npu's ``TestCase.assertRtolEqual``, as a function returning why it fails.

Followed: torch_npu ``torch_npu/testing/testcase.py`` (``assertRtolEqual``).  The walk over the
arguments is torch_npu's:

* two sequences (list, tuple, ``torch.Size``): compared pairwise (``zip``: extra items of the
  longer one are not looked at, as in torch_npu);
* a tensor and a sequence: the sequence becomes a tensor of the tensor's dtype;
* two tensors: with ``auto_trans_dtype`` the first is cast to the second's dtype; two bfloat16
  tensors are judged by ``torch.allclose(x, y, rtol=prec16, atol=prec16)`` (shapes must agree);
  any other pair goes to numpy (so a bfloat16 tensor next to another dtype is an error, as
  numpy has no bfloat16);
* two numbers: become 0-d numpy arrays (so ``1`` and ``1.0`` differ in dtype and fail).

Then the shapes and the dtypes must be equal, and the dtype one of bool, uint8, int8, int16,
uint16, int32, int64, float16, float32, float64.  bool must match exactly.  Every other dtype
goes to the numeric core, :func:`npu_anywhere.testing.compare.assert_rtol_equal`, with the
tolerance ``p = prec16`` for float16 and ``p = prec`` otherwise: with ``e = |x - y|`` and
``r = e / max(|x|, |y|, tiny)`` (``tiny`` = 6e-8 for float16, 1e-9 otherwise; torch_npu adds
``tiny`` to the maximum instead, which moves ``r`` by less than ``tiny / max``), the check
fails only if more than ``size * p`` elements have ``r > p`` **and** more than ``size * p``
have ``e > p``.  NaN must sit at the same places.

Deliberate differences from torch_npu: integer differences are taken without wrapping around
(torch_npu subtracts in the input dtype, so uint8 ``2 - 3`` counts as 255), and an infinity
matched by the same infinity counts as equal (torch_npu counts it as an outlier within the
budget); any other NaN/inf mismatch fails at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Number

import numpy as np
import torch

from ...testing.compare import assert_rtol_equal

SUPPORTED_NUMPY_DTYPES = (np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.int32, np.int64,
                          np.float16, np.float32, np.float64)


def _describe(value: object) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__}(dtype={value.dtype}, shape={tuple(value.shape)})"
    return type(value).__name__


def rtol_failure(x: object, y: object, prec: float, prec16: float,
                 auto_trans_dtype: bool = False) -> str | None:
    """Why ``assertRtolEqual(x, y, prec, prec16, auto_trans_dtype)`` fails, or None if it passes.

    Raises
    ------
    TypeError
        Where torch_npu's own conversion raises (a bfloat16 tensor compared with another
        dtype, objects that are neither tensors, arrays, numbers nor sequences).
    """
    if isinstance(x, (str, bytes)) or isinstance(y, (str, bytes)):
        # Strings are sequences of strings: walking them would never end.
        raise TypeError(f"assertRtolEqual: expected tensors, numpy arrays, numbers or "
                        f"sequences, but got {_describe(x)} and {_describe(y)}")
    if isinstance(x, Sequence) and isinstance(y, Sequence):
        for index, (x_item, y_item) in enumerate(zip(x, y)):
            failure = rtol_failure(x_item, y_item, prec, prec16, auto_trans_dtype)
            if failure is not None:
                return f"item {index}: {failure}"
        return None
    if isinstance(x, torch.Tensor) and isinstance(y, Sequence):
        y = torch.as_tensor(y, dtype=x.dtype, device=x.device)
    elif isinstance(x, Sequence) and isinstance(y, torch.Tensor):
        x = torch.as_tensor(x, dtype=y.dtype, device=y.device)

    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
        if auto_trans_dtype:
            x = x.to(y.dtype)
        if x.dtype == torch.bfloat16 and y.dtype == torch.bfloat16:
            if x.shape != y.shape:
                return f"shape error: {tuple(x.shape)} vs {tuple(y.shape)}"
            xc, yc = x.detach().cpu(), y.detach().cpu()
            if not torch.allclose(xc, yc, rtol=prec16, atol=prec16):
                worst = (xc.float() - yc.float()).abs().max().item()
                return (f"bfloat16 allclose(rtol={prec16:g}, atol={prec16:g}) failed "
                        f"(max abs err {worst:.6g})")
            return None
        if torch.bfloat16 in (x.dtype, y.dtype):
            raise TypeError(f"assertRtolEqual: expected both tensors bfloat16 or neither "
                            f"(torch_npu converts the others to numpy, which has no "
                            f"bfloat16), but got {x.dtype} and {y.dtype}")
        x = x.detach().cpu().numpy()
        y = y.detach().cpu().numpy()
    elif isinstance(x, Number) and isinstance(y, Number):
        x, y = np.array(x), np.array(y)

    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
        if isinstance(x, (torch.Tensor, np.ndarray)) or isinstance(y, (torch.Tensor, np.ndarray)):
            # torch_npu compares a torch dtype with a numpy one here and reports a dtype error.
            return f"dtype error: {_describe(x)} vs {_describe(y)}"
        raise TypeError(f"assertRtolEqual: expected tensors, numpy arrays, numbers or sequences, "
                        f"but got {_describe(x)} and {_describe(y)}")
    if x.shape != y.shape:
        return f"shape error: {x.shape} vs {y.shape}"
    if x.dtype != y.dtype:
        return f"dtype error: {x.dtype} vs {y.dtype}"
    if x.dtype.type not in SUPPORTED_NUMPY_DTYPES:
        names = ", ".join(np.dtype(d).name for d in SUPPORTED_NUMPY_DTYPES)
        return f"required dtype in [{names}], but got {x.dtype}"
    if x.dtype == np.bool_:
        n_diff = int(np.count_nonzero(x != y))
        return f"result error: {n_diff} of {x.size} bool elements differ" if n_diff else None
    try:
        assert_rtol_equal(x, y, prec=prec, prec16=prec16)
    except AssertionError as exc:
        return f"result error: {str(exc).removeprefix('assert_rtol_equal failed: ')}"
    return None

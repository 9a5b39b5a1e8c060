"""torch_npu.npu_sort_v2 and its ``.out`` overload: sorted values, no indices.

Semantics (seed 004; op-plugin ``op_plugin/ops/aclops/SortWithoutIndicesKernelNpu.cpp``, the
CANN op SortV2)::

    out = sort(self, dim, descending).values

The doc says only the last dimension is supported; op-plugin's kernel wrapper takes any
``dim`` by transposing it to the end, sorting and transposing back, so every ``dim`` is
accepted here (strict mode does not narrow it: the public wrapper has no such limit).
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_out

OP = "npu_sort_v2"
SCHEMA = "npu_sort_v2(Tensor self, int dim=-1, bool descending=False) -> Tensor"
OUT_SCHEMA = ("npu_sort_v2.out(Tensor self, int dim=-1, bool descending=False, *, "
              "Tensor(a!) out) -> Tensor(a!)")

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
           torch.uint8, torch.int16, torch.int32, torch.int64)


def check_sort_v2(self, dim=-1, descending=False):
    checks.expect_dtype(self, _DTYPES, OP, "self")
    n = max(self.dim(), 1)
    checks.expect(-n <= dim < n, OP, "dim", lambda: f"in the range [{-n}, {n - 1}] for a "
                  f"{self.dim()}-D self", dim, IndexError)


def check_sort_v2_out(self, dim=-1, descending=False, *, out):
    check_sort_v2(self, dim, descending)
    checks.expect(tuple(out.shape) == tuple(self.shape) and out.dtype == self.dtype
                  and out.device == self.device, OP, "out",
                  lambda: f"shape {tuple(self.shape)}, dtype {self.dtype} on {self.device} "
                  "(self's)", lambda: f"shape {tuple(out.shape)}, dtype {out.dtype} on "
                  f"{out.device}", RuntimeError)


def sort_v2_reference(self, dim=-1, descending=False):
    if self.dim() == 0:
        return self.clone()
    return torch.sort(self, dim=dim, descending=descending, stable=True).values


def sort_v2_out_reference(self, dim=-1, descending=False, *, out):
    out.copy_(sort_v2_reference(self, dim, descending))


sort_v2_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_sort_v2,
                   reference=sort_v2_reference, metadata_check=True,
                   info=OpInfo(api="torch_npu"))
sort_v2_op.forbid_autograd("derivatives.yaml defines no backward for npu_sort_v2")
_, sort_v2_out_op = define_out(OUT_SCHEMA, check=check_sort_v2_out,
                               reference=sort_v2_out_reference,
                               no_grad="derivatives.yaml defines no backward for npu_sort_v2")


def npu_sort_v2(self, dim=-1, descending=False, out=None):
    """Sort ``self`` along ``dim`` (ascending unless ``descending``), values only.

    Formula::

        out = torch.sort(self, dim, descending).values

    Parameters
    ----------
    self : Tensor
        Any shape; float16, bfloat16, float32, float64 or an integer dtype.
    dim : int
        Default -1.  The doc allows the last dimension only; op-plugin's wrapper transposes
        any other ``dim`` to the end, so every ``dim`` works (here too).
    descending : bool
        Default False.
    out : Tensor, optional
        Written with the result (``self``'s shape and dtype) and returned (``npu_sort_v2.out``).

    Returns
    -------
    Tensor
        ``self``'s shape and dtype.

    Notes
    -----
    Source: seed 004 and op-plugin ``SortWithoutIndicesKernelNpu.cpp``.  NaNs sort as the
    largest values (torch.sort's rule; the NPU's is not documented).  The doc's example prints
    float32 results rounded to float16 precision (1.7790 -> 1.7793), which is what the SortV2
    kernel of the older Atlas training products returns; this emulation returns the input's
    values unrounded, as torch.sort (the doc's suggested replacement) does.  No backward.

    Examples
    --------
    >>> npu_anywhere.npu_sort_v2(torch.randn(3, 4))
    """
    if out is not None:
        return sort_v2_out_op(self, dim, descending, out=out)
    return sort_v2_op(self, dim, descending)


TORCH_NPU_FUNCTIONS = {OP: npu_sort_v2}

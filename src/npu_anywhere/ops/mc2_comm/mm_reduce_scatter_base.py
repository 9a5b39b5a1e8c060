"""torch_npu.npu_mm_reduce_scatter_base: each rank's matmul, summed over the ranks of ``hcom``,
each rank keeping its block of rows.

Formula (seed 004; hicann/ops-transformer ``mc2/matmul_reduce_scatter/README.md``)::

    out = reduce_scatter(x1 @ x2 + bias)              rank r keeps rows [r*m/W, (r+1)*m/W)
    quant: out = reduce_scatter((x1 @ x2) * x2_scale [* x1_scale])

Each rank's partial result is computed in float32 and rounded to the output dtype (the kernel
stores its matmul tile so before the collective), the rounded partials are summed in float32 and
rounded again -- one addition in the output dtype for two ranks (op-plugin's golden,
``test/test_custom_ops/test_mm_reduce_scatter_base.py``, sums unrounded float32); output shape and
dtype as op-plugin's meta function: ``[m / world_size, n]``, x1's dtype (float16 for an int64
``x2_scale``, else ``output_dtype``, default bfloat16).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _comm, _tp

OP = "npu_mm_reduce_scatter_base"
SCHEMA = ("npu_mm_reduce_scatter_base(Tensor self, Tensor x2, str hcom, int world_size, *, "
          "str reduce_op='sum', Tensor? bias=None, Tensor? x1_scale=None, "
          "Tensor? x2_scale=None, int comm_turn=0, ScalarType? output_dtype=None, "
          "str? comm_mode=None) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def check_mm_reduce_scatter_base(self, x2, hcom, world_size, *, reduce_op="sum", bias=None,
                                 x1_scale=None, x2_scale=None, comm_turn=0, output_dtype=None,
                                 comm_mode=None):
    checks.expect(reduce_op == "sum", OP, "reduce_op", "'sum'", repr(reduce_op), ValueError)
    _tp.check(OP, self, x2, hcom, world_size, bias, x1_scale, x2_scale, comm_turn, output_dtype,
              comm_mode)
    checks.expect(self.shape[0] % world_size == 0, OP, "input",
                  lambda: f"a row count divisible by world_size = {world_size}",
                  self.shape[0], RuntimeError)
    targets.expect_supported(OP, _SUPPORTED)


def mm_reduce_scatter_base_reference(self, x2, hcom, world_size, *, reduce_op="sum", bias=None,
                                     x1_scale=None, x2_scale=None, comm_turn=0,
                                     output_dtype=None, comm_mode=None):
    out = _tp.out_dtype(self, x2_scale, output_dtype)
    local = _tp.partial(self, x2, bias, x1_scale, x2_scale).to(out).to(torch.float32)
    return _comm.reduce_scatter_rows(local, hcom).to(out)


def mm_reduce_scatter_base_fake(self, x2, hcom, world_size, *, x2_scale=None,
                                output_dtype=None, **kwargs):
    return self.new_empty((self.shape[0] // world_size, x2.shape[1]),
                          dtype=_tp.out_dtype(self, x2_scale, output_dtype))


mm_reduce_scatter_base_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                  check=check_mm_reduce_scatter_base,
                                  reference=mm_reduce_scatter_base_reference,
                                  fake=mm_reduce_scatter_base_fake, info=OpInfo(api="torch_npu"))
mm_reduce_scatter_base_op.forbid_autograd(
    "npu_mm_reduce_scatter_base has no backward (op-plugin's derivatives.yaml defines none)")


def npu_mm_reduce_scatter_base(self=None, x2=None, hcom=None, world_size=None, *,
                               reduce_op="sum", bias=None, x1_scale=None, x2_scale=None,
                               comm_turn=0, output_dtype=None, comm_mode=None, **kwargs):
    """Matmul on every rank of ``hcom``, summed over the ranks and scattered by rows.

    Formula (seed 004; ops-transformer ``mc2/matmul_reduce_scatter/README.md``)::

        out = reduce_scatter(input @ x2 + bias)    (rank r keeps rows [r*m/W, (r+1)*m/W))
        int8: out = reduce_scatter((input @ x2) * x2_scale [* x1_scale])

    Parameters
    ----------
    self : Tensor
        ``[m, k]`` float16 / bfloat16 / int8 (``input=``, the doc's name, is accepted too);
        m divisible by ``world_size``.
    x2 : Tensor
        ``[k, n]``, input's dtype (a transposed view is fine).
    hcom : str
        The group's communicator name (``get_hccl_comm_name``); an unknown name or no process
        group means one rank.
    world_size : int
        The group's size (1 without a group).
    reduce_op : str
        ``'sum'`` only.
    bias : Tensor, optional
        ``[n]``, input's dtype (float inputs); every rank's is inside the sum.
    x1_scale : Tensor, optional
        int8: float32 ``[m, 1]`` per-token scale (with a float32 x2_scale).
    x2_scale : Tensor, optional
        int8 (required): float32 or int64 (``npu_trans_quant_param`` word) ``[1, n]``.
    comm_turn : int
        0 only.
    output_dtype : torch.dtype, optional
        int8 with a float32 x2_scale: torch.float16 or torch.bfloat16 (default).
    comm_mode : str, optional
        None, ``'aiv'`` or ``'ai_cpu'`` (a scheduling choice of the NPU; no effect here).

    Returns
    -------
    Tensor
        ``[m / world_size, n]``: input's dtype; int8 inputs give float16 for an int64 x2_scale,
        else ``output_dtype``.

    Constraints
    -----------
    Strict mode: Atlas A2 and A3.

    Notes
    -----
    Each rank's partial is rounded to the output dtype, then the partials are summed in float32
    and rounded again (exact for two ranks).  No backward.

    Examples
    --------
    >>> x = torch.randn(8, 16, dtype=torch.bfloat16)
    >>> npu_anywhere.npu_mm_reduce_scatter_base(x, torch.randn(16, 4, dtype=torch.bfloat16),
    ...                                         "no_group", 1).shape
    torch.Size([8, 4])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return mm_reduce_scatter_base_op(self, x2, hcom, world_size, reduce_op=reduce_op, bias=bias,
                                     x1_scale=x1_scale, x2_scale=x2_scale, comm_turn=comm_turn,
                                     output_dtype=output_dtype, comm_mode=comm_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_mm_reduce_scatter_base}

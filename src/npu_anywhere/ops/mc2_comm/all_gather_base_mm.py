"""torch_npu.npu_all_gather_base_mm: the ranks' ``input`` rows gathered, then one matmul.

Formulas (seed 004; hicann/ops-transformer ``mc2/all_gather_matmul/README.md``)::

    gather_out = all_gather(input)                    (rank order along dim 0)
    out        = gather_out @ x2 + bias
    int8:  out = (gather_out @ x2) * x2_scale [* all_gather(x1_scale)]

The per-token ``x1_scale`` is gathered with its rows (op-plugin's golden,
``test/test_custom_ops/test_all_gather_base_mm.py``, concatenates the ranks' scales).  The
matmul is float32 (exact int32 accumulation for int8) and rounded once; shapes and dtypes as
op-plugin's meta function: ``out`` ``[m * world_size, n]``, ``gather_out`` ``[m * world_size,
k]`` in input's dtype, or ``[0]`` with ``gather_output=False``.
"""

from __future__ import annotations

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias
from ...targets import Product
from . import _comm, _tp

OP = "npu_all_gather_base_mm"
SCHEMA = ("npu_all_gather_base_mm(Tensor self, Tensor x2, str hcom, int world_size, *, "
          "Tensor? bias=None, Tensor? x1_scale=None, Tensor? x2_scale=None, "
          "int gather_index=0, bool gather_output=True, int comm_turn=0, "
          "ScalarType? output_dtype=None, str? comm_mode=None) -> (Tensor, Tensor)")

_SUPPORTED = frozenset({Product.A2, Product.A3})


def check_all_gather_base_mm(self, x2, hcom, world_size, *, bias=None, x1_scale=None,
                             x2_scale=None, gather_index=0, gather_output=True, comm_turn=0,
                             output_dtype=None, comm_mode=None):
    checks.expect(gather_index == 0, OP, "gather_index", "0 (gather input)", gather_index,
                  ValueError)
    _tp.check(OP, self, x2, hcom, world_size, bias, x1_scale, x2_scale, comm_turn, output_dtype,
              comm_mode)
    targets.expect_supported(OP, _SUPPORTED)


def all_gather_base_mm_reference(self, x2, hcom, world_size, *, bias=None, x1_scale=None,
                                 x2_scale=None, gather_index=0, gather_output=True, comm_turn=0,
                                 output_dtype=None, comm_mode=None):
    gathered = _comm.all_gather_rows(self, hcom)
    scales = None if x1_scale is None else _comm.all_gather_rows(x1_scale, hcom)
    out = _tp.partial(gathered, x2, bias, scales, x2_scale)
    out = out.to(_tp.out_dtype(self, x2_scale, output_dtype))
    if not gather_output:
        return out, self.new_empty((0,))
    # One rank: the gathered rows are input itself, and an output may not alias an input.
    return out, gathered.clone() if gathered is self else gathered


def all_gather_base_mm_fake(self, x2, hcom, world_size, *, x2_scale=None, gather_output=True,
                            output_dtype=None, **kwargs):
    rows = self.shape[0] * world_size
    out = self.new_empty((rows, x2.shape[1]), dtype=_tp.out_dtype(self, x2_scale, output_dtype))
    gather = self.new_empty((rows, self.shape[1]) if gather_output else (0,))
    return out, gather


all_gather_base_mm_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_all_gather_base_mm,
                              reference=all_gather_base_mm_reference,
                              fake=all_gather_base_mm_fake, info=OpInfo(api="torch_npu"))
all_gather_base_mm_op.forbid_autograd(
    "npu_all_gather_base_mm has no backward (op-plugin's derivatives.yaml defines none)")


def npu_all_gather_base_mm(self=None, x2=None, hcom=None, world_size=None, *, bias=None,
                           x1_scale=None, x2_scale=None, gather_index=0, gather_output=True,
                           comm_turn=0, output_dtype=None, comm_mode=None, **kwargs):
    """All-gather of ``input``'s rows over the ranks of ``hcom``, then a matmul with ``x2``.

    Formulas (seed 004; ops-transformer ``mc2/all_gather_matmul/README.md``)::

        gather_out = all_gather(input)            (ranks' rows in rank order)
        out        = gather_out @ x2 + bias
        int8: out  = (gather_out @ x2) * x2_scale [* all_gather(x1_scale)]

    Parameters
    ----------
    self : Tensor
        ``[m, k]`` float16 / bfloat16 / int8, this rank's rows (``input=`` is accepted too).
    x2 : Tensor
        ``[k, n]``, input's dtype (a transposed view is fine).
    hcom : str
        The group's communicator name (``get_hccl_comm_name``); an unknown name or no process
        group means one rank.
    world_size : int
        The group's size (1 without a group).
    bias : Tensor, optional
        ``[n]``, input's dtype (float inputs); added once.
    x1_scale : Tensor, optional
        int8: float32 ``[m, 1]`` per-token scale of this rank's rows (gathered with them).
    x2_scale : Tensor, optional
        int8 (required): float32 or int64 (``npu_trans_quant_param`` word) ``[1, n]``.
    gather_index : int
        0 only (gather input).
    gather_output : bool
        Return the gathered input; False returns an empty ``[0]`` tensor in its place.
    comm_turn : int
        0 only.
    output_dtype : torch.dtype, optional
        int8 with a float32 x2_scale: torch.float16 or torch.bfloat16 (default).
    comm_mode : str, optional
        None, ``'aiv'`` or ``'ai_cpu'`` (no effect here).

    Returns
    -------
    (out, gather_out)
        ``out`` ``[m * world_size, n]`` in input's dtype (int8: float16 for an int64 x2_scale,
        else ``output_dtype``); ``gather_out`` ``[m * world_size, k]`` in input's dtype.

    Constraints
    -----------
    Strict mode: Atlas A2 and A3.

    Notes
    -----
    float32 matmul (exact int32 accumulation for int8), rounded once.  No backward.

    Examples
    --------
    >>> x = torch.randn(4, 16, dtype=torch.float16)
    >>> out, gathered = npu_anywhere.npu_all_gather_base_mm(
    ...     x, torch.randn(16, 8, dtype=torch.float16), "no_group", 1)
    >>> out.shape, gathered.shape
    (torch.Size([4, 8]), torch.Size([4, 16]))
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "input", kwargs)
    return all_gather_base_mm_op(self, x2, hcom, world_size, bias=bias, x1_scale=x1_scale,
                                 x2_scale=x2_scale, gather_index=gather_index,
                                 gather_output=gather_output, comm_turn=comm_turn,
                                 output_dtype=output_dtype, comm_mode=comm_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_all_gather_base_mm}

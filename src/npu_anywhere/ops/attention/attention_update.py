"""torch_npu.npu_attention_update: merge partial attention outputs by their log-sum-exp.

Sequence-parallel decode splits the KV sequence over ``sp`` ranks; each rank returns its partial
attention output ``O_i`` (normalized over its own keys) and its log-sum-exp ``lse_i``.  The global
result is (seed 004 "npu_attention_update", hicann/ops-transformer
attention/attention_update/docs/aclnnAttentionUpdate.md)::

    lse_max = max_i lse_i
    lse_m   = lse_max + log(sum_i exp(lse_i - lse_max))
    O       = sum_i O_i * exp(lse_i - lse_m)

Numerics follow the Ascend C kernel (attention_update/op_kernel/arch35/
attention_update_with_lse_regbase.h): ``+inf`` in an ``lse_i`` is replaced by ``-inf`` (a rank
that saw no key must not win the max), every step runs in float32 with the weights
``exp(lse_i - lse_m)`` formed once per row, ``O_i`` is upcast to float32, the products are
accumulated over ranks in order and the sum is rounded once to ``local_out``'s dtype.  A row
whose every ``lse_i`` is ``-inf`` gives NaN there, as on the NPU (``-inf - -inf``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product

OP = "npu_attention_update"
SCHEMA = ("npu_attention_update(Tensor[] lse, Tensor[] local_out, int update_type) "
          "-> (Tensor, Tensor)")

# Seed 004 and the op-plugin doc list A2 and A3; op-plugin's doc and aclnnAttentionUpdate add the
# 950 (its arch35 kernel).
_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
SP_MAX = 16          # aclnnAttentionUpdate: sp in [1, 16]
HEAD_DIM_MAX = 512   # head_dim in [8, 512], a multiple of 8


def _floats(documented: tuple) -> tuple:
    return documented if targets.current() is not None else documented + (torch.float64,)


def check_attention_update(lse, local_out, update_type):
    op = OP
    targets.expect_supported(op, _SUPPORTED)
    sp = len(lse)
    checks.expect(1 <= sp <= SP_MAX, op, "lse", lambda: f"a list of 1 to {SP_MAX} tensors "
                  "(the sequence-parallel degree sp)", lambda: f"{sp} tensors", ValueError)
    checks.expect(len(local_out) == sp, op, "local_out",
                  lambda: f"as many tensors as lse ({sp})", lambda: f"{len(local_out)} tensors",
                  ValueError)
    checks.expect(update_type in (0, 1), op, "update_type",
                  "0 (out only) or 1 (out and lse_out)", repr(update_type), ValueError)
    first_lse, first_out = lse[0], local_out[0]
    checks.expect(first_lse.dim() == 1, op, "lse[0]", "a 1-D tensor [batch*seqLen*headNum]",
                  lambda: f"shape {tuple(first_lse.shape)}", ValueError)
    checks.expect(first_out.dim() == 2, op, "local_out[0]",
                  "a 2-D tensor [batch*seqLen*headNum, head_dim]",
                  lambda: f"shape {tuple(first_out.shape)}", ValueError)
    lse_dtypes = _floats((torch.float32,))
    out_dtypes = _floats(FLOATING)
    for i in range(sp):
        checks.expect_dtype(lse[i], lse_dtypes, op, f"lse[{i}]")
        checks.expect_dtype(local_out[i], out_dtypes, op, f"local_out[{i}]")
        checks.expect(lse[i].shape == first_lse.shape, op, f"lse[{i}]",
                      lambda: f"the shape of lse[0] {tuple(first_lse.shape)}",
                      lambda: f"shape {tuple(lse[i].shape)}", RuntimeError)
        checks.expect(local_out[i].shape == first_out.shape, op, f"local_out[{i}]",
                      lambda: f"the shape of local_out[0] {tuple(first_out.shape)}",
                      lambda: f"shape {tuple(local_out[i].shape)}", RuntimeError)
        # The kernel is instantiated for one local_out dtype and writes out in it.
        checks.expect(local_out[i].dtype == first_out.dtype, op, f"local_out[{i}]",
                      lambda: f"the dtype of local_out[0] ({first_out.dtype})",
                      lambda: str(local_out[i].dtype), TypeError)
        checks.expect(lse[i].device == first_out.device and
                      local_out[i].device == first_out.device, op, f"lse[{i}] and local_out[{i}]",
                      lambda: f"to be on local_out[0]'s device ({first_out.device})",
                      lambda: f"{lse[i].device} and {local_out[i].device}", RuntimeError)
    rows, head_dim = first_out.shape
    checks.expect(first_lse.shape[0] == rows, op, "lse[0]",
                  lambda: f"one value per row of local_out[0] ({rows})",
                  lambda: f"shape {tuple(first_lse.shape)}", RuntimeError)
    checks.expect(8 <= head_dim <= HEAD_DIM_MAX and head_dim % 8 == 0, op, "local_out[0]",
                  lambda: f"a head_dim (dim 1) that is a multiple of 8 in [8, {HEAD_DIM_MAX}]",
                  lambda: f"shape {tuple(first_out.shape)}", ValueError)


def attention_update_reference(lse, local_out, update_type):
    ct = torch.float64 if local_out[0].dtype == torch.float64 else torch.float32
    stacked = torch.stack([t.to(ct) for t in lse])                   # [sp, rows]
    # A rank's +inf (what attention writes for a row without keys) is read as -inf.
    stacked = stacked.masked_fill(stacked == float("inf"), float("-inf"))
    lse_max = stacked.amax(0)
    lse_m = lse_max + torch.log(torch.exp(stacked - lse_max).sum(0))
    weights = torch.exp(stacked - lse_m).unsqueeze(-1)               # [sp, rows, 1]
    out = local_out[0].to(ct) * weights[0]
    for i in range(1, len(local_out)):
        out = out.addcmul(local_out[i].to(ct), weights[i])
    return out.to(local_out[0].dtype), lse_m.to(lse[0].dtype)


attention_update_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_attention_update,
                            reference=attention_update_reference, metadata_check=True,
                            info=OpInfo(api="torch_npu"))
attention_update_op.forbid_autograd("torch_npu defines no backward for npu_attention_update")


def npu_attention_update(lse, local_out, update_type):
    """Merge the partial attention outputs of ``sp`` sequence-parallel ranks by their lse.

    Formula (aclnnAttentionUpdate)::

        lse_max = max_i lse_i
        lse_m   = lse_max + log(sum_i exp(lse_i - lse_max))
        out     = sum_i local_out_i * exp(lse_i - lse_m)

    Parameters
    ----------
    lse : list of Tensor
        ``sp`` (1 to 16) float32 tensors ``[batch*seqLen*headNum]``: each rank's log-sum-exp.
    local_out : list of Tensor
        ``sp`` tensors ``[batch*seqLen*headNum, head_dim]``, float32, float16 or bfloat16 (all
        one dtype; float64 also accepted outside strict mode); ``head_dim`` a multiple of 8 in
        [8, 512].
    update_type : {0, 1}
        0: only ``out`` is wanted; 1: ``lse_out`` too.

    Returns
    -------
    (out, lse_out)
        ``out``: ``local_out``'s shape and dtype (computed in float32, rounded once);
        ``lse_out``: float32 ``lse_m``, ``lse``'s shape.

    Constraints
    -----------
    Strict mode: A2, A3 and 950.

    Notes
    -----
    On the NPU ``lse_out`` is an undefined tensor (Python None) when ``update_type=0``; a custom
    op with the documented ``-> (Tensor, Tensor)`` schema cannot return None, so we return
    ``lse_m`` for both values (op-plugin's meta function also gives it that shape).  ``+inf``
    inputs count as ``-inf`` and a row with every ``lse_i = -inf`` is NaN, as in the kernel
    (attention_update_with_lse_regbase.h).  No backward.

    Examples
    --------
    >>> lse = [torch.randn(4), torch.randn(4)]
    >>> local_out = [torch.randn(4, 32), torch.randn(4, 32)]
    >>> out, lse_out = npu_anywhere.npu_attention_update(lse, local_out, 0)
    >>> out.shape
    torch.Size([4, 32])
    """
    return attention_update_op(list(lse), list(local_out), update_type)


TORCH_NPU_FUNCTIONS = {"npu_attention_update": npu_attention_update}

"""torch_npu.npu_quant_scatter and npu_quant_scatter_: quantize ``updates``, then write them into
``input`` as per-batch slabs along ``axis`` (a Quantize fused with scatter_update).

Formula (hicann/ops-nn ``index/quant_update_scatter``: golden ``tests/assets/golden.py``, docs
``aclnnInplaceQuantScatter.md`` / ``aclnnInplaceQuantScatterV2.md``; the seed 004 page gives the
words only), with ``s = quant_scales.reshape(-1)``, ``z = quant_zero_points.reshape(-1)`` (both
broadcast along the last dim of updates, the only allowed ``quant_axis``)::

    q = cast(float32(updates) / float32(s) + float32(z))        (float32 throughout)

then ``q`` is written exactly as ``scatter_update`` writes ``updates`` (see
:mod:`.scatter_update`).  ``cast`` is the quant core's (:mod:`..quant.core`).

op-plugin (``op_plugin/ops/opapi/QuantScatterKernelNpuOpApi.cpp``): the functional op clones
``self`` and runs the in-place kernel on the clone; on the 950 it calls
aclnnInplaceQuantScatterV2 with ``self`` re-typed as ``dst_type`` (default int8) and passes
``round_mode``; on earlier products aclnnInplaceQuantScatter ignores both.
"""

from __future__ import annotations

import torch

from ... import checks, dtypes, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace
from ...params import accept_alias
from ...targets import PRE_950, Product
from ..quant import core
from ._common import INDEX_DTYPES
from .scatter_update import check_slab_shapes, write_scatter_update

OP = "npu_quant_scatter"
_ARGS = ("Tensor indices, Tensor updates, Tensor quant_scales, Tensor? quant_zero_points=None, "
         "int axis=-2, int quant_axis=-1, str reduce='update', int? dst_type=None, "
         "str? round_mode='rint')")
SCHEMA = f"npu_quant_scatter(Tensor self, {_ARGS} -> Tensor"
INPLACE_PUBLIC_OP = "npu_quant_scatter_"
INPLACE_PUBLIC_SCHEMA = f"npu_quant_scatter_(Tensor(a!) self, {_ARGS} -> Tensor(a!)"
INPLACE_OP = "_npu_quant_scatter_inplace"
INPLACE_SCHEMA = f"_npu_quant_scatter_inplace(Tensor(a!) self, {_ARGS} -> ()"

# Seed 004 lists A2 and the Atlas inference series (310P); aclnnInplaceQuantScatter.md lists
# 310P, A2, A3 and the 950 (the ops-nn README drops 310P, which the seed and the aclnn page keep).
SUPPORTED = frozenset({Product.ATLAS_INFERENCE, Product.A2, Product.A3, Product.ASCEND_950})
DST_FORMATS = ("int8", "float8_e4m3fn", "float8_e5m2", "hifloat8")
DST_SPELLED = ("torch.int8 (1)", "torch.float8_e4m3fn (24) / torch_npu.float8_e4m3fn (292)",
               "torch.float8_e5m2 (23) / torch_npu.float8_e5m2 (291)",
               "torch_npu.hifloat8 (290)")
# aclnnInplaceQuantScatterV2: int8 / float8 accept "rint" only, hifloat8 "round" or "hybrid".
ROUND_MODES = {"int8": ("rint",), "float8_e4m3fn": ("rint",), "float8_e5m2": ("rint",),
               "hifloat8": ("round", "hybrid")}
UPDATE_DTYPES = (torch.float16, torch.bfloat16)
# The dtype combinations every product's table lists: updates -> (quant_scales, zero points).
COMBOS = {torch.float16: (torch.float32, torch.int32),
          torch.bfloat16: (torch.bfloat16, torch.bfloat16)}
ALIGN_BYTES = 32


def parse_format(op: str, dst_type) -> core.QuantFormat:
    return core.parse_dst_type(dst_type, op=op, param="dst_type", allowed=DST_FORMATS,
                               spelled=DST_SPELLED)


def _check(op, inp, indices, updates, quant_scales, quant_zero_points, axis, quant_axis, reduce,
           dst_type, round_mode):
    product = targets.expect_supported(op, SUPPORTED)
    fmt = parse_format(op, dst_type)
    checks.expect_one_of(reduce, ("update",), op, "reduce")
    modes = ROUND_MODES[fmt.name]
    checks.expect(("rint" if round_mode is None else round_mode) in modes, op, "round_mode",
                  lambda: f"one of {list(modes)} for dst format {fmt.name}", repr(round_mode),
                  ValueError)
    if product in PRE_950:
        checks.expect(fmt.name == "int8", op, "dst_type",
                      lambda: f"None or torch.int8 on {product.value} (only the 950's "
                      "aclnnInplaceQuantScatterV2 reads dst_type; this kernel always writes "
                      "int8)", lambda: core.describe_code(dst_type), ValueError)
    checks.expect(inp.dtype == fmt.storage, op, "input",
                  lambda: f"dtype {dtypes.name(fmt.storage)} (the storage of dst_type's format "
                  f"{fmt.name}; dst_type None means int8)", lambda: dtypes.name(inp.dtype),
                  TypeError)
    updates_dtypes = (torch.float16,) if product is Product.ATLAS_INFERENCE else UPDATE_DTYPES
    where = "" if product is None else f" on {product.value}"
    checks.expect(updates.dtype in updates_dtypes, op, "updates",
                  lambda: f"dtype in {[dtypes.name(d) for d in updates_dtypes]}{where}",
                  lambda: dtypes.name(updates.dtype), TypeError)
    scale_dtype, zero_dtype = COMBOS[updates.dtype]
    for name, t, want in (("quant_scales", quant_scales, scale_dtype),
                          ("quant_zero_points", quant_zero_points, zero_dtype)):
        if t is not None:
            checks.expect(t.dtype == want, op, name,
                          lambda want=want: f"dtype {dtypes.name(want)} (with "
                          f"{dtypes.name(updates.dtype)} updates)",
                          lambda t=t: dtypes.name(t.dtype), TypeError)
    checks.expect_dtype(indices, INDEX_DTYPES, op, "indices")
    tensors = {"input": inp, "indices": indices, "updates": updates, "quant_scales": quant_scales}
    if quant_zero_points is not None:
        tensors["quant_zero_points"] = quant_zero_points
    checks.expect_same_device(tensors, op)

    checks.expect_dim(inp, tuple(range(3, 9)), op, "input")
    rank = inp.dim()
    checks.expect(updates.dim() == rank, op, "updates", lambda: f"{rank} dims (the rank of input)",
                  lambda: f"shape {tuple(updates.shape)}", RuntimeError)
    checks.expect_dim(indices, (1, 2), op, "indices")
    checks.expect(1 <= axis % rank < rank - 1 and -rank <= axis < rank, op, "axis",
                  lambda: f"in [{1 - rank}, -1) or [1, {rank - 1}) (neither the first nor the "
                  "last dim of updates)", axis, ValueError)
    checks.expect(quant_axis in (-1, rank - 1), op, "quant_axis",
                  lambda: f"-1 or {rank - 1} (only the last dim of updates)", quant_axis,
                  ValueError)
    check_slab_shapes(op, inp, indices, updates, axis % rank, "input")
    last = updates.shape[-1]
    for name, t in (("quant_scales", quant_scales), ("quant_zero_points", quant_zero_points)):
        if t is not None:
            checks.expect_dim(t, tuple(range(1, 9)), op, name)
            checks.expect(t.numel() == last, op, name,
                          lambda: f"{last} elements (the size of updates' quant_axis)",
                          lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)
    if product in PRE_950:
        # aclnnInplaceQuantScatter.md (310P, A2, A3): the last dims of selfRef and updates are
        # 32-byte aligned (the seed names updates only; the README adds selfRef on A2/A3).
        for name, t in (("input", inp), ("updates", updates)):
            checks.expect(t.shape[-1] * t.element_size() % ALIGN_BYTES == 0, op, name,
                          lambda t=t: f"a last dim of a multiple of {ALIGN_BYTES} bytes "
                          f"({ALIGN_BYTES // t.element_size()} {dtypes.name(t.dtype)} elements) "
                          f"on {product.value}", lambda t=t: f"shape {tuple(t.shape)}",
                          ValueError)


def check_npu_quant_scatter(self, indices, updates, quant_scales, quant_zero_points=None,
                            axis=-2, quant_axis=-1, reduce="update", dst_type=None,
                            round_mode="rint"):
    _check(OP, self, indices, updates, quant_scales, quant_zero_points, axis, quant_axis, reduce,
           dst_type, round_mode)


def check_npu_quant_scatter_(self, indices, updates, quant_scales, quant_zero_points=None,
                             axis=-2, quant_axis=-1, reduce="update", dst_type=None,
                             round_mode="rint"):
    _check(INPLACE_PUBLIC_OP, self, indices, updates, quant_scales, quant_zero_points, axis,
           quant_axis, reduce, dst_type, round_mode)


def quantize_updates(op, updates, quant_scales, quant_zero_points, dst_type, round_mode):
    """``cast(float32(updates) / float32(s) + float32(z))`` in the format of ``dst_type``."""
    fmt = parse_format(op, dst_type)
    y = updates.to(torch.float32) / quant_scales.reshape(-1).to(torch.float32)
    if quant_zero_points is not None:
        y = y.add_(quant_zero_points.reshape(-1).to(torch.float32))
    mode = round_mode if fmt.name == "hifloat8" else "rint"
    return core.cast_to(y, fmt, round_mode=mode, inplace=True)


def _write(op, out, indices, updates, quant_scales, quant_zero_points, axis, dst_type,
           round_mode):
    q = quantize_updates(op, updates, quant_scales, quant_zero_points, dst_type, round_mode)
    write_scatter_update(op, out, indices, q, axis, "input")


def npu_quant_scatter_reference(self, indices, updates, quant_scales, quant_zero_points=None,
                                axis=-2, quant_axis=-1, reduce="update", dst_type=None,
                                round_mode="rint"):
    out = self.clone()
    _write(OP, out, indices, updates, quant_scales, quant_zero_points, axis, dst_type,
           round_mode)
    return out


def _functional_fake(self, *args, **kwargs):
    return torch.empty_like(self)


def npu_quant_scatter_inplace_reference(self, indices, updates, quant_scales,
                                        quant_zero_points=None, axis=-2, quant_axis=-1,
                                        reduce="update", dst_type=None, round_mode="rint"):
    _write(INPLACE_PUBLIC_OP, self, indices, updates, quant_scales, quant_zero_points, axis,
           dst_type, round_mode)


npu_quant_scatter_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_npu_quant_scatter,
                             reference=npu_quant_scatter_reference, fake=_functional_fake,
                             metadata_check=True, info=OpInfo(api="torch_npu"))
npu_quant_scatter_op.forbid_autograd("npu_quant_scatter has no backward on the NPU (op-plugin's "
                                     "derivatives.yaml lists none)")

npu_quant_scatter_inplace_op, npu_quant_scatter_inplace_public_op = define_inplace(
    INPLACE_PUBLIC_SCHEMA, INPLACE_SCHEMA, check=check_npu_quant_scatter_,
    reference=npu_quant_scatter_inplace_reference,
    no_grad="npu_quant_scatter_ has no backward on the NPU")


_DOC_COMMON = """
    Formula (aclnnInplaceQuantScatter / aclnnInplaceQuantScatterV2 and their golden,
    hicann/ops-nn ``index/quant_update_scatter``), with ``s = quant_scales.reshape(-1)`` and
    ``z = quant_zero_points.reshape(-1)`` broadcast along the last dim of updates::

        q = cast(float32(updates) / float32(s) + float32(z))       (z = 0 when None)

    then, with ``a`` = axis normalized and ``e = updates.shape[a]``::

        indices [u0]:     input[i, ..., indices[i] + k, ...]          = q[i, ..., k, ...]
        indices [u0, 2]:  input[indices[i, 0], ..., indices[i, 1] + k, ...] = q[i, ..., k, ...]

    for ``i < u0`` and ``k < e``; all other dims are written whole, every other element of
    input is kept.  The division and the add are float32 operations (one rounding each), as in
    the 950 kernel and the golden.  ``cast`` depends on the format ``dst_type`` selects:

    * int8 (default): round half to even (``CAST_RINT``; 2.5 -> 2, 3.5 -> 4), then saturate to
      [-128, 127]; NaN -> 0, +-inf -> 127 / -128 (the golden's ``np.round`` + ``np.clip``;
      NaN as the quant core documents).
    * float8_e4m3fn / float8_e5m2 (950 only): round half to even and **saturate** to +-448 /
      +-57344; NaN -> +0.  The golden's ``ml_dtypes`` cast would overflow to NaN / inf,
      but the 950 kernel casts with ``SatMode::SAT`` and switches the float overflow mode to
      saturation (``op_kernel/arch35/quant_update_scatter_base.h``); the kernel wins.
    * hifloat8 (950 only): ``round_mode`` "round" (half away from zero) or "hybrid"
      (CAST_HYBRID), saturating (inf -> +-32768, NaN -> 0), as
      :mod:`npu_anywhere.ops.quant.hifloat8` documents; the golden's ``en_dtypes`` cast
      after its clip gives the same codes for "round".

    Parameters
    ----------
    input : Tensor
        3-D to 8-D, the bytes written by the op: int8 for the default format; for ``dst_type``
        float8_e4m3fn / float8_e5m2 a tensor of that dtype, for hifloat8 a uint8 tensor.
        ``self=`` (op-plugin's name) is accepted as an alias.  Non-contiguous tensors are fine.
    indices : Tensor
        int32 (seed) or int64 (aclnn docs); 1-D ``[u0]`` (one offset per batch row) or 2-D
        ``[u0, 2]`` of ``(batch index, offset)`` pairs.
    updates : Tensor
        float16 or bfloat16 (310P: float16), the rank of input; ``updates.shape[0] == u0 <=
        input.shape[0]``, ``updates.shape[axis] <= input.shape[axis]``, the other dims equal.
    quant_scales : Tensor
        1-D to 8-D with ``updates.shape[-1]`` elements: float32 with float16 updates, bfloat16
        with bfloat16 updates.
    quant_zero_points : Tensor, optional
        Like quant_scales: int32 with float16 updates, bfloat16 with bfloat16 updates.
    axis : int
        The dim of updates the offsets index: in ``[1 - rank, -1)`` or ``[1, rank - 1)``
        (neither the batch dim nor the last dim).  Default -2.
    quant_axis : int
        The quantization dim: only the last one (-1 or ``rank - 1``).
    reduce : str
        Only ``'update'``.
    dst_type : torch.dtype or int, optional
        The format written (the NPU re-types input's bytes as this): None / torch.int8 (1),
        torch.float8_e4m3fn (24, torch_npu 292), torch.float8_e5m2 (23, torch_npu 291),
        torch_npu.hifloat8 (290).  Read only by the 950 kernel.
    round_mode : str, optional
        ``'rint'`` (default; None means ``'rint'``) for int8 and float8; ``'round'`` or
        ``'hybrid'`` for hifloat8 (aclnnInplaceQuantScatterV2).  Read only by the 950 kernel.

    Constraints
    -----------
    The constraints above hold in every mode (every product's table lists the same dtype
    combinations).  Index values: ``0 <= offset`` and ``offset + e <= input.shape[axis]``, batch
    indices in ``[0, input.shape[0])``.  The NPU does not check them ("索引越界不校验"); we
    raise IndexError before writing anything.  (The aclnn pages write the offset range as
    ``[0, input.shape(axis) - updates.shape(axis))``, which would forbid writing the last
    slot; we accept it, as the golden's loop does.)  Overlapping slabs: which write wins is
    unspecified (as documented).  Strict mode: 310P, A2, A3 and the 950.  On 310P / A2 / A3
    (aclnnInplaceQuantScatter.md): dst_type must be None or int8 and round_mode ``'rint'``
    (that kernel ignores both, so other values would silently write int8), and the last dims
    of input and updates must be multiples of 32 bytes (32 int8 / 16 float16 elements);
    310P: float16 updates only.

    Notes
    -----
    No autograd (none in op-plugin's derivatives.yaml).  aclnnInplaceQuantScatter.md also
    lists narrower shapes (3-D selfRef, 1-D indices, axis -2 only) in its parameter table; the
    seed page, the ops-nn README and the V2 page allow 3-8 dims, 2-D indices and any inner
    axis, which is what we accept.  Empty tensors are accepted (nothing is written).
"""


def _input(op, inp, kwargs):
    return accept_alias(op, "input", inp, "self", kwargs) if kwargs else inp


def npu_quant_scatter(input=None, indices=None, updates=None, quant_scales=None,
                      quant_zero_points=None, axis=-2, quant_axis=-1, reduce="update",
                      dst_type=None, round_mode="rint", **kwargs):
    return npu_quant_scatter_op(_input(OP, input, kwargs), indices, updates,
                                quant_scales, quant_zero_points, axis, quant_axis,
                                reduce, dst_type, round_mode)


def npu_quant_scatter_(input=None, indices=None, updates=None, quant_scales=None,
                       quant_zero_points=None, axis=-2, quant_axis=-1, reduce="update",
                       dst_type=None, round_mode="rint", **kwargs):
    return npu_quant_scatter_inplace_public_op(
        _input(INPLACE_PUBLIC_OP, input, kwargs), indices, updates, quant_scales,
        quant_zero_points, axis, quant_axis, reduce, dst_type, round_mode)


npu_quant_scatter.__doc__ = """Quantize ``updates`` and write them into a copy of ``input`` at
    per-batch offsets along ``axis`` (``torch_npu.npu_quant_scatter``); ``input`` is unchanged.
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        A new tensor of input's shape, dtype and strides.

    Examples
    --------
    >>> var = torch.zeros(2, 3, 32, dtype=torch.int8)
    >>> updates = torch.full((2, 1, 32), 2.5, dtype=torch.bfloat16)
    >>> scales = torch.ones(32, dtype=torch.bfloat16)
    >>> out = npu_anywhere.npu_quant_scatter(var, torch.tensor([0, 2], dtype=torch.int32),
    ...                                      updates, scales)
    >>> out[0, 0, 0].item(), out[1, 2, 0].item(), out[1, 0, 0].item()
    (2, 2, 0)
"""

npu_quant_scatter_.__doc__ = """Quantize ``updates`` and write them into ``input`` in place at
    per-batch offsets along ``axis``; return ``input`` (``torch_npu.npu_quant_scatter_``).
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        ``input`` itself.  When the call raises, ``input`` is untouched.
"""


TORCH_NPU_FUNCTIONS = {"npu_quant_scatter": npu_quant_scatter,
                       "npu_quant_scatter_": npu_quant_scatter_}

"""torch_npu.npu_swiglu_quant: SwiGLU followed by static or dynamic (per-token) quantization.

Formula (seed 004; hicann/ops-nn ``quant/swi_glu_quant/docs/aclnnSwiGluQuantV2.md``)::

    act   = swish(A) * B   (activate_left=True)   or   A * swish(B)   (False)
    t     = act * smooth_scales[g] (+ offsets[g] when quant_mode == 0)
    static:  y = cast(t)
    dynamic: scale = DTYPE_MAX / max(|t|) per row,  y = cast(t * scale)

Precision order and rounding: see :func:`npu_swiglu_quant`.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from ..activation.glu_core import swiglu_fp32
from ..quant import core

OP = "npu_swiglu_quant"
# op-plugin's yaml declares ``ScalarType? dst_type``; ``int?`` accepts a dtype as well (it
# arrives as its ScalarType code) and the doc's integer spelling 29 (int4).
SCHEMA = ("npu_swiglu_quant(Tensor x, *, Tensor? smooth_scales=None, Tensor? offsets=None, "
          "Tensor? group_index=None, bool activate_left=False, int quant_mode=0, "
          "int group_list_type=0, int? dst_type=None) -> (Tensor, Tensor)")

SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
MAX_LAST_DIM = 8192
ACL_INT4 = 29          # aclDataType INT4, the value the seed doc gives for dst_type
DST_SPELLED = ("torch.int8", "torch.quint4x2 (int4)", "29 (int4)")


def parse_format(dst_type) -> core.QuantFormat:
    if isinstance(dst_type, int) and not isinstance(dst_type, bool) and dst_type == ACL_INT4:
        return core.FORMATS["int4"]
    return core.parse_dst_type(dst_type, op=OP, param="dst_type", allowed=("int8", "int4"),
                               spelled=DST_SPELLED)


def _expect_scale_shape(name, t, groups, n, grouped):
    checks.expect_dim(t, (1, 2), OP, name)
    what = (lambda: f"shape [G, {n}] or [G] with G == group_index.numel() ({groups})") \
        if grouped else (lambda: f"shape [G, {n}] or [G] (G >= 1; row 0 is used)")
    ok = (t.dim() == 1 or t.shape[1] == n) and (t.shape[0] == groups if grouped
                                                else t.shape[0] >= 1)
    checks.expect(ok, OP, name, what, lambda: tuple(t.shape))


def check_swiglu_quant(x, *, smooth_scales=None, offsets=None, group_index=None,
                       activate_left=False, quant_mode=0, group_list_type=0, dst_type=None):
    product = targets.expect_supported(OP, SUPPORTED)
    fmt = parse_format(dst_type)
    checks.expect_one_of(quant_mode, (0, 1), OP, "quant_mode")
    checks.expect_one_of(group_list_type, (0, 1), OP, "group_list_type")
    strict = product is not None
    checks.expect_dtype(x, FLOATING if strict else FLOATING_OR_DOUBLE, OP, "x")
    checks.expect(x.dim() > 1, OP, "x", "a tensor with more than 1 dim",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    d = x.shape[-1]
    checks.expect(d > 0, OP, "x", "a non-empty last dim (2N with N >= 1)", d, ValueError)
    checks.expect(d % 2 == 0, OP, "x", "an even last dim", d, ValueError)
    checks.expect(d <= MAX_LAST_DIM, OP, "x", f"a last dim of at most {MAX_LAST_DIM}", d,
                  ValueError)
    if fmt.name == "int4":
        checks.expect(d % 4 == 0, OP, "x", "a last dim divisible by 4 when dst_type is int4",
                      d, ValueError)
    n = d // 2
    s_dtypes = (torch.float32,) if strict else (torch.float32, torch.float64)
    devices = {"x": x}
    grouped = group_index is not None
    groups = 1
    if grouped:
        checks.expect_dtype(group_index, (torch.int32,) if strict else (torch.int32, torch.int64),
                            OP, "group_index")
        checks.expect_dim(group_index, 1, OP, "group_index")
        groups = group_index.shape[0]
        checks.expect(groups >= 1, OP, "group_index", "at least one group",
                      lambda: tuple(group_index.shape), ValueError)
        devices["group_index"] = group_index
    if smooth_scales is not None:
        checks.expect_dtype(smooth_scales, s_dtypes, OP, "smooth_scales")
        _expect_scale_shape("smooth_scales", smooth_scales, groups, n, grouped)
        devices["smooth_scales"] = smooth_scales
    if quant_mode == 0 and offsets is not None:
        checks.expect(smooth_scales is not None, OP, "offsets",
                      "to come with smooth_scales of the same shape (static quantization)",
                      "offsets without smooth_scales", ValueError)
        checks.expect(offsets.shape == smooth_scales.shape, OP, "offsets",
                      lambda: f"the shape of smooth_scales {tuple(smooth_scales.shape)}",
                      lambda: tuple(offsets.shape))
        checks.expect_same_dtype({"smooth_scales": smooth_scales, "offsets": offsets}, OP)
        devices["offsets"] = offsets
    checks.expect_same_device(devices, OP)


def _pack_int4_pairs(q: torch.Tensor) -> torch.Tensor:
    """int4 values (int8 in [-8, 7]) -> int8 with two per byte, element 2k in the low nibble."""
    lo = q[..., 0::2].to(torch.int32) & 0xF
    hi = q[..., 1::2].to(torch.int32) & 0xF
    byte = lo | (hi << 4)
    return torch.where(byte >= 128, byte - 256, byte).to(torch.int8)


def _row_params(t, s, group_index, group_list_type):
    """Per-row parameter (rows of ``t`` viewed as (M, N)) and a mask of rows inside a group."""
    s = s.to(t.dtype)
    s = s.unsqueeze(-1) if s.dim() == 1 else s              # per-tensor [G] -> [G, 1]
    if group_index is None:
        return s[0], None
    m = t.shape[0]
    ends = group_index.to(torch.int64)
    if group_list_type == 1:
        ends = ends.cumsum(0)
    rows = torch.arange(m, device=t.device, dtype=torch.int64)
    group = torch.searchsorted(ends.contiguous(), rows, right=True)
    inside = group < ends.shape[0]
    return s[group.clamp(max=ends.shape[0] - 1)], inside


def swiglu_quant_reference(x, *, smooth_scales=None, offsets=None, group_index=None,
                           activate_left=False, quant_mode=0, group_list_type=0, dst_type=None):
    fmt = parse_format(dst_type)
    lead = x.shape[:-1]
    n = x.shape[-1] // 2
    # glu_core's activate_left has the same meaning as this op's (True: swish(first half) *
    # second half), so it is passed through unchanged.
    act = swiglu_fp32(x, -1, activate_left=bool(activate_left))       # float32 (fp64 for fp64)
    t = act.reshape(-1, n)
    inside = None
    if smooth_scales is not None:
        row_s, inside = _row_params(t, smooth_scales, group_index, group_list_type)
        t = t * row_s
        if quant_mode == 0 and offsets is not None:
            row_o, _ = _row_params(t, offsets, group_index, group_list_type)
            t = t + row_o
    elif group_index is not None:
        _, inside = _row_params(t, torch.ones(group_index.shape[0], dtype=t.dtype,
                                              device=t.device), group_index, group_list_type)
    if quant_mode == 1:
        # amax of |t|, not vector_norm(inf): the same value, and FakeTensor's vector_norm
        # refuses the zero-row inputs eager takes
        amax = t.abs().amax(dim=-1, keepdim=True)
        mul = torch.full_like(amax, core.max_value(fmt)) / amax
        t = t * mul
        scale = mul.squeeze(-1).to(torch.float32)
    else:
        scale = torch.zeros(t.shape[0], dtype=torch.float32, device=x.device)
    q = core.cast_to(t, fmt, pack=False)
    if inside is not None:
        q = torch.where(inside.unsqueeze(-1), q, torch.zeros_like(q))
        scale = torch.where(inside, scale, torch.zeros_like(scale))
    q = q.reshape(*lead, n)
    if fmt.name == "int4":
        q = _pack_int4_pairs(q)
    return q, scale.reshape(lead)


swiglu_quant_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_swiglu_quant,
                        reference=swiglu_quant_reference, metadata_check=True,
                        info=OpInfo(api="torch_npu"))
swiglu_quant_op.forbid_autograd(
    "npu_swiglu_quant has no backward in op-plugin's derivatives.yaml (integer outputs)")


def npu_swiglu_quant(x, *, smooth_scales=None, offsets=None, group_index=None,
                     activate_left=False, quant_mode=0, group_list_type=0, dst_type=None):
    """SwiGLU fused with static or dynamic per-token quantization (int8 or int4), MoE groups.

    Formula (seed 004; aclnnSwiGluQuantV2)::

        A, B  = x[..., :N], x[..., N:]                      (N = x.shape[-1] // 2)
        act   = swish(A) * B          activate_left=True
              = A * swish(B)          activate_left=False (default)
        t     = act * smooth_scales[g(r)]                   (row r of group g(r))
        quant_mode=0 (static):  t = t + offsets[g(r)];   y = cast(t)
        quant_mode=1 (dynamic): scale = DTYPE_MAX / max(|t| over the row);  y = cast(t * scale)

    ``DTYPE_MAX`` is 127 (int8) or 7 (int4).  ``cast`` rounds half to even, saturates to
    [-128, 127] / [-8, 7] and maps NaN to 0: 2.5 -> 2, 3.5 -> 4, 127.5 -> 127.

    Parameters
    ----------
    x : Tensor
        float16, bfloat16 or float32 (float64 too outside strict mode), more than one dim,
        last dim ``2N`` even and <= 8192 (divisible by 4 for int4).  Any strides.
    smooth_scales : Tensor, optional
        float32, ``[G, N]`` (per channel) or ``[G]`` (per tensor).  ``G`` is the number of
        groups with ``group_index``; without it row 0 is used.  None: no smoothing (1).
    offsets : Tensor, optional
        Static mode only (ignored when ``quant_mode=1``): smooth_scales' shape and dtype.
    group_index : Tensor, optional
        int32 ``[G]`` (int64 accepted outside strict mode): cumulative row ends
        (``group_list_type=0``) or rows per group (1), over x viewed as ``(M, 2N)``.
    activate_left : bool
        True: swish of the first half; False: swish of the second half.
    quant_mode : int
        0 static, 1 dynamic.
    group_list_type : int
        0 cumsum, 1 count.
    dst_type : dtype or int, optional
        None / ``torch.int8``: int8; ``torch.quint4x2`` or 29: int4.

    Returns
    -------
    (y, scale)
        ``y``: int8, ``x.shape[:-1] + (N,)``; for int4 ``x.shape[:-1] + (N // 2,)`` int8 with
        two values per byte (element ``2k`` in the low nibble).  ``scale``: float32,
        ``x.shape[:-1]``: the *multiplier* ``DTYPE_MAX / max|t|`` (not its reciprocal) in
        dynamic mode, zeros in static mode (the NPU leaves it unwritten).  An all-zero row
        gives scale ``inf`` and y 0.  Rows past the groups' total are 0 (garbage on the NPU).

    Constraints
    -----------
    Products: A2, A3 and the 950 (op-plugin's doc page).  Strict mode rejects float64 and
    int64 group_index.  ``group_index`` values (non-decreasing, total <= M) are the caller's
    responsibility, as on the NPU (not checked: they are data).

    Notes
    -----
    * ``activate_left`` is settled by op-plugin's golden (``test/test_custom_ops/
      test_npu_swiglu_quant.py``: ``silu(x1) * x2 if activate_left else x1 * silu(x2)``) and
      matches glu_core's convention, which is used unchanged.
    * The returned dynamic scale is ``DTYPE_MAX / row_max`` (aclnnSwiGluQuantV2.md, hicann/ops-nn
      ``quant/swi_glu_quant/docs``: ``scale = dstTypeScale / row_max(abs(Y_tmp))``,
      ``Y = Cast(Mul(Y_tmp, scale))``; the op-plugin golden returns ``127 / max`` and compares
      it with the NPU's output).  This differs from npu_dynamic_quant's ``max / 127``.
    * Precision: x is upcast to float32, swiglu, the smooth multiply, offsets add and scale
      multiply are float32 operations (one rounding each), then the rounding cast.  The golden
      rounds with ``torch.round`` (half to even) and clamps to ``[-DTYPE_MAX - 1, DTYPE_MAX]``.
    * op-plugin's meta registration gives y dtype ``dst_type`` and the unhalved int4 width;
      its C++ wrapper (``op_plugin/ops/opapi/SwigluquantKernelNpuOpApi.cpp``) allocates int8
      with ``N / 2`` for int4, which is followed here.  The wrapper also requires
      ``offsets`` to match ``smooth_scales`` in static mode.
    * No autograd.

    Examples
    --------
    >>> x = torch.randn(8, 32)
    >>> y, scale = npu_anywhere.npu_swiglu_quant(x, smooth_scales=torch.ones(1, 16),
    ...                                          quant_mode=1)
    >>> y.shape, y.dtype, scale.shape
    (torch.Size([8, 16]), torch.int8, torch.Size([8]))
    """
    return swiglu_quant_op(x, smooth_scales=smooth_scales, offsets=offsets,
                           group_index=group_index, activate_left=activate_left,
                           quant_mode=quant_mode, group_list_type=group_list_type,
                           dst_type=dst_type)


TORCH_NPU_FUNCTIONS = {"npu_swiglu_quant": npu_swiglu_quant}

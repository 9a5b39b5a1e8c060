"""The arithmetic of npu_grouped_matmul: a few large matmuls, one per group.

Speed: one ``torch.mm`` per contiguous group slice, written straight into the output rows with
``out=``, runs at the dense-matmul roof; empty groups cost nothing.  A bfloat16/float16 matmul
without bias runs natively where the device has a float32-accumulating kernel for it (CUDA;
bfloat16 on CPUs oneDNN drives with AVX-512: one rounding of the float32 sum, as the NPU's
cube unit does, at 2-3x float32's speed there).  Otherwise (float16 on CPU runs a generic
kernel at well under 1 GFLOP/s; AVX2-only CPUs likewise for bfloat16; and any call with a
float32 bias, which must be added before the one rounding) the inputs are upcast to float32
once and the result rounded once.

Numerics (op-plugin golden ``test/test_custom_ops/test_npu_grouped_matmul.py``):

* float: ``y = x @ w + bias`` accumulated in float32, rounded once to x's dtype;
* quant (int8): exact int32 ``acc = x @ w + bias``; float32 ``acc * scale`` (then
  ``* per_token_scale``, then a float bias -- formulas 2-2 / 3-2, float16 / bfloat16 / float32
  widened exactly, as the Ascend 950 epilogue ``gqmm_mix_online_dynamic.h`` and A2's
  ``grouped_matmul_quant_mixcore.h`` add it -- then the activation, rounded half to even to
  the output dtype); int8 output:
  ``rint(acc * scale + offset)`` saturated to [-128, 127], with scale and offset unpacked
  from npu_trans_quant_param's word;
* antiquant: ``w' = (w + antiquant_offset) * antiquant_scale`` rounded to x's dtype as
  ``grouped_matmul_antiquant.h`` computes it (float16: each step rounded; bfloat16: float32,
  one rounding), per channel or per group of k; ``y = x @ w' + bias`` in float32, rounded once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..matmul import integer
from ..matmul.integer import int_mm, unpack_scale_word
from .grouping import Segment

# The exact int8 GEMM, int4 unpacking and scale-word decoding are the matmul family's
# (``ops/matmul/integer.py``).


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def native_matmul(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether ``torch.mm`` in ``dtype`` accumulates in float32 at full speed on ``device``."""
    if dtype in (torch.float32, torch.float64):
        return True
    if device.type == "cuda":
        return True
    if device.type == "cpu" and dtype == torch.bfloat16:
        return _cpu_bf16_matmul()
    return False


_CPU_BF16: list[bool] = []


def _cpu_bf16_matmul() -> bool:
    if not _CPU_BF16:
        try:
            _CPU_BF16.append(bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()))
        except (AttributeError, RuntimeError):
            _CPU_BF16.append(False)
    return _CPU_BF16[0]


def activation(y: torch.Tensor, act_type: int) -> torch.Tensor:
    if act_type == 1:
        return torch.relu(y)
    if act_type == 2:
        return F.gelu(y, approximate="tanh")
    if act_type == 4:
        return y * torch.sigmoid(1.702 * y)       # fast_gelu: x / (1 + exp(-1.702 x))
    if act_type == 5:
        return F.silu(y)
    return y


class Params:
    """Per-group views of the optional parameter lists (one [E, ...] tensor or E tensors)."""

    def __init__(self, tensors, single: bool):
        self.tensors = tensors
        self.single = single

    def __bool__(self) -> bool:
        return self.tensors is not None

    def __getitem__(self, e: int):
        if self.tensors is None:
            return None
        return self.tensors[0][e] if self.single else self.tensors[e]


def dequant_weight(w: torch.Tensor, scale: torch.Tensor, offset, int4: bool,
                   dtype: torch.dtype) -> torch.Tensor:
    """Antiquant weight [k, n] as the cube reads it, in float32 values of x's ``dtype``.

    ``grouped_matmul_antiquant.h`` dequantizes with ``AscendAntiQuant`` into x's dtype before
    the matmul: for float16 in float16 arithmetic (``w + offset`` rounded, ``* scale``
    rounded), for bfloat16 in float32 then rounded once to bfloat16.  Per channel, or per
    group of k rows for int4.
    """
    if int4:
        w = integer.unpack_int4_fast(w)
    wf = w.to(torch.float32)
    s = scale.to(torch.float32)
    o = offset.to(torch.float32) if offset is not None else None
    if s.dim() == 2:                       # per group: [G, n], each row covers k / G rows
        repeat = wf.shape[0] // s.shape[0]
        s = s.repeat_interleave(repeat, dim=0)
        o = o.repeat_interleave(repeat, dim=0) if o is not None else None
    if dtype == torch.float16:
        # a sum and a product of float16 values, each exact in float32 before its rounding
        if o is not None:
            wf = (wf + o).to(torch.float16).to(torch.float32)
        return (wf * s).to(torch.float16).to(torch.float32)
    if o is not None:
        wf = wf + o
    wf = wf * s
    return wf.to(dtype).to(torch.float32) if dtype == torch.bfloat16 else wf


def float_groups(x2: torch.Tensor, segments: list[Segment], weight: Params, bias: Params,
                 n: int, out_dtype: torch.dtype, antiquant=None) -> torch.Tensor:
    """m-axis groups: rows ``[start, start + length)`` of ``x2`` times their group's weight."""
    ct = compute_dtype(x2.dtype)
    if antiquant is None and not bias and native_matmul(x2.dtype, x2.device):
        ct = x2.dtype                       # one rounding inside the matmul itself
    xc = x2.to(ct)
    y = torch.empty(x2.shape[0], n, dtype=ct, device=x2.device)
    covered = 0
    for seg in segments:
        covered = max(covered, seg.start + seg.length)
    if covered < x2.shape[0]:
        y[covered:].zero_()                 # rows no group covers
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        if antiquant is not None:
            scale, offset, int4 = antiquant
            w = dequant_weight(weight[seg.expert], scale[seg.expert], offset[seg.expert], int4,
                               x2.dtype)
        else:
            w = weight[seg.expert].to(ct)
        b = bias[seg.expert]
        if b is not None:
            torch.addmm(b.to(ct), xc[rows], w, out=y[rows])
        else:
            torch.mm(xc[rows], w, out=y[rows])
    return y.to(out_dtype)


def quant_groups(x2: torch.Tensor, segments: list[Segment], weight: Params, bias: Params,
                 scale: Params, per_token_scale, n: int, out_dtype: torch.dtype,
                 act_type: int) -> torch.Tensor:
    """int8 m-axis groups: exact int32 accumulation, then dequantization per group."""
    y = torch.zeros(x2.shape[0], n, dtype=out_dtype, device=x2.device)
    for seg in segments:
        if seg.length == 0:
            continue
        rows = slice(seg.start, seg.start + seg.length)
        acc = int_mm(x2[rows], weight[seg.expert])
        b = bias[seg.expert]
        if b is not None and b.dtype == torch.int32:
            acc = acc + b
            b = None                        # a bfloat16 bias waits for the epilogue
        if not scale:
            y[rows] = acc
            continue
        s = scale[seg.expert]
        if s.dtype == torch.int64:
            s32, off = unpack_scale_word(s)
            y[rows] = integer.to_int8_saturated(acc.to(torch.float32) * s32 + off)
            continue
        v = acc.to(torch.float32) * s.to(torch.float32)
        if per_token_scale is not None:
            v = v * per_token_scale[rows].unsqueeze(-1)
        if b is not None:
            v = v + b.to(torch.float32)     # formula 3-2: after per_token_scale, before act
        y[rows] = activation(v, act_type).to(out_dtype)
    return y


def k_groups(x0: torch.Tensor, w0: torch.Tensor, segments: list[Segment],
             out_dtype: torch.dtype, stacked: bool) -> list[torch.Tensor]:
    """k-axis groups: out[e] = x[:, k-slice e] @ w[k-slice e, :]; an empty slice gives zeros.

    ``stacked``: one ``[E, m, n]`` tensor, else E separate ``[m, n]`` tensors (never views of
    one buffer: the schema's outputs do not alias each other).
    """
    ct = x0.dtype if native_matmul(x0.dtype, x0.device) else compute_dtype(x0.dtype)
    xc, wc = x0.to(ct), w0.to(ct)
    shape = (x0.shape[0], w0.shape[1])
    if stacked:
        y = torch.zeros(len(segments), *shape, dtype=ct, device=x0.device)
        outs = list(y.unbind(0))
    else:
        outs = [torch.zeros(shape, dtype=ct, device=x0.device) for _ in segments]
    for e, seg in enumerate(segments):
        if seg.length == 0:
            continue
        cols = slice(seg.start, seg.start + seg.length)
        torch.mm(xc[:, cols], wc[cols], out=outs[e])
    if stacked:
        return [y.to(out_dtype)]
    return [o.to(out_dtype) for o in outs]

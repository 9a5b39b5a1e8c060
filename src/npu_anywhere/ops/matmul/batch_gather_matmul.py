"""torch_npu.npu_batch_gather_matmul and npu_batch_gather_matmul_: multi-LoRA "bgmv".

Each token ``i`` picks an adapter ``w = indices[i]`` and adds its low-rank product to a column
window of its row of ``input`` (aclnnAddLora; seed 004 and the aclnn doc
``hicann/ops-math math/add_lora/docs/aclnnAddLora.md``)::

    Z1 = x[i] @ weight_a[w, layer_idx]^T                      [R]    (skipped without weight_a)
    Z2 = Z1 @ weight_b[w, layer_idx]^T * scale                 [H2]
    y[i, y_offset : y_offset + H2] += Z2

Tokens with a negative index (or one equal to W, the adapter count) are skipped: their rows
are left as they are.

Numerics follow the A2 kernel (``math/add_lora/op_kernel/add_lora_base.h`` and
``add_lora_normal_core.h`` / ``add_lora_single_core.h``): each matmul accumulates in float32
and its result is rounded to float16 on the way out of the cube unit (``F322F16``), so Z1 is
float16 before the second matmul; the scale is applied by a float16 ``Muls`` with
``half(scale)``; the sum is an atomic float16 add into y.  Each step here rounds to the input
dtype once (float64 inputs, accepted outside strict mode, are not rounded at all).

The kernel writes ``H2`` columns starting at ``y_offset``; ``y_slice_size`` is checked but,
as in the kernel, does not narrow that window (the documented calls pass ``H2`` or -1).

Speed: tokens are sorted by adapter once (one gather of x), then each adapter's rows take two
matmuls; the rows are written back with one ``index_copy_``.  No per-token Python loop.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_inplace
from ...params import accept_alias
from ...targets import Product

OP = "npu_batch_gather_matmul"
INPLACE_PUBLIC_OP = "npu_batch_gather_matmul_"
_ARGS = ("Tensor x, Tensor weight_b, Tensor indices, Tensor? weight_a=None, int layer_idx=0, "
         "float scale=1e-3, int y_offset=0, int y_slice_size=-1")
SCHEMA = f"npu_batch_gather_matmul(Tensor self, {_ARGS}) -> Tensor"
INPLACE_PUBLIC_SCHEMA = f"npu_batch_gather_matmul_(Tensor(a!) self, {_ARGS}) -> Tensor(a!)"
INPLACE_SCHEMA = f"_npu_batch_gather_matmul_inplace(Tensor(a!) self, {_ARGS}) -> ()"

# seed 004 lists the A2 line; the aclnn doc adds the Atlas inference line (310P), where
# op-plugin's own tests run the op.
_SUPPORTED = frozenset({Product.A2, Product.ATLAS_INFERENCE})
_MAX_ADAPTERS = 32        # W (tiling: "weight num exceeds limit 32"); L likewise (aclnn doc)
_MAX_COLUMNS = 131072     # H2 and y_column (aclnn doc)


def _float_dtypes() -> tuple[torch.dtype, ...]:
    # float64 outside strict mode lets float64 goldens run through the very same op.
    return (torch.float16,) if targets.current() is not None else (torch.float16, torch.float64)


def _check(op, y, x, weight_b, indices, weight_a, layer_idx, scale, y_offset, y_slice_size):
    targets.expect_supported(op, _SUPPORTED)
    named = {"input": y, "x": x, "weight_b": weight_b}
    if weight_a is not None:
        named["weight_a"] = weight_a
    checks.expect_dtype(y, _float_dtypes(), op, "input")
    checks.expect_same_dtype(named, op)
    checks.expect_dtype(indices, (torch.int32,), op, "indices")
    checks.expect_same_device({**named, "indices": indices}, op)
    checks.expect_dim(y, 2, op, "input")
    checks.expect_dim(x, 2, op, "x")
    checks.expect_dim(weight_b, 4, op, "weight_b")
    checks.expect_dim(indices, 1, op, "indices")
    if weight_a is not None:
        checks.expect_dim(weight_a, 4, op, "weight_a")
    for name, t in {**named, "indices": indices}.items():
        checks.expect_nonempty(t, op, name)
    batch, y_column = y.shape
    h1 = x.shape[1]
    w, layers, h2, r = weight_b.shape
    for name, t in (("x", x), ("indices", indices)):
        checks.expect(t.shape[0] == batch, op, name,
                      lambda: f"dim 0 equal to input's dim 0 (batch_size {batch})",
                      lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)
    checks.expect(h1 % 16 == 0, op, "x", "a second dim (H1) that is a multiple of 16",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    checks.expect(y_column % 16 == 0 and y_column <= _MAX_COLUMNS, op, "input",
                  f"a second dim (y_column) that is a multiple of 16 and <= {_MAX_COLUMNS}",
                  lambda: f"shape {tuple(y.shape)}", ValueError)
    checks.expect(w <= _MAX_ADAPTERS and layers <= _MAX_ADAPTERS, op, "weight_b",
                  f"W and L (dims 0 and 1) <= {_MAX_ADAPTERS}",
                  lambda: f"shape {tuple(weight_b.shape)}", ValueError)
    checks.expect(h2 % 16 == 0 and h2 <= y_column, op, "weight_b",
                  lambda: f"a third dim (H2) that is a multiple of 16 and <= input's second dim "
                  f"({y_column})", lambda: f"shape {tuple(weight_b.shape)}", ValueError)
    if weight_a is None:
        checks.expect(r == h1, op, "weight_b",
                      lambda: f"a fourth dim equal to x's second dim H1 ({h1}) when weight_a is "
                      "None ([W, L, H2, H1])", lambda: f"shape {tuple(weight_b.shape)}",
                      RuntimeError)
    else:
        _check_weight_a(op, weight_a, (w, layers, r, h1))
        checks.expect(r % 16 == 0 and 16 <= r <= 128, op, "weight_b",
                      "a fourth dim (R) that is a multiple of 16 in [16, 128]",
                      lambda: f"shape {tuple(weight_b.shape)}", ValueError)
    checks.expect(0 <= layer_idx < layers, op, "layer_idx",
                  lambda: f"in [0, {layers}) (weight_b's dim 1, L)", layer_idx, ValueError)
    checks.expect(0 <= y_offset < y_column, op, "y_offset",
                  lambda: f"in [0, {y_column}) (input's second dim)", y_offset, ValueError)
    checks.expect(y_slice_size == -1 or 1 <= y_slice_size <= y_column, op, "y_slice_size",
                  lambda: f"-1 or in [1, {y_column}] (input's second dim)", y_slice_size,
                  ValueError)
    checks.expect(y_offset + h2 <= y_column, op, "y_offset",
                  lambda: f"y_offset + H2 ({h2}) <= input's second dim ({y_column}): the update "
                  "spans H2 columns", y_offset, ValueError)


def _check_weight_a(op, weight_a, documented) -> None:
    """weight_a is ``[W, L, R, H1]``; outside strict mode also what the NPU reads instead.

    The kernel addresses weight_a as a packed ``[W, L, R, H1]`` array (offset
    ``(w * L + l) * R * H1``, rows of H1) whatever its trailing dims, and neither op-plugin
    nor aclnn checks them; seed 004's own example passes ``[2, 1, 16, 4096]`` with H1 = 16.
    So default mode accepts any weight_a with dim 0 W and at least W * L * R * H1 elements,
    read that way (:func:`_packed_weight_a`); strict mode requires the documented shape.
    """
    if tuple(weight_a.shape) == documented:
        return
    need = documented[0] * documented[1] * documented[2] * documented[3]
    lenient = (targets.current() is None and weight_a.shape[0] == documented[0]
               and weight_a.numel() >= need)
    checks.expect(lenient, op, "weight_a",
                  lambda: f"shape [W, L, R, H1] = {documented} (W, L and R from weight_b, H1 "
                  "from x)" + ("" if targets.current() is not None else
                               f"; or dim 0 W and at least W*L*R*H1 = {need} elements, which "
                               "the NPU reads as that packed array"),
                  lambda: f"shape {tuple(weight_a.shape)}", RuntimeError)


def _packed_weight_a(weight_a, w, layers, r, h1):
    """weight_a as the kernel reads it: its first W*L*R*H1 elements as ``[W, L, R, H1]``."""
    if tuple(weight_a.shape) == (w, layers, r, h1):
        return weight_a
    return weight_a.contiguous().reshape(-1)[:w * layers * r * h1].view(w, layers, r, h1)


def check_batch_gather_matmul(self, x, weight_b, indices, weight_a=None, layer_idx=0,
                              scale=1e-3, y_offset=0, y_slice_size=-1):
    _check(OP, self, x, weight_b, indices, weight_a, layer_idx, scale, y_offset, y_slice_size)


def check_batch_gather_matmul_(self, x, weight_b, indices, weight_a=None, layer_idx=0,
                               scale=1e-3, y_offset=0, y_slice_size=-1):
    _check(INPLACE_PUBLIC_OP, self, x, weight_b, indices, weight_a, layer_idx, scale, y_offset,
           y_slice_size)


def _adapter_groups(op, indices, adapters):
    """Token rows sorted by adapter and the number of rows of each adapter.

    Negative indices and ``adapters`` itself (what the kernel files as "no adapter") are
    skipped; larger ones would read past the weights on the NPU, so they raise here.
    """
    idx = indices.to(torch.int64)
    hi = int(idx.max())
    if hi > adapters:
        bad = int((idx > adapters).nonzero()[0, 0])
        checks.expect(False, op, "indices",
                      f"values < {adapters} (weight_b's dim 0, W; negative or W skips a token)",
                      f"{int(idx[bad])} at position {bad}", IndexError)
    group = torch.where(idx < 0, adapters, idx)
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=adapters + 1).tolist()
    return order, counts[:adapters]


def add_lora(op, y, x, weight_b, indices, weight_a, layer_idx, scale, y_offset) -> None:
    """Write ``y[i, y_offset:y_offset + H2] += Z2`` (the formula above) into ``y``."""
    dt = y.dtype
    ct = torch.float64 if dt == torch.float64 else torch.float32
    if weight_a is not None:
        w, layers, _, r = weight_b.shape
        weight_a = _packed_weight_a(weight_a, w, layers, r, x.shape[1])
    order, counts = _adapter_groups(op, indices, weight_b.shape[0])
    taken = sum(counts)
    if taken == 0:
        return
    rows = order[:taken]
    xs = x.index_select(0, rows).to(ct)
    h2 = weight_b.shape[2]
    z2 = torch.empty(taken, h2, dtype=ct, device=y.device)
    start = 0
    for adapter, count in enumerate(counts):
        if count == 0:
            continue
        seg = slice(start, start + count)
        start += count
        a = xs[seg]
        if weight_a is not None:
            # Z1 leaves the cube unit as float16 (F322F16) before the second matmul.
            a = torch.mm(a, weight_a[adapter, layer_idx].to(ct).mT).to(dt).to(ct)
        torch.mm(a, weight_b[adapter, layer_idx].to(ct).mT, out=z2[seg])
    # Muls takes half(scale); s is exact in dt, and dt's elementwise mul and add compute in
    # float32 (or float64) and round once -- exactly the kernel's float16 vector steps.
    s = float(torch.tensor(scale, dtype=dt))
    delta = z2.to(dt).mul_(s)
    window = y.narrow(1, y_offset, h2)
    window.index_copy_(0, rows, window.index_select(0, rows).add_(delta))


def batch_gather_matmul_reference(self, x, weight_b, indices, weight_a=None, layer_idx=0,
                                  scale=1e-3, y_offset=0, y_slice_size=-1):
    out = self.clone()
    add_lora(OP, out, x, weight_b, indices, weight_a, layer_idx, scale, y_offset)
    return out


def _batch_gather_matmul_fake(self, x, weight_b, indices, weight_a=None, layer_idx=0,
                              scale=1e-3, y_offset=0, y_slice_size=-1):
    return torch.empty_like(self)


def batch_gather_matmul_inplace_reference(self, x, weight_b, indices, weight_a=None,
                                          layer_idx=0, scale=1e-3, y_offset=0,
                                          y_slice_size=-1):
    add_lora(INPLACE_PUBLIC_OP, self, x, weight_b, indices, weight_a, layer_idx, scale,
             y_offset)


batch_gather_matmul_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_batch_gather_matmul,
                               reference=batch_gather_matmul_reference,
                               fake=_batch_gather_matmul_fake, metadata_check=True,
                               info=OpInfo(api="torch_npu"))
batch_gather_matmul_op.forbid_autograd("npu_batch_gather_matmul has no backward on the NPU "
                                       "(inference only; op-plugin's derivatives.yaml lists none)")

batch_gather_matmul_inplace_op, batch_gather_matmul_inplace_public_op = define_inplace(
    INPLACE_PUBLIC_SCHEMA, INPLACE_SCHEMA, check=check_batch_gather_matmul_,
    reference=batch_gather_matmul_inplace_reference,
    no_grad="npu_batch_gather_matmul_ has no backward on the NPU (inference only)")


_DOC_COMMON = """
    Formula (aclnnAddLora), for every token ``i`` with ``w = indices[i]`` in ``[0, W)``::

        Z1 = x[i] @ weight_a[w, layer_idx]^T                 (Z1 = x[i] without weight_a)
        Z2 = Z1 @ weight_b[w, layer_idx]^T * scale
        y[i, y_offset : y_offset + H2] += Z2

    Tokens whose index is negative (or equal to W) are skipped.

    Parameters
    ----------
    input : Tensor
        float16 ``[batch_size, y_column]``, y_column a multiple of 16 (<= 131072).  ``self=``
        (op-plugin's name) is accepted as an alias.
    x : Tensor
        float16 ``[batch_size, H1]``, H1 a multiple of 16.
    weight_b : Tensor
        float16 ``[W, L, H2, R]`` (``[W, L, H2, H1]`` without weight_a); H2 a multiple of 16
        and <= y_column; W, L <= 32.
    indices : Tensor
        int32 ``[batch_size]``: each token's adapter.
    weight_a : Tensor, optional
        float16 ``[W, L, R, H1]``, R a multiple of 16 in [16, 128].  None skips the first
        matmul.
    layer_idx : int
        In ``[0, L)``.
    scale : float
        Applied as ``float16(scale)``.
    y_offset : int
        In ``[0, y_column)``, with ``y_offset + H2 <= y_column``.
    y_slice_size : int
        -1 (y_column) or in ``[1, y_column]``.  As on the NPU the update spans ``H2`` columns
        whatever its value; the documented calls pass ``H2``.

    Constraints
    -----------
    No empty tensors; float64 is also accepted outside strict mode (no intermediate
    rounding).  Strict mode: Atlas A2 and the Atlas inference series (310P, per the aclnn
    doc).  Indices above W raise IndexError before anything is written (the NPU reads past
    its weights).  Outside strict mode weight_a may have other trailing dims (dim 0 W and
    at least W*L*R*H1 elements): the NPU kernel reads its first W*L*R*H1 elements as a
    packed ``[W, L, R, H1]`` array and checks nothing more, and seed 004's own example
    relies on that; strict mode requires ``[W, L, R, H1]``.

    Notes
    -----
    Rounding as in the A2 kernel (``ops-math math/add_lora/op_kernel/add_lora_base.h``): each
    matmul accumulates in float32 and is rounded to float16, then ``float16(Z2 * half(scale))``
    is added to y in float16.  The FRACTAL_NZ weight format of the 310P is not emulated.  No
    autograd (inference only).
"""


def npu_batch_gather_matmul(input=None, x=None, weight_b=None, indices=None, weight_a=None,
                            layer_idx=0, scale=1e-3, y_offset=0, y_slice_size=-1, **kwargs):
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    # On the NPU this call adds into input's own memory and returns input: the kernel's
    # atomic add targets y (math/add_lora/op_kernel/add_lora_310.h, CopyFinalResOutAdd),
    # op-plugin's host returns ``self`` (BatchGatherMatmulKernelNpuOpApi.cpp), and seed 004
    # says the output reuses y's address.  The public call does the same: it runs the
    # functional op (whose schema may not mutate; errors name this op, and input is untouched
    # when it raises) and writes the result back, which torch.compile traces as a copy_.
    out = batch_gather_matmul_op(input, x, weight_b, indices, weight_a, layer_idx, scale,
                                 y_offset, y_slice_size)
    return input.copy_(out)


def npu_batch_gather_matmul_(input=None, x=None, weight_b=None, indices=None, weight_a=None,
                             layer_idx=0, scale=1e-3, y_offset=0, y_slice_size=-1, **kwargs):
    if kwargs:
        input = accept_alias(INPLACE_PUBLIC_OP, "input", input, "self", kwargs)
    return batch_gather_matmul_inplace_public_op(input, x, weight_b, indices, weight_a,
                                                 layer_idx, scale, y_offset, y_slice_size)


npu_batch_gather_matmul.__doc__ = """Batched gather matrix-vector multiply (multi-LoRA
    "bgmv"): add each token's adapter product to ``input`` and return it
    (``torch_npu.npu_batch_gather_matmul``).
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        ``input`` itself, updated, as on the NPU: the kernel accumulates into input's memory
        and op-plugin returns ``input`` (seed 004: the output reuses y's address).
        ``torch.ops.npu.npu_batch_gather_matmul``, whose schema declares no mutation,
        returns a new tensor with the same values and leaves ``input`` alone.

    Examples
    --------
    >>> y = torch.zeros(2, 16, dtype=torch.float16)
    >>> x = torch.ones(2, 16, dtype=torch.float16)
    >>> wa = torch.ones(1, 1, 16, 16, dtype=torch.float16)
    >>> wb = torch.ones(1, 1, 16, 16, dtype=torch.float16)
    >>> out = npu_anywhere.npu_batch_gather_matmul(y, x, wb, torch.tensor([0, -1],
    ...     dtype=torch.int32), wa, scale=0.5)
    >>> out[0, 0].item(), out[1, 0].item()
    (128.0, 0.0)
"""

npu_batch_gather_matmul_.__doc__ = """In-place batched gather matrix-vector multiply
    (multi-LoRA "bgmv"): add each token's adapter product to ``input`` and return it
    (``torch_npu.npu_batch_gather_matmul_``).
""" + _DOC_COMMON + """
    Returns
    -------
    Tensor
        ``input`` itself.  Only the rows of tokens with an adapter, columns
        ``[y_offset, y_offset + H2)``, change; when the call raises, ``input`` is untouched.
"""


TORCH_NPU_FUNCTIONS = {"npu_batch_gather_matmul": npu_batch_gather_matmul,
                       "npu_batch_gather_matmul_": npu_batch_gather_matmul_}

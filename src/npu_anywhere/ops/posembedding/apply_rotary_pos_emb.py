"""RoPE on query and key in one call, three flavours sharing one check and one reference:

* ``cann_ops_transformer.apply_rotary_pos_emb`` (seed 000): new outputs, autograd in half mode
  through ``apply_rotary_pos_emb_grad``;
* ``cann_ops_transformer.apply_rotary_pos_emb_grad``: the fused backward;
* ``torch_npu.npu_apply_rotary_pos_emb`` (seed 004): updates query and key in place and returns
  them; no backward.

Formula (seed 000 section 3)::

    q_embed = query * cos + rotate(query) * sin        k_embed likewise
    half:       rotate(x) = cat(-x2, x1)           x1, x2 = halves of the last dim
    quarter:    rotate(x) = cat(-x2, x1, -x4, x3)  x1..x4 = quarters of the last dim
    interleave: rotate(x) = (-x[1], x[0], -x[3], x[2], ...)

cos/sin have N == 1 and broadcast over the heads (and over the batch when their B is 1).
Precision: computed in float32 (float64 for float64 inputs) and rounded once.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...layouts import LAYOUT_BY_CODE, LAYOUT_CODES, LAYOUTS
from ...kernels import compiled
from ...library import CANN_NS, INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import PRE_950, Product
from .rotation import (DIVISOR, MODES, compute_dtype, partner, prepare, reduce_to, rope, rotate,
                       signed)

CANN_OP = "apply_rotary_pos_emb"
CANN_SCHEMA = ("apply_rotary_pos_emb(Tensor query, Tensor key, Tensor cos, Tensor sin, "
               "str layout='BSND', str rotary_mode='half') -> (Tensor, Tensor)")
GRAD_OP = "apply_rotary_pos_emb_grad"
GRAD_SCHEMA = ("apply_rotary_pos_emb_grad(Tensor grad_query_embed, Tensor grad_key_embed, "
               "Tensor cos, Tensor sin, *, Tensor? query=None, Tensor? key=None, "
               "str? rotary_mode='half', int? layout=1) -> (Tensor, Tensor, Tensor?, Tensor?)")
NPU_OP = "npu_apply_rotary_pos_emb"
# op-plugin's yaml declares plain `Tensor` arguments although the kernel writes into query and
# key; we declare the mutation so that functionalization and torch.compile see it.
NPU_SCHEMA = ("npu_apply_rotary_pos_emb(Tensor(a!) query, Tensor(b!) key, Tensor cos, "
              "Tensor sin, str layout='BSND', str rotary_mode='half') -> (Tensor(a!), Tensor(b!))")
INPLACE_OP = "_npu_apply_rotary_pos_emb_inplace"
INPLACE_SCHEMA = ("_npu_apply_rotary_pos_emb_inplace(Tensor(a!) query, Tensor(b!) key, "
                  "Tensor cos, Tensor sin, str layout='BSND', str rotary_mode='half') -> ()")

MAX_HEAD_DIM = 1024            # the most capable product (950) accepts D <= 1024
_PRE_950_HEAD_DIMS = (64, 128)
_PRE_950_LAYOUTS = ("BSND", "BSH", "TND")


def check_rope_pair(op, query, key, cos, sin, layout, rotary_mode, *, allow_empty,
                    names=("query", "key")):
    """The checks every flavour shares (default mode: the union of the products' rules)."""
    q_name, k_name = names
    checks.expect_one_of(layout, tuple(LAYOUTS), op, "layout")
    checks.expect_one_of(rotary_mode, MODES, op, "rotary_mode")
    tensors = {q_name: query, k_name: key, "cos": cos, "sin": sin}
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    for name, t in tensors.items():
        checks.expect_dtype(t, allowed, op, name)
    checks.expect_same_dtype(tensors, op)
    checks.expect_same_device(tensors, op)
    lay = LAYOUTS[layout]
    for name, t in tensors.items():
        checks.expect(t.dim() == lay.ndim, op, name, lambda: f"a {lay.ndim}-D tensor for layout {layout}",
                      lambda t=t: f"shape {tuple(t.shape)}", ValueError)
    if not allow_empty:
        for name, t in tensors.items():
            checks.expect_nonempty(t, op, name)
    d = query.shape[-1]
    checks.expect(d % DIVISOR[rotary_mode] == 0, op, q_name,
                  lambda: f"a last dim (D) divisible by {DIVISOR[rotary_mode]} in rotary_mode "
                  f"'{rotary_mode}'", d, ValueError)
    checks.expect(d <= MAX_HEAD_DIM, op, q_name, lambda: f"a last dim (D) <= {MAX_HEAD_DIM}", d,
                  ValueError)
    for i in range(lay.ndim):
        if i != lay.head_axis:
            checks.expect(key.shape[i] == query.shape[i], op, k_name,
                          lambda: f"the shape of {q_name} {tuple(query.shape)} except in N "
                          f"(dim {lay.head_axis})", lambda: tuple(key.shape))
    checks.expect(sin.shape == cos.shape, op, "sin", lambda: f"the shape of cos {tuple(cos.shape)}",
                  lambda: tuple(sin.shape))
    checks.expect(cos.shape[lay.head_axis] == 1, op, "cos",
                  lambda: f"N (dim {lay.head_axis} in layout {layout}) equal to 1",
                  lambda: f"shape {tuple(cos.shape)}")
    cos_d = cos.shape[-1]
    checks.expect(cos_d >= d or cos_d == 0, op, "cos",
                  lambda: f"a last dim equal to the D of {q_name} ({d}); a smaller cos D (partial "
                  "rotation) is documented without saying what happens to the tail, so it is "
                  "not emulated", cos_d, NotImplementedError)
    checks.expect(cos_d == d, op, "cos", lambda: f"a last dim equal to the D of {q_name} ({d})",
                  cos_d)
    for i in range(lay.ndim - 1):
        if i == lay.head_axis:
            continue
        ok = cos.shape[i] == query.shape[i] or (i == lay.batch_axis and cos.shape[i] == 1)
        want = "or 1" if i == lay.batch_axis else ""
        checks.expect(ok, op, "cos", lambda: f"dim {i} equal to {q_name}'s ({query.shape[i]}) {want}"
                      .rstrip(), lambda: f"shape {tuple(cos.shape)}")


def check_strict_pre_950(op, product, query, cos, layout, *, batch_broadcast_ok=False,
                         allow_empty=False):
    """A2 / A3 / 310P rules of seeds 000 (6.2, 6.4) and 004."""
    lay = LAYOUTS[layout]
    checks.expect(layout in _PRE_950_LAYOUTS, op, "layout",
                  lambda: f"one of {list(_PRE_950_LAYOUTS)} on {product.value}", repr(layout),
                  ValueError)
    d = query.shape[-1]
    checks.expect(d in _PRE_950_HEAD_DIMS, op, "query",
                  lambda: f"a last dim (D) of 64 or 128 on {product.value}", d, ValueError)
    if lay.batch_axis is not None and not batch_broadcast_ok:
        b = lay.batch_axis
        checks.expect(cos.shape[b] == query.shape[b], op, "cos",
                      lambda: f"the batch (B) of query ({query.shape[b]}) on {product.value}",
                      cos.shape[b], ValueError)
    if product == Product.ATLAS_INFERENCE:
        checks.expect(query.dtype != torch.bfloat16, op, "query",
                      "a dtype other than bfloat16 on 310P", "bfloat16", TypeError)


# -- cann_ops_transformer.apply_rotary_pos_emb -----------------------------------------------

_CANN_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE,
                             Product.ASCEND_950})


def check_apply_rotary_pos_emb(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    check_rope_pair(CANN_OP, query, key, cos, sin, layout, rotary_mode, allow_empty=False)
    product = targets.expect_supported(CANN_OP, _CANN_SUPPORTED)
    if product in PRE_950:
        check_strict_pre_950(CANN_OP, product, query, cos, layout)


def rope_pair_reference(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    c, s = prepare(cos, sin, rotary_mode, query.dtype)
    return rope(query, c, s, rotary_mode), rope(key, c, s, rotary_mode)


apply_rotary_pos_emb_op = NpuOp(CANN_SCHEMA, namespace=CANN_NS,
                                check=check_apply_rotary_pos_emb,
                                reference=rope_pair_reference, metadata_check=True,
                                info=OpInfo(api="cann_ops_transformer"))


# -- cann_ops_transformer.apply_rotary_pos_emb_grad ------------------------------------------

_GRAD_SUPPORTED = frozenset({Product.ASCEND_950})


def check_apply_rotary_pos_emb_grad(grad_query_embed, grad_key_embed, cos, sin, *, query=None,
                                    key=None, rotary_mode="half", layout=1):
    op = GRAD_OP
    rotary_mode = "half" if rotary_mode is None else rotary_mode
    layout = 1 if layout is None else layout
    checks.expect(rotary_mode == "half", op, "rotary_mode", "'half' (the only mode with a "
                  "backward)", repr(rotary_mode), ValueError)
    checks.expect(layout in LAYOUT_BY_CODE, op, "layout",
                  "one of 1 (BSND), 2 (SBND), 3 (BNSD), 4 (TND)", repr(layout), ValueError)
    check_rope_pair(op, grad_query_embed, grad_key_embed, cos, sin, LAYOUT_BY_CODE[layout],
                    rotary_mode, allow_empty=False, names=("grad_query_embed", "grad_key_embed"))
    checks.expect((query is None) == (key is None), op, "query and key",
                  "to be both given or both None",
                  f"query {'None' if query is None else 'given'}, "
                  f"key {'None' if key is None else 'given'}", ValueError)
    if query is not None:
        named = {"grad_query_embed": grad_query_embed, "query": query, "key": key}
        checks.expect_same_dtype(named, op)
        checks.expect_same_device(named, op)
        checks.expect(query.shape == grad_query_embed.shape, op, "query",
                      lambda: f"the shape of grad_query_embed {tuple(grad_query_embed.shape)}",
                      lambda: tuple(query.shape))
        checks.expect(key.shape == grad_key_embed.shape, op, "key",
                      lambda: f"the shape of grad_key_embed {tuple(grad_key_embed.shape)}",
                      lambda: tuple(key.shape))
    targets.expect_supported(op, _GRAD_SUPPORTED)


def apply_rotary_pos_emb_grad_reference(grad_query_embed, grad_key_embed, cos, sin, *,
                                        query=None, key=None, rotary_mode="half", layout=1):
    """grad_x = g * cos + rotate^T(g * sin);  grad_cos = sum(g_q*q + g_k*k);
    grad_sin = sum(g_q*rotate(q) + g_k*rotate(k)), summed over the dims cos/sin broadcast."""
    mode = "half"
    ct = compute_dtype(grad_query_embed.dtype)
    gq, gk = grad_query_embed.to(ct), grad_key_embed.to(ct)
    c, s = cos.to(ct), signed(sin.to(ct), mode)
    grad_query = (gq * c + partner(gq * s, mode)).to(grad_query_embed.dtype)
    grad_key = (gk * c + partner(gk * s, mode)).to(grad_key_embed.dtype)
    if query is None:
        return grad_query, grad_key, None, None
    q, k = query.to(ct), key.to(ct)
    grad_cos = reduce_to(gq * q, cos.shape) + reduce_to(gk * k, cos.shape)
    grad_sin = (reduce_to(gq * rotate(q, mode), sin.shape)
                + reduce_to(gk * rotate(k, mode), sin.shape))
    return grad_query, grad_key, grad_cos.to(cos.dtype), grad_sin.to(sin.dtype)


apply_rotary_pos_emb_grad_op = NpuOp(GRAD_SCHEMA, namespace=CANN_NS,
                                     check=check_apply_rotary_pos_emb_grad,
                                     reference=apply_rotary_pos_emb_grad_reference,
                                     metadata_check=True,
                                     info=OpInfo(api="cann_ops_transformer",
                                                 backward_of=CANN_OP))


def _setup_context(ctx, inputs, output):
    query, key, cos, sin, layout, rotary_mode = inputs
    checks.expect(rotary_mode == "half", CANN_OP, "rotary_mode",
                  "'half' when a gradient is requested (autograd supports only half mode)",
                  repr(rotary_mode), ValueError)
    targets.expect_supported(f"{CANN_OP} (autograd)", _GRAD_SUPPORTED)
    ctx.layout_code = LAYOUT_CODES[layout]
    ctx.save_for_backward(query, key, cos, sin)


def _backward(ctx, grad_query_embed, grad_key_embed):
    query, key, cos, sin = ctx.saved_tensors
    need_q, need_k, need_cos, need_sin = ctx.needs_input_grad[:4]
    if grad_query_embed is None:
        grad_query_embed = torch.zeros_like(query)
    if grad_key_embed is None:
        grad_key_embed = torch.zeros_like(key)
    with_cos_sin = need_cos or need_sin
    dq, dk, dcos, dsin = apply_rotary_pos_emb_grad_op(
        grad_query_embed, grad_key_embed, cos, sin,
        query=query if with_cos_sin else None, key=key if with_cos_sin else None,
        rotary_mode="half", layout=ctx.layout_code)
    return (dq if need_q else None, dk if need_k else None, dcos if need_cos else None,
            dsin if need_sin else None, None, None)


apply_rotary_pos_emb_op.set_autograd(setup_context=_setup_context, backward=_backward)


# -- torch_npu.npu_apply_rotary_pos_emb (in place) -------------------------------------------

_NPU_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ATLAS_INFERENCE,
                            Product.ASCEND_950})


def check_npu_apply_rotary_pos_emb(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    op = NPU_OP
    product = targets.current()
    # Seed 004: the Atlas 350 (950) card supports empty tensors, the others do not.
    check_rope_pair(op, query, key, cos, sin, layout, rotary_mode,
                    allow_empty=product is None or product == Product.ASCEND_950)
    product = targets.expect_supported(op, _NPU_SUPPORTED)
    if product in PRE_950:
        checks.expect(layout != "BSH", op, "layout", "one of ['BSND', 'TND'] on "
                      f"{product.value}", repr(layout), ValueError)
        check_strict_pre_950(op, product, query, cos, layout)
        checks.expect(rotary_mode == "half", op, "rotary_mode", lambda: f"'half' on {product.value}",
                      repr(rotary_mode), ValueError)


def npu_apply_rotary_pos_emb_inplace_reference(query, key, cos, sin, layout="BSND",
                                               rotary_mode="half"):
    # Both results are computed before either input is written, so aliasing between the
    # inputs cannot leak a half-updated tensor into the other computation.
    q_out, k_out = rope_pair_reference(query, key, cos, sin, layout, rotary_mode)
    query.copy_(q_out)
    key.copy_(k_out)


def _inplace_fake(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    return None


npu_apply_rotary_pos_emb_inplace_op = NpuOp(
    INPLACE_SCHEMA, namespace=INTERNAL_NS, check=check_npu_apply_rotary_pos_emb,
    reference=npu_apply_rotary_pos_emb_inplace_reference, fake=_inplace_fake,
    metadata_check=True,
    info=OpInfo(api="internal", public=False))
npu_apply_rotary_pos_emb_inplace_op.forbid_autograd(
    "npu_apply_rotary_pos_emb has no backward on the NPU; use "
    "cann_ops_transformer.apply_rotary_pos_emb for training", public_name=NPU_OP)


def _npu_apply_rotary_pos_emb_composite(query, key, cos, sin, layout="BSND",
                                        rotary_mode="half"):
    npu_apply_rotary_pos_emb_inplace_op(query, key, cos, sin, layout, rotary_mode)
    return query, key


npu_apply_rotary_pos_emb_op = NpuOp(NPU_SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_npu_apply_rotary_pos_emb,
                                    composite=_npu_apply_rotary_pos_emb_composite,
                                    info=OpInfo(api="torch_npu"))
npu_apply_rotary_pos_emb_op.autograd = "no (raises)"


# -- Python API ------------------------------------------------------------------------------

def apply_rotary_pos_emb(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    """RoPE on query and key, returning new tensors (``cann_ops_transformer.ops``).

    Formula (seed 000, section 3)::

        q_embed = query * cos + rotate(query) * sin;   k_embed = key * cos + rotate(key) * sin
        half:       rotate(x) = cat(-x[..., :D/2] ... )  i.e. cat(-x2, x1)
        quarter:    rotate(x) = cat(-x2, x1, -x4, x3)    (quarters of D)
        interleave: rotate(x) = (-x1, x0, -x3, x2, ...)  (adjacent pairs)

    Parameters
    ----------
    query, key : Tensor
        4-D for layouts BSND, BSH (same as BSND), SBND, BNSD; 3-D for TND.  float16, bfloat16
        or float32 (float64 accepted outside strict mode), same dtype.  key may differ from
        query only in N.
    cos, sin : Tensor
        Same shape as each other; N must be 1; other dims equal to query's, except the batch
        dim which may be 1 (broadcast).  D equal to query's (a smaller D is documented for the
        950 but its tail behaviour is not, so it raises NotImplementedError).
    layout : {'BSND', 'BSH', 'SBND', 'BNSD', 'TND'}
    rotary_mode : {'half', 'quarter', 'interleave'}

    Returns
    -------
    (query_out, key_out) : new tensors of query's/key's shape and dtype; inputs are untouched.
    Computed in float32 and rounded once.

    Constraints
    -----------
    No empty tensors; D divisible by 2 (4 for quarter) and <= 1024.  Strict mode on A2/A3/310P:
    layouts BSND/BSH/TND, D in {64, 128}, cos/sin batch equal to query's, no bfloat16 on 310P;
    Atlas training (910) is not supported.

    Notes
    -----
    Differentiable in half mode (for query, key, cos and sin, through
    ``apply_rotary_pos_emb_grad``); requesting a gradient in another mode raises ValueError.
    On the NPU autograd exists only on the 950; strict mode enforces that.
    """
    return apply_rotary_pos_emb_op(query, key, cos, sin, layout, rotary_mode)


def apply_rotary_pos_emb_grad(grad_query_embed, grad_key_embed, cos, sin, *, query=None,
                              key=None, rotary_mode="half", layout=1):
    """Fused backward of :func:`apply_rotary_pos_emb` in half mode.

    Formula (ops-transformer ``apply_rotary_pos_emb_grad``)::

        grad_query = cat(cos1*g1 + sin2*g2, cos2*g2 - sin1*g1)   (g = grad_query_embed halves)
        grad_key   likewise
        grad_cos   = sum(grad_query_embed * query + grad_key_embed * key, dims)
        grad_sin   = sum(grad_query_embed * rotate(query) + grad_key_embed * rotate(key), dims)

    where ``dims`` are the axes cos/sin were broadcast along (N, and B when cos's B is 1).

    Parameters
    ----------
    layout : int
        1 BSND (also BSH), 2 SBND, 3 BNSD, 4 TND.
    query, key : Tensor, optional
        Both or neither; without them grad_cos and grad_sin are None.

    Returns
    -------
    (grad_query, grad_key, grad_cos or None, grad_sin or None)
    """
    return apply_rotary_pos_emb_grad_op(
        grad_query_embed, grad_key_embed, cos, sin, query=query, key=key,
        rotary_mode=rotary_mode, layout=layout)


def npu_apply_rotary_pos_emb(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    """RoPE on query and key, written into query and key (``torch_npu``).

    Same formula, layouts and modes as :func:`apply_rotary_pos_emb` (seed 004 lists BSND,
    SBND, BNSD and TND; BSH is accepted as BSND, as op-plugin maps it); returns
    ``(query, key)``, the very tensors passed in, after updating them in place.  ``layout``
    and ``rotary_mode`` may be given by keyword (the doc) or by position (op-plugin's schema).

    Constraints
    -----------
    D divisible by 2 (4 for quarter), <= 1024.  Empty tensors are accepted (as on the Atlas
    350); strict mode on A2/A3/310P: half mode only, layouts BSND/TND, D in {64, 128}, cos/sin
    batch equal to query's, no empty tensors, no bfloat16 on 310P.  When the call raises,
    query and key are left untouched.

    Notes
    -----
    No backward (op-plugin registers a not-implemented autograd fallback): calling it with an
    input that requires grad raises.
    """
    return npu_apply_rotary_pos_emb_op(query, key, cos, sin, layout, rotary_mode)


# -- fast providers --------------------------------------------------------------------------

def _pair_key(query, key, cos, sin, layout="BSND", rotary_mode="half"):
    return (layout, rotary_mode, query.dtype, query.device.type)


compiled.register(apply_rotary_pos_emb_op, key=_pair_key)
compiled.register(npu_apply_rotary_pos_emb_inplace_op, key=_pair_key)
compiled.register(
    apply_rotary_pos_emb_grad_op,
    key=lambda g, *args, query=None, **kwargs: (g.dtype, g.device.type, query is None))


TORCH_NPU_FUNCTIONS = {"npu_apply_rotary_pos_emb": npu_apply_rotary_pos_emb}
CANN_FUNCTIONS = {
    "apply_rotary_pos_emb": apply_rotary_pos_emb,
    "apply_rotary_pos_emb_grad": apply_rotary_pos_emb_grad,
}

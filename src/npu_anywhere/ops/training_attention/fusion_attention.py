"""torch_npu.npu_fusion_attention and npu_fusion_attention_grad (FlashAttentionScore).

Formula (seed 004; aclnnFlashAttentionScore)::

    y         = Softmax(Mask(scale * (pse + query key^T), atten_mask), keep_prob)
    attention = Dropout(y) value

Numerics follow hicann/ops-transformer attention/flash_attention_score (op_kernel: float32
accumulation, one rounding of the output) and its grad (flash_attention_score_grad: the
softmax recomputed from the forward's max / sum); output shapes follow op-plugin's
``op_plugin/python/meta/_meta_registrations.py``.  See :mod:`.fa_math` for the arithmetic and
:mod:`.fa_masks` for the sparse modes and the dropout keep-mask.
"""

from __future__ import annotations

import torch

from ...library import INTERNAL_NS, TORCH_NPU_NS, NpuOp, OpInfo
from . import fa_core

OP = "npu_fusion_attention"
GRAD_OP = "npu_fusion_attention_grad"
MASK_GRAD_OP = "_npu_fusion_attention_grad_dropout_mask"
_INT_MAX = 2147483647
# op-plugin's yaml returns the seed / offset / numels as `int` and the grad op takes them as
# `int`; here they are `SymInt` (the same Python ints in eager).  A seed drawn at run time is
# data-dependent, and a data-dependent `int` cannot leave a traced call: with `SymInt`,
# torch.compile(fullgraph=True) carries the drawn values from the forward to the backward.
SCHEMA = (
    "npu_fusion_attention(Tensor query, Tensor key, Tensor value, int head_num, "
    "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
    "float scale=1., float keep_prob=1., int pre_tockens=2147483647, "
    "int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
    "int[]? actual_seq_qlen=None, int[]? actual_seq_kvlen=None, int sparse_mode=0, "
    "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None, "
    "Tensor? dropout_mask=None, int seed=0, int offset=0) "
    "-> (Tensor, Tensor, Tensor, Tensor, SymInt, SymInt, SymInt)")
GRAD_SCHEMA = (
    "npu_fusion_attention_grad(Tensor query, Tensor key, Tensor value, Tensor dy, int head_num, "
    "str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
    "Tensor? softmax_max=None, Tensor? softmax_sum=None, Tensor? softmax_in=None, "
    "Tensor? attention_in=None, float scale_value=1., float keep_prob=1., "
    "int pre_tockens=2147483647, int next_tockens=2147483647, int inner_precise=0, SymInt seed=0, "
    "SymInt offset=0, SymInt numels=0, int[]? prefix=None, int[]? actual_seq_qlen=None, "
    "int[]? actual_seq_kvlen=None, int sparse_mode=0, bool gen_mask_parallel=True, "
    "bool sync=False, str softmax_layout=\"\", Tensor? sink=None) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")

FORWARD_ARGS = ("query", "key", "value", "head_num", "input_layout", "pse", "padding_mask",
                "atten_mask", "scale", "keep_prob", "pre_tockens", "next_tockens",
                "inner_precise", "prefix", "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode",
                "gen_mask_parallel", "sync", "softmax_layout", "sink", "dropout_mask", "seed",
                "offset")
_FORWARD_DEFAULTS = dict(pse=None, padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                         pre_tockens=_INT_MAX, next_tockens=_INT_MAX, inner_precise=0,
                         prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                         sparse_mode=0, gen_mask_parallel=True, sync=False, softmax_layout="",
                         sink=None, dropout_mask=None, seed=0, offset=0)
_GRAD_DEFAULTS = dict(pse=None, padding_mask=None, atten_mask=None, softmax_max=None,
                      softmax_sum=None, softmax_in=None, attention_in=None, scale_value=1.0,
                      keep_prob=1.0, pre_tockens=_INT_MAX, next_tockens=_INT_MAX,
                      inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                      actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                      gen_mask_parallel=True, sync=False, softmax_layout="", sink=None)


def forward_args(args: tuple, kwargs: dict) -> dict:
    a = dict(_FORWARD_DEFAULTS)
    a.update(zip(FORWARD_ARGS, args))
    a.update(kwargs)
    return a


def grad_args(query, key, value, dy, head_num, input_layout, kwargs: dict) -> dict:
    a = dict(_GRAD_DEFAULTS)
    a.update(kwargs)
    a.update(query=query, key=key, value=value, dy=dy, head_num=head_num,
             input_layout=input_layout, scale=a["scale_value"])
    return a


def draw_seed(a: dict) -> tuple[int, int]:
    """(seed, offset) of the dropout keep-mask, as the NPU's generator hands them out.

    keep_prob = 1: (0, 0) and no randomness.  A caller-given nonzero seed / offset (or a
    dropout_mask) is used as given.  Otherwise seed is the device generator's seed (what
    ``torch.manual_seed`` / ``torch.npu.manual_seed`` set) and offset is 0 for the first draw
    after seeding, as on the NPU, so ``_npu_dropout_gen_mask(x, shape, 1 - keep_prob, seed, 0)``
    right after ``manual_seed(seed)`` makes the mask that call applies (seed 0 excepted: (0, 0)
    means "draw" as an input, so that seed gets a drawn offset too).  Later draws take an
    offset from the generator (the NPU advances its Philox offset), so runs repeat after
    ``manual_seed`` and successive calls get fresh masks.
    """
    if a["keep_prob"] >= 1.0:
        return 0, 0
    if a["seed"] != 0 or a["offset"] != 0 or a["dropout_mask"] is not None:
        return int(a["seed"]), int(a["offset"])
    gen = _generator(a["query"].device)
    initial = gen.initial_seed()
    fresh = torch.equal(gen.get_state(), _fresh_state(gen.device, initial))
    # an int64 in the schema: a random (torch.seed()) 64-bit seed keeps its low 63 bits
    seed = initial & ((1 << 63) - 1)
    offset = int(torch.randint(1, 2 ** 31 - 1, (1,), generator=gen, device=gen.device).item())
    # (0, 0) would read as "draw" when passed back in: after manual_seed(0) the offset is drawn
    return seed, 0 if fresh and seed != 0 else offset


def _generator(device: torch.device) -> torch.Generator:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.default_generators[index]
    return torch.default_generator


_FRESH_STATES: dict = {}


def _fresh_state(device: torch.device, seed: int) -> torch.Tensor:
    """A generator's state right after ``manual_seed(seed)`` (cached per device and seed)."""
    key = (str(device), seed)
    if key not in _FRESH_STATES:
        if len(_FRESH_STATES) > 64:
            _FRESH_STATES.clear()
        _FRESH_STATES[key] = torch.Generator(device=device).manual_seed(seed).get_state()
    return _FRESH_STATES[key]


# -- forward -----------------------------------------------------------------------------------

def check_fusion_attention(*args, **kwargs):
    fa_core.check_forward(OP, forward_args(args, kwargs))


def _forward(args, kwargs, use_flash: bool, tiled: bool):
    a = forward_args(args, kwargs)
    p = fa_core.check_forward(OP, a)
    seed, offset = draw_seed(a)
    outs = fa_core.forward(p, a, seed, offset, use_flash=use_flash, tiled=tiled)
    n = fa_core.numels(p) if a["keep_prob"] < 1.0 else 0
    return (*outs, seed, offset, n)


def fusion_attention_reference(*args, **kwargs):
    return _forward(args, kwargs, use_flash=False, tiled=False)


def _fusion_attention_fake(*args, **kwargs):
    a = forward_args(args, kwargs)
    p = fa_core.check_forward(OP, a)
    outs = fa_core.fake_forward(p, a)
    if a["keep_prob"] >= 1.0:
        return (*outs, 0, 0, 0)
    if a["seed"] != 0 or a["offset"] != 0 or a["dropout_mask"] is not None:
        return (*outs, a["seed"], a["offset"], fa_core.numels(p))
    # both drawn at run time: the generator's seed, and an offset that is 0 only on the first
    # draw after manual_seed
    ctx = torch.library.get_ctx()
    return (*outs, ctx.new_dynamic_size(), ctx.new_dynamic_size(), fa_core.numels(p))


def _flash_fusion_attention(*args, **kwargs):
    return _forward(args, kwargs, use_flash=True, tiled=False)


def _flash_supports(*args, **kwargs):
    a = forward_args(args, kwargs)
    p = fa_core.check_forward(OP, a)
    return fa_core.flash_reason(p, a)


fusion_attention_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_fusion_attention,
                            reference=fusion_attention_reference, fake=_fusion_attention_fake,
                            metadata_check=False, random=True, info=OpInfo(api="torch_npu"))


def _tiled_fusion_attention(*args, **kwargs):
    return _forward(args, kwargs, use_flash=False, tiled=True)


def _tiled_supports(*args, **kwargs):
    return None        # every call: the tiles compute exactly what the reference does


fusion_attention_op.add_provider("sdpa_flash", _flash_fusion_attention, _flash_supports)
fusion_attention_op.add_provider("tiled", _tiled_fusion_attention, _tiled_supports)


# -- grad --------------------------------------------------------------------------------------

def check_fusion_attention_grad(query, key, value, dy, head_num, input_layout, **kwargs):
    fa_core.check_grad(GRAD_OP, grad_args(query, key, value, dy, head_num, input_layout, kwargs))


def _grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash: bool,
          tiled: bool):
    a = grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    p = fa_core.check_grad(GRAD_OP, a)
    return fa_core.functional_grad(
        fa_core.grad(p, a, int(a["seed"]), int(a["offset"]), use_flash=use_flash, tiled=tiled),
        a)


def fusion_attention_grad_reference(query, key, value, dy, head_num, input_layout, **kwargs):
    return _grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash=False,
                 tiled=False)


def _fusion_attention_grad_fake(query, key, value, dy, head_num, input_layout, **kwargs):
    a = grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    return fa_core.functional_grad(fa_core.fake_grad(fa_core.check_grad(GRAD_OP, a), a), a)


def _flash_grad(query, key, value, dy, head_num, input_layout, **kwargs):
    return _grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash=True,
                 tiled=False)


def _flash_grad_supports(query, key, value, dy, head_num, input_layout, **kwargs):
    a = grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    return fa_core.flash_reason(fa_core.check_grad(GRAD_OP, a), a)


fusion_attention_grad_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_fusion_attention_grad,
                                 reference=fusion_attention_grad_reference,
                                 fake=_fusion_attention_grad_fake,
                                 info=OpInfo(api="torch_npu", backward_of=OP))
def _tiled_grad(query, key, value, dy, head_num, input_layout, **kwargs):
    return _grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash=False,
                 tiled=True)


def _tiled_grad_supports(query, key, value, dy, head_num, input_layout, **kwargs):
    return None


fusion_attention_grad_op.add_provider("sdpa_flash", _flash_grad, _flash_grad_supports)
fusion_attention_grad_op.add_provider("tiled", _tiled_grad, _tiled_grad_supports)


# -- the grad with a caller's dropout_mask (autograd of a forward given one) -------------------
# derivatives.yaml's grad op has no dropout_mask input: it regenerates a keep-mask from seed /
# offset, and a caller's mask need not be one it can regenerate (any bits will do).  So the
# autograd backward of such a forward calls this internal op, the public grad plus the mask's
# bits, which traces under torch.compile and FakeTensor as one opaque op like the public grad.

MASK_GRAD_SCHEMA = GRAD_SCHEMA.replace(f"{GRAD_OP}(", f"{MASK_GRAD_OP}(", 1).replace(
    "str input_layout, *,", "str input_layout, Tensor dropout_mask, *,", 1)


def _mask_grad_args(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs):
    a = grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    a["dropout_mask"] = dropout_mask
    return a


def check_fusion_attention_grad_dropout_mask(query, key, value, dy, head_num, input_layout,
                                             dropout_mask, **kwargs):
    fa_core.check_grad(MASK_GRAD_OP, _mask_grad_args(query, key, value, dy, head_num,
                                                     input_layout, dropout_mask, kwargs))


def _mask_grad(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs, tiled):
    a = _mask_grad_args(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs)
    p = fa_core.check_grad(MASK_GRAD_OP, a)
    return fa_core.functional_grad(
        fa_core.grad(p, a, int(a["seed"]), int(a["offset"]), use_flash=False, tiled=tiled), a)


def fusion_attention_grad_dropout_mask_reference(query, key, value, dy, head_num, input_layout,
                                                 dropout_mask, **kwargs):
    """:func:`npu_fusion_attention_grad` with the keep-mask read from ``dropout_mask`` (the
    forward's bit-packed mask) instead of regenerated from seed / offset."""
    return _mask_grad(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs,
                      tiled=False)


def _fusion_attention_grad_dropout_mask_fake(query, key, value, dy, head_num, input_layout,
                                             dropout_mask, **kwargs):
    a = _mask_grad_args(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs)
    return fa_core.functional_grad(fa_core.fake_grad(fa_core.check_grad(MASK_GRAD_OP, a), a),
                                   a)


def _tiled_mask_grad(query, key, value, dy, head_num, input_layout, dropout_mask, **kwargs):
    return _mask_grad(query, key, value, dy, head_num, input_layout, dropout_mask, kwargs,
                      tiled=True)


fusion_attention_grad_dropout_mask_op = NpuOp(
    MASK_GRAD_SCHEMA, namespace=INTERNAL_NS, check=check_fusion_attention_grad_dropout_mask,
    reference=fusion_attention_grad_dropout_mask_reference,
    fake=_fusion_attention_grad_dropout_mask_fake,
    info=OpInfo(api="internal", public=False, backward_of=OP))
fusion_attention_grad_dropout_mask_op.add_provider("tiled", _tiled_mask_grad,
                                                   lambda *args, **kwargs: None)


# -- autograd (derivatives.yaml: query, key, value, pse, sink through the grad op) ------------

def _setup_context(ctx, inputs, output):
    a = forward_args(inputs, {})
    attention, softmax_max, softmax_sum, softmax_out, seed, offset, numels = output
    ctx.mark_non_differentiable(softmax_max, softmax_sum, softmax_out)
    ctx.args = {k: a[k] for k in FORWARD_ARGS
                if k not in ("query", "key", "value", "pse", "atten_mask", "sink", "seed",
                             "offset", "padding_mask", "dropout_mask")}
    ctx.draw = (seed, offset, numels)
    # the grad op has no dropout_mask input (derivatives.yaml): a caller's mask is saved too
    dropout_mask = a["dropout_mask"] if a["keep_prob"] < 1.0 else None
    ctx.save_for_backward(a["query"], a["key"], a["value"], a["pse"], a["atten_mask"],
                          a["sink"], attention, softmax_max, softmax_sum, dropout_mask)


def _backward(ctx, grad_attention, *unused):
    q, k, v, pse, mask, sink, attention, smax, ssum, dropout_mask = ctx.saved_tensors
    a = ctx.args
    if grad_attention is None:
        grad_attention = torch.zeros_like(attention)
    seed, offset, numels = ctx.draw
    kwargs = dict(
        pse=pse, atten_mask=mask, softmax_max=smax, softmax_sum=ssum, attention_in=attention,
        scale_value=a["scale"], keep_prob=a["keep_prob"], pre_tockens=a["pre_tockens"],
        next_tockens=a["next_tockens"], inner_precise=a["inner_precise"], seed=seed,
        offset=offset, numels=numels, prefix=a["prefix"],
        actual_seq_qlen=a["actual_seq_qlen"], actual_seq_kvlen=a["actual_seq_kvlen"],
        sparse_mode=a["sparse_mode"], gen_mask_parallel=a["gen_mask_parallel"], sync=a["sync"],
        softmax_layout=a["softmax_layout"], sink=sink)
    if dropout_mask is None:
        dq, dk, dv, dpse, dsink = fusion_attention_grad_op(
            q, k, v, grad_attention, a["head_num"], a["input_layout"], **kwargs)
    else:
        dq, dk, dv, dpse, dsink = fusion_attention_grad_dropout_mask_op(
            q, k, v, grad_attention, a["head_num"], a["input_layout"], dropout_mask, **kwargs)
    grads = [None] * len(FORWARD_ARGS)
    grads[0], grads[1], grads[2] = dq, dk, dv
    grads[FORWARD_ARGS.index("pse")] = dpse if pse is not None else None
    grads[FORWARD_ARGS.index("sink")] = dsink if sink is not None else None
    return tuple(grads)


fusion_attention_op.set_autograd(setup_context=_setup_context, backward=_backward)


# -- Python functions --------------------------------------------------------------------------

def take_token_aliases(op: str, kwargs: dict, pre: int, nxt: int) -> tuple[int, int]:
    """op-plugin's later ops spell the band limits pre_tokens / next_tokens: accept both."""
    for alias, name in (("pre_tokens", "pre_tockens"), ("next_tokens", "next_tockens")):
        if alias in kwargs:
            value = kwargs.pop(alias)
            current = pre if name == "pre_tockens" else nxt
            if current != _INT_MAX:
                raise TypeError(f"{op}() got both '{name}' and its alias '{alias}'")
            if name == "pre_tockens":
                pre = value
            else:
                nxt = value
    if kwargs:
        raise TypeError(f"{op}() got unexpected keyword arguments {sorted(kwargs)}")
    return pre, nxt


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1.0, keep_prob=1.0, pre_tockens=_INT_MAX,
                         next_tockens=_INT_MAX, inner_precise=0, prefix=None,
                         actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                         gen_mask_parallel=True, sync=False, softmax_layout="", sink=None,
                         dropout_mask=None, seed=0, offset=0, **kwargs):
    """Training flash attention: ``Dropout(Softmax(Mask(scale * (pse + q k^T)))) v``.

    Formula (seed 004, aclnnFlashAttentionScore)::

        y         = Softmax(Mask(scale * (pse + query key^T), atten_mask), keep_prob)
        attention = Dropout(y) value          # kept values scaled by 1 / keep_prob
        sink (per head): one extra logit in the softmax, not multiplied with value

    Parameters
    ----------
    query, key, value : Tensor
        float16, bfloat16 or float32 (float64 outside strict mode), all one dtype, in
        ``input_layout``: BSH / SBH (H = N D), BSND, BNSD, or TND (packed tokens; needs
        ``actual_seq_qlen`` / ``actual_seq_kvlen``).  key and value share their shape but for
        Dv <= Dk; Nq must be a multiple of Nkv (GQA); D <= 768, Nq <= 256.
    head_num : int
        Nq.
    pse : Tensor, optional
        Added to ``q k^T`` before the scale, the inputs' dtype: BNSS, BN1Skv or 1NSS; for
        Sq > 1024 also the alibi-compressed ``ori_pse[:, :, -1024:, :]`` (``[B|1, N, 1024,
        Skv]``, Sq == Skv, a lower-triangle mask: sparse_mode 2 / 3, or 0 with next_tockens 0).
        TND: a flat tensor of ``N * sum(Skv_b)`` (per sequence ``[N, 1, Skv_b]``) or
        ``N * sum(Sq_b Skv_b)`` (``[N, Sq_b, Skv_b]``) values, or the alibi-compressed
        ``[B|1, N, 1024, max Skv]`` (every Sq_b == Skv_b, lower triangle); no sequence of
        length 0.  See :mod:`.fa_pse`.
    padding_mask : None
        Not supported by the op (must be None).
    atten_mask : Tensor, optional
        bool / uint8, True (1) = masked.  BNSS, B1SS, 11SS or SS for sparse_mode 0 / 1 / 5
        (TND: SS of max lengths); the compressed 2048x2048 lower-triangle for 2, 3, 4, 7, 8 and
        the 3072x2048 one for 6 (its content is implied by the mode).  None: nothing is masked
        and sparse_mode / pre_tockens / next_tockens do nothing.
    scale, keep_prob : float
        The score scale; the dropout keep probability in (0, 1] (1: no dropout).
    pre_tockens, next_tockens : int
        Band limits (``pre_tokens`` / ``next_tokens`` accepted too); see the sparse modes.
    inner_precise : {0, 1, 2}
        Accepted; rows that see no key always give 0 here (what 2 asks the NPU for).
    prefix : list of int, optional
        sparse_mode 5 / 6: the always-visible leading columns of each batch.
    actual_seq_qlen, actual_seq_kvlen : list of int, optional
        TND: cumulative lengths without a leading 0 (``[2, 4, 6]``); trailing zeros: batches
        that take no part.
    sparse_mode : int in [0, 8]
        0 default (the mask and the band ``-pre <= j - i <= next``), 1 all-mask, 2 left-up
        causal, 3 right-down causal, 4 band from the bottom-right, 5 / 6 prefix (full / compressed
        mask), 7 / 8 TND pieces of a split causal sequence (right-down / left-up causal, the last
        / first batch a band).
    gen_mask_parallel, sync : bool
        Accepted (how the NPU schedules its mask generation); no effect.
    softmax_layout : str
        "" or, with TND, "TND".  TND statistics are ``[T, N, 8]`` either way; "TND" orders
        their rows token-major, "" (NTD) head-major within each sequence (batch ``b``'s
        ``len_b * N`` rows hold head 0's tokens, then head 1's...), the order
        npu_ring_attention_update reads.
    sink : Tensor, optional
        ``[Nq]`` extra logits (op-plugin's newer schema).
    dropout_mask : Tensor, optional
        uint8, a caller's bit-packed keep-mask (``_npu_dropout_gen_mask(x, [B, N, Sq, Skv],
        p=1 - keep_prob, seed, offset)``): element ``e`` of ``[B, N, Sq, Skv]`` (TND: the
        sequences' ``[N, Sq_b, Skv_b]`` one after the other) is kept when bit ``e % 8`` of byte
        ``e // 8`` is 1 (least significant bit first); at least ``ceil(numels / 8)`` bytes.
        Used instead of the op's own mask (only when keep_prob < 1), in the forward and in
        its autograd backward; ``seed`` / ``offset`` are returned as given.
    seed, offset : int
        0: draw from the generator (seed = its ``manual_seed``, offset 0 on the first draw after
        seeding, as on the NPU); nonzero: regenerate the mask of a previous call or of
        ``_npu_dropout_gen_mask(x, [B, N, Sq, Skv], 1 - keep_prob, seed, offset)``.

    Returns
    -------
    (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)
        attention_out in query's layout (head dim Dv) and dtype; softmax_max / softmax_sum the
        row max and exp-sum of the scaled scores as float32 ``[B, N, Sq, 8]`` (TND
        ``[T, N, 8]``), 8 equal copies; softmax_out an empty placeholder; the keep-mask's seed,
        offset and element count (0, 0, 0 when keep_prob = 1).

    Constraints
    -----------
    Strict mode: Atlas A2 / A3 training parts; no float64.  7 / 8 only with TND and without pse;
    5 not with TND; prefix batch <= 32.

    Notes
    -----
    Calls the fused CPU kernels cannot take (masks other than top-left causal, pse, sink,
    dropout, TND) run on online-softmax tiles (:mod:`.fa_tiled`) that skip fully masked tiles.
    The keep-mask is not the NPU's Philox stream: element ``e`` (in dropout_mask's order) is drawn
    by a ``torch.Generator`` seeded from a hash of (seed, offset, e // 16384), so the forward,
    the grad, any recomputation and ``_npu_dropout_gen_mask`` with the same seed / offset agree.  The fused-kernel path (dense, no pse / sink / dropout, no or top-left causal
    mask) returns ``softmax_max = logsumexp`` and ``softmax_sum = 1``: the same probabilities and
    the same ``max + log(sum)``.  float64 calls return float64 statistics.  Differentiable in
    query, key, value, pse and sink through :func:`npu_fusion_attention_grad`.

    Examples
    --------
    >>> q = k = v = torch.randn(1, 8, 256, 64, dtype=torch.float16)
    >>> mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    >>> out = npu_anywhere.npu_fusion_attention(q, k, v, 8, "BNSD", atten_mask=mask,
    ...                                         scale=0.125, sparse_mode=2)[0]
    """
    pre_tockens, next_tockens = take_token_aliases(OP, kwargs, pre_tockens, next_tockens)
    return fusion_attention_op(query, key, value, head_num, input_layout, pse, padding_mask,
                               atten_mask, scale, keep_prob, pre_tockens, next_tockens,
                               inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen,
                               sparse_mode, gen_mask_parallel, sync, softmax_layout, sink,
                               dropout_mask, seed, offset)


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None,
                              padding_mask=None, atten_mask=None, softmax_max=None,
                              softmax_sum=None, softmax_in=None, attention_in=None,
                              scale_value=1.0, keep_prob=1.0, pre_tockens=_INT_MAX,
                              next_tockens=_INT_MAX, inner_precise=0, seed=0, offset=0,
                              numels=0, prefix=None, actual_seq_qlen=None,
                              actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None, **kwargs):
    """Gradient of :func:`npu_fusion_attention` from its saved statistics.

    Formula (P recomputed from the forward's ``softmax_max`` m and ``softmax_sum`` l)::

        P = exp(scale * (q k^T + pse) - m) / l;   D = rowsum(dy * attention_in)
        dS = P * (Z * (dy v^T) - D)               # Z: the keep-mask / keep_prob
        dq = scale dS k;  dk = scale dS^T q;  dv = (P * Z)^T dy;  dpse = scale dS

    Ring / context-parallel attention passes the *global* m, l and attention_in of the
    merged result with one KV chunk's key / value: the chunk's share of dq and its dk, dv come
    out.  ``seed`` / ``offset`` (from the forward) regenerate its keep-mask.

    Returns ``(dq, dk, dv, dpse, dsink)``: the shapes of query, key, value, pse and sink; dpse
    is None without pse and dsink an empty float32 ``[0]`` without sink, as op-plugin returns
    them.
    """
    pre_tockens, next_tockens = take_token_aliases(GRAD_OP, kwargs, pre_tockens, next_tockens)
    return fusion_attention_grad_op(
        query, key, value, dy, head_num, input_layout, pse=pse, padding_mask=padding_mask,
        atten_mask=atten_mask, softmax_max=softmax_max, softmax_sum=softmax_sum,
        softmax_in=softmax_in, attention_in=attention_in, scale_value=scale_value,
        keep_prob=keep_prob, pre_tockens=pre_tockens, next_tockens=next_tockens,
        inner_precise=inner_precise, seed=seed, offset=offset, numels=numels, prefix=prefix,
        actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen,
        sparse_mode=sparse_mode, gen_mask_parallel=gen_mask_parallel, sync=sync,
        softmax_layout=softmax_layout, sink=sink)


TORCH_NPU_FUNCTIONS = {
    "npu_fusion_attention": npu_fusion_attention,
    "npu_fusion_attention_grad": npu_fusion_attention_grad,
}

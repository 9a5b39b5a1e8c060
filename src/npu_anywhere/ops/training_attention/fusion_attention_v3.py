"""torch_npu.npu_fusion_attention_v3 and npu_fusion_attention_grad_v3.

The graph-mode form of :mod:`.fusion_attention` (seed 004): the same formula and modes, but
``actual_seq_qlen`` / ``actual_seq_kvlen`` are int64 tensors and the dropout seed / offset come
back as ``[1]`` int64 tensors (op-plugin ``op_plugin/python/meta/_fake_registrations.py``), so
every output is a tensor and the op traces without data-dependent sizes.  Under FakeTensor the
length tensors have no values: the checks that read them (cumulative ends, the TND mask shape)
run in eager only.

Both have ``.out`` overloads (op-plugin ``op_plugin_functions.yaml``; rules from
``FlashAttentionKernelNpuOpApi.cpp``, ``npu_fusion_attention_v3_out`` /
``npu_fusion_attention_grad_v3_out``, which call the varlen kernels only): they take an optional
``workspace`` and write the results into the given tensors, which must have exactly the shapes
and dtypes of the functional results.  They need ``actual_seq_qlen`` and ``actual_seq_kvlen``,
take no ``sink`` (the forward rejects it; the backward, given one, writes nothing), and with a
``workspace`` only the TND layout.  Not on Ascend 950 (nor are the functional forms here).
The NPU's forward rebinds ``seed`` / ``offset`` to fresh host tensors instead of writing the
ones passed; here they are written, so the returned tensors are the ones passed, as the schema
says.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo, define_out
from . import fa_core
from .fusion_attention import _INT_MAX, draw_seed, take_token_aliases

OP = "npu_fusion_attention_v3"
GRAD_OP = "npu_fusion_attention_grad_v3"
SCHEMA = (
    "npu_fusion_attention_v3(Tensor query, Tensor key, Tensor value, int head_num, "
    "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
    "float scale=1., float keep_prob=1., int pre_tockens=2147483647, "
    "int next_tockens=2147483647, int inner_precise=0, SymInt[]? prefix=None, "
    "Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, int sparse_mode=0, "
    "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)")
GRAD_SCHEMA = (
    "npu_fusion_attention_grad_v3(Tensor query, Tensor key, Tensor value, Tensor dy, "
    "int head_num, str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, "
    "Tensor? atten_mask=None, Tensor? softmax_max=None, Tensor? softmax_sum=None, "
    "Tensor? softmax_in=None, Tensor? attention_in=None, float scale_value=1., "
    "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
    "int inner_precise=0, Tensor? seed=None, Tensor? offset=None, SymInt[]? prefix=None, "
    "Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, int sparse_mode=0, "
    "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None) "
    "-> (Tensor, Tensor, Tensor, Tensor, Tensor)")

ARGS = ("query", "key", "value", "head_num", "input_layout", "pse", "padding_mask",
        "atten_mask", "scale", "keep_prob", "pre_tockens", "next_tockens", "inner_precise",
        "prefix", "actual_seq_qlen", "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel",
        "sync", "softmax_layout", "sink")
_DEFAULTS = dict(pse=None, padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                 pre_tockens=_INT_MAX, next_tockens=_INT_MAX, inner_precise=0, prefix=None,
                 actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0,
                 gen_mask_parallel=True, sync=False, softmax_layout="", sink=None)
_GRAD_DEFAULTS = dict(_DEFAULTS, softmax_max=None, softmax_sum=None, softmax_in=None,
                      attention_in=None, scale_value=1.0, seed=None, offset=None)
del _GRAD_DEFAULTS["scale"]


def _is_fake(t) -> bool:
    return isinstance(t, torch.Tensor) and torch._subclasses.fake_tensor.is_fake(t)


def _lengths(a: dict) -> bool:
    """Replace the length tensors by lists in ``a``; False when they are fake (no values)."""
    known = True
    for name, x in (("actual_seq_qlen", a["query"]), ("actual_seq_kvlen", a["key"])):
        t = a[name]
        if t is None:
            continue
        checks.expect(t.dim() == 1 and not t.dtype.is_floating_point, fa_core_op(a), name,
                      "a 1-D integer tensor of cumulative lengths",
                      lambda: f"{t.dtype} shape {tuple(t.shape)}", TypeError)
        if _is_fake(t):
            known = False
            # one placeholder batch per entry: sizes come from the tensors' metadata only
            a[name] = [0] * (t.shape[0] - 1) + [x.shape[0]]
        else:
            a[name] = [int(v) for v in t.tolist()]
    return known


def fa_core_op(a: dict) -> str:
    return GRAD_OP if "dy" in a else OP


def _forward_args(args, kwargs) -> dict:
    a = dict(_DEFAULTS)
    a.update(zip(ARGS, args))
    a.update(kwargs)
    a.update(dropout_mask=None, seed=0, offset=0)
    return a


def _grad_args(query, key, value, dy, head_num, input_layout, kwargs) -> dict:
    a = dict(_GRAD_DEFAULTS)
    a.update(kwargs)
    a.update(query=query, key=key, value=value, dy=dy, head_num=head_num,
             input_layout=input_layout, scale=a["scale_value"])
    return a


def _scalar(t, default: int = 0):
    if t is None:
        return default
    return int(t.reshape(-1)[0].item())


def check_fusion_attention_v3(*args, **kwargs):
    a = _forward_args(args, kwargs)
    fa_core.check_forward(OP, a, _lengths(a))


def _run_forward(args, kwargs, use_flash: bool):
    a = _forward_args(args, kwargs)
    p = fa_core.check_forward(OP, a, _lengths(a))
    seed, offset = draw_seed(a)      # the generator's, as npu_fusion_attention draws them
    outs = fa_core.forward(p, a, seed, offset, use_flash=use_flash)
    dev = a["query"].device
    return (*outs, torch.tensor([seed], dtype=torch.int64, device=dev),
            torch.tensor([offset], dtype=torch.int64, device=dev))


def fusion_attention_v3_reference(*args, **kwargs):
    return _run_forward(args, kwargs, use_flash=False)


def _flash_forward(*args, **kwargs):
    return _run_forward(args, kwargs, use_flash=True)


def _flash_supports(*args, **kwargs):
    a = _forward_args(args, kwargs)
    return fa_core.flash_reason(fa_core.check_forward(OP, a, _lengths(a)), a)


def _fake(*args, **kwargs):
    a = _forward_args(args, kwargs)
    p = fa_core.check_forward(OP, a, _lengths(a))
    q = a["query"]
    return (*fa_core.fake_forward(p, a), q.new_empty(1, dtype=torch.int64),
            q.new_empty(1, dtype=torch.int64))


def check_fusion_attention_grad_v3(query, key, value, dy, head_num, input_layout, **kwargs):
    a = _grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    fa_core.check_grad(GRAD_OP, a, _lengths(a))


def _run_grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash: bool):
    a = _grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    p = fa_core.check_grad(GRAD_OP, a, _lengths(a))
    return fa_core.functional_grad(
        fa_core.grad(p, a, _scalar(a["seed"]), _scalar(a["offset"]), use_flash=use_flash), a)


def fusion_attention_grad_v3_reference(query, key, value, dy, head_num, input_layout, **kwargs):
    return _run_grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash=False)


def _flash_grad(query, key, value, dy, head_num, input_layout, **kwargs):
    return _run_grad(query, key, value, dy, head_num, input_layout, kwargs, use_flash=True)


def _flash_grad_supports(query, key, value, dy, head_num, input_layout, **kwargs):
    a = _grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    return fa_core.flash_reason(fa_core.check_grad(GRAD_OP, a, _lengths(a)), a)


def _grad_fake(query, key, value, dy, head_num, input_layout, **kwargs):
    a = _grad_args(query, key, value, dy, head_num, input_layout, kwargs)
    return fa_core.functional_grad(fa_core.fake_grad(fa_core.check_grad(GRAD_OP, a, _lengths(a)),
                                                     a), a)


fusion_attention_v3_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_fusion_attention_v3,
                               reference=fusion_attention_v3_reference, fake=_fake,
                               random=True, info=OpInfo(api="torch_npu"))
fusion_attention_grad_v3_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                    check=check_fusion_attention_grad_v3,
                                    reference=fusion_attention_grad_v3_reference,
                                    fake=_grad_fake, info=OpInfo(api="torch_npu",
                                                                 backward_of=OP))
fusion_attention_v3_op.add_provider("sdpa_flash", _flash_forward, _flash_supports)
fusion_attention_grad_v3_op.add_provider("sdpa_flash", _flash_grad, _flash_grad_supports)


def _setup_context(ctx, inputs, output):
    a = dict(_DEFAULTS)
    a.update(zip(ARGS, inputs))
    attention, smax, ssum, softmax_out, seed, offset = output
    ctx.mark_non_differentiable(smax, ssum, softmax_out, seed, offset)
    ctx.args = {k: a[k] for k in ARGS if k not in ("query", "key", "value", "pse", "atten_mask",
                                                   "sink", "padding_mask", "actual_seq_qlen",
                                                   "actual_seq_kvlen")}
    ctx.save_for_backward(a["query"], a["key"], a["value"], a["pse"], a["atten_mask"],
                          a["sink"], a["actual_seq_qlen"], a["actual_seq_kvlen"], attention,
                          smax, ssum, seed, offset)


def _backward(ctx, grad_attention, *unused):
    q, k, v, pse, mask, sink, qlen, kvlen, attention, smax, ssum, seed, offset = ctx.saved_tensors
    a = ctx.args
    if grad_attention is None:
        grad_attention = torch.zeros_like(attention)
    dq, dk, dv, dpse, dsink = fusion_attention_grad_v3_op(
        q, k, v, grad_attention, a["head_num"], a["input_layout"], pse=pse, atten_mask=mask,
        softmax_max=smax, softmax_sum=ssum, attention_in=attention, scale_value=a["scale"],
        keep_prob=a["keep_prob"], pre_tockens=a["pre_tockens"], next_tockens=a["next_tockens"],
        inner_precise=a["inner_precise"], seed=seed, offset=offset, prefix=a["prefix"],
        actual_seq_qlen=qlen, actual_seq_kvlen=kvlen, sparse_mode=a["sparse_mode"],
        gen_mask_parallel=a["gen_mask_parallel"], sync=a["sync"],
        softmax_layout=a["softmax_layout"], sink=sink)
    grads = [None] * len(ARGS)
    grads[0], grads[1], grads[2] = dq, dk, dv
    grads[ARGS.index("pse")] = dpse if pse is not None else None
    grads[ARGS.index("sink")] = dsink if sink is not None else None
    return tuple(grads)


fusion_attention_v3_op.set_autograd(setup_context=_setup_context, backward=_backward)


# -- .out overloads ----------------------------------------------------------------------------

OUT_SCHEMA = (
    "npu_fusion_attention_v3.out(Tensor query, Tensor key, Tensor value, int head_num, "
    "str input_layout, Tensor? pse=None, Tensor? padding_mask=None, Tensor? atten_mask=None, "
    "float scale=1., float keep_prob=1., int pre_tockens=2147483647, "
    "int next_tockens=2147483647, int inner_precise=0, int[]? prefix=None, "
    "Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, int sparse_mode=0, "
    "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None, "
    "Tensor? workspace=None, *, Tensor(a!) attention_score, Tensor(b!) softmax_max, "
    "Tensor(c!) softmax_sum, Tensor(d!) softmax_out, Tensor(e!) seed, Tensor(f!) offset) "
    "-> (Tensor(a!), Tensor(b!), Tensor(c!), Tensor(d!), Tensor(e!), Tensor(f!))")
GRAD_OUT_SCHEMA = (
    "npu_fusion_attention_grad_v3.out(Tensor query, Tensor key, Tensor value, Tensor dy, "
    "int head_num, str input_layout, *, Tensor? pse=None, Tensor? padding_mask=None, "
    "Tensor? atten_mask=None, Tensor? softmax_max=None, Tensor? softmax_sum=None, "
    "Tensor? softmax_in=None, Tensor? attention_in=None, float scale_value=1., "
    "float keep_prob=1., int pre_tockens=2147483647, int next_tockens=2147483647, "
    "int inner_precise=0, Tensor? seed=None, Tensor? offset=None, int[]? prefix=None, "
    "Tensor? actual_seq_qlen=None, Tensor? actual_seq_kvlen=None, int sparse_mode=0, "
    "bool gen_mask_parallel=True, bool sync=False, str softmax_layout=\"\", Tensor? sink=None, "
    "Tensor? workspace=None, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, Tensor(d!) dpse, "
    "Tensor(e!) dsink) -> (Tensor(a!), Tensor(b!), Tensor(c!), Tensor(d!), Tensor(e!))")
OUT_NAMES = ("attention_score", "softmax_max", "softmax_sum", "softmax_out", "seed", "offset")
GRAD_OUT_NAMES = ("dq", "dk", "dv", "dpse", "dsink")
_GRAD_POSITIONAL = ("query", "key", "value", "dy", "head_num", "input_layout")


def _bind_out(positional, names, args, kwargs):
    """``(op kwargs, workspace, {out name: tensor})`` of a ``.out`` call."""
    a = dict(zip(positional + ("workspace",), args))
    a.update(kwargs)
    outs = {n: a.pop(n) for n in names}
    return a, a.pop("workspace", None), outs


def _given(t) -> bool:
    return t is not None and t.numel() > 0     # the kernel reads an empty tensor as absent


def _check_out_rules(op, a, workspace) -> None:
    checks.expect(a.get("sink") is None, op, "sink", "None (the .out overload takes no sink)",
                  lambda: "a tensor", ValueError)
    for name in ("actual_seq_qlen", "actual_seq_kvlen"):
        checks.expect(_given(a.get(name)), op, name, "a tensor of cumulative lengths (the "
                      ".out overload runs the varlen kernel only)", "None or empty",
                      ValueError)
    checks.expect(workspace is None or a["input_layout"].upper() == "TND", op, "input_layout",
                  "'TND' when a workspace is given", lambda: repr(a["input_layout"]),
                  ValueError)


def _check_written(op, outs: dict, expected, reserved=()) -> None:
    """Each output exactly as the call returns it; a ``reserved`` one (nothing to return: an
    empty softmax_out, dpse without pse, dsink without sink) may be anything, unwritten."""
    for (name, t), e in zip(outs.items(), expected):
        if name in reserved and e.numel() == 0:
            continue
        checks.expect(tuple(t.shape) == tuple(e.shape) and t.dtype == e.dtype
                      and t.device == e.device, op, name,
                      lambda e=e: f"shape {tuple(e.shape)}, dtype {e.dtype} on {e.device} "
                                  "(what the call returns)",
                      lambda t=t: f"shape {tuple(t.shape)}, dtype {t.dtype} on {t.device}",
                      RuntimeError)


def _write(outs: dict, results) -> None:
    for t, r in zip(outs.values(), results):
        # a reserved output of another shape, or an absent result (dpse without pse): unwritten
        if r is not None and tuple(t.shape) == tuple(r.shape):
            t.copy_(r)


def check_fusion_attention_v3_out(*args, **kwargs) -> None:
    a, workspace, outs = _bind_out(ARGS, OUT_NAMES, args, kwargs)
    fa = _forward_args((), a)
    p = fa_core.check_forward(OP, fa, _lengths(fa))
    _check_out_rules(OP, a, workspace)
    q = a["query"]
    # softmax_out is reserved: ACL-graph code passes torch.empty_like(softmax_max) for it
    _check_written(OP, outs, (*fa_core.fake_forward(p, fa), q.new_empty(1, dtype=torch.int64),
                              q.new_empty(1, dtype=torch.int64)), reserved=("softmax_out",))


def fusion_attention_v3_out_reference(*args, **kwargs) -> None:
    a, _workspace, outs = _bind_out(ARGS, OUT_NAMES, args, kwargs)
    _write(outs, fusion_attention_v3_op(**a))


def check_fusion_attention_grad_v3_out(*args, **kwargs) -> None:
    a, workspace, outs = _bind_out(_GRAD_POSITIONAL, GRAD_OUT_NAMES, args, kwargs)
    rest = {k: v for k, v in a.items() if k not in _GRAD_POSITIONAL}
    fa = _grad_args(*(a[n] for n in _GRAD_POSITIONAL), rest)
    p = fa_core.check_grad(GRAD_OP, fa, _lengths(fa))
    _check_out_rules(GRAD_OP, a, workspace)
    _check_written(GRAD_OP, outs, fa_core.fake_grad(p, fa), reserved=("dpse", "dsink"))


def fusion_attention_grad_v3_out_reference(*args, **kwargs) -> None:
    a, _workspace, outs = _bind_out(_GRAD_POSITIONAL, GRAD_OUT_NAMES, args, kwargs)
    positional = [a.pop(n) for n in _GRAD_POSITIONAL]
    _write(outs, fusion_attention_grad_v3_op(*positional, **a))


_, fusion_attention_v3_out_op = define_out(
    OUT_SCHEMA, check=check_fusion_attention_v3_out, reference=fusion_attention_v3_out_reference,
    no_grad="the .out overload writes into given tensors; differentiate the functional form")
_, fusion_attention_grad_v3_out_op = define_out(
    GRAD_OUT_SCHEMA, check=check_fusion_attention_grad_v3_out,
    reference=fusion_attention_grad_v3_out_reference,
    no_grad="a backward op has no backward of its own")


def npu_fusion_attention_v3(query, key, value, head_num, input_layout, pse=None,
                            padding_mask=None, atten_mask=None, scale=1.0, keep_prob=1.0,
                            pre_tockens=_INT_MAX, next_tockens=_INT_MAX, inner_precise=0,
                            prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                            sparse_mode=0, gen_mask_parallel=True, sync=False,
                            softmax_layout="", sink=None, **kwargs):
    """:func:`npu_fusion_attention` in graph-mode form (seed 004).

    The same formula, layouts, sparse modes, pse, sink and dropout; ``actual_seq_qlen`` /
    ``actual_seq_kvlen`` are int64 tensors of cumulative lengths, and the outputs are six
    tensors ``(attention_out, softmax_max, softmax_sum, softmax_out, seed, offset)`` with
    ``seed`` / ``offset`` as ``[1]`` int64 tensors on query's device (the keep-mask's, 0 when
    keep_prob = 1).  No numels output.  Differentiable in query, key, value, pse and sink
    through :func:`npu_fusion_attention_grad_v3`.  The fused-kernel provider takes the calls
    it computes exactly (dense, no pse / sink / dropout, no or top-left causal mask).
    """
    pre_tockens, next_tockens = take_token_aliases(OP, kwargs, pre_tockens, next_tockens)
    return fusion_attention_v3_op(query, key, value, head_num, input_layout, pse, padding_mask,
                                  atten_mask, scale, keep_prob, pre_tockens, next_tockens,
                                  inner_precise, prefix, actual_seq_qlen, actual_seq_kvlen,
                                  sparse_mode, gen_mask_parallel, sync, softmax_layout, sink)


def npu_fusion_attention_grad_v3(query, key, value, dy, head_num, input_layout, *, pse=None,
                                 padding_mask=None, atten_mask=None, softmax_max=None,
                                 softmax_sum=None, softmax_in=None, attention_in=None,
                                 scale_value=1.0, keep_prob=1.0, pre_tockens=_INT_MAX,
                                 next_tockens=_INT_MAX, inner_precise=0, seed=None, offset=None,
                                 prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                                 sparse_mode=0, gen_mask_parallel=True, sync=False,
                                 softmax_layout="", sink=None, **kwargs):
    """:func:`npu_fusion_attention_grad` for v3: ``seed`` / ``offset`` and the lengths are
    tensors.  Returns ``(dq, dk, dv, dpse, dsink)``."""
    pre_tockens, next_tockens = take_token_aliases(GRAD_OP, kwargs, pre_tockens, next_tockens)
    return fusion_attention_grad_v3_op(
        query, key, value, dy, head_num, input_layout, pse=pse, padding_mask=padding_mask,
        atten_mask=atten_mask, softmax_max=softmax_max, softmax_sum=softmax_sum,
        softmax_in=softmax_in, attention_in=attention_in, scale_value=scale_value,
        keep_prob=keep_prob, pre_tockens=pre_tockens, next_tockens=next_tockens,
        inner_precise=inner_precise, seed=seed, offset=offset, prefix=prefix,
        actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen,
        sparse_mode=sparse_mode, gen_mask_parallel=gen_mask_parallel, sync=sync,
        softmax_layout=softmax_layout, sink=sink)


TORCH_NPU_FUNCTIONS = {
    "npu_fusion_attention_v3": npu_fusion_attention_v3,
    "npu_fusion_attention_grad_v3": npu_fusion_attention_grad_v3,
}

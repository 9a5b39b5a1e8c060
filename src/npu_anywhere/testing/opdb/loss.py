"""Op database entries of the loss family (cross-entropy, softmax cross-entropy with logits,
the vocab-parallel cross-entropy pieces)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _logits(n, c, dtype=torch.float32, seed=0):
    return torch.randn(n, c, generator=_gen(seed), dtype=torch.float64).to(dtype)


def _ce_args(dtype=torch.float32, n=5, c=7, **kw):
    target = torch.tensor([1, 0, 6, 3, 3, 2, 5][:n])
    return (_logits(n, c, dtype), target), kw


def _cross_entropy() -> None:
    e = _entry("npu_cross_entropy_loss")
    e.samples += [
        Sample("mean_bf16", lambda: _ce_args(torch.bfloat16)),
        Sample("sum_weight_ignore_smooth", lambda: _ce_args(
            weight=torch.rand(7, generator=_gen(1)) + 0.1, reduction="sum", ignore_index=3,
            label_smoothing=0.2)),
        # target by keyword: a differentiable sample's positional tensors all require grad
        Sample("none_zloss_fp64", lambda: ((_logits(5, 7, torch.float64),), dict(
            target=torch.tensor([1, 0, 6, 3, 3]), reduction="none", ignore_index=3,
            label_smoothing=0.1, lse_square_scale_for_zloss=0.2, return_zloss=True)),
            differentiable=True),
    ]
    e.errors += [
        ErrorSample("reduction", lambda: _ce_args(reduction="avg"), ValueError,
                    "npu_cross_entropy_loss: expected reduction one of"),
        ErrorSample("target_dtype", lambda: ((_logits(3, 4), torch.zeros(3)), {}), TypeError,
                    "npu_cross_entropy_loss: expected target dtype in"),
        ErrorSample("target_shape", lambda: ((_logits(3, 4), torch.zeros(4, dtype=torch.long)),
                                             {}), RuntimeError,
                    "npu_cross_entropy_loss: expected target the shape"),
        ErrorSample("weight_shape", lambda: _ce_args(weight=torch.ones(6)), RuntimeError,
                    "npu_cross_entropy_loss: expected weight the shape"),
        ErrorSample("ignore_index", lambda: _ce_args(ignore_index=7), ValueError,
                    "npu_cross_entropy_loss: expected ignore_index less than C = 7"),
        ErrorSample("label_smoothing", lambda: _ce_args(label_smoothing=1.0), ValueError,
                    "npu_cross_entropy_loss: expected label_smoothing in \\[0.0, 1.0\\)"),
        ErrorSample("three_d", lambda: ((torch.randn(2, 3, 4), torch.zeros(2, dtype=torch.long)),
                                        {}), ValueError,
                    "npu_cross_entropy_loss: expected input a 2-D tensor"),
    ]

    def grad_args(reduction="mean", dtype=torch.float32, **kw):
        x = _logits(5, 7, dtype)
        log_prob = torch.log_softmax(x.double(), -1).to(dtype)
        n = 5 if reduction == "none" else 1
        grad = torch.randn(n, generator=_gen(4), dtype=torch.float64).to(dtype)
        return (grad, log_prob, torch.tensor([1, 0, 6, 3, 3])), dict(reduction=reduction, **kw)

    b = _entry("npu_cross_entropy_loss_backward")
    b.samples += [
        Sample("mean_fp16", lambda: grad_args(dtype=torch.float16)),
        Sample("none_weight_smooth_zloss", lambda: grad_args(
            "none", weight=torch.rand(7, generator=_gen(2)) + 0.1, ignore_index=3,
            label_smoothing=0.3, grad_zloss=torch.randn(5, generator=_gen(5)),
            lse_for_zloss=torch.randn(5, generator=_gen(6)), lse_square_scale_for_zloss=0.1)),
    ]
    b.errors += [
        ErrorSample("grad_shape", lambda: ((torch.randn(4), grad_args()[0][1],
                                            torch.tensor([1, 0, 6, 3, 3])),
                                           dict(reduction="none")), RuntimeError,
            "npu_cross_entropy_loss_backward: expected grad_loss the shape of loss"),
        ErrorSample("grad_dtype", lambda: ((torch.randn(1).half(), grad_args()[0][1],
                                            torch.tensor([1, 0, 6, 3, 3])), {}), TypeError,
                    "npu_cross_entropy_loss_backward: expected grad_loss the same dtype"),
    ]


_cross_entropy()


def _softmax_ce() -> None:
    def pair(dtype=torch.float32, n=3, c=6, seed=7):
        gen = _gen(seed)
        labels = torch.rand(n, c, generator=gen, dtype=torch.float64)
        labels = labels / labels.sum(-1, keepdim=True)
        return _logits(n, c, dtype, seed).to(dtype), labels.to(dtype)

    e = _entry("npu_softmax_cross_entropy_with_logits")
    e.samples += [
        Sample("bf16", lambda: (pair(torch.bfloat16), {})),
        Sample("fp64", lambda: (pair(torch.float64), {}), differentiable=True),
    ]
    e.errors += [
        ErrorSample("labels_shape", lambda: ((_logits(3, 4), torch.rand(3, 5)), {}), RuntimeError,
                    "npu_softmax_cross_entropy_with_logits: expected labels the shape"),
        ErrorSample("labels_dtype", lambda: ((_logits(3, 4), torch.rand(3, 4).half()), {}),
                    TypeError, "npu_softmax_cross_entropy_with_logits: expected labels the same"),
        ErrorSample("one_d", lambda: ((torch.randn(4), torch.rand(4)), {}), ValueError,
                    "npu_softmax_cross_entropy_with_logits: expected self a 2-D tensor"),
    ]
    b = _entry("npu_softmax_cross_entropy_with_logits_backward")
    b.samples += [
        Sample("fp16", lambda: ((torch.randn(3, generator=_gen(8)).half(),
                                 *pair(torch.float16)), {})),
    ]
    b.errors += [
        ErrorSample("grad_shape", lambda: ((torch.randn(4), *pair()), {}), RuntimeError,
                    "npu_softmax_cross_entropy_with_logits_backward: expected grad the shape"),
    ]


_softmax_ce()


def _vocab_parallel() -> None:
    def mm(dtype=torch.bfloat16, b=11, h=6, v=9, seed=9):
        gen = _gen(seed)
        x = torch.randn(b, h, generator=gen, dtype=torch.float64).to(dtype)
        w = torch.randn(v, h, generator=gen, dtype=torch.float64).to(dtype)
        return x, w

    target = lambda dtype=torch.int64: torch.tensor(  # noqa: E731
        [0, 4, 12, 7, 3, 20, 9, 5, 11, 6, 2], dtype=dtype)

    e = _entry("npu_fused_linear_online_max_sum")
    e.samples += [
        Sample("bf16_logits", lambda: ((*mm(), target(), 3, 12), dict(return_logits=True))),
        Sample("fp16_int32_no_logits", lambda: ((*mm(torch.float16), target(torch.int32), 0, 9),
                                                {})),
    ]
    e.errors += [
        ErrorSample("start_negative", lambda: ((*mm(), target(), -1, 5), {}), ValueError,
                    "npu_fused_linear_online_max_sum: expected vocab_start_index >= 0"),
        ErrorSample("end_before_start", lambda: ((*mm(), target(), 5, 4), {}), ValueError,
                    "npu_fused_linear_online_max_sum: expected vocab_end_index >= "),
        ErrorSample("hidden_mismatch", lambda: ((mm()[0], torch.zeros(9, 5, dtype=torch.bfloat16),
                                                 target(), 0, 9), {}), RuntimeError,
                    "npu_fused_linear_online_max_sum: expected weight size\\(1\\) equal"),
        ErrorSample("target_dtype", lambda: ((*mm(), target().float(), 0, 9), {}), TypeError,
                    "npu_fused_linear_online_max_sum: expected target dtype in"),
    ]

    def stats(b=11, v=9, with_logits=True):
        gen = _gen(10)
        logits = torch.randn(b, v, generator=gen, dtype=torch.float64)
        mx = logits.amax(-1)
        kw = dict(vocab_parallel_logits=logits.to(torch.bfloat16)) if with_logits else {}
        return ((mx.float(), (logits - mx[:, None]).exp().sum(-1).float(),
                 (logits[:, 2] - mx).float()), kw)

    e = _entry("npu_fused_cross_entropy_loss_with_max_sum")
    e.samples += [Sample("softmax", stats), Sample("loss_only", lambda: stats(with_logits=False))]
    e.errors += [
        ErrorSample("label_smoothing", lambda: (stats()[0], dict(label_smoothing=0.1)),
                    ValueError,
                    "npu_fused_cross_entropy_loss_with_max_sum: expected label_smoothing 0.0"),
        ErrorSample("shape", lambda: ((torch.zeros(3), torch.ones(4), torch.zeros(3)), {}),
                    RuntimeError,
                    "npu_fused_cross_entropy_loss_with_max_sum: expected sum_exp_logits the"),
    ]

    def grads(mode="softmax", dtype=torch.bfloat16):
        x, w = mm(dtype)
        gen = _gen(11)
        b, v = x.shape[0], w.shape[0]
        mask = torch.tensor([0b10100101, 0b110], dtype=torch.uint8)
        masked = torch.randint(0, v, (b,), generator=gen, dtype=torch.int32)
        kw = {}
        if mode == "softmax":
            kw["softmax"] = torch.softmax(torch.randn(b, v, generator=gen), -1)
        else:
            logits = x.float() @ w.float().t()
            kw["logits_max"] = logits.amax(-1) + 0.5
            kw["sum_exp_logits"] = (logits - kw["logits_max"][:, None]).exp().sum(-1) * 1.5
        return (torch.randn(b, generator=gen), x, w, mask, masked), kw

    e = _entry("npu_fused_linear_cross_entropy_loss_with_max_sum_backward")
    e.samples += [Sample("softmax_bf16", grads),
                  Sample("recompute_fp16", lambda: grads("recompute", torch.float16))]
    e.errors += [
        ErrorSample("no_softmax_no_stats", lambda: (grads()[0], {}), RuntimeError,
                    "npu_fused_linear_cross_entropy_loss_with_max_sum_backward: expected "
                    "logits_max and sum_exp_logits both given"),
        ErrorSample("mask_shape", lambda: ((*grads()[0][:3], torch.zeros(3, dtype=torch.uint8),
                                            grads()[0][4]), grads()[1]), RuntimeError,
                    "npu_fused_linear_cross_entropy_loss_with_max_sum_backward: expected "
                    "target_mask the shape"),
    ]


_vocab_parallel()

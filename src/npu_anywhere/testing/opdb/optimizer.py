"""Op database entries of the optimizer family (the .out overloads of the Adam steps)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _state(shape=(3, 5), dtype=torch.float32, seed=0, **override):
    gen = torch.Generator().manual_seed(seed)
    t = {name: torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
         for name in ("var", "m", "grad")}
    t["v"] = torch.rand(*shape, generator=gen, dtype=torch.float64).to(dtype)
    t.update(override)
    return t


def _adam(dtype=torch.float32, nesterov=False, **override):
    def make():
        t = _state(dtype=dtype, **override)
        return ((0.9 ** 3, 0.999 ** 3, 1e-2, 0.9, 0.999, 1e-8, t["grad"], False, nesterov),
                dict(var=t["var"], m=t["m"], v=t["v"]))
    return make


def _adam_w(dtype=torch.float32, amsgrad=False, maximize=False, max_grad_norm=True, **override):
    def make():
        t = _state(dtype=dtype, **override)
        mgn = (t["v"] + 0.25) if max_grad_norm else None
        return ((0.9 ** 2, 0.999 ** 2, 1e-2, 0.05, 0.9, 0.999, 1e-8, t["grad"], mgn, amsgrad,
                 maximize), dict(var=t["var"], m=t["m"], v=t["v"]))
    return make


def _bert(dtype=torch.float32, step_size=None, adam_mode=0, **override):
    def make():
        t = _state(dtype=dtype, **override)
        return ((1e-2, 0.9, 0.99, 1e-6, t["grad"], 1.0, 3.0, 0.01, step_size, adam_mode),
                dict(var=t["var"], m=t["m"], v=t["v"]))
    return make


e = _entry("npu_apply_adam.out")
e.samples += [Sample("fp32", _adam()), Sample("nesterov_bf16", _adam(torch.bfloat16, True))]
e.errors += [
    ErrorSample("m_shape", _adam(m=torch.zeros(3, 4)), RuntimeError,
                "npu_apply_adam: expected m the shape of var"),
    ErrorSample("grad_dtype", _adam(grad=torch.zeros(3, 5, dtype=torch.float16)), TypeError,
                "npu_apply_adam: expected grad the same dtype as var"),
]

e = _entry("npu_apply_adam_w.out")
e.samples += [Sample("amsgrad_fp32", _adam_w(amsgrad=True)),
              Sample("maximize_fp16_no_norm", _adam_w(torch.float16, maximize=True,
                                                      max_grad_norm=False))]
e.errors += [
    ErrorSample("amsgrad_without_norm", _adam_w(amsgrad=True, max_grad_norm=False), RuntimeError,
                "npu_apply_adam_w: expected max_grad_norm a tensor when amsgrad is True"),
    ErrorSample("int_var", _adam_w(var=torch.zeros(3, 5, dtype=torch.int32)), TypeError,
                "npu_apply_adam_w: expected var dtype in"),
]

e = _entry("npu_bert_apply_adam.out")
e.samples += [Sample("adam_clip_fp32", _bert()),
              Sample("mbart_step_fp16", _bert(torch.float16, step_size=5e-3, adam_mode=1))]
e.errors += [
    ErrorSample("adam_mode", _bert(adam_mode=2), ValueError,
                "npu_bert_apply_adam: expected adam_mode 0"),
    ErrorSample("bf16", _bert(torch.bfloat16), TypeError,
                "npu_bert_apply_adam: expected var dtype in"),
]

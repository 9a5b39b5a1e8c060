"""torch_npu.npu.obfuscation_initialize / obfuscation_calculate / obfuscation_finalize.

The PMCC (Privacy and Model Confidential Computing) model-obfuscation engine: ``initialize``
opens a socket to the engine's client application, which drives a trusted application in a
TEE, and returns the socket as a ``(1,)`` int32 tensor; ``calculate`` sends a tensor through
the engine and returns the obfuscated tensor (x's shape and dtype); ``finalize`` closes the
socket.  Schemas: op-plugin ``op_plugin_functions.yaml``; host code
``op_plugin/ops/opapi/Obfuscation*KernelNpuOpApi.cpp`` (data_type required; the int codes).

The docs give two expected outcomes (op-plugin ``docs/zh/custom_APIs/torch_npu-npu/
torch_npu-npu-obfuscation_initialize.md``): with PMCC deployed, the engine's answer; without
it, error code 507018.  No machine here has the engine (it lives in an Ascend server's TEE), so
every call that passes the documented argument checks raises RuntimeError with that code,
which is what the same call does on an NPU server without PMCC.  FakeTensor and
``torch.compile`` see the output shapes, as graph mode sees them before the engine is asked.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo

_INFO = OpInfo(api="torch_npu", notes=["no PMCC engine off the NPU: raises error 507018"])
NO_ENGINE_CODE = 507018
_DATA_TYPES = (torch.float16, torch.float32, torch.int8, torch.bfloat16)

INIT_SCHEMA = ("obfuscation_initialize(int hidden_size, int tp_rank, int cmd, *, "
               "ScalarType? data_type=None, int? model_obf_seed_id=0, int? data_obf_seed_id=0, "
               "int? thread_num=4, float? obf_coefficient=1.0) -> Tensor")
FINAL_SCHEMA = "obfuscation_finalize(Tensor fd_to_close) -> Tensor"
CALC_SCHEMA = ("obfuscation_calculate(Tensor fd, Tensor x, Tensor param, *, "
               "float? obf_coefficient=1.0) -> Tensor")


def _no_engine(op: str):
    raise RuntimeError(f"{op}: expected a deployed PMCC model-obfuscation engine (its client "
                       f"application and TEE trusted application), but got none on this "
                       f"machine (error code {NO_ENGINE_CODE}, as an NPU server without PMCC "
                       f"returns)")


def _expect_fd(op: str, name: str, fd: torch.Tensor) -> None:
    checks.expect_dtype(fd, (torch.int32,), op, name)
    checks.expect(fd.numel() == 1, op, name, "the (1,) socket tensor obfuscation_initialize "
                  "returns", lambda: f"shape {tuple(fd.shape)}", RuntimeError)


def _expect_coefficient(op: str, value, low_open: bool) -> None:
    if value is None:
        return
    ok = (0.0 < value <= 1.0) if low_open else (0.0 <= value <= 1.0)
    checks.expect(ok, op, "obf_coefficient", "in (0, 1]" if low_open else "in [0, 1]",
                  repr(value), ValueError)


def check_initialize(hidden_size, tp_rank, cmd, *, data_type=None, model_obf_seed_id=0,
                     data_obf_seed_id=0, thread_num=4, obf_coefficient=1.0):
    op = "obfuscation_initialize"
    checks.expect_one_of(cmd, (1, 2, 3), op, "cmd")
    # op-plugin's host code refuses a missing data_type before anything else is sent
    checks.expect(data_type is not None, op, "data_type", "a dtype (data_type cannot be empty)",
                  "None", ValueError)
    if cmd in (1, 2):                          # cmd 3 (release) takes zeros elsewhere
        checks.expect(1 <= hidden_size <= 10000, op, "hidden_size", "in [1, 10000]",
                      repr(hidden_size), ValueError)
        checks.expect(0 <= tp_rank <= 1024, op, "tp_rank", "in [0, 1024]", repr(tp_rank),
                      ValueError)
        checks.expect(data_type in _DATA_TYPES, op, "data_type",
                      "float16, float32, bfloat16 or int8", str(data_type), TypeError)
        if thread_num is not None:
            checks.expect_one_of(thread_num, (1, 2, 3, 4, 5, 6), op, "thread_num")
    _expect_coefficient(op, obf_coefficient, low_open=False)


def check_finalize(fd_to_close):
    _expect_fd("obfuscation_finalize", "fd_to_close", fd_to_close)


def check_calculate(fd, x, param, *, obf_coefficient=1.0):
    op = "obfuscation_calculate"
    _expect_fd(op, "fd", fd)
    checks.expect_dtype(x, _DATA_TYPES, op, "x")
    checks.expect_dtype(param, (torch.int32, torch.int64), op, "param")
    _expect_coefficient(op, obf_coefficient, low_open=True)


def _initialize_ref(hidden_size, tp_rank, cmd, **_):
    _no_engine("obfuscation_initialize")


def _finalize_ref(fd_to_close):
    _no_engine("obfuscation_finalize")


def _calculate_ref(fd, x, param, **_):
    _no_engine("obfuscation_calculate")


initialize_op = NpuOp(INIT_SCHEMA, namespace=TORCH_NPU_NS, check=check_initialize,
                      reference=_initialize_ref,
                      fake=lambda *a, **k: torch.empty(1, dtype=torch.int32), info=_INFO)
finalize_op = NpuOp(FINAL_SCHEMA, namespace=TORCH_NPU_NS, check=check_finalize,
                    reference=_finalize_ref, fake=lambda fd: torch.empty_like(fd), info=_INFO)
calculate_op = NpuOp(CALC_SCHEMA, namespace=TORCH_NPU_NS, check=check_calculate,
                     reference=_calculate_ref,
                     fake=lambda fd, x, param, **k: torch.empty_like(x), info=_INFO)
for _op in (initialize_op, finalize_op, calculate_op):
    _op.forbid_autograd("the obfuscation engine has no backward")


def obfuscation_initialize(hidden_size, tp_rank, cmd, data_type=None, model_obf_seed_id=0,
                           data_obf_seed_id=0, thread_num=4, obf_coefficient=1.0):
    """Open the PMCC obfuscation engine; returns the socket as a ``(1,)`` int32 tensor.

    Parameters (seed 004): ``hidden_size`` in [1, 10000] and ``tp_rank`` in [0, 1024] (valid
    values only for ``cmd`` 1 / 2, else 0); ``cmd`` 1 float inference, 2 quantized inference,
    3 release; ``data_type`` float16 / float32 / bfloat16 / int8 (required by op-plugin's
    host code); ``model_obf_seed_id`` / ``data_obf_seed_id`` the obfuscation-factor ids the TA
    looks up; ``thread_num`` in 1..6; ``obf_coefficient`` in [0, 1].

    Off the NPU there is no engine: after the argument checks this raises RuntimeError with
    error code 507018, the documented result on a server without PMCC (module docstring).
    """
    return initialize_op(hidden_size, tp_rank, cmd, data_type=data_type,
                         model_obf_seed_id=model_obf_seed_id, data_obf_seed_id=data_obf_seed_id,
                         thread_num=thread_num, obf_coefficient=obf_coefficient)


def obfuscation_finalize(fd_to_close):
    """Close the engine socket ``fd_to_close`` (obfuscation_initialize's result); returns a
    ``(1,)`` int32 tensor.  Raises error 507018 off the NPU (no engine)."""
    return finalize_op(fd_to_close)


def obfuscation_calculate(fd, x, param, obf_coefficient=1.0):
    """Send ``x`` (float16 / float32 / bfloat16 / int8, last dim ``hidden_size``) through the
    engine; the result has x's shape and dtype.  ``param``: int32, x's last dim;
    ``obf_coefficient`` in (0, 1].  Raises error 507018 off the NPU (no engine)."""
    return calculate_op(fd, x, param, obf_coefficient=obf_coefficient)


TORCH_NPU_FUNCTIONS = {
    "obfuscation_initialize": obfuscation_initialize,
    "obfuscation_finalize": obfuscation_finalize,
    "obfuscation_calculate": obfuscation_calculate,
}

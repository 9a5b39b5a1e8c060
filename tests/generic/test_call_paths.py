"""One call, one verdict: the op object's eager fast path, ``torch.ops`` and FakeTensor accept
and reject the same arguments with the same errors; error classes also match torch_npu's
RuntimeError; the checked-signature cache tells 285 from 285.0; calls from other threads keep
the fast path while one thread compiles."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere as na
from npu_anywhere import checks, library
from npu_anywhere.library import REGISTRY
from npu_anywhere.testing.opdb import OPDB


def _error(fn, *args, **kwargs):
    with pytest.raises(Exception) as info:
        fn(*args, **kwargs)
    return info.value


# -- schema types on the fast path ---------------------------------------------------------

def test_a_string_for_a_bool_is_rejected_as_torch_ops_rejects_it():
    x = torch.randn(4, 8)
    fast = _error(na.npu_geglu, x, activate_left="False")
    slow = _error(torch.ops.npu.npu_geglu, x, activate_left="False")
    assert type(fast) is type(slow) and str(fast) == str(slow)
    assert "Expected a value of type 'bool' for argument 'activate_left'" in str(fast)


def test_none_for_a_required_int_is_rejected():
    x = torch.randn(4, 8)
    fast = _error(na.npu_quantize, x, torch.ones(8), None, None)
    assert isinstance(fast, RuntimeError) and "argument 'dtype'" in str(fast)
    assert str(fast) == str(_error(torch.ops.npu.npu_quantize, x, torch.ones(8), None, None))


def test_a_bool_for_an_int_is_converted_as_torch_ops_converts_it():
    x = torch.randn(4, 8)
    got = na.npu_geglu(x, dim=True)             # the schema parser reads True as 1
    want = torch.ops.npu.npu_geglu(x, dim=1)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_an_int_for_a_float_is_converted_before_the_kernel_sees_it():
    x, gamma = torch.randn(3, 8), torch.rand(8) + 0.5
    got = na.npu_rms_norm(x, gamma, 0)
    want = torch.ops.npu.npu_rms_norm(x, gamma, 0.0)
    assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_an_unknown_keyword_gets_the_schemas_error():
    op = REGISTRY["npu_geglu"]
    x = torch.randn(4, 8)
    fast = _error(op, x, bogus=1)
    assert str(fast) == str(_error(op.overload, x, bogus=1))
    assert "Unknown keyword argument 'bogus'" in str(fast) and "check_" not in str(fast)


def test_too_many_positional_arguments_get_the_schemas_error():
    op = REGISTRY["npu_rms_norm"]
    x, gamma = torch.randn(3, 8), torch.ones(8)
    assert str(_error(op, x, gamma, 1e-6, 1)) == str(_error(op.overload, x, gamma, 1e-6, 1))


def test_meta_tensors_take_the_fake_kernel():
    data = torch.empty(3, 2, 6, 4, device="meta")
    indices = torch.empty(2, dtype=torch.int64, device="meta")
    updates = torch.empty(2, 2, 2, 4, device="meta")
    out = na.scatter_update(data, indices, updates, -2)
    assert out.device.type == "meta" and out.shape == data.shape
    # the in-place composite, even through torch.ops
    assert torch.ops.npu.scatter_update_(data, indices, updates, -2) is data


# -- None ------------------------------------------------------------------------------------

def _first_plain_tensor(name):
    arguments = REGISTRY[name].overload._schema.arguments
    return next((i for i, a in enumerate(arguments) if a.type.kind() == "TensorType"), None)


# Ops whose tensors all come in lists (Tensor[]) have no required plain tensor to replace.
NONE_CASES = sorted(n for n in OPDB if n in REGISTRY and OPDB[n].samples
                    and _first_plain_tensor(n) is not None)


@pytest.mark.parametrize("name", NONE_CASES)
def test_none_for_a_required_tensor_names_the_parameter(name):
    op = REGISTRY[name]
    arguments = op.overload._schema.arguments
    position = _first_plain_tensor(name)
    param = arguments[position].name
    args, kwargs = OPDB[name].samples[0].make()
    args = list(args)
    if position < len(args):
        args[position] = None
    else:
        kwargs = {**kwargs, param: None}
    for door in (op, op.overload):
        err = _error(door, *args, **kwargs)
        assert isinstance(err, TypeError) and isinstance(err, RuntimeError), repr(err)
        assert str(err) == f"{op.arguments.op}: expected {param} a Tensor, but got None"


def test_none_for_a_non_optional_bool_is_an_error_not_false():
    x = torch.randn(4, 8)
    with pytest.raises(TypeError, match="npu_clipped_swiglu: expected interleaved a bool"):
        na.npu_clipped_swiglu(x, interleaved=None)
    mode = FakeTensorMode()
    with pytest.raises(TypeError, match="npu_clipped_swiglu: expected interleaved a bool"), mode:
        na.npu_clipped_swiglu(mode.from_tensor(x), interleaved=None)


# -- the checked-signature cache -------------------------------------------------------------

def test_a_float_never_passes_for_an_int_after_the_int_passed():
    sample = next(s for s in OPDB["npu_anti_quant"].samples if s.name == "int4_packed_npu_code")
    args, kwargs = sample.make()
    assert kwargs["src_dtype"] == 285
    na.npu_anti_quant(*args, **kwargs)                          # caches the checked signature
    for door in (na.npu_anti_quant, torch.ops.npu.npu_anti_quant):
        with pytest.raises(RuntimeError, match="Expected a value of type 'Optional\\[int\\]' "
                           "for argument 'src_dtype'"):
            door(*args, **{**kwargs, "src_dtype": 285.0})


def test_signatures_key_on_type_and_value():
    assert library._signature((1,), {}) != library._signature((True,), {})
    assert library._signature((285,), {}) != library._signature((285.0,), {})


# -- error classes ---------------------------------------------------------------------------

ERRORS = [(name, s) for name, e in OPDB.items() for s in e.errors]


def test_every_documented_error_is_also_a_runtime_error():
    """torch_npu raises RuntimeError (TORCH_CHECK) for every bad argument."""
    for name, sample in ERRORS:
        args, kwargs = sample.make()
        with pytest.raises(sample.error) as info:
            REGISTRY[name](*args, **kwargs)
        assert isinstance(info.value, RuntimeError), (name, sample.name, type(info.value))


@pytest.mark.parametrize("call,match", [
    (lambda: na.npu_rotary_mul(torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8),
                               torch.randn(1, 2, 1, 8), rotary_mode="quarter"),
     "npu_rotary_mul: expected rotary_mode"),
])
def test_value_errors_are_caught_as_either_class(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()
    with pytest.raises(ValueError, match=match):
        call()


def test_the_classes_keep_their_message_under_torch_compile():
    x = torch.randn(1, 2, 1, 8)
    fn = torch.compile(lambda a: torch.ops.npu.npu_rotary_mul(a, a, a, "quarter"),
                       fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="npu_rotary_mul: expected rotary_mode"):
        fn(x)
    assert issubclass(checks.NpuValueError, ValueError)
    assert issubclass(checks.NpuTypeError, TypeError)
    assert issubclass(checks.NpuIndexError, IndexError)


# -- threads ---------------------------------------------------------------------------------

def test_the_fast_path_ignores_another_threads_compilation(monkeypatch):
    """torch.compiler.is_compiling() reads one process-wide flag, set while any thread runs
    torch.compile; an eager call elsewhere must still take the fast path."""
    x, gamma = torch.randn(3, 8), torch.ones(8)
    calls = []
    op = REGISTRY["npu_rms_norm"]
    original = type(op)._kernel
    monkeypatch.setattr(type(op), "_kernel",
                        lambda self, *a, **k: calls.append(self.name) or original(self, *a, **k))
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    assert torch.compiler.is_compiling()
    na.npu_rms_norm(x, gamma, 1e-6)
    assert calls == ["npu_rms_norm"]                  # the kernel, called directly
    assert library._plain_eager((x, gamma, 1e-6), {})


def test_the_compiled_provider_ignores_another_threads_compilation(monkeypatch):
    from npu_anywhere.kernels.compiled import CompiledProvider, compiling_after
    provider = CompiledProvider(lambda x: x + 1, key=lambda x: x.dtype)
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    with compiling_after(0):
        assert provider.supports(torch.ones(2)) is None

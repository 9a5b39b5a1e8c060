"""The public functions as ``help()`` and a type checker see them.

Each ``npu_anywhere.<op>`` function states its op's schema: required parameters have no
default (even where the function takes a documented alias through ``**kwargs`` and therefore
defaults to None), parameters and the result carry the schema's types, and an unknown keyword
is answered with the closest real name.
"""

from __future__ import annotations

import inspect
import pydoc
from importlib import resources
from typing import Optional, Union

import pytest
import torch

import npu_anywhere
from npu_anywhere import params
from npu_anywhere.library import REGISTRY

FUNCTIONS = {**npu_anywhere.ops.TORCH_NPU_FUNCTIONS, **npu_anywhere.ops.CANN_FUNCTIONS}
WITH_OPS = sorted(n for n in FUNCTIONS if n in REGISTRY)


def test_py_typed_is_shipped():
    assert resources.files("npu_anywhere").joinpath("py.typed").is_file()


def test_rotary_mul_signature_reads_like_the_schema():
    sig = inspect.signature(npu_anywhere.npu_rotary_mul)
    p = sig.parameters
    assert list(p) == ["input", "r1", "r2", "rotary_mode", "rotate"]
    for name in ("input", "r1", "r2"):
        assert p[name].default is inspect.Parameter.empty, name
        assert p[name].annotation is torch.Tensor
    assert p["rotary_mode"].default == "half" and p["rotary_mode"].annotation is str
    assert p["rotate"].default is None and p["rotate"].annotation == Optional[torch.Tensor]
    assert sig.return_annotation is torch.Tensor
    assert "npu_rotary_mul(input: torch.Tensor, r1: torch.Tensor" in \
        pydoc.plain(pydoc.render_doc(npu_anywhere.npu_rotary_mul))


def test_schema_types_become_python_types():
    schema = torch._C.parse_schema(
        "f(Tensor self, Tensor? a, int[] b, SymInt c, ScalarType? d, bool[3] e, float? f, "
        "str g, Tensor[] h, Scalar i) -> (Tensor, Tensor?)")
    got = [params.annotation(a.real_type) for a in schema.arguments]
    assert got == [torch.Tensor, Optional[torch.Tensor], list[int], Union[int, torch.SymInt],
                   Optional[torch.dtype], list[bool], Optional[float], str, list[torch.Tensor],
                   Union[int, float, bool]]
    assert params._return_annotation(schema) == tuple[torch.Tensor, Optional[torch.Tensor]]


@pytest.mark.parametrize("name", WITH_OPS)
def test_every_function_states_its_schema(name):
    fn = FUNCTIONS[name]
    sig = inspect.signature(fn)
    schema = REGISTRY[name].overload._schema
    assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()), sig
    required = {a.name for a in schema.arguments if not a.has_default_value()}
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    seen_optional = False
    for index, p in enumerate(sig.parameters.values()):
        schema_name = p.name if p.name in {a.name for a in schema.arguments} else (
            positional[index] if index < len(positional) and p.kind is p.POSITIONAL_OR_KEYWORD
            else None)
        if schema_name is not None:       # a Python-only extra (e.g. out=) has no schema type
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)
        # Required in the schema means no default here (unless Python's ordering forbids it:
        # a positional parameter without default cannot follow one with a default).
        ordering_forbids = p.kind is p.POSITIONAL_OR_KEYWORD and seen_optional
        if schema_name in required and p.default is None and not ordering_forbids:
            pytest.fail(f"{name}: {p.name} is required by the schema but defaults to None")
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty:
            seen_optional = True
    assert "return" in fn.__annotations__


def test_documented_aliases_still_work():
    x = torch.randn(1, 2, 3, 8)
    cos, sin = x.cos(), x.sin()
    expected = npu_anywhere.npu_rotary_mul(x, cos, sin)
    torch.testing.assert_close(npu_anywhere.npu_rotary_mul(self=x, r1=cos, r2=sin), expected,
                               rtol=0, atol=0)
    y = torch.randn(4, 6)
    torch.testing.assert_close(npu_anywhere.npu_swiglu(input=y), npu_anywhere.npu_swiglu(y),
                               rtol=0, atol=0)


@pytest.mark.parametrize("call,message", [
    # no **kwargs: Python's own TypeError, given a hint by the exported wrapper
    (lambda x, g: npu_anywhere.npu_add_rms_norm(x, x, g, eps=1e-6),
     "npu_add_rms_norm() got an unexpected keyword argument 'eps'; did you mean 'epsilon'?"),
    (lambda x, g: npu_anywhere.npu_rms_norm(x, g, epsilonn=1e-6),
     "npu_rms_norm() got an unexpected keyword argument 'epsilonn'; did you mean 'epsilon'?"),
    # **kwargs carrying aliases: params.accept_alias
    (lambda x, g: npu_anywhere.npu_rotary_mul(x, x, x, mode="half"),
     "npu_rotary_mul() got an unexpected keyword argument 'mode'; did you mean 'rotary_mode'?"),
    (lambda x, g: npu_anywhere.npu_swiglu(x, dims=-1),
     "npu_swiglu() got an unexpected keyword argument 'dims'; did you mean 'dim'?"),
    (lambda x, g: npu_anywhere.npu_swiglu(x, zzz=1),
     "npu_swiglu() got an unexpected keyword argument 'zzz'"),
])
def test_unknown_keyword_gets_a_hint(call, message):
    x, g = torch.randn(2, 1, 4, 8), torch.ones(8)
    with pytest.raises(TypeError) as info:
        call(x, g)
    assert str(info.value) == message


def test_type_errors_from_the_op_pass_through_unchanged():
    x = torch.ones(2, 8, dtype=torch.int32)
    with pytest.raises(TypeError, match=r"^npu_add_rms_norm: expected"):
        npu_anywhere.npu_add_rms_norm(x, x, torch.ones(8, dtype=torch.int32))


def test_the_wrapper_keeps_the_function_identity_visible():
    fn = npu_anywhere.npu_add_rms_norm
    raw = inspect.unwrap(fn)
    assert fn.__name__ == raw.__name__ == "npu_add_rms_norm"
    assert fn.__doc__ == raw.__doc__ and fn.__module__ == raw.__module__


def test_wrapped_function_compiles_fullgraph():
    fn = npu_anywhere.npu_add_rms_norm

    @torch.compile(fullgraph=True, backend="eager")
    def step(a, b, g):
        return fn(a, b, g, 1e-6)[0] + 1

    a, b, g = torch.randn(3, 16), torch.randn(3, 16), torch.rand(16)
    torch.testing.assert_close(step(a, b, g), inspect.unwrap(fn)(a, b, g, 1e-6)[0] + 1)


def test_package_exports():
    for name in ("install", "uninstall", "strict", "use_providers", "ops", "REGISTRY",
                 "TORCH_NPU_FUNCTIONS", "CANN_FUNCTIONS", "__version__"):
        assert hasattr(npu_anywhere, name), name
    assert set(FUNCTIONS) <= set(npu_anywhere.__all__)
    assert all(getattr(npu_anywhere, n) is f for n, f in FUNCTIONS.items())
    with pytest.raises(AttributeError):
        npu_anywhere.no_such_function


def test_describing_twice_changes_nothing():
    fn = npu_anywhere.npu_rotary_mul
    assert params.describe("npu_rotary_mul", fn, REGISTRY["npu_rotary_mul"].overload._schema) is fn
    wrapped = npu_anywhere.npu_add_rms_norm
    assert params.describe("npu_add_rms_norm", wrapped,
                           REGISTRY["npu_add_rms_norm"].overload._schema) is wrapped

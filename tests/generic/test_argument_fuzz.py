"""Every op of the op database, called with mutated arguments through three doors.

For each op, its first sample is mutated one argument at a time, by what the schema says the
argument is: ``None``, a bool or a float for an ``int``, a string, a tensor of another dtype, an
unknown keyword.  Each mutated call goes through

* the op object (``npu_anywhere.<op>`` / ``torch_npu.<op>``: the eager fast path when it may),
* the dispatcher (``torch.ops.npu.<op>``),
* the op object under FakeTensorMode,

and the test asserts that all three accept or reject it alike, that every rejection is a clean
error naming the op (no AttributeError, no internal helper's name), and that a rejected call
left every input and cache as it was.  One documented difference: ``None`` for a non-optional
``bool`` is rejected by the op object but taken as False by torch's own argument parser.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import npu_anywhere  # noqa: F401  (registers the ops)
from npu_anywhere.library import REGISTRY
from npu_anywhere.testing.opdb import OPDB

OPS = sorted(name for name, e in OPDB.items() if e.samples and name in REGISTRY)
CLEAN_ERRORS = (RuntimeError, ValueError, TypeError, IndexError)


def _kind(jit_type):
    kind = jit_type.kind()
    if kind == "OptionalType":
        return "optional", _kind(jit_type.getElementType())[1]
    if kind == "ListType":
        return "required", "list"
    return "required", {"TensorType": "tensor", "IntType": "int", "FloatType": "float",
                        "BoolType": "bool", "StringType": "str"}.get(kind, "other")


def _other_dtype(t):
    if t.dtype.is_floating_point:
        return t.to(torch.int32)
    return t.to(torch.float32)


def _mutations(op):
    """(label, position, name, replace(value) -> new value) for every argument of ``op``."""
    out = []
    for i, arg in enumerate(op.overload._schema.arguments):
        optional, kind = _kind(arg.type)
        values = []
        if kind == "tensor":
            values += [("other_dtype", _other_dtype), ("int", lambda v: 1)]
            if optional == "required":
                values.append(("none", lambda v: None))
        elif kind == "int":
            values += [("bool", lambda v: True), ("float", lambda v: 1.5), ("str", lambda v: "1")]
        elif kind == "float":
            values += [("str", lambda v: "1.0"), ("bool", lambda v: False)]
        elif kind == "bool":
            values += [("str", lambda v: "True"), ("int", lambda v: 1)]
        elif kind == "str":
            values += [("int", lambda v: 1), ("unknown_mode", lambda v: "no_such_mode")]
        elif kind == "list":
            values += [("scalar_str", lambda v: "1"), ("strings", lambda v: ["a"])]
        if optional == "required" and kind in ("int", "float", "bool", "str"):
            values.append(("none", lambda v: None))
        for label, replace in values:
            out.append((f"{arg.name}={label}", i, arg.name, replace))
    return out


def _mutate(args, kwargs, position, name, replace):
    args, kwargs = list(args), dict(kwargs)
    if position < len(args):
        args[position] = _apply(replace, args[position])
    else:
        kwargs[name] = _apply(replace, kwargs.get(name))
    return tuple(args), kwargs


def _apply(replace, value):
    if replace is _other_dtype and not isinstance(value, torch.Tensor):
        return value          # an absent optional tensor: nothing to retype
    return replace(value)


def _tensors(args, kwargs):
    return [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]


# Integer dtypes of each element size: a tensor viewed as one of them compares bit for bit
# (NaN payloads, signed zeros and float8 included) without allocating a converted copy.
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(t):
    t = t.detach()
    as_int = _SAME_SIZE_INT.get(t.dtype.itemsize)
    return t.view(as_int) if as_int is not None and t.dtype != as_int else t


def _snapshot(tensors):
    return [_as_bits(t).clone() for t in tensors]


def _untouched(tensors, before):
    return all(torch.equal(_as_bits(t), b) for t, b in zip(tensors, before))


def _call(fn, args, kwargs):
    try:
        fn(*args, **kwargs)
        return None
    except Exception as exc:  # noqa: BLE001 -- the test classifies every exception
        return exc


def _fake_call(op, args, kwargs):
    mode = FakeTensorMode(allow_non_fake_inputs=False)

    def fake(v):
        if isinstance(v, torch.Tensor):
            return mode.from_tensor(v)
        if isinstance(v, (list, tuple)) and any(isinstance(e, torch.Tensor) for e in v):
            return type(v)(fake(e) for e in v)
        return v

    fargs = tuple(fake(a) for a in args)
    fkwargs = {k: fake(v) for k, v in kwargs.items()}
    with mode:
        return _call(op, fargs, fkwargs)


def _names(op):
    """The names an error may call ``op`` by: its own, the public op it serves, and a public
    op whose name it extends (``_npu_x_get_workspace`` speaks of ``npu_x``)."""
    return {op.name, op.arguments.op} | {n for n in REGISTRY if n in op.name}


def _assert_clean(exc, op, door, label):
    where = f"{op.name} [{label}] via {door}"
    assert isinstance(exc, CLEAN_ERRORS), f"{where}: {type(exc).__name__}: {exc}"
    assert not isinstance(exc, (AttributeError, KeyError, UnboundLocalError)), where
    text = str(exc)
    assert any(n in text for n in _names(op)), f"{where}: message does not name the op: {text}"
    assert "check_" not in text and "_reference" not in text, f"{where}: {text}"


def _none_for_plain_bool(op, position, name, replace):
    arguments = op.overload._schema.arguments
    if position >= len(arguments):
        return False
    arg = arguments[position]
    return arg.type.kind() == "BoolType" and replace(False) is None


def _run_case(op, sample, label, position, name, replace):
    def fresh():
        args, kwargs = sample.make()
        return _mutate(args, kwargs, position, name, replace) if label else (args, kwargs)

    results = {}
    inputs = None
    for door, call in (("op", op), ("torch.ops", op.overload)):
        if inputs is None:
            inputs = fresh()
            tensors = _tensors(*inputs)
            before = _snapshot(tensors)
        exc = _call(call, *inputs)
        results[door] = exc
        if exc is None:
            inputs = None         # an accepted call may have written into its inputs
            continue
        _assert_clean(exc, op, door, label)
        assert _untouched(tensors, before), \
            f"{op.name} [{label}] via {door}: a rejected call wrote into its inputs"
        # Left as they were (just checked): the next door is judged on the very same inputs.
    results["fake"] = _fake_call(op, *(inputs if inputs is not None else fresh()))
    if results["fake"] is not None:
        _assert_clean(results["fake"], op, "FakeTensor", label)
    decisions = {door: exc is None for door, exc in results.items()}
    if label and _none_for_plain_bool(op, position, name, replace):
        # torch's parser takes None as False before any op code runs.
        assert not decisions["op"] and not decisions["fake"], (op.name, label, results)
        return
    assert len(set(decisions.values())) == 1, f"{op.name} [{label}]: {results}"


@pytest.mark.parametrize("name", OPS)
def test_mutated_arguments_are_judged_alike_on_every_path(name):
    op = REGISTRY[name]
    sample = OPDB[name].samples[0]
    _run_case(op, sample, "", 0, "", None)              # the sample itself: accepted everywhere
    for label, position, arg_name, replace in _mutations(op):
        _run_case(op, sample, label, position, arg_name, replace)
    _run_case(op, sample, "bogus=1", 10 ** 6, "bogus", lambda v: 1)

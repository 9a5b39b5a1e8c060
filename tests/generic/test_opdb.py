"""Generic checks for every op in the op database (npu_anywhere.testing.opdb)."""

from __future__ import annotations

import re

import pytest
import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._subclasses.fake_utils import _check_alias_info

import npu_anywhere  # noqa: F401  (registers the ops)
from npu_anywhere.library import REGISTRY
from npu_anywhere.testing.opdb import OPDB

SAMPLES = [(name, s) for name, e in OPDB.items() for s in e.samples]
ERRORS = [(name, s) for name, e in OPDB.items() for s in e.errors]


def _ids(items):
    return [f"{name}-{s.name}" for name, s in items]


def _fake(mode, value):
    """``value`` with every tensor (also inside a Tensor[] argument) made fake."""
    if isinstance(value, torch.Tensor):
        return mode.from_tensor(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_fake(mode, v) for v in value)
    return value


def _flat(out):
    if isinstance(out, torch.Tensor) or out is None:
        return [out]
    return list(out)


# Ops whose docs state no constraint a call could break (any tensor, no other argument).
NOTHING_TO_REFUSE = {"npu_alloc_float_status"}
# Ops every valid call of which fails off the NPU, as documented for a server without the
# hardware they drive (the PMCC obfuscation engine: error 507018); their tests check that.
NOTHING_RUNS = {"obfuscation_initialize", "obfuscation_finalize", "obfuscation_calculate"}


def test_every_public_op_has_samples_and_errors():
    missing = [name for name, op in REGISTRY.items()
               if op.info.public and not (name in OPDB
                                          and (OPDB[name].samples or name in NOTHING_RUNS)
                                          and (OPDB[name].errors or name in NOTHING_TO_REFUSE))]
    assert not missing, missing


def test_schema_is_the_literal_string():
    for op in REGISTRY.values():
        registered = op.overload._schema
        assert registered.name.split("::")[-1] == op.name
        # compare parsed forms: torch prints defaults its own way (7.0 -> 7., quotes)
        literal = torch._C.parse_schema(f"{op.namespace}::{op.schema}")
        assert str(registered) == str(literal)


# opcheck's utilities, by cost.  The schema and autograd-registration tests run on every
# sample (the latter acts on inputs that require grad).  opcheck's FakeTensor test runs the
# sample once on fake and once on real tensors and compares the outputs' metadata:
# test_fake_matches_eager does exactly that on every sample, with more checks, so it is not
# run twice.  The static-shape AOT test traces what test_compile_fullgraph compiles
# (aot_eager, static shapes, outputs compared bit for bit); it adds the backward, so it runs
# for differentiable samples only.  The dynamic-shape AOT test (two thirds of opcheck's time)
# runs on every differentiable sample and on DYNAMIC_PER_OP samples spread evenly over each
# op's list (first and last included), so that an op's modes keep a symbolic-shape trace.
OPCHECK_UTILS = ("test_schema", "test_autograd_registration")
DYNAMIC_PER_OP = 4


def _dynamic_indices(count: int) -> set[int]:
    if count <= DYNAMIC_PER_OP:
        return set(range(count))
    return {round(i * (count - 1) / (DYNAMIC_PER_OP - 1)) for i in range(DYNAMIC_PER_OP)}


DYNAMIC = {(name, e.samples[i].name) for name, e in OPDB.items()
           for i in _dynamic_indices(len(e.samples))}


def _grad_inputs(sample):
    """The sample's arguments; a differentiable sample's tensors require grad."""
    args, kwargs = sample.make()
    if sample.differentiable:
        args = tuple(a.requires_grad_() if isinstance(a, torch.Tensor) else a for a in args)
    return args, kwargs


@pytest.mark.parametrize("name,sample", SAMPLES, ids=_ids(SAMPLES))
def test_opcheck(name, sample):
    args, kwargs = _grad_inputs(sample)
    utils = OPCHECK_UTILS
    if sample.differentiable:
        utils = utils + ("test_aot_dispatch_static", "test_aot_dispatch_dynamic")
    elif (name, sample.name) in DYNAMIC:
        utils = utils + ("test_aot_dispatch_dynamic",)
    torch.library.opcheck(REGISTRY[name].overload, args, kwargs, test_utils=utils)


@pytest.mark.parametrize("name,sample", SAMPLES, ids=_ids(SAMPLES))
def test_fake_matches_eager(name, sample):
    """One fake call and one real call of the sample, every output's metadata compared.

    This is opcheck's test_faketensor (which CrossRefFakeMode runs the same way: sizes,
    strides, storage offset, requires_grad, aliasing) plus dtype, device and the types of
    non-tensor outputs, so test_opcheck leaves that utility out.
    """
    overload = REGISTRY[name].overload
    args, kwargs = _grad_inputs(sample)
    mode = FakeTensorMode()
    # made before the real call, which may write into its inputs
    fargs = tuple(_fake(mode, a) for a in args)
    fkwargs = {k: _fake(mode, v) for k, v in kwargs.items()}
    with mode:
        fake_out = overload(*fargs, **fkwargs)
    eager_out = overload(*args, **kwargs)
    fake, eager = pytree.tree_leaves(fake_out), pytree.tree_leaves(eager_out)
    assert len(fake) == len(eager), (len(fake), len(eager))
    for i, (f, e) in enumerate(zip(fake, eager)):
        if e is None:
            assert f is None, i
            continue
        if not isinstance(e, torch.Tensor):     # int / float outputs (seed, offset, numels)
            assert isinstance(f, (type(e), torch.SymInt, torch.SymFloat)), (i, type(f), type(e))
            continue
        assert isinstance(f, torch.Tensor), (i, type(f))
        assert (f.shape, f.dtype, f.device) == (e.shape, e.dtype, e.device), i
        assert f.stride() == e.stride() and f.storage_offset() == e.storage_offset(), i
        assert f.requires_grad == e.requires_grad, i
    _check_alias_info(f"{name}-{sample.name}: fake vs real outputs:", eager_out, (args, kwargs),
                      fake_out, (fargs, fkwargs))


@pytest.mark.parametrize("name,sample", ERRORS, ids=_ids(ERRORS))
def test_errors_identical_in_eager_and_fake(name, sample):
    args, kwargs = sample.make()
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    with pytest.raises(sample.error, match=sample.match) as eager:
        REGISTRY[name].overload(*args, **kwargs)
    after = [a for a in args if isinstance(a, torch.Tensor)]
    assert all(torch.equal(b, a) for b, a in zip(before, after)), "a failed call modified input"
    mode = FakeTensorMode()
    fargs = tuple(_fake(mode, a) for a in args)
    fkwargs = {k: _fake(mode, v) for k, v in kwargs.items()}
    with pytest.raises(sample.error) as fake, mode:
        REGISTRY[name].overload(*fargs, **fkwargs)
    assert str(fake.value) == str(eager.value)


def _declares_aliasing(overload) -> bool:
    """Whether the schema lets an output alias or the op write into an argument."""
    schema = overload._schema
    return any(a.alias_info is not None for a in (*schema.arguments, *schema.returns))


def _aot_traced_by_opcheck(name, sample) -> bool:
    """Whether test_opcheck runs an AOT test (trace, functionalize, run, compare) on the sample."""
    return sample.differentiable or (name, sample.name) in DYNAMIC


# Dynamo's capture is tested on every sample.  Its graph then goes through AOTAutograd
# (aot_eager) unless test_opcheck already puts this very sample through AOTAutograd's
# stages (aot_dispatch_static/dynamic: trace, functionalize, run the graph, compare) and the
# schema declares no aliasing: opcheck's AOT tests clone the inputs inside the traced
# function, so writes into graph inputs and outputs that alias them are only exercised here.
# Otherwise the graph runs eagerly (backend "eager"): the same bit-for-bit comparison.
def _compile_backend(name, sample) -> str:
    if _aot_traced_by_opcheck(name, sample) and not _declares_aliasing(REGISTRY[name].overload):
        return "eager"
    return "aot_eager"


@pytest.mark.parametrize("name,sample", SAMPLES, ids=_ids(SAMPLES))
def test_compile_fullgraph(name, sample):
    overload = REGISTRY[name].overload
    args, kwargs = sample.make()
    eager_args, eager_kwargs = _clone(args), dict(kwargs)
    expected = _flat(overload(*eager_args, **eager_kwargs))
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a, **k: overload(*a, **k), fullgraph=True,
                             backend=_compile_backend(name, sample))
    got = _flat(compiled(*args, **kwargs))
    # equal_nan: some inputs are bit patterns (packed float4 words read as float32) that can
    # hold NaNs, and an op may return NaN where the NPU does
    for g, e in zip(got, expected):
        if e is not None:
            torch.testing.assert_close(g, e, rtol=0, atol=0, equal_nan=True)
    # in-place ops: the inputs must have been written the same way
    for a, e in zip(args, eager_args):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True)


def _clone(args):
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def test_error_messages_follow_the_project_shape():
    pattern = re.compile(r"^\w+: expected .+, but got .+", re.S)
    for name, sample in ERRORS:
        args, kwargs = sample.make()
        with pytest.raises(sample.error) as info:
            REGISTRY[name].overload(*args, **kwargs)
        assert pattern.match(str(info.value)), (name, sample.name, str(info.value))

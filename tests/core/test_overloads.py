"""Named overloads and ``.out`` overloads in the op library (``library.NpuOp.define_overload``,
``library.define_out``), on small ops defined here in the internal namespace."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from npu_anywhere import checks, coverage, library
from npu_anywhere.library import INTERNAL_NS, REGISTRY, NpuOp, OpInfo

NS = getattr(torch.ops, INTERNAL_NS)


def _check_scale(x, factor=2.0):
    checks.expect(factor != 0, "_test_scale", "factor", "non-zero", repr(factor), ValueError)


def _check_scale_list(x, factors):
    checks.expect(len(factors) == x.shape[-1], "_test_scale", "factors",
                  lambda: f"one per column ({x.shape[-1]})", lambda: f"{len(factors)}",
                  ValueError)


def _check_scale_out(x, factor=2.0, *, out, twice):
    _check_scale(x, factor)
    checks.expect(out.shape == x.shape, "_test_scale", "out", lambda: f"shape {tuple(x.shape)}",
                  lambda: f"shape {tuple(out.shape)}", RuntimeError)


def _write_scale_out(x, factor=2.0, *, out, twice):
    out.copy_(x * factor)
    twice.copy_(x * (2 * factor))


@pytest.fixture(scope="module")
def ops():
    """A default op, a ``.Columns`` overload (composite over it) and a ``.out`` overload."""
    base = NpuOp("_test_scale(Tensor x, float factor=2.0) -> Tensor", namespace=INTERNAL_NS,
                 check=_check_scale, reference=lambda x, factor=2.0: x * factor,
                 info=OpInfo(api="internal", public=False))
    base.forbid_autograd("a test op")

    def columns(x, factors):
        _check_scale_list(x, factors)
        return base.overload(x, 1.0) * torch.tensor(factors, dtype=x.dtype)

    listed = base.define_overload("_test_scale.Columns(Tensor x, float[] factors) -> Tensor",
                                  check=_check_scale_list, composite=columns)
    internal, out = library.define_out(
        "_test_scale.out(Tensor x, float factor=2.0, *, Tensor(a!) out, Tensor(b!) twice) "
        "-> (Tensor(a!), Tensor(b!))", check=_check_scale_out, reference=_write_scale_out,
        no_grad="a test op", namespace=INTERNAL_NS, info=OpInfo(api="internal", public=False))
    yield base, listed, internal, out
    for op in (base, listed, internal, out):
        REGISTRY.pop(op.key, None)


def test_overloads_are_registered_under_their_own_keys(ops):
    base, listed, internal, out = ops
    assert (base.key, listed.key, out.key) == ("_test_scale", "_test_scale.Columns",
                                               "_test_scale.out")
    assert REGISTRY["_test_scale.Columns"] is listed and REGISTRY["_test_scale"] is base
    assert listed.name == out.name == "_test_scale"
    assert (listed.overload_name, out.overload_name) == ("Columns", "out")
    assert base.overloads == {"Columns": listed, "out": out}
    assert listed.overload is NS._test_scale.Columns and out.overload is NS._test_scale.out
    assert internal.key == "__test_scale_out" and not internal.info.public
    assert "_test_scale.Columns" not in library.default_ops()
    assert str(listed.overload._schema) == str(torch._C.parse_schema(
        f"{INTERNAL_NS}::_test_scale.Columns(Tensor x, float[] factors) -> Tensor"))


def test_the_packet_resolves_overloads_by_argument_types(ops):
    x = torch.arange(6.0).reshape(2, 3)
    torch.testing.assert_close(NS._test_scale(x, 3.0), x * 3)
    torch.testing.assert_close(NS._test_scale(x, [1.0, 2.0, 3.0]), x * torch.tensor([1., 2, 3]))
    base, listed, _, _ = ops
    torch.testing.assert_close(listed(x, [1.0, 0.0, 1.0]), x * torch.tensor([1., 0, 1]))


def test_an_overload_has_its_own_check_on_every_path(ops):
    _, listed, _, _ = ops
    x = torch.ones(2, 3)
    message = r"_test_scale: expected factors one per column \(3\), but got 2"
    for door in (listed, listed.overload):
        with pytest.raises(ValueError, match=message):
            door(x, [1.0, 2.0])
    mode = FakeTensorMode()
    with mode, pytest.raises(ValueError, match=message):
        listed.overload(mode.from_tensor(x), [1.0, 2.0])
    with mode:
        assert listed.overload(mode.from_tensor(x), [1.0, 2.0, 3.0]).shape == (2, 3)


def test_out_writes_and_returns_the_given_tensors(ops):
    _, _, _, out_op = ops
    x = torch.arange(4.0)
    out, twice = torch.zeros(4), torch.zeros(4)
    for door in (out_op, out_op.overload):
        got = door(x, 1.5, out=out, twice=twice)
        assert got[0] is out and got[1] is twice
        assert torch.equal(out, x * 1.5) and torch.equal(twice, x * 3)


def test_out_checks_before_any_write(ops):
    _, _, _, out_op = ops
    x, out, twice = torch.arange(4.0), torch.zeros(4), torch.zeros(4)
    with pytest.raises(ValueError, match="_test_scale: expected factor non-zero"):
        out_op(x, 0.0, out=out, twice=twice)
    with pytest.raises(RuntimeError, match="_test_scale: expected out shape"):
        out_op(x, out=torch.zeros(5), twice=twice)
    # the second target cannot take the write: the first is not written either
    with pytest.raises(RuntimeError, match="_test_scale: expected twice a tensor whose elements"):
        out_op(x, out=out, twice=torch.zeros(1).expand(4))
    assert not out.any() and not twice.any()
    with pytest.raises(RuntimeError, match="_test_scale: expected inputs that do not require "
                       "grad \\(a test op\\)"):
        out_op(x.requires_grad_(), out=out, twice=twice)


def test_out_functionalizes_under_compile(ops):
    _, _, _, out_op = ops

    def fn(x, out, twice):
        out_op.overload(x, 0.5, out=out, twice=twice)
        return out + twice

    x, out, twice = torch.arange(3.0), torch.zeros(3), torch.zeros(3)
    torch._dynamo.reset()
    got = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, out, twice)
    assert torch.equal(got, x * 1.5) and torch.equal(out, x * 0.5) and torch.equal(twice, x)


def test_bad_overload_definitions_are_refused(ops):
    base = ops[0]
    with pytest.raises(ValueError, match="must be named _test_scale.<overload>"):
        base.define_overload("_other.X(Tensor x) -> Tensor", check=_check_scale,
                             composite=lambda x: x)
    with pytest.raises(ValueError, match="defined twice"):
        base.define_overload("_test_scale.Columns(Tensor x, float[] factors) -> Tensor",
                             check=_check_scale_list, composite=lambda x, f: x)
    with pytest.raises(ValueError, match="is not one of the written arguments"):
        library.define_out("_test_scale.bad(Tensor x, *, Tensor(a!) out) -> Tensor",
                           check=_check_scale, reference=lambda x, out: None, no_grad="-",
                           namespace=INTERNAL_NS)


def test_coverage_lists_overloads_in_the_op_row():
    rows = {r["name"]: r for r in coverage.rows()}
    assert "npu_grouped_matmul.List" not in rows
    assert rows["npu_grouped_matmul"]["overloads"] == ["List"]
    assert rows["npu_fusion_attention_v3"]["overloads"] == ["out"]

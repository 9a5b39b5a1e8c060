"""Provider machinery: a bad call does not disable the compiled provider, the first compile of
a specialization is announced, and the environment variables are validated."""

from __future__ import annotations

import logging

import pytest
import torch

import npu_anywhere as na
from npu_anywhere import dispatch
from npu_anywhere.kernels import compiled
from npu_anywhere.kernels.compiled import CompiledProvider


def _scale(x, n):
    torch._check(n > 0, lambda: f"_scale: expected n positive, but got {n}")
    return x * n


def _pretend_compile(fails: bool):
    """A stand-in for torch.compile: the function itself, or one whose compilation fails."""
    def compile_(fn, **kwargs):
        if not fails:
            return fn

        def broken(*args, **kw):
            raise RuntimeError("C++ compiler not found")
        return broken
    return compile_


def test_a_bad_call_raises_its_own_error_and_keeps_the_provider(monkeypatch):
    monkeypatch.setattr(compiled.torch, "compile", _pretend_compile(fails=False))
    provider = CompiledProvider(_scale, key=lambda x, n: x.dtype, op_name="scale")
    x = torch.ones(3)
    with pytest.raises(RuntimeError, match="expected n positive"):
        provider.run(x, -1)
    assert provider._disabled is None
    with compiled.compiling_after(0):
        assert provider.supports(x, 2) is None
    assert torch.equal(provider.run(x, 2), x * 2)


def test_a_compiler_failure_disables_the_provider_and_answers_eagerly(monkeypatch):
    monkeypatch.setattr(compiled.torch, "compile", _pretend_compile(fails=True))
    provider = CompiledProvider(_scale, key=lambda x, n: x.dtype, op_name="scale")
    x = torch.ones(3)
    assert torch.equal(provider.run(x, 3), x * 3)
    assert provider._disabled is not None and "C++ compiler not found" in provider._disabled
    assert provider.supports(x, 3) == provider._disabled


def test_the_first_compile_of_a_specialization_is_logged_once(monkeypatch, caplog):
    monkeypatch.setattr(compiled.torch, "compile", _pretend_compile(fails=False))
    provider = CompiledProvider(_scale, key=lambda x, n: (x.dtype, x.shape[-1]),
                                op_name="npu_scale")
    with caplog.at_level(logging.INFO, logger="npu_anywhere.kernels.compiled"):
        for _ in range(3):
            provider.run(torch.ones(2, 4), 2)
        provider.run(torch.ones(2, 8), 2)
    lines = [r.getMessage() for r in caplog.records if "compiling" in r.getMessage()]
    assert lines == [
        "compiling npu_scale float32_4 (this call waits for the compiler; set "
        "NPU_ANYWHERE_COMPILE_AFTER=never to stay eager)",
        "compiling npu_scale float32_8 (this call waits for the compiler; set "
        "NPU_ANYWHERE_COMPILE_AFTER=never to stay eager)"]


@pytest.mark.parametrize("text,want", [("8", 8), (" 0 ", 0), ("never", None), ("OFF", None)])
def test_compile_after_accepts_counts_and_never(text, want):
    assert compiled.parse_compile_after(text) == want


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", ""])
def test_compile_after_rejects_anything_else_naming_the_variable(text):
    with pytest.raises(ValueError, match="NPU_ANYWHERE_COMPILE_AFTER: expected a non-negative "
                       "integer .* or 'never', but got"):
        compiled.parse_compile_after(text)


def test_compile_after_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("NPU_ANYWHERE_COMPILE_AFTER", "abc")
    with pytest.raises(ValueError, match="NPU_ANYWHERE_COMPILE_AFTER"):
        compiled._compile_after_from_env()


def test_use_providers_rejects_an_unknown_provider():
    with pytest.raises(ValueError, match=r"use_providers: expected provider names among "
                       r"\[.*'compiled'.*'reference'.*\], but got 'complied'"):
        with na.use_providers("complied"):
            pass
    with pytest.raises(ValueError, match="use_providers: expected op names .* but got "
                       "'npu_rms_nrom'"):
        with na.use_providers("reference", op="npu_rms_nrom"):
            pass
    with na.use_providers("reference", op="npu_rms_norm"):        # known names still work
        na.npu_rms_norm(torch.randn(2, 8), torch.ones(8))


def test_the_providers_variable_is_checked_at_the_first_call(monkeypatch):
    monkeypatch.setenv("NPU_ANYWHERE_PROVIDERS", "npu_rms_norm=reference,fastest")
    monkeypatch.setattr(dispatch, "_env_checked", False)
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="NPU_ANYWHERE_PROVIDERS: expected provider names "
                       r"among \[.*\], but got 'fastest'"):
        na.npu_rms_norm(x, torch.ones(8))
    monkeypatch.setenv("NPU_ANYWHERE_PROVIDERS", "npu_rms_norm=reference")
    na.npu_rms_norm(x, torch.ones(8))
    assert dispatch._env_checked


def test_an_unknown_strict_product_in_the_environment_names_the_variable(monkeypatch):
    from npu_anywhere import targets
    monkeypatch.setenv("NPU_ANYWHERE_STRICT", "A9")
    with pytest.raises(ValueError, match="NPU_ANYWHERE_STRICT: expected product one of .*, "
                       "but got 'A9'"):
        targets._from_env()
    monkeypatch.setenv("NPU_ANYWHERE_STRICT", "910B")
    assert targets._from_env() is targets.Product.A2

"""torch_npu's own words for the argument errors its tests match.

Our messages have one shape ("<op>: expected <param> <requirement>, but got <actual>",
:mod:`.checks`), but op-plugin's test files match torch_npu's wording with
``assertRaisesRegex(RuntimeError, "...")``.  For the (op, parameter) pairs whose wording those
tests check, :func:`suffix` appends torch_npu's sentence in parentheses, so a search for either
wording finds the message.  ``{actual}`` stands for the rejected value as written.

Sources: the ``assertRaisesRegex`` patterns of op-plugin ``test/test_custom_ops/`` (the files
named per entry) and the ``TORCH_CHECK`` texts of ``op_plugin/ops/opapi/``.
"""

from __future__ import annotations

from typing import Any

WORDING: dict[tuple[str, str], str] = {
    # test_npu_rotary_mul.py; RotaryMulKernelNpuOpApi.cpp
    ("npu_rotary_mul", "rotary_mode"):
        "The rotary_mode of npu_rotary_mul should be half or interleave, but got {actual}",
    # test_npu_mrope.py
    ("npu_mrope", "cache_mode"): "cache_mode only support default or interleave",
    # test_npu_quant_matmul_gelu.py
    ("npu_quant_matmul_gelu", "approximate"): "approximate must be 'gelu_tanh' or 'gelu_erf'",
}


def _plain(actual: Any) -> str:
    text = str(actual)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]                     # repr of a string: torch_npu prints it bare
    return text


def suffix(op: str, param: str, actual: Any) -> str:
    """`` (torch_npu: <sentence>)`` for a pair torch_npu's tests match, else ``""``."""
    words = WORDING.get((op, param))
    if words is None:
        return ""
    return f" (torch_npu: {words.format(actual=_plain(actual))})"

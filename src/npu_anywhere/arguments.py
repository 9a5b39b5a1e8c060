"""What an op's schema says about its arguments, as cheap per-call checks.

:class:`ArgumentSpec` is built once per op from its registered ``FunctionSchema`` and serves
three callers:

* the eager fast path (``NpuOp.__call__``): :meth:`ArgumentSpec.fast` answers whether a call
  binds to the schema with values of exactly the types the schema names (a plain ``int`` --
  or a ``torch.dtype``, the documented spelling of dtype codes -- for ``int``, a plain tensor
  for ``Tensor``...).  Only such calls skip the dispatcher; anything
  else -- a bool or a NumPy integer for an ``int``, an int for a ``float``, an unknown keyword,
  one argument too many, a meta tensor -- goes through it, which converts what the schema
  converts and rejects what it rejects, with torch's own messages.  So a call is accepted or
  rejected the same way whichever door it comes in by.
* the op's kernel and fake kernel: :meth:`ArgumentSpec.check_required` rejects ``None`` for a
  required ``Tensor`` (which the dispatcher passes through as an undefined tensor), and
  :meth:`ArgumentSpec.check_targets` checks every tensor the schema marks as written
  (``Tensor(a!)``) before the first write: not an inference tensor outside inference mode, and
  no two elements sharing memory (an expanded view), as torch's own in-place ops require.
* the Python functions: :meth:`ArgumentSpec.reject_none_bools` rejects ``None`` for a
  non-optional ``bool``, which torch's argument parser silently turns into ``False`` (so
  ``interleaved=None`` would mean the opposite of its default).  ``torch.ops.npu.<op>`` calls
  are parsed by torch before any code of ours runs, so they keep torch's behaviour there.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from . import checks

Tensor = torch.Tensor
_SEQUENCE_TYPES = (list, tuple, torch.Size)
_OVERLAP_YES = 1   # at::MemOverlap::Yes, as torch._debug_has_internal_overlap reports it

Accepts = Callable[[Any, bool], bool]
"""``accepts(value, grad_enabled)``: True when the kernel can take ``value`` as given."""


def _plain_tensor(value: Any, grad: bool) -> bool:
    # No subclass (FakeTensor, Parameter, DTensor...), no meta data (the fake kernel handles
    # those), and no gradient to record: the dispatcher would only run our kernel for it.
    return (type(value) is Tensor and not value.is_meta
            and not (grad and value.requires_grad))


def _exact(kind: type) -> Accepts:
    def accepts(value: Any, grad: bool) -> bool:
        return type(value) is kind
    return accepts


def _int_or_dtype(value: Any, grad: bool) -> bool:
    # torch_npu's documented calls pass dtypes for int arguments (``dtype=torch.qint8``); the
    # parser turns them into ScalarType codes and every op accepts both spellings, so they
    # keep the fast path (quant ops are called per decode step).
    kind = type(value)
    return kind is int or kind is torch.dtype


def _optional(inner: Accepts) -> Accepts:
    def accepts(value: Any, grad: bool) -> bool:
        return value is None or inner(value, grad)
    return accepts


def _sequence(inner: Accepts, length: int | None) -> Accepts:
    def accepts(value: Any, grad: bool) -> bool:
        if type(value) not in _SEQUENCE_TYPES or (length is not None and len(value) != length):
            return False
        return all(inner(v, grad) for v in value)
    return accepts


def _never(value: Any, grad: bool) -> bool:
    return False


def _accepts_for(jit_type: Any, length: int | None = None) -> Accepts:
    """The exact-type test for one schema type; unknown types always go to the dispatcher.

    ``length``: the fixed length of a list type (``bool[3]``: the argument's ``N``).
    """
    kind = jit_type.kind()
    if kind == "OptionalType":
        return _optional(_accepts_for(jit_type.getElementType(), length))
    if kind == "ListType":
        return _sequence(_accepts_for(jit_type.getElementType()), length)
    simple = {"TensorType": None, "IntType": int, "FloatType": float, "BoolType": bool,
              "StringType": str}
    if kind not in simple:
        return _never
    if kind == "TensorType":
        return _plain_tensor
    return _int_or_dtype if kind == "IntType" else _exact(simple[kind])


def _is_plain(jit_type: Any, kind: str) -> bool:
    return jit_type.kind() == kind


class ArgumentSpec:
    """The arguments of one schema, with the checks described in the module docstring.

    Parameters
    ----------
    op : str
        The name errors use (the public op's name for an internal in-place op).
    schema : torch._C.FunctionSchema
        The registered schema (``OpOverload._schema``).
    """

    def __init__(self, op: str, schema: Any):
        self.op = op
        arguments = list(schema.arguments)
        self.names = tuple(a.name for a in arguments)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.n_positional = sum(1 for a in arguments if not a.kwarg_only)
        self.accepts = tuple(_accepts_for(a.type, a.N) for a in arguments)
        self.required = tuple((i, a.name) for i, a in enumerate(arguments)
                              if not a.has_default_value())
        # Without keywords, a call binds when it reaches the last required argument.
        self.min_positional = self.required[-1][0] + 1 if self.required else 0
        self.required_tensors = tuple((i, a.name) for i, a in enumerate(arguments)
                                      if _is_plain(a.type, "TensorType"))
        self.plain_bools = tuple((i, a.name) for i, a in enumerate(arguments)
                                 if _is_plain(a.type, "BoolType"))
        self.written = tuple((i, a.name) for i, a in enumerate(arguments)
                             if a.alias_info is not None and a.alias_info.is_write)

    # -- the fast path ---------------------------------------------------------------------

    def fast(self, args: tuple, kwargs: dict, grad: bool) -> bool:
        """True when ``(args, kwargs)`` binds to the schema with exactly-typed values."""
        n = len(args)
        if n > self.n_positional:
            return False
        accepts = self.accepts
        for i in range(n):
            if not accepts[i](args[i], grad):
                return False
        if not kwargs:
            return n >= self.min_positional
        index = self.index
        for name, value in kwargs.items():
            i = index.get(name)
            if i is None or i < n or not accepts[i](value, grad):
                return False
        return self._required_bound(n, kwargs)

    def _required_bound(self, n: int, kwargs: dict) -> bool:
        for i, name in self.required:
            if i >= n and name not in kwargs:
                return False
        return True

    # -- checks shared by every path -------------------------------------------------------

    def _value(self, args: tuple, kwargs: dict, i: int, name: str) -> Any:
        return args[i] if i < len(args) else kwargs.get(name)

    def reject_none_bools(self, args: tuple, kwargs: dict) -> None:
        """``None`` for a non-optional ``bool`` is an error, not ``False``."""
        for i, name in self.plain_bools:
            if (i < len(args) and args[i] is None) or (name in kwargs and kwargs[name] is None):
                checks.expect(False, self.op, name, "a bool (True or False; the argument is "
                              "not optional)", "None", TypeError)

    def check_required(self, args: tuple, kwargs: dict) -> None:
        """``None`` for a required ``Tensor`` is an error naming the parameter."""
        for i, name in self.required_tensors:
            if self._value(args, kwargs, i, name) is None:
                checks.expect(False, self.op, name, "a Tensor", "None", TypeError)

    def check_targets(self, args: tuple, kwargs: dict) -> None:
        """Every written tensor can take the write, checked before the first write."""
        if not self.written:
            return
        inference_mode = torch.is_inference_mode_enabled()
        for i, name in self.written:
            t = self._value(args, kwargs, i, name)
            if not isinstance(t, Tensor):
                continue
            if not inference_mode and t.is_inference():
                checks.expect(False, self.op, name, "a tensor that may be written outside "
                              "torch.inference_mode() (clone it outside inference mode first)",
                              "an inference tensor", RuntimeError)
            if not t.is_contiguous() and torch._debug_has_internal_overlap(t) == _OVERLAP_YES:
                checks.expect(False, self.op, name, "a tensor whose elements do not share "
                              "memory (it is written in place; write into a clone, not an "
                              "expanded view)",
                              lambda: f"strides {tuple(t.stride())} for shape {tuple(t.shape)}",
                              RuntimeError)

"""Helpers for the plain-Python op functions (``npu_anywhere.<op>``).

The docs and op-plugin's schemas sometimes name a parameter differently (``input`` vs
``self``); the Python functions accept both spellings and never reject a call that either
would accept.  A function that does so takes the other spelling through ``**kwargs`` and a
``None`` default, which would make required parameters look optional; :func:`describe` gives
every public function the signature its op's schema states instead (required parameters
without a default, type hints from the schema types), and a "did you mean" hint for unknown
keywords.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import typing
from typing import Any, Callable, Optional, Sequence

_PARAMETERS: dict[str, tuple[str, ...]] = {}
"""Every keyword each described function accepts (its parameters and their aliases), by name."""


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """``"; did you mean 'epsilon'?"`` for the closest candidate, or ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.5)
    if not close:
        # Abbreviations (eps for epsilon) are far in edit distance but are prefixes.
        close = [c for c in candidates if c.startswith(word) or word.startswith(c)][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def unexpected_keywords(function: str, names: Sequence[str],
                        accepted: Optional[Sequence[str]] = None) -> TypeError:
    """The TypeError for keywords ``function`` does not take, with a hint for the first one."""
    accepted = tuple(accepted if accepted is not None else _PARAMETERS.get(function, ()))
    names = sorted(names)
    if len(names) == 1:
        text = f"{function}() got an unexpected keyword argument {names[0]!r}"
    else:
        text = f"{function}() got unexpected keyword arguments {names}"
    return TypeError(text + did_you_mean(names[0], accepted))


def accept_alias(op: str, name: str, value: Any, alias: str, kwargs: dict) -> Any:
    """Return ``value``, or ``kwargs[alias]`` when the caller used the other spelling."""
    extra = set(kwargs) - {alias}
    if extra:
        raise unexpected_keywords(op, extra, _PARAMETERS.get(op, (name, alias)))
    if alias in kwargs:
        if value is not None:
            raise TypeError(f"{op}() got both '{name}' and its alias '{alias}'")
        return kwargs[alias]
    return value


# -- signatures from schemas ----------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _scalar_types() -> dict[str, Any]:
    import torch
    return {
        "TensorType": torch.Tensor, "IntType": int, "SymIntType": typing.Union[int, torch.SymInt],
        "FloatType": float, "SymFloatType": typing.Union[float, torch.SymFloat],
        "BoolType": bool, "SymBoolType": typing.Union[bool, torch.SymBool], "StringType": str,
        "NumberType": typing.Union[int, float, bool], "ScalarTypeType": torch.dtype,
        "DeviceObjType": typing.Union[torch.device, str], "LayoutType": torch.layout,
        "MemoryFormatType": torch.memory_format, "GeneratorType": torch.Generator,
        "NoneType": type(None),
    }


def annotation(jit_type: Any) -> Any:
    """The Python type for a schema type (``Tensor?`` -> ``Optional[torch.Tensor]``...)."""
    kind = jit_type.kind()
    if kind == "OptionalType":
        return Optional[annotation(jit_type.getElementType())]
    if kind == "ListType":
        return list[annotation(jit_type.getElementType())]
    if kind == "TupleType":
        return tuple[tuple(annotation(t) for t in jit_type.elements())]
    # An unknown kind keeps the schema's spelling, which help() shows as is.
    return _scalar_types().get(kind, str(jit_type))


def _return_annotation(schema: Any) -> Any:
    returns = [annotation(r.real_type) for r in schema.returns]
    if not returns:
        return None
    return returns[0] if len(returns) == 1 else tuple[tuple(returns)]


def signature_from_schema(fn: Callable[..., Any], schema: Any) -> inspect.Signature:
    """``fn``'s signature with the schema's types, and no default where the schema has none.

    Parameters map to schema arguments by name, else (an alias spelling such as ``input`` for
    the schema's ``self``) by position.  ``**kwargs`` that only carries aliases is dropped.  A
    ``None`` default is removed when the schema argument is required, unless that would put a
    required positional parameter after an optional one.
    """
    own = inspect.signature(fn)
    arguments = list(schema.arguments)
    if any(p.kind is p.VAR_POSITIONAL for p in own.parameters.values()):
        return _forwarding_signature(own, schema)
    by_name = {a.name: a for a in arguments}
    names = set(own.parameters)
    params = []
    optional_seen = False
    for index, p in enumerate(own.parameters.values()):
        if p.kind is p.VAR_KEYWORD:
            continue
        arg = by_name.get(p.name)
        if arg is None and p.kind is p.POSITIONAL_OR_KEYWORD and index < len(arguments) \
                and arguments[index].name not in names:
            arg = arguments[index]
        if arg is not None:
            if p.annotation is p.empty or isinstance(p.annotation, str):
                p = p.replace(annotation=annotation(arg.real_type))
            if p.default is None and not arg.has_default_value() and not (
                    p.kind is p.POSITIONAL_OR_KEYWORD and optional_seen):
                p = p.replace(default=p.empty)
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty:
            optional_seen = True
        params.append(p)
    returns = own.return_annotation
    if returns is own.empty or isinstance(returns, str):
        returns = _return_annotation(schema)
    return own.replace(parameters=params, return_annotation=returns)


def _forwarding_signature(own: inspect.Signature, schema: Any) -> inspect.Signature:
    """The schema's own signature, for a function that forwards ``*args, **kwargs`` to its op."""
    params = []
    for arg in schema.arguments:
        kind = (inspect.Parameter.KEYWORD_ONLY if arg.kwarg_only
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)
        default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
        params.append(inspect.Parameter(arg.name, kind, default=default,
                                        annotation=annotation(arg.real_type)))
    return own.replace(parameters=params, return_annotation=_return_annotation(schema))


def _with_keyword_hints(fn: Callable[..., Any], name: str,
                        accepted: tuple[str, ...]) -> Callable[..., Any]:
    """``fn``, turning Python's bare unknown-keyword TypeError into one with a hint.

    The successful call pays one extra Python frame (about 60 ns); only a failing call does
    any work.
    """
    known = frozenset(accepted)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            unknown = [k for k in kwargs if k not in known]
            if not unknown:
                raise
            raise unexpected_keywords(name, unknown, accepted) from None
    return call


def describe(name: str, fn: Callable[..., Any], schema: Any = None) -> Callable[..., Any]:
    """The public form of ``fn``: schema signature and annotations, keyword hints.

    ``schema`` is the op's ``torch._C.FunctionSchema`` (None for a function with no op, whose
    own signature stands).  Functions taking ``**kwargs`` (documented aliases) are returned
    as they are, with ``__signature__`` and ``__annotations__`` set; their unknown keywords go
    through :func:`accept_alias`.  Others are wrapped by a hinting shim.
    """
    if getattr(fn, "_npu_anywhere_public", False):      # described already (idempotent)
        return fn
    try:
        own = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    var_keyword = any(p.kind is p.VAR_KEYWORD for p in own.parameters.values())
    signature = own if schema is None else signature_from_schema(fn, schema)
    accepted = tuple(p.name for p in signature.parameters.values()
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    if schema is not None and var_keyword:
        # The schema's spellings are the aliases such a function takes through **kwargs.
        accepted += tuple(a.name for a in schema.arguments if a.name not in accepted)
    _PARAMETERS[name] = accepted
    public = fn if var_keyword else _with_keyword_hints(fn, name, accepted)
    public.__signature__ = signature
    hints = {p.name: p.annotation for p in signature.parameters.values()
             if p.annotation is not p.empty}
    if signature.return_annotation is not signature.empty:
        hints["return"] = signature.return_annotation
    public.__annotations__ = hints
    public._npu_anywhere_public = True
    return public

"""Provider selection: which implementation runs a call.

Every op has an ordered list of providers.  Each fast provider carries a ``supports``
predicate that returns ``None`` when it can take the call, or a short reason string when it
declines; the reason is logged once per (op, provider, reason).  The reference is always last
and takes every call that passed the op's checks, so every call has a correct path.

Overrides, strongest first:

* ``with npu_anywhere.use_providers("reference"):`` (optionally ``op="npu_rotary_mul"``),
* ``NPU_ANYWHERE_PROVIDERS``: a comma-separated list of ``provider`` (all ops) or
  ``op=provider`` items, e.g. ``reference`` or ``npu_rotary_mul=compiled,reference``.

Forcing a provider that declines a call falls back to the reference (logged), never fails.
Naming a provider (or an op) that no op has is an error: ``use_providers`` raises at once, and
the environment variable is checked on the first op call (all ops are registered by then).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

log = logging.getLogger("npu_anywhere.dispatch")

REFERENCE = "reference"

SupportsFn = Callable[..., Optional[str]]

ENV_VAR = "NPU_ANYWHERE_PROVIDERS"

KNOWN_PROVIDERS: set[str] = {REFERENCE}
"""Every provider name some op has (filled as ops register theirs)."""

KNOWN_OPS: set[str] = set()
"""Every op that has a provider list."""


@dataclass(frozen=True)
class Provider:
    name: str
    fn: Callable[..., Any]
    supports: SupportsFn | None = None   # None: takes every call


@dataclass(frozen=True)
class _Override:
    """Provider names forced globally (``default``) and per op (``per_op``)."""
    default: tuple[str, ...] | None = None
    per_op: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def for_op(self, op: str) -> tuple[str, ...] | None:
        return self.per_op.get(op, self.default)


def parse_override(text: str) -> _Override:
    default: list[str] = []
    per_op: dict[str, list[str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "=" in item:
            op, name = (s.strip() for s in item.split("=", 1))
            per_op.setdefault(op, []).append(name)
        else:
            default.append(item)
    return _Override(tuple(default) or None, {k: tuple(v) for k, v in per_op.items()})


_override: contextvars.ContextVar[_Override] = contextvars.ContextVar(
    "npu_anywhere_providers",
    default=parse_override(os.environ.get(ENV_VAR, "")))

_env_checked = False


def _unknown(override: _Override) -> Optional[tuple[str, str]]:
    """The first (what, name) of ``override`` that no registered op knows, or None."""
    for name in override.default or ():
        if name not in KNOWN_PROVIDERS:
            return "provider names", name
    for op, names in override.per_op.items():
        if op not in KNOWN_OPS:
            return "op names", op
        for name in names:
            if name not in KNOWN_PROVIDERS:
                return "provider names", name
    return None


def validate(override: _Override, source: str) -> None:
    """Raise ValueError naming ``source`` when ``override`` names an unknown provider or op."""
    unknown = _unknown(override)
    if unknown is not None:
        what, name = unknown
        known = sorted(KNOWN_PROVIDERS) if what == "provider names" else "the ops with providers"
        raise ValueError(f"{source}: expected {what} among {known}, but got {name!r}")


def _check_env_once() -> None:
    global _env_checked
    text = os.environ.get(ENV_VAR, "")
    if text.strip():
        validate(parse_override(text), ENV_VAR)   # raises on every call until fixed
    _env_checked = True


@contextlib.contextmanager
def use_providers(*names: str, op: str | None = None) -> Iterator[None]:
    """Force the listed providers (in order) for all ops, or for one op."""
    if not names:
        raise ValueError("use_providers: expected at least one provider name, but got none")
    if op is None:
        validate(_Override(tuple(names)), "use_providers")
    else:
        validate(_Override(None, {op: tuple(names)}), "use_providers")
    current = _override.get()
    if op is None:
        new = _Override(tuple(names), dict(current.per_op))
    else:
        new = _Override(current.default, {**current.per_op, op: tuple(names)})
    token = _override.set(new)
    try:
        yield
    finally:
        _override.reset(token)


_logged: set[tuple[str, str, str]] = set()


def _log_once(op: str, provider: str, reason: str) -> None:
    key = (op, provider, reason)
    if key not in _logged:
        _logged.add(key)
        log.info("%s: provider %r declined: %s", op, provider, reason)


class ProviderList:
    """The providers of one op, fastest first, reference last."""

    def __init__(self, op_name: str, reference: Callable[..., Any]):
        self.op_name = op_name
        self.reference = Provider(REFERENCE, reference)
        self._fast: list[Provider] = []
        KNOWN_OPS.add(op_name)

    def add(self, provider: Provider) -> None:
        if provider.name == REFERENCE or any(p.name == provider.name for p in self._fast):
            raise ValueError(f"{self.op_name}: provider {provider.name!r} is registered twice")
        self._fast.append(provider)
        KNOWN_PROVIDERS.add(provider.name)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self._fast] + [REFERENCE]

    def select(self, *args: Any, **kwargs: Any) -> Provider:
        if not _env_checked:
            _check_env_once()
        forced = _override.get().for_op(self.op_name)
        if forced is None:
            candidates = self._fast
        else:
            by_name = {p.name: p for p in self._fast}
            candidates = [by_name[n] for n in forced if n in by_name]
            for name in forced:
                if name not in by_name and name != REFERENCE:
                    _log_once(self.op_name, name, "no such provider for this op")
        for provider in candidates:
            reason = None if provider.supports is None else provider.supports(*args, **kwargs)
            if reason is None:
                return provider
            _log_once(self.op_name, provider.name, reason)
        return self.reference

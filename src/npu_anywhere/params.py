"""Helpers for the plain-Python op functions (``npu_anywhere.<op>``).

The docs and op-plugin's schemas sometimes name a parameter differently (``input`` vs
``self``); the Python functions accept both spellings and never reject a call that either
would accept.
"""

from __future__ import annotations

from typing import Any


def accept_alias(op: str, name: str, value: Any, alias: str, kwargs: dict) -> Any:
    """Return ``value``, or ``kwargs[alias]`` when the caller used the other spelling."""
    extra = set(kwargs) - {alias}
    if extra:
        raise TypeError(f"{op}() got unexpected keyword arguments {sorted(extra)}")
    if alias in kwargs:
        if value is not None:
            raise TypeError(f"{op}() got both '{name}' and its alias '{alias}'")
        return kwargs[alias]
    return value

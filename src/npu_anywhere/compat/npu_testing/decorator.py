"""``torch_npu.testing.decorator``: the dtype / format parametrization of torch_npu's tests.

``@Dtypes(...)`` and ``@Formats(...)`` tag a test method with the values it takes;
``@instantiate_tests`` on the class replaces each tagged method by one method per combination,
named ``<test>_<dtype name>`` and ``<test>_<format>`` in tag order (dtypes first, then formats),
each calling the original with ``device="npu"`` (when it takes a ``device`` argument) and the
values passed to the parameters whose names contain ``dtype`` / ``format``.  ``@graph_mode``
runs the test as is: there is no separate graph mode to switch on off the NPU (torch_npu only
switches it when ``GRAPH_MODE_TEST=1``, and that mode is gone from current releases).

Semantics followed: torch_npu ``torch_npu/testing/decorator.py``.
"""

from __future__ import annotations

import functools
import inspect
import itertools

import torch

__all__ = ["Dtypes", "Formats", "instantiate_tests", "graph_mode"]


class Dtypes:
    """Tag a test method with the dtypes it runs for."""

    def __init__(self, *dtypes: torch.dtype) -> None:
        if not dtypes:
            raise ValueError("Dtypes: expected at least one dtype, but got none")
        bad = [d for d in dtypes if not isinstance(d, torch.dtype)]
        if bad:
            raise TypeError(f"Dtypes: expected torch dtypes, but got {bad!r}")
        self.args = dtypes

    def __call__(self, fn):
        fn.dtypes = self.args
        return fn


class Formats:
    """Tag a test method with the NPU storage formats it runs for (ints, e.g. 0, 2, 29)."""

    def __init__(self, *formats) -> None:
        if not formats:
            raise ValueError("Formats: expected at least one format, but got none")
        self.args = formats

    def __call__(self, fn):
        fn.formats = self.args
        return fn


def _parameter_for(key: str, params: list[str]) -> str:
    """The test's parameter whose name contains ``key`` ("dtype" -> "dtype" or "npu_dtype")."""
    matches = [p for p in params if key in p]
    if len(matches) != 1:
        raise TypeError(f"instantiate_tests: expected one parameter naming {key!r}, but got "
                        f"{matches or 'none'}")
    return matches[0]


def _suffix(key: str, value) -> str:
    return str(value).split(".", 1)[1] if key == "dtype" else str(value)


def _bound(fn, name: str, kwargs: dict):
    @functools.wraps(fn)
    def test(self):
        return fn(self, **kwargs)
    test.__name__ = test.__qualname__ = name
    test.__wrapped__ = fn
    return test


def instantiate_tests(cls=None, **_ignored):
    """Expand every ``@Dtypes`` / ``@Formats``-tagged method of the class into its variants."""
    def expand(klass):
        for name, fn in list(vars(klass).items()):
            tags = {key: getattr(fn, attr) for key, attr in (("dtype", "dtypes"),
                                                               ("format", "formats"))
                    if hasattr(fn, attr)}
            if not tags:
                continue
            params = inspect.getfullargspec(fn).args
            targets = {key: _parameter_for(key, params) for key in tags}
            for combo in itertools.product(*tags.values()):
                kwargs = {"device": "npu"} if "device" in params else {}
                variant = name
                for key, value in zip(tags, combo):
                    variant += "_" + _suffix(key, value)
                    kwargs[targets[key]] = value
                setattr(klass, variant, _bound(fn, variant, kwargs))
            delattr(klass, name)
        return klass

    return expand if cls is None else expand(cls)


def graph_mode(fn):
    """Run the test unchanged (there is no graph mode to enter off the NPU)."""
    @functools.wraps(fn)
    def test(*args, **kwargs):
        return fn(*args, **kwargs)
    return test

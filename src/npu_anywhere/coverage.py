"""The coverage table behind ``npu-anywhere ops``: every documented op, implemented or not."""

from __future__ import annotations

import collections
from typing import Callable, Optional

from . import ops
from .compat.shim import documented_ops
from .library import REGISTRY, default_ops

TABLE_WIDTH = 100
"""``format_table`` keeps every line within this many columns."""

_OPS_PACKAGE = ops.__name__ + "."


def _package_of(fn: Optional[Callable]) -> Optional[str]:
    """The ``ops/<package>`` an op's function lives in (``norm`` for ``ops.norm.rms_norm``)."""
    module = getattr(fn, "__module__", None) or ""
    if not module.startswith(_OPS_PACKAGE):
        return None
    return module[len(_OPS_PACKAGE):].split(".", 1)[0]


def _registry(documented: dict) -> dict:
    """One op per name, plus the named overloads the docs list as ops of their own
    (``npu_fused_infer_attention_score.out`` has a doc page of its own)."""
    return {**default_ops(), **{k: op for k, op in REGISTRY.items() if k in documented}}


def _families(names: list[str], documented: dict, functions: dict) -> dict[str, str]:
    """The family of every op: the doc's, else the doc family its package's other ops share.

    Ops the docs do not list (backward ops, op-plugin-only ops such as ``npu_add_rms_norm``)
    take the family most documented ops of their ``ops/<package>`` have, so that
    ``--family norm`` lists the whole family; a package with no documented op names itself.
    """
    packages: dict[str, Optional[str]] = {}
    registry = _registry(documented)
    for name in names:
        op = registry.get(name)
        packages[name] = _package_of(op.check if op is not None else functions.get(name))
    votes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name, package in packages.items():
        family = documented.get(name, {}).get("family")
        if package and family:
            votes[package][family] += 1
    out = {}
    for name in names:
        family = documented.get(name, {}).get("family")
        package = packages[name]
        if not family and package:
            family = votes[package].most_common(1)[0][0] if votes[package] else package
        out[name] = family or "-"
    return out


def rows() -> list[dict]:
    """One row per documented op plus every implemented op the docs do not list.

    An op's named overloads (``.List``, ``.out``) are listed in its row's ``overloads``.
    """
    documented = documented_ops()
    registry = _registry(documented)
    # Python-level helpers of torch_npu (no op schema, e.g. npu_format_cast) count as implemented.
    functions = {**ops.TORCH_NPU_FUNCTIONS, **ops.CANN_FUNCTIONS}
    names = list(documented) + sorted(n for n, op in default_ops().items()
                                      if n not in documented and op.info.public)
    family_of = _families(names, documented, functions)
    out = []
    for name in names:
        entry = documented.get(name, {})
        op = registry.get(name)
        plain = op is None and name in functions
        out.append({
            "name": name,
            "api": entry.get("api", op.info.api if op else "?"),
            "family": family_of[name],
            "implemented": op is not None or plain,
            "namespace": op.namespace if op else ("python" if plain else "-"),
            "providers": ", ".join(op.providers.names) if op and op.providers else
                         ("composite" if op else ("python function" if plain else "-")),
            "autograd": op.autograd if op else "-",
            "fake": "yes" if op and op.has_fake else "-",
            "documented": name in documented,
            "overloads": sorted(op.overloads) if op else [],
        })
    return out


def families(table: list[dict]) -> list[str]:
    """The families present in ``table``, sorted."""
    return sorted({r["family"] for r in table if r["family"] != "-"})


# Short spellings for the table (the JSON keeps the full values); the legend explains them.
_SHORT = {
    "api": {"cann_ops_transformer": "cann"},
    "providers": {"python function": "python"},
    "autograd": {"no (raises)": "raises"},
}
_COLUMNS = (("name", "name"), ("api", "api"), ("family", "family"),
            ("implemented", "implemented"), ("providers", "providers"), ("autograd", "grad"))

LEGEND = """\
api        torch_npu: torch_npu.<op> and torch.ops.npu.<op>;  custom: a torch_npu custom op;
           cann: cann_ops_transformer.ops.<op> and torch.ops.cann_ops_transformer.<op>
providers  tried in this order, each may decline a call; compiled: torch.compile of the
           reference, used from the NPU_ANYWHERE_COMPILE_AFTER-th call on; ref: the eager
           reference; composite: built from other ops; python: a plain Python function
grad       yes: autograd implemented; raises: no backward on the NPU either, asking for a
           gradient raises; none: a backward op (no double backward)"""


def _cell(row: dict, column: str) -> str:
    value = row[column]
    if value is True or value is False:
        return "yes" if value else "no"
    value = _SHORT.get(column, {}).get(value, str(value))
    if column == "providers":      # "compiled, reference" -> "compiled,ref": one word, narrow
        value = ",".join("ref" if p == "reference" else p for p in value.split(", "))
    return value


def format_table(table: list[dict]) -> str:
    """The table as text, every line at most :data:`TABLE_WIDTH` columns, with a legend.

    A name too long for its column goes on a line of its own, the other cells below it.
    """
    if not table:
        return "no ops match"
    headers = [title for _, title in _COLUMNS]
    cells = [[_cell(r, column) for column, _ in _COLUMNS] for r in table]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    others = sum(widths[1:]) + 2 * (len(widths) - 1)
    widths[0] = min(widths[0], TABLE_WIDTH - others)

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    lines = [line(headers), line(["-" * w for w in widths])]
    for row in cells:
        if len(row[0]) > widths[0]:
            lines.append(row[0])
            row = ["", *row[1:]]
        lines.append(line(row))
    done = sum(r["implemented"] for r in table if r["documented"])
    total = sum(r["documented"] for r in table)
    fakes = all(r["fake"] == "yes" for r in table if r["implemented"] and r["namespace"] != "python")
    lines += ["", f"{done} of {total} documented ops implemented "
                  f"({sum(r['implemented'] for r in table)} ops registered in all)", "", LEGEND]
    if fakes:
        lines.append("Every implemented op has a fake kernel (FakeTensor, torch.compile); "
                     "--json adds namespaces.")
    return "\n".join(lines)

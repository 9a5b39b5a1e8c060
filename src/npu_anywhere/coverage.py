"""The coverage table behind ``npu-anywhere ops``: every documented op, implemented or not."""

from __future__ import annotations

from . import ops
from .compat.shim import documented_ops
from .library import REGISTRY


def rows() -> list[dict]:
    """One row per documented op plus every implemented op the docs do not list."""
    documented = documented_ops()
    # Python-level helpers of torch_npu (no op schema, e.g. npu_format_cast) count as implemented.
    functions = {**ops.TORCH_NPU_FUNCTIONS, **ops.CANN_FUNCTIONS}
    names = list(documented) + sorted(n for n, op in REGISTRY.items()
                                      if n not in documented and op.info.public)
    out = []
    for name in names:
        entry = documented.get(name, {})
        op = REGISTRY.get(name)
        plain = op is None and name in functions
        out.append({
            "name": name,
            "api": entry.get("api", op.info.api if op else "?"),
            "family": entry.get("family", "-"),
            "implemented": op is not None or plain,
            "namespace": op.namespace if op else ("python" if plain else "-"),
            "providers": ", ".join(op.providers.names) if op and op.providers else
                         ("composite" if op else ("python function" if plain else "-")),
            "autograd": op.autograd if op else "-",
            "fake": "yes" if op and op.has_fake else "-",
            "documented": name in documented,
        })
    return out


def format_table(table: list[dict]) -> str:
    cols = ("name", "api", "family", "implemented", "namespace", "providers", "autograd", "fake")
    cells = [[("yes" if r[c] is True else "no" if r[c] is False else str(r[c])) for c in cols]
             for r in table]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    done = sum(r["implemented"] for r in table if r["documented"])
    total = sum(r["documented"] for r in table)
    lines.append(f"\n{done} of {total} documented ops implemented "
                 f"({sum(r['implemented'] for r in table)} ops registered in all)")
    return "\n".join(lines)

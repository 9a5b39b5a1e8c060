"""Ascend products and strict mode.

By default every op accepts what the most capable documented product accepts (the union of
the per-product rules in the docs).  Strict mode narrows that to one product, so that a user
learns on a laptop that a call would fail on that NPU::

    with npu_anywhere.strict("A2"):
        npu_anywhere.npu_apply_rotary_pos_emb(q, k, cos, sin)   # raises if D not in {64, 128}

or process-wide with the environment variable ``NPU_ANYWHERE_STRICT=A2``.  Ops read the
active product with :func:`current` inside their ``_check`` and apply the rules the docs
list for that product.  Strict mode is read when the op is called (or traced), so it
applies to eager, FakeTensor and ``torch.compile`` alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import os
from typing import Iterator


class Product(enum.Enum):
    """Product lines as the torch_npu / CANN docs group them."""

    ATLAS_TRAINING = "910"          # Atlas 训练系列产品 (Ascend 910)
    ATLAS_INFERENCE = "310P"        # Atlas 推理系列产品 (Ascend 310P)
    A2 = "A2"                       # Atlas A2 训练/推理系列产品 (Ascend 910B)
    A3 = "A3"                       # Atlas A3 训练/推理系列产品 (Ascend 910_93)
    ASCEND_950 = "950"              # Ascend 950PR / 950DT, Atlas 350 加速卡

    @property
    def doc_name(self) -> str:
        return _DOC_NAMES[self]


_DOC_NAMES = {
    Product.ATLAS_TRAINING: "Atlas training series (Ascend 910)",
    Product.ATLAS_INFERENCE: "Atlas inference series (Ascend 310P)",
    Product.A2: "Atlas A2 training/inference series (Ascend 910B)",
    Product.A3: "Atlas A3 training/inference series (Ascend 910_93)",
    Product.ASCEND_950: "Ascend 950PR/950DT (Atlas 350 card)",
}

_ALIASES = {
    "910": Product.ATLAS_TRAINING, "ATLAS TRAINING": Product.ATLAS_TRAINING,
    "310P": Product.ATLAS_INFERENCE, "ATLAS INFERENCE": Product.ATLAS_INFERENCE,
    "A2": Product.A2, "910B": Product.A2, "ATLAS A2": Product.A2,
    "A3": Product.A3, "910_93": Product.A3, "910C": Product.A3, "ATLAS A3": Product.A3,
    "950": Product.ASCEND_950, "950PR": Product.ASCEND_950, "950DT": Product.ASCEND_950,
    "ASCEND 950": Product.ASCEND_950, "ATLAS 350": Product.ASCEND_950,
    "350": Product.ASCEND_950,
}

# The A2/A3/inference/training lines share most of their op rules in the docs.
PRE_950 = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3})


def parse_product(name: str | Product) -> Product:
    """Map a product name or alias ("A2", "910B", "Atlas A3", "950PR", ...) to a Product."""
    if isinstance(name, Product):
        return name
    key = " ".join(str(name).replace("-", " ").split()).upper()
    for prefix in ("ASCEND", "ATLAS"):
        bare = key.removeprefix(prefix).strip()
        if bare in _ALIASES and key not in _ALIASES:
            key = bare
    if key not in _ALIASES:
        raise ValueError(
            f"npu_anywhere.strict: expected product one of {sorted(set(_ALIASES))}, "
            f"but got {name!r}")
    return _ALIASES[key]


def _from_env() -> Product | None:
    value = os.environ.get("NPU_ANYWHERE_STRICT", "").strip()
    if not value:
        return None
    try:
        return parse_product(value)
    except ValueError as exc:   # say which setting is wrong: the user wrote no strict() call
        raise ValueError(str(exc).replace("npu_anywhere.strict:", "NPU_ANYWHERE_STRICT:", 1)) \
            from None


_active: contextvars.ContextVar[Product | None] = contextvars.ContextVar(
    "npu_anywhere_strict", default=_from_env())


def current() -> Product | None:
    """The product strict mode enforces now, or None in default (permissive) mode."""
    return _active.get()


@contextlib.contextmanager
def strict(product: str | Product | None) -> Iterator[Product | None]:
    """Enforce the documented constraints of ``product`` inside the block.

    ``strict(None)`` returns to default mode inside the block (useful to lift an env-wide
    setting locally).
    """
    target = None if product is None else parse_product(product)
    token = _active.set(target)
    try:
        yield target
    finally:
        _active.reset(token)


def expect_supported(op: str, supported: frozenset[Product] | set[Product]) -> Product | None:
    """In strict mode, raise unless the active product is one the op's doc lists.

    Returns the active product (None in default mode) so the caller can apply its rules.
    """
    product = current()
    if product is not None and product not in supported:
        listed = ", ".join(sorted(p.value for p in supported)) or "none"
        raise RuntimeError(
            f"{op}: expected a product the op supports ({listed}), but got strict target "
            f"{product.value} ({product.doc_name})")
    return product

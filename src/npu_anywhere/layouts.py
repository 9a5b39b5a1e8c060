"""Tensor layouts named by the docs (BSND, BSH, SBND, BNSD, TND) and where their axes sit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Layout:
    name: str
    ndim: int
    batch_axis: Optional[int]   # None for TND (batch folded into T)
    head_axis: int


LAYOUTS = {
    "BSND": Layout("BSND", 4, 0, 2),
    # BSH shares BSND's kernel layout (code 1) and its 4-D dim semantics.
    "BSH": Layout("BSH", 4, 0, 2),
    "SBND": Layout("SBND", 4, 1, 2),
    "BNSD": Layout("BNSD", 4, 0, 1),
    "TND": Layout("TND", 3, None, 1),
}

# The integer layout codes of the aclnn kernels and of apply_rotary_pos_emb_grad.
LAYOUT_CODES = {"BSND": 1, "BSH": 1, "SBND": 2, "BNSD": 3, "TND": 4}
LAYOUT_BY_CODE = {1: "BSND", 2: "SBND", 3: "BNSD", 4: "TND"}

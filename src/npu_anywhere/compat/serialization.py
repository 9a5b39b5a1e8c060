"""``torch.load`` of npu locations: ``map_location="npu"`` / ``"npu:0"`` /
``torch.device("npu")`` / ``{"npu:0": ...}``, and checkpoints saved on an NPU (their storages
are tagged "npu:0").

torch resolves every location through its package registry
(``torch.serialization.register_package``); a deserializer registered ahead of torch's
PrivateUse1 one moves npu-tagged storages to the local device, and marks them as NPU memory
when that is the CPU (:mod:`npu_anywhere.compat.placement`).  After ``transfer_to_npu`` it
takes "cuda" locations as well when CUDA is not the local device.
"""

from __future__ import annotations

import torch

from . import placement
from .device import local_device

_PRIORITY = 19  # before torch's cuda (20) and PrivateUse1 (23) deserializers
_types: set[str] = set()  # the location types taken over; empty while not installed
_registered = False


def _tag(storage) -> None:
    return None  # saving: our tensors are local-device tensors; torch tags them itself


def _deserialize(storage, location: str):
    kind, _, index = location.partition(":")
    if kind not in _types:
        return None
    target = local_device(int(index) if index else None)
    moved = storage if storage.device == target else storage.to(device=target)
    placement.mark_storage(moved)
    return moved


def map_cuda(enabled: bool) -> None:
    """Restore "cuda" locations to the stand-in too (transfer_to_npu, CUDA not local)."""
    if enabled and local_device().type != "cuda":
        _types.add("cuda")
    else:
        _types.discard("cuda")


def enable() -> None:
    global _registered
    _types.add("npu")
    if not _registered:
        torch.serialization.register_package(_PRIORITY, _tag, _deserialize)
        _registered = True


def disable() -> None:
    _types.clear()

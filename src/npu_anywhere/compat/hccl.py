"""An ``hccl`` torch.distributed backend that is gloo underneath, and the communicator names the
communication-fused ops (``npu_mm_all_reduce_base`` & co.) take as ``hcom``.

Ascend code starts its processes with ``dist.init_process_group(backend="hccl", ...)`` and
passes the communicator name ``group._get_backend(torch.device("npu")).get_hccl_comm_name(rank)``
to the fused ops.  Here:

* ``hccl`` is registered with :func:`torch.distributed.Backend.register_backend` for the cpu,
  npu and cuda device types; each group gets a :class:`HcclBackend`, a
  ``ProcessGroupGloo`` (tensors live on the CPU here; CUDA tensors are copied to the CPU by the
  fused ops for their collectives) with ``get_hccl_comm_name``.
* Every backend made in this process gets a name, ``npu_anywhere_hccl_<n>`` (n counts the groups
  the process created, so ranks that create their groups in the same order -- as
  torch.distributed requires -- agree on the names), and :func:`lookup` finds it again.
* Without a group (no ``init_process_group``) or an unknown name, :func:`lookup` answers None
  and the fused ops are single-process: their collective is the identity over one rank.
"""

from __future__ import annotations

import datetime
import threading

import torch
import torch.distributed as dist

BACKEND = "hccl"
_NAME_PREFIX = "npu_anywhere_hccl_"

_lock = threading.Lock()
_backends: dict[str, object] = {}   # name -> HcclBackend, kept alive so pybind returns the
                                     # Python subclass (with get_hccl_comm_name) from
                                     # ProcessGroup._get_backend
_installed = False


def _backend_class():
    gloo = getattr(dist, "ProcessGroupGloo", None)
    if gloo is None:
        return None

    class HcclBackend(gloo):
        """A gloo backend that answers to HCCL's communicator-name query."""

        def get_hccl_comm_name(self, rank: int = 0, init_comm: bool = True) -> str:
            """This group's communicator name (the same for every rank argument)."""
            return self._npu_anywhere_name

    return HcclBackend


def _create(store, rank: int, size: int, timeout: datetime.timedelta):
    backend = _HcclBackend(store, rank, size, timeout)
    with _lock:
        name = f"{_NAME_PREFIX}{len(_backends)}"
        backend._npu_anywhere_name = name
        _backends[name] = backend
    return backend


_HcclBackend = _backend_class()


def lookup(hcom: str):
    """The backend named ``hcom`` (``get_hccl_comm_name``'s answer), or None."""
    return _backends.get(hcom)


def group_size(hcom: str) -> int:
    """The number of ranks of the group named ``hcom``; 1 when there is none."""
    backend = _backends.get(hcom)
    return 1 if backend is None else backend.size()


def _accelerator_or_cpu(original):
    # torch.distributed.barrier() asks torch._C._get_accelerator(), which raises while the
    # PrivateUse1 backend is named "npu" without device hooks; the answer for our CPU-backed
    # npu device is the CPU.
    def get_accelerator():
        try:
            return original()
        except RuntimeError:
            return torch.device("cpu")
    get_accelerator._npu_anywhere_original = original
    return get_accelerator


def installed() -> bool:
    """Whether the ``hccl`` backend is registered in this process."""
    return _installed


def _serve_npu_devices() -> None:
    """Let ``hccl`` groups serve ``torch.device("npu")`` once PrivateUse1 is named "npu".

    The backend may have been registered before the rename (an earlier install without device
    strings, in a parent process that then forked); a group's backends are chosen from
    ``Backend.backend_capability`` when it is created, so adding the device later works.
    """
    if torch._C._get_privateuse1_backend_name() != "npu":
        return
    capability = dist.Backend.backend_capability.setdefault(BACKEND, ["cpu", "cuda"])
    if "npu" not in capability:
        capability.append("npu")
    dist.Backend.default_device_backend_map.setdefault("npu", BACKEND)


def install() -> None:
    """Register the ``hccl`` backend (idempotent; nothing when gloo is missing)."""
    global _installed
    if _installed:
        _serve_npu_devices()     # a later install may come after PrivateUse1 got its name
        return
    if _HcclBackend is None or not dist.is_available():
        return
    if BACKEND.upper() not in dist.Backend.__dict__:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
    _serve_npu_devices()
    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: True
    getter = getattr(torch._C, "_get_accelerator", None)
    if getter is not None and not hasattr(getter, "_npu_anywhere_original"):
        torch._C._get_accelerator = _accelerator_or_cpu(getter)
    _installed = True

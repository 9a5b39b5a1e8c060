"""torch_npu's runtime options and storage-format enum, as scripts and tests read them back.

torch_npu keeps its switches (``ALLOW_INTERNAL_FORMAT``, ``ALLOW_MATMUL_HF32``, ...) in one
option table behind ``torch_npu._C._npu_setOption({name: "enable"})`` and
``torch_npu._C._npu_getOption(name)`` (bytes, or None when never set); the Python switches
``torch.npu.config.allow_internal_format``, ``torch.npu.matmul.allow_hf32`` and
``torch.npu.conv.allow_hf32`` write and read that table.  Test suites save an option in
``setUp`` and restore it in ``tearDown``, so the stand-in keeps a real table: the values are
recorded, and none of them changes what an op computes on the CPU.

``Format`` is torch_npu's ``IntEnum`` of storage formats (``torch_npu/npu/_format.py``), which
``torch_npu.get_npu_format`` returns, so ``get_npu_format(w) == torch_npu.Format.FRACTAL_NZ``
works like the plain code comparison.
"""

from __future__ import annotations

import enum
from typing import Optional

_OPTIONS: dict[str, str] = {}


def set_option(options: dict) -> None:
    """``torch_npu._C._npu_setOption``: record each ``name: value`` (values as strings)."""
    if not isinstance(options, dict):
        raise TypeError(f"_npu_setOption: expected options a dict of option names to values, "
                        f"but got {type(options).__name__}")
    for name, value in options.items():
        _OPTIONS[str(name)] = value.decode() if isinstance(value, bytes) else str(value)


def get_option(name: str) -> Optional[bytes]:
    """``torch_npu._C._npu_getOption``: the recorded value as bytes, None when never set."""
    value = _OPTIONS.get(str(name))
    return None if value is None else value.encode()


def _enabled(name: str, default: bool) -> bool:
    value = _OPTIONS.get(name)
    if value is None or value == "":
        return default
    return value == "enable"


class _Switch:
    """A boolean attribute stored in the option table (``"enable"`` / ``"disable"``).

    torch_npu turns any truthy value into "enable" (a test's ``tearDown`` restores the bytes
    ``_npu_getOption`` gave it, and ``b"disable"`` is truthy), and so does this."""

    def __init__(self, option: str, default: bool):
        self.option, self.default = option, default

    def __get__(self, instance, owner=None):
        return _enabled(self.option, self.default)

    def __set__(self, instance, value):
        _OPTIONS[self.option] = "enable" if value else "disable"


class Config:
    """``torch.npu.config``."""
    allow_internal_format = _Switch("ALLOW_INTERNAL_FORMAT", False)


class MatmulConfig:
    """``torch.npu.matmul``: HF32 has no CPU counterpart; the switch is recorded only."""
    allow_hf32 = _Switch("ALLOW_MATMUL_HF32", False)


class ConvConfig:
    """``torch.npu.conv``: unset reads as enabled, as torch_npu's getter answers."""
    allow_hf32 = _Switch("ALLOW_CONV_HF32", True)


class Format(enum.IntEnum):
    """torch_npu's storage formats (the ACL format codes)."""
    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47
    FRACTAL_NZ_C0_16 = 50
    FRACTAL_NZ_C0_32 = 51
    FRACTAL_NZ_C0_2 = 52
    FRACTAL_NZ_C0_4 = 53
    FRACTAL_NZ_C0_8 = 54

    def __str__(self) -> str:
        return self.name


def as_format(code: int):
    """``code`` as a :class:`Format` member, or the plain int for a code the enum lacks."""
    try:
        return Format(code)
    except ValueError:
        return code

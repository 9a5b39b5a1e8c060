"""Op database entries of the PMCC obfuscation calls: errors only (with no engine off the NPU
every valid call raises its documented error code; tests/ops/runtime/test_obfuscation.py)."""

from __future__ import annotations

import torch

from . import ErrorSample, entry as _entry

FD = lambda: torch.tensor([3], dtype=torch.int32)  # noqa: E731  (a socket as initialize gives it)

_entry("obfuscation_initialize").errors += [
    ErrorSample("cmd", lambda: ((3584, 0, 4), dict(data_type=torch.bfloat16)), ValueError,
                "obfuscation_initialize: expected cmd one of \\[1, 2, 3\\], but got 4"),
    ErrorSample("no_data_type", lambda: ((3584, 0, 1), {}), ValueError,
                "obfuscation_initialize: expected data_type a dtype"),
    ErrorSample("hidden_size", lambda: ((0, 0, 1), dict(data_type=torch.float16)), ValueError,
                "obfuscation_initialize: expected hidden_size in \\[1, 10000\\]"),
]
_entry("obfuscation_finalize").errors += [
    ErrorSample("fd_dtype", lambda: ((torch.tensor([3]),), {}), TypeError,
                "obfuscation_finalize: expected fd_to_close dtype in \\['int32'\\]"),
]
_entry("obfuscation_calculate").errors += [
    ErrorSample("coefficient", lambda: ((FD(), torch.randn(2, 8), torch.tensor([8])),
                                        dict(obf_coefficient=0.0)), ValueError,
                "obfuscation_calculate: expected obf_coefficient in \\(0, 1\\]"),
    ErrorSample("x_dtype", lambda: ((FD(), torch.randn(2, 8).double(), torch.tensor([8])), {}),
                TypeError, "obfuscation_calculate: expected x dtype in"),
]

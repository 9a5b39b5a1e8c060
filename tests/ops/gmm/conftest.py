"""Makes this directory's golden helpers (``msd_golden.py``) importable by its tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

"""Makes ``fa_golden.py`` (the float64 golden of this directory) importable from its tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

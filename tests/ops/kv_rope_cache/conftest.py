"""Makes this directory's goldens (``kv_cache_golden.py``) importable by its test files."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

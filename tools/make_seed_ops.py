"""Regenerate src/npu_anywhere/data/seed_ops.json from the reference catalogue.

Usage: python tools/make_seed_ops.py ../shared/reference/ops_catalog.json
The JSON lists every operator the specification documents (name, API, family, documented
backward ops), which `npu-anywhere ops` and the torch_npu shim use to tell "documented but not
implemented yet" from "no such op".
"""

import json
import pathlib
import sys


def main(path: str) -> None:
    entries = json.loads(pathlib.Path(path).read_text())["entries"]
    ops = []
    for e in entries:
        ops.append({
            "name": e["name"],
            "api": e["api"],
            "family": e["family"],
            "backward_ops": e.get("autograd", {}).get("grad_ops", []),
            "has_backward": bool(e.get("autograd", {}).get("supported")),
        })
    ops.sort(key=lambda o: (o["api"], o["name"]))
    out = pathlib.Path(__file__).resolve().parents[1] / "src/npu_anywhere/data/seed_ops.json"
    out.write_text(json.dumps(ops, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(ops)} ops to {out}")


if __name__ == "__main__":
    main(sys.argv[1])

"""transformers' own Ascend code paths, run unchanged under the shim with an NPU claimed.

``attn_implementation="flash_attention_2"`` on an NPU makes transformers skip the flash_attn
package and call ``torch_npu.npu_fusion_attention`` (``transformers/integrations/
npu_flash_attention.py``, imported only when ``is_torch_npu_available()``).  The script runs in
a fresh interpreter under ``npu-anywhere run`` with ``NPU_ANYWHERE_CLAIM_NPU=1``, so that
transformers sees the NPU from its first import, as on an Ascend machine.
"""

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("transformers")

import npu_anywhere  # noqa: E402

SCRIPT = textwrap.dedent('''
    import copy
    import torch
    import torch_npu

    calls = []
    real = torch_npu.npu_fusion_attention
    def counted(*args, **kwargs):
        calls.append(kwargs.get("sparse_mode", 0))
        return real(*args, **kwargs)
    torch_npu.npu_fusion_attention = counted      # before transformers imports it

    from transformers import AutoModelForCausalLM
    from transformers.utils import is_torch_npu_available
    from npu_anywhere.models.reference import tiny_model

    assert is_torch_npu_available()
    eager = tiny_model("llama", dtype=torch.float16).to("npu")
    config = copy.deepcopy(eager.config)
    fa = AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2",
                                          dtype=torch.float16)
    fa.load_state_dict(eager.state_dict())
    fa = fa.eval().to("npu")
    ids = torch.randint(3, 256, (2, 11), generator=torch.Generator().manual_seed(0)).to("npu")
    with torch.no_grad():
        ref = eager(ids).logits.float()
        out = fa(ids).logits.float()
    print("calls", len(calls))
    print("diff", float((ref - out).abs().max()))
    print("scale", float(ref.abs().max()))
''')


@pytest.mark.slow    # a fresh interpreter importing transformers: ~15 s on 2 cores
@pytest.mark.skipif(not hasattr(npu_anywhere, "npu_fusion_attention"),
                    reason="npu_fusion_attention is not implemented yet")
def test_flash_attention_2_on_npu_matches_eager(tmp_path):
    script = tmp_path / "fa2_on_npu.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, NPU_ANYWHERE_CLAIM_NPU="1")
    proc = subprocess.run([sys.executable, "-m", "npu_anywhere.cli", "run", str(script)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    values = dict(line.split() for line in proc.stdout.splitlines() if line.count(" ") == 1)
    assert int(values["calls"]) >= 2                  # one per layer: the NPU path ran
    # float16 end to end: eager rounds the probabilities to float16 before P @ V, the fused
    # op does not; a few float16 ulps of the largest logit (measured: 0.008 at scale 4.3).
    tol = 8 * 2.0 ** -10 * max(1.0, float(values["scale"]))
    assert float(values["diff"]) <= tol, values

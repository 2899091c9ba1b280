"""``benchmarks/device_check.py`` on the CPU with a tiny budget (a few updates, a handful of sentences, a slice of
Multi30k), so that the command a lent GPU will run cannot rot. Its numbers mean nothing at this size; what is
checked is that it runs end to end on this device and reports every field."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "device_check.py"


def test_device_check_runs_on_the_cpu_and_reports_json(shared_data, tmp_path):
    data = shared_data / "multi30k" / "raw"
    cmd = [sys.executable, str(SCRIPT), "--device", "cpu", "--updates", "2", "--sentences", "4", "--lines", "300",
           "--vocab", "400", "--max-tokens", "256", "--threads", "1", "--data", str(data), "--work", str(tmp_path),
           "--no-fairseq"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ})
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(done.stdout)
    assert res["device"] == "cpu" and res["amp"] in ("none", "bf16") and res["fairseq"] is None
    assert res["policy"]["fast_dropout_mask"] and res["policy"]["explicit_low_precision_attention"]
    assert res["train"]["updates"] == 2 and res["train"]["target_tokens_per_s"] > 0
    assert res["train"]["peak_rss_mb"] > 0 and res["train"]["device_peak_mb"] is None
    assert res["decode"]["sentences"] == 4 and res["decode"]["dtype"] == "float32"
    assert res["decode"]["sentences_per_s"] > 0
    assert res["decode"]["output_tokens_per_s"] >= res["decode"]["sentences_per_s"]
    assert res["score"]["lines"] == 4 and 0 <= res["score"]["bleu"] <= 100
    assert "tok:13a" in res["score"]["bleu_signature"]
    assert len((tmp_path / "xlpe.hyp").read_text(encoding="utf-8").splitlines()) == 4

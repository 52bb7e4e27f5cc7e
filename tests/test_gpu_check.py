"""The device check (scripts/gpu_check.py) runs on a CPU against a tiny folder, and the operator counts it reports
(benchmarks/bench_ops.py) are counts of what one call runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_operator_counts_are_per_call_and_do_not_grow_with_the_prompts():
    import bench_ops

    from helpers.exercises.tiny import make_tiny_model

    model = make_tiny_model("gpt2")
    one, eight = bench_ops.measure_ops(model, "sst2", (1, 8))
    assert one["n"] == 1 and eight["n"] == 8 and one["layers"] == model.cfg.n_layers
    assert one["products"] > 0 and one["products"] == eight["products"]  # a batch is one call, whatever its size
    assert one["products_per_layer"] == one["products"] / model.cfg.n_layers
    ops = bench_ops.count_ops(lambda: model(model.to_tokens("a b c")))
    assert ops["aten::mm"] + ops["aten::bmm"] + ops["aten::matmul"] + ops["aten::addmm"] > 0
    table = bench_ops.markdown([one, eight])
    assert table.count("\n") == 4 and "| 8 |" in table


def test_the_device_check_runs_on_a_cpu_against_a_tiny_folder(tmp_path):
    out = tmp_path / "check.json"
    got = subprocess.run([sys.executable, "scripts/gpu_check.py", "--tiny", "--skip-tests", "--notebooks", "01",
                          "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["device"]["cuda"] is False
    assert all(s["ok"] for s in report["steps"].values()), report["steps"]
    ops = report["steps"]["operator counts and flow/batch ratio"]
    assert [r["n"] for r in ops["ops"]] == [1, 8] and ops["flow_vs_batch"]["ratio"] > 0
    assert "notebooks 01 at smoke" in report["steps"]

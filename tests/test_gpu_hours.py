"""scripts/gpu_hours.py: GPU hours of the paper's models scaled from an accounted run."""

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers.core import accounting

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gh():
    spec = importlib.util.spec_from_file_location("_icl_gpu_hours", ROOT / "scripts" / "gpu_hours.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows(positions=1000, backward=0, nb="00_icl_setting"):
    return [{"notebook": nb, "step": "vanilla", "positions": positions, "backward_positions": backward,
             "tflop": 1.0, "seconds": 10.0},
            {"notebook": nb, "step": "total", "positions": positions, "backward_positions": backward,
             "tflop": 1.0, "seconds": 12.0, "wall_s": 30.0}]


@pytest.mark.parametrize("name", ["gpt2-xl", "EleutherAI/gpt-j-6B"])
def test_flops_per_position_is_the_accountings_forward_without_attention(gh, name):
    s = gh.SHAPES[name]
    cfg = SimpleNamespace(n_layers=s["n_layers"], d_model=s["d_model"], n_heads=s["n_heads"], d_head=s["d_head"],
                          d_mlp=s["d_mlp"], d_vocab=s["d_vocab"], gated_mlp=False, attn_only=False,
                          n_key_value_heads=None)
    attention = s["n_layers"] * 4.0 * s["n_heads"] * s["d_head"]  # one position over one key
    assert gh.flops_per_position(s) == pytest.approx(accounting.forward_flops(cfg, 1, 1) - attention, rel=1e-12)


def test_flops_per_position_by_hand(gh):
    # 2 layers, d_model 4, 2 heads of 2, MLP 8, vocabulary 10: 2 x (2 x (4*2*(4+4) + 2*4*8) + 4*10)
    s = dict(n_layers=2, d_model=4, n_heads=2, d_head=2, d_mlp=8, d_vocab=10)
    assert gh.flops_per_position(s) == 2 * (2 * (64 + 64) + 40)
    # GPT2-XL: about 2 x 1.55 billion weights per position
    assert gh.flops_per_position(gh.SHAPES["gpt2-xl"]) == pytest.approx(2 * 1.555e9, rel=0.01)


TP = {"predict": 10.0, "forward_backward": 10.0, "run_isolation": 10.0, "saliency_flow": 10.0}


def test_estimate_scales_with_work_tokens_throughput(gh):
    s = gh.SHAPES["gpt2-xl"]
    one = gh.estimate(_rows(), "default", "default", s, TP)["00_icl_setting"]
    assert one["work"] == 1.0
    assert one["hours"] == pytest.approx(1000 * gh.flops_per_position(s) / 10e12 / 3600)
    assert gh.estimate(_rows(2000), "default", "default", s, TP)["00_icl_setting"]["hours"] == \
        pytest.approx(2 * one["hours"])
    # 500 positions that ran forward and backward: 3 x the forward's FLOPs, at the backward path's throughput
    assert gh.estimate(_rows(500, 500), "default", "default", s, TP)["00_icl_setting"]["hours"] == \
        pytest.approx(1.5 * one["hours"])
    half = {**TP, "predict": 5.0}
    assert gh.estimate(_rows(), "default", "default", s, half, token_ratio=1.5)["00_icl_setting"]["hours"] == \
        pytest.approx(3 * one["hours"])
    paper = gh.estimate(_rows(), "default", "paper", s, TP)["00_icl_setting"]
    from helpers.study.profile_table import PROFILES

    ratio = gh.timing.work(PROFILES["paper"], "00") / gh.timing.work(PROFILES["default"], "00")
    assert ratio > 10 and paper["work"] == pytest.approx(ratio)
    assert paper["hours"] == pytest.approx(ratio * one["hours"])
    assert gh.estimate(_rows(), "default", "default", s, TP, load_minutes=6)["00_icl_setting"]["hours"] == \
        pytest.approx(one["hours"] + 0.1)


def test_each_notebook_runs_at_its_paths_measured_throughput(gh):
    """Notebook 01's backward positions run at saliency_flow's throughput, 02's forward at run_isolation's."""
    s = gh.SHAPES["gpt2-xl"]
    sal = gh.estimate(_rows(1000, 1000, nb="01_saliency_flow"), "default", "default", s, TP)["01_saliency_flow"]
    slow = gh.estimate(_rows(1000, 1000, nb="01_saliency_flow"), "default", "default", s,
                       {**TP, "saliency_flow": 2.5})["01_saliency_flow"]
    assert slow["hours"] == pytest.approx(4 * sal["hours"])
    iso = gh.estimate(_rows(nb="02_shallow_isolation"), "default", "default", s,
                      {**TP, "run_isolation": 20.0})["02_shallow_isolation"]
    assert iso["hours"] == pytest.approx(1000 * gh.flops_per_position(s) / 20e12 / 3600)
    assert set(gh.NOTEBOOK_PATHS) == {f"{i:02d}" for i in range(9)}


def test_the_committed_h100_measurement_is_read_per_path(gh):
    bench = json.loads(gh.THROUGHPUT.read_text())
    tp = gh.throughputs(bench)
    assert bench["card"].startswith("NVIDIA H100") and bench["commit"] == "d774e22"
    assert "GPT2-XL" in bench["models"]["gpt2-xl-shape"]["model"]
    needed = {p for pair in gh.NOTEBOOK_PATHS.values() for p in pair}
    assert needed <= set(tp) and all(v > 0 for v in tp.values())
    assert tp["saliency_flow"] < tp["saliency_batch"]  # the CPU-sized pattern cap, before sizing
    with pytest.raises(ValueError, match="make bench"):
        gh.throughputs(bench, "gpt-j")


def test_the_bench_writes_the_format_gpu_hours_reads(gh, tiny_model):
    """bench_gpu.measure_paths (here on a tiny model on the CPU) gives rows that throughputs() reads; without a
    GPU, the bench's section says it was skipped."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_gpu

    rows = bench_gpu.measure_paths(tiny_model, paths=("forward", "predict"))
    assert set(rows) == {"forward", "predict"}
    assert all(r["tflops"] > 0 and r["seconds"] > 0 and r["what"] for r in rows.values())
    committed = json.loads(gh.THROUGHPUT.read_text())
    bench = {**committed, "models": {"gpt2-xl-shape": {"model": "tiny", "paths": rows}}}
    assert gh.throughputs(bench) == {p: r["tflops"] for p, r in rows.items()}
    for r in committed["models"]["gpt2-xl-shape"]["paths"].values():  # the committed rows: the same fields
        assert set(r) <= set(rows["forward"])


def test_the_gpu_section_is_skipped_without_cuda(monkeypatch, capsys):
    import sys

    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_gpu

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.measure() is None
    assert "skipped, no CUDA GPU" in capsys.readouterr().out


def test_estimate_refuses_what_it_cannot_use(gh):
    with pytest.raises(ValueError, match="make bench"):
        gh.estimate(_rows(), "default", "paper", gh.SHAPES["gpt2-xl"], {**TP, "predict": 0})
    with pytest.raises(ValueError, match="ACCOUNT=1"):
        gh.estimate(_rows()[:1], "default", "paper", gh.SHAPES["gpt2-xl"], TP)


def test_cli_prints_a_table_per_notebook(gh, tmp_path, capsys):
    folder = tmp_path / "gemma-3-270m" / "default"
    folder.mkdir(parents=True)
    rows = _rows() + _rows(nb="07_incontext_heads", positions=3000)
    (folder / "accounting.json").write_text(json.dumps(rows))
    assert gh.main([str(folder / "accounting.json"), "--profile", "paper"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| 0")]
    assert [ln.split(" | ")[0] for ln in lines] == ["| 00_icl_setting", "| 07_incontext_heads"]
    assert "GPT2-XL: hours on one NVIDIA H100" in out and "GPT-J: hours on one NVIDIA H100" in out
    assert "Target: the paper profile of GPT2-XL on one H100 in at most 1 hour" in out
    with pytest.raises(SystemExit):
        gh.main([str(tmp_path / "missing.json")])
    assert "make run ACCOUNT=1" in capsys.readouterr().err


def test_docs_gpu_hours_table_is_the_scripts_output(gh, capsys):
    """docs/gpu.md's GPU-hours block is what the script prints for the committed accounting and measurement."""
    acct = ROOT / "benchmarks" / "gpu" / "accounting-gemma-3-270m-smoke.json"
    rows, profile, ratio = gh.read_accounting(acct)
    assert profile == "smoke" and ratio and 0.5 < ratio < 2
    bench = json.loads(gh.THROUGHPUT.read_text())
    tp = gh.throughputs(bench)
    est = {m: gh.estimate(rows, profile, "paper", gh.SHAPES[m], tp, ratio) for m in gh.SHAPES}
    table = gh.markdown(rows, est, profile, "paper", bench, token_ratio=ratio)
    doc = gh.DOC.read_text()
    assert gh.render_doc(table) == doc, "run scripts/gpu_hours.py benchmarks/gpu/accounting-gemma-3-270m-smoke.json --doc"
    total = sum(est["gpt2-xl"][nb]["hours"] for nb in est["gpt2-xl"])
    verdict = "meets it" if total <= gh.TARGET["hours"] else "does not meet it"
    assert f"This estimate, {total:.1f} hours on one {bench['card']}, {verdict}." in table


def test_docs_precision_table_is_the_jsons(gh):
    """docs/gpu.md's precision block is scripts/precision.py's rendering of the committed JSON."""
    spec = importlib.util.spec_from_file_location("_icl_precision", ROOT / "scripts" / "precision.py")
    prec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prec)
    res = json.loads((ROOT / "benchmarks" / "precision" / "gemma-3-270m.json").read_text())
    assert res["device"] == "cpu" and res["emulated"] and "float32" in res["outputs"]
    assert prec.render_doc(res) == prec.DOC.read_text(), "run scripts/precision.py --doc"
    assert "Measured on a CPU, emulated" in prec.markdown(res) and "TF32 cannot be measured on a CPU" in prec.markdown(res)
    for dt, devs in res["deviations"].items():  # each deviation is the JSON's outputs' largest change
        for key in ("accuracy", "label_loyalty"):
            want = max(abs(res["outputs"][dt][t][key] - res["outputs"]["float32"][t][key]) for t in res["tasks"])
            assert devs[key] == pytest.approx(want)

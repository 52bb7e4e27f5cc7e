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


def test_estimate_scales_with_work_tokens_throughput(gh):
    s = gh.SHAPES["gpt2-xl"]
    one = gh.estimate(_rows(), "default", "default", s, tflops=10)["00_icl_setting"]
    assert one["work"] == 1.0
    assert one["hours"] == pytest.approx(1000 * gh.flops_per_position(s) / 10e12 / 3600)
    assert gh.estimate(_rows(2000), "default", "default", s, tflops=10)["00_icl_setting"]["hours"] == \
        pytest.approx(2 * one["hours"])
    assert gh.estimate(_rows(500, 500), "default", "default", s, tflops=10)["00_icl_setting"]["hours"] == \
        pytest.approx(one["hours"])  # a backward position (activation gradients only) costs one forward
    assert gh.estimate(_rows(), "default", "default", s, tflops=5, token_ratio=1.5)["00_icl_setting"]["hours"] == \
        pytest.approx(3 * one["hours"])
    paper = gh.estimate(_rows(), "default", "paper", s, tflops=10)["00_icl_setting"]
    from helpers.study.profile_table import PROFILES

    ratio = gh.timing.work(PROFILES["paper"], "00") / gh.timing.work(PROFILES["default"], "00")
    assert ratio > 10 and paper["work"] == pytest.approx(ratio)
    assert paper["hours"] == pytest.approx(ratio * one["hours"])
    assert gh.estimate(_rows(), "default", "default", s, tflops=10, load_minutes=6)["00_icl_setting"]["hours"] == \
        pytest.approx(one["hours"] + 0.1)


def test_estimate_refuses_what_it_cannot_use(gh):
    with pytest.raises(ValueError, match="positive"):
        gh.estimate(_rows(), "default", "paper", gh.SHAPES["gpt2-xl"], tflops=0)
    with pytest.raises(ValueError, match="ACCOUNT=1"):
        gh.estimate(_rows()[:1], "default", "paper", gh.SHAPES["gpt2-xl"], tflops=8)


def test_cli_prints_a_table_per_notebook(gh, tmp_path, capsys):
    folder = tmp_path / "gemma-3-270m" / "default"
    folder.mkdir(parents=True)
    rows = _rows() + _rows(nb="07_incontext_heads", positions=3000)
    (folder / "accounting.json").write_text(json.dumps(rows))
    assert gh.main([str(folder / "accounting.json"), "--profile", "paper"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| 0")]
    assert [ln.split(" | ")[0] for ln in lines] == ["| 00_icl_setting", "| 07_incontext_heads"]
    assert "gpt2-xl: GPU h" in out and "EleutherAI/gpt-j-6B: GPU h" in out and "8 TFLOP/s" in out
    with pytest.raises(SystemExit):
        gh.main([str(tmp_path / "missing.json")])
    assert "make run ACCOUNT=1" in capsys.readouterr().err

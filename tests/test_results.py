"""The on-disk results store never serves a result computed by other code or for other parameters."""

from __future__ import annotations

import helpers.results as R


def test_cached_recomputes_for_other_params_and_other_code(tmp_path, monkeypatch):
    monkeypatch.setenv("ICL_RESULTS_CACHE", str(tmp_path))
    monkeypatch.delenv("ICL_RECOMPUTE", raising=False)
    calls = []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    assert R.cached("probe", {"seed": 1}, compute) == {"value": 1}
    assert R.cached("probe", {"seed": 1}, compute) == {"value": 1} and len(calls) == 1  # stored
    assert R.cached("probe", {"seed": 2}, compute) == {"value": 2}  # other parameters
    monkeypatch.setattr(R, "code_digest", lambda: "another version of helpers")
    assert R.cached("probe", {"seed": 1}, compute) == {"value": 3}  # other code: recomputed, not served


def test_code_digest_covers_the_helpers_source():
    R.code_digest.cache_clear()
    d = R.code_digest()
    assert len(d) == 16 and d == R.code_digest()
    files = sorted(R.HELPERS.rglob("*.py"))
    assert R.HELPERS / "prefix.py" in files and R.HELPERS / "results.py" in files

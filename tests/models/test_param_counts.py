"""Every backbone size has exactly the published parameter count (eval_shape: no memory), and
tools/param_counts.py reports them."""

from __future__ import annotations

import json
from pathlib import Path

from memr1.models.config import PUBLISHED_PARAM_COUNTS, SIZES
from tests.tool import load_tool

ROOT = Path(__file__).resolve().parents[2]


def test_counts_match_published_and_tool_reports_them(tmp_path, capsys):
    out = tmp_path / "counts.json"
    # One eval_shape pass over every size (the 14B one included) serves both checks.
    assert load_tool("param_counts").main(["--json", str(out)]) == 0
    table = capsys.readouterr().out
    records = {r["size"]: r for r in json.loads(out.read_text())}
    assert set(records) == set(SIZES)
    for name, published in PUBLISHED_PARAM_COUNTS.items():
        r = records[name]
        assert r["params"] == published, (
            f"{name}: {r['params']:,} parameters vs {published:,} published; check the size "
            "table in memr1/models/config.py against the checkpoint's config.json"
        )
        assert r["match"] is True
        assert (r["bytes_bf16"], r["bytes_fp32"]) == (2 * published, 4 * published)
        assert f"{published:,}" in table
    assert records["tiny"]["published"] is None and records["tiny"]["match"] is None
    assert "✗" not in table and table.count("✓") == len(PUBLISHED_PARAM_COUNTS)
    assert list(tmp_path.iterdir()) == [out], "the JSON is written via a temporary file"


def test_mismatch_fails_the_tool(monkeypatch, capsys):
    tool = load_tool("param_counts")
    monkeypatch.setattr(tool, "SIZES", {"qwen2.5-3b": SIZES["qwen2.5-3b"].replace(d_ff=11_000)})
    assert tool.main([]) == 1
    assert "✗" in capsys.readouterr().out

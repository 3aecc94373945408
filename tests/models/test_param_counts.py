"""Every backbone size has exactly the published parameter count (eval_shape: no memory), and
tools/param_counts.py reports them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from memr1.models.config import PUBLISHED_PARAM_COUNTS, SIZES

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("param_counts", ROOT / "tools/param_counts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_counts_match_published_and_tool_reports_them(tmp_path, capsys):
    out = tmp_path / "counts.json"
    # One eval_shape pass over every size (the 14B one included) serves both checks.
    assert _tool().main(["--json", str(out)]) == 0
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
    tool = _tool()
    monkeypatch.setattr(tool, "SIZES", {"qwen2.5-3b": SIZES["qwen2.5-3b"].replace(d_ff=11_000)})
    assert tool.main([]) == 1
    assert "✗" in capsys.readouterr().out

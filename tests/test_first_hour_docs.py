"""Generated docs stay current: docs/config.md is what ``python -m azserve.config.docs``
prints now (``make docs`` rewrites it), every config key has a docstring, and
docs/protocol.md names every field of the ``status`` reply's contract."""

from __future__ import annotations

from pathlib import Path

from azserve.config.docs import render

REPO = Path(__file__).resolve().parents[1]


def test_config_reference_is_current() -> None:
    text = render()
    assert "(undocumented)" not in text, [
        line for line in text.splitlines() if "(undocumented)" in line
    ]
    assert (REPO / "docs" / "config.md").read_text() == text, (
        "docs/config.md is out of date: run `make docs`"
    )


def test_protocol_doc_covers_the_contract() -> None:
    doc = (REPO / "docs" / "protocol.md").read_text()
    for field in ("max_batch_size", "max_queued_rows", "obs_shape", "obs_dtype", "num_actions"):
        assert f"`{field}`" in doc, field
    for term in ("BadValue", "azserve.checkpoint/1", "plane 0", "stem.0.weight"):
        assert term in doc, term


def test_grafana_dashboard_uses_exported_names() -> None:
    """Every metric the dashboard queries is one a role exports (names as in the code)."""
    import json
    import re

    dash = json.loads((REPO / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    names = set(re.findall(r"\b((?:azserve|process)_[a-z_]+)", " ".join(exprs)))
    sources = "".join(
        (REPO / p).read_text()
        for p in (
            "azserve/prom.py",
            "azserve/server/metrics.py",
            "learner/prom.py",
            "actors/prom.py",
        )
    )
    suffixes = ("_bucket", "_sum", "_count", "_total", "_info")
    for name in names:
        base = name
        for s in suffixes:
            base = base.removesuffix(s)
        assert base.startswith("process_") or f'"{base}"' in sources, name

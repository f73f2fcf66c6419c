"""Every measured number README shows comes from a committed results file, by one script."""
import json
import subprocess
import sys

import pytest
from conftest import REPO

RESULTS = sorted((REPO / "recipes" / "results").glob("*.json")) + sorted((REPO / "benchmarks" / "results").glob("*.json"))


def test_readme_tables_are_the_ones_the_results_files_make():
    """README's marked tables equal what scripts/readme_tables.py makes from the files now."""
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_tables.py"), "--check"],
                          capture_output=True, text=True)  # the documented command
    assert proc.returncode == 0, proc.stderr


def test_a_changed_results_file_makes_the_readme_stale(tmp_path, monkeypatch):
    """The check is real: a number changed in a results file no longer matches README."""
    from attn_kit import readme_tables

    text = readme_tables.README.read_text(encoding="utf-8")
    assert readme_tables.render(text) == text
    bench = tmp_path / "bench"
    bench.mkdir()
    for path in (REPO / "benchmarks" / "results").glob("*.json"):
        data = json.loads(path.read_text())
        if path.name == "h100_train_bf16.json":
            data["results"]["base"]["ratio_tokens_per_s"] += 0.1
        (bench / path.name).write_text(json.dumps(data))
    monkeypatch.setattr(readme_tables, "BENCH", bench)
    assert readme_tables.render(text) != text


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_every_results_file_says_how_where_and_when(path):
    data = json.loads(path.read_text())
    for key in ("command", "commit", "machine", "date"):
        assert data.get(key), (path.name, key)

"""The package's calibration table (attn_kit/planning/calibration.json) against the results files it is
made from (lab.calibration): the recipes read the table, never benchmarks/results, and the table
cannot drift from the measurements on file."""
import json
import subprocess
import sys

from conftest import REPO

from attn_kit.planning import step_model
from lab import calibration


def test_the_table_is_what_the_results_files_give():
    """Refitted from every GPU check results file now, the table's fits are the package's (a new or
    changed results file fails this until `python -m lab.calibration` is run)."""
    filed = json.loads(step_model.CALIBRATION.read_text())
    fitted = calibration.table()
    assert calibration.same(filed, fitted)
    files = sorted(p.name for p in calibration.RESULTS.glob(calibration.GPU_CHECKS))
    assert sorted({f.source for f in step_model.fits()}) == sorted(
        p for p in files if calibration.fits_of(calibration.RESULTS / p))
    assert step_model.fits() and all(f.points >= 2 for f in step_model.fits())


def test_a_changed_table_is_found_by_the_check(tmp_path, monkeypatch):
    """--check compares values: a fit's efficiency moved by 1% is a difference, one in its 12th digit is not."""
    table = calibration.table()
    table["gpu_step"][0]["efficiency"] *= 1 + 1e-12
    assert calibration.same(table, calibration.table())
    table["gpu_step"][0]["efficiency"] *= 1.01
    assert not calibration.same(table, calibration.table())
    proc = subprocess.run([sys.executable, "-m", "lab.calibration", "--check"], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 0 and "as the results files give" in proc.stdout, proc.stdout + proc.stderr


def test_no_kit_module_reads_the_results_files():
    """What a recipe does depends on the package, not on which measurement files a checkout holds."""
    named = [str(p.relative_to(REPO)) for p in (REPO / "attn_kit").rglob("*.py")
             if "benchmarks/results" in p.read_text(encoding="utf-8")
             or '"benchmarks" / "results"' in p.read_text(encoding="utf-8")]
    assert named == [], named

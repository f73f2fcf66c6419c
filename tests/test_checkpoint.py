"""Safe checkpoint loading and checkpoint averaging, through the real CLIs."""
import os

import pytest
import torch
from conftest import REPO, USER_DIR, cli, last_line, run

AVERAGE = str(REPO / "scripts" / "average_checkpoints.py")


def generate(data_bin, path, *extra, check=True):
    return run([cli("fairseq-generate"), data_bin, "--path", path, "--beam", "4", "--cpu",
                "--required-batch-size-multiple", "1", *extra], check=check)


def test_stock_checkpoint_needs_the_allow_list_and_loads_with_it(data_bin, stock_checkpoint):
    """fairseq-train pickles argparse.Namespace into a stock transformer checkpoint:
    torch's safe loader refuses it, the plugin allows exactly that type."""
    without = generate(data_bin, stock_checkpoint, check=False)
    assert without.returncode != 0 and "argparse.Namespace" in without.stderr
    with_plugin = generate(data_bin, stock_checkpoint, "--user-dir", USER_DIR)
    assert with_plugin.stdout.count("\nH-") == 21  # every test sentence translated


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_that_would_run_code_is_refused(data_bin, plugin_run, tmp_path):
    save, _ = plugin_run
    state = torch.load(save / "checkpoint_last.pt", weights_only=True)
    marker = tmp_path / "code-ran"
    state["extra_state"]["payload"] = RunsCode(marker)
    evil = tmp_path / "evil.pt"
    torch.save(state, evil)
    proc = generate(data_bin, evil, "--user-dir", USER_DIR, check=False)
    assert proc.returncode != 0
    assert not marker.exists()
    line = last_line(proc)
    assert line.startswith("error: refused to load") and str(evil) in line and "system" in line
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("damage", ["truncated", "foreign"])
def test_damaged_checkpoint_is_one_clear_error(data_bin, plugin_run, tmp_path, damage):
    save, _ = plugin_run
    bad = tmp_path / f"{damage}.pt"
    if damage == "truncated":
        data = (save / "checkpoint_last.pt").read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    else:
        torch.save({"weights": torch.zeros(3)}, bad)  # a valid torch file, not a fairseq checkpoint
    proc = generate(data_bin, bad, "--user-dir", USER_DIR, check=False)
    assert proc.returncode != 0
    line = last_line(proc)
    assert line.startswith("error: ") and str(bad) in line
    assert ("truncated" if damage == "truncated" else "not a fairseq checkpoint") in line
    assert "Traceback" not in proc.stderr


def test_average_checkpoints_is_the_elementwise_mean(plugin_run, tmp_path):
    save, _ = plugin_run
    out = tmp_path / "avg.pt"
    run([cli("python"), AVERAGE, "--inputs", save,
         "--num-update-checkpoints", "3", "--output", out])
    picked = [save / f"checkpoint_{e}_{u}.pt" for e, u in _update_checkpoints(save)[-3:]]
    states = [torch.load(p, weights_only=True)["model"] for p in picked]
    averaged = torch.load(out, weights_only=True)["model"]
    assert set(averaged) == set(states[0])
    for name, value in averaged.items():
        expected = sum(s[name].double() for s in states) / 3
        assert torch.allclose(value.double(), expected, atol=1e-6), name


def _update_checkpoints(save):
    found = []
    for name in os.listdir(save):
        if name.startswith("checkpoint_") and name[11].isdigit():
            e, u = name[len("checkpoint_"):-3].split("_")
            found.append((int(e), int(u)))
    return sorted(found, key=lambda eu: eu[1])


def test_average_checkpoints_explicit_files_and_generate(data_bin, plugin_run, tmp_path):
    save, _ = plugin_run
    files = [save / f"checkpoint_{e}_{u}.pt" for e, u in _update_checkpoints(save)[-2:]]
    out = tmp_path / "avg2.pt"
    run([cli("python"), AVERAGE, "--inputs", *files, "--output", out])
    proc = generate(data_bin, out, "--user-dir", USER_DIR)
    assert proc.stdout.count("\nH-") == 21


def test_average_checkpoints_too_few_is_one_clear_error(plugin_run, tmp_path):
    save, _ = plugin_run
    proc = run([cli("python"), AVERAGE, "--inputs", save, "--num-update-checkpoints", "50",
                "--output", tmp_path / "x.pt"], check=False)
    assert proc.returncode == 1
    assert last_line(proc).startswith("error: found") and "need 50" in last_line(proc)
    assert not (tmp_path / "x.pt").exists()

"""Safe checkpoint loading and checkpoint averaging, through the real CLIs."""
import os
import pickle
import subprocess
import sys

import pytest
import torch
from conftest import REPO, USER_DIR, assert_one_error_line, cli, last_line, run, run_main

from attn_kit.fairseq_layer.checkpoints import main as average_main
from attn_kit.fairseq_layer.checkpoints import update_candidates, update_checkpoints

AVERAGE = str(REPO / "scripts" / "average_checkpoints.py")


def average(*args):
    """scripts/average_checkpoints.py's main() in this process (conftest.run_main): the script itself runs
    in test_average_checkpoints_is_the_elementwise_mean and test_average_script_records_the_updates_and_
    rejects_a_bad_count (its process-level contract); here no fairseq import of ~3.5 s CPU."""
    return run_main(average_main, *args)


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


def test_a_raw_pickle_is_refused_before_torch_reads_it(tmp_path, recwarn):
    """A plain pickle named .pt (not torch.save's zip): torch warned about its pickle protocol before the
    refusal, two lines ahead of the project's one. Now it is refused on its first bytes, torch never sees it."""
    from attn_plugin.checkpoint import load_checkpoint
    from attn_plugin.errors import CheckpointError

    marker = tmp_path / "code-ran"
    raw = tmp_path / "raw.pt"
    raw.write_bytes(pickle.dumps({"model": RunsCode(marker)}, protocol=4))
    with pytest.raises(CheckpointError, match="raw.pt is not a PyTorch checkpoint: it begins with"):
        load_checkpoint(raw)
    assert [str(w.message) for w in recwarn if "pickle" in str(w.message)] == [] and not marker.exists()


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


RANK = """
import datetime, hashlib, sys
from argparse import Namespace
import torch, torch.distributed as dist
rank, init, path, user_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if user_dir:
    from fairseq import utils
    utils.import_user_module(Namespace(user_dir=user_dir))  # what --user-dir does
from fairseq import checkpoint_utils
from fairseq.distributed import utils as distributed_utils
dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
state = checkpoint_utils.load_checkpoint_to_cpu(path) if rank == 0 else None  # as fairseq's Trainer.load_checkpoint
state = distributed_utils.broadcast_object(state, src_rank=0, group=dist.group.WORLD, dist_device=torch.device("cpu"))
weights = hashlib.sha256(b"".join(t.numpy().tobytes() for t in state["model"].values())).hexdigest()
print("received", type(state["cfg"]).__name__, state["cfg"].model._name, state["cfg"].model.encoder_layers,
      state["optimizer_history"][-1]["num_updates"], len(state["model"]), weights, flush=True)
"""


def _two_ranks(tmp_path, checkpoint, user_dir):
    """Rank 0 loads ``checkpoint`` and broadcasts it to rank 1 as data-parallel fairseq-train does
    on resume; returns both processes (rank 0 is ended once rank 1 is done)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    init = f"file://{tmp_path / ('init-' + str(bool(user_dir)))}"
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(r), init, str(checkpoint), user_dir], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    out = [None, None]
    out[1] = ranks[1].communicate(timeout=300)
    try:
        out[0] = ranks[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:  # waiting for a rank 1 that failed
        ranks[0].kill()
        out[0] = ranks[0].communicate()
    return [subprocess.CompletedProcess(p.args, p.returncode, *o) for p, o in zip(ranks, out)]


def test_resume_broadcast_reaches_the_other_rank(plugin_run, tmp_path):
    """Data-parallel resume: rank 0 loads the checkpoint and broadcasts the state, whose options
    fairseq has made an omegaconf DictConfig. torch's safe loader on rank 1 refuses that type;
    with the plugin (fairseq_patches, patch 3) rank 1 receives exactly what rank 0 loaded."""
    save, _ = plugin_run
    rank0, rank1 = _two_ranks(tmp_path, save / "checkpoint_last.pt", USER_DIR)
    assert rank0.returncode == 0 and rank1.returncode == 0, rank1.stderr[-3000:]
    line = rank1.stdout.strip().splitlines()[-1]
    assert line.startswith("received DictConfig attn_paper_base 2 40 ")
    assert rank0.stdout.strip().splitlines()[-1] == line  # the same options, update count and weights

    _, rank1 = _two_ranks(tmp_path, save / "checkpoint_last.pt", "")
    assert rank1.returncode != 0 and "omegaconf.dictconfig.DictConfig" in rank1.stderr


def test_average_checkpoints_is_the_elementwise_mean(plugin_run, tmp_path):
    save, _ = plugin_run
    out = tmp_path / "avg.pt"
    run([cli("python"), AVERAGE, "--inputs", save, "--num-update-checkpoints", "3", "--output", out], fork=True)
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
    averaged = average("--inputs", *files, "--output", out)
    assert averaged.returncode == 0, averaged.stderr
    proc = generate(data_bin, out, "--user-dir", USER_DIR)
    assert proc.stdout.count("\nH-") == 21


def test_average_checkpoints_too_few_is_one_clear_error(plugin_run, tmp_path):
    save, _ = plugin_run
    proc = average("--inputs", save, "--num-update-checkpoints", "50", "--output", tmp_path / "x.pt")
    assert proc.returncode == 1
    assert last_line(proc).startswith("error: found") and "need 50" in last_line(proc)
    assert not (tmp_path / "x.pt").exists()


# The average stage's own process, watched: whether fairseq was imported by the time it exits
WATCHED_AVERAGE = ("import atexit, runpy, sys\n"
                   "atexit.register(lambda: print('fairseq imported:', 'fairseq' in sys.modules))\n"
                   "sys.argv[0] = 'checkpoints'\n"
                   "runpy.run_module('attn_kit.fairseq_layer.checkpoints', run_name='__main__')\n")


def test_averaging_imports_no_fairseq_and_a_bad_file_is_the_plugins_one_line(tmp_path):
    """The average stage's command (python -m attn_kit.fairseq_layer.checkpoints) loads checkpoints with the
    plugin's safe loader (attn_plugin/checkpoint.py) without importing fairseq, seconds of CPU a run: the
    mean of the two, and a file that is not a checkpoint refused in the plugin's words, one line, exit 1."""
    folder, out = tmp_path / "ckpts", tmp_path / "avg.pt"
    folder.mkdir()
    for update, value in ((10, 1.0), (20, 4.0)):
        torch.save({"model": {"w": torch.full((2,), value)}, "optimizer_history": [{"num_updates": update}]},
                   folder / f"checkpoint_1_{update}.pt")
    ok = subprocess.run([sys.executable, "-c", WATCHED_AVERAGE, "--inputs", folder, "--num-update-checkpoints", "2",
                         "--output", out], capture_output=True, text=True)
    assert ok.returncode == 0 and "fairseq imported: False" in ok.stdout, ok.stdout + ok.stderr
    assert torch.equal(torch.load(out, weights_only=True)["model"]["w"], torch.full((2,), 2.5))
    (folder / "checkpoint_1_30.pt").write_bytes(b"garbage\n")
    bad = subprocess.run([sys.executable, "-c", WATCHED_AVERAGE, "--inputs", folder, "--num-update-checkpoints", "2",
                          "--output", tmp_path / "bad.pt"], capture_output=True, text=True)
    assert_one_error_line(bad, "checkpoint_1_30.pt is not a PyTorch checkpoint: it begins with b'garbage\\n'")
    assert bad.returncode == 1 and "fairseq imported: False" in bad.stdout and not (tmp_path / "bad.pt").exists()


# --------------------------------------------------------------------------- which checkpoints are averaged
def _fake_run(directory, max_update, interval, keep):
    """The files fairseq-train leaves: checkpoint_1_U.pt for U a multiple of ``interval``
    (the newest ``keep`` of them, --keep-interval-updates) and checkpoint_last.pt at the final update."""
    directory.mkdir()
    saved = [u for u in range(interval, max_update + 1, interval)][-keep:]
    for u in saved:
        torch.save({"model": {}, "optimizer_history": [{"num_updates": u}]}, directory / f"checkpoint_1_{u}.pt")
    torch.save({"model": {}, "optimizer_history": [{"num_updates": max_update}]}, directory / "checkpoint_last.pt")


@pytest.mark.parametrize("max_update,interval,n,expected", [
    # the base recipe: 100000 % 1500 = 1000, so the interval checkpoints stop at 99000 (Sec. 6.1: "the last 5")
    (100000, 1500, 5, [94500, 96000, 97500, 99000, 100000]),
    (300000, 600, 3, [298800, 299400, 300000]),  # big: 300000 is a multiple of 600: checkpoint_1_300000.pt is it
    (1000, 100, 5, [600, 700, 800, 900, 1000]),
    (25, 10, 5, [10, 20, 25]),  # fewer than asked: all of them, ending at 25
    (7, 10, 5, [7]),  # no interval checkpoint at all: the final model alone
])
def test_averaged_set_ends_at_the_final_update(tmp_path, max_update, interval, n, expected):
    _fake_run(tmp_path / "c", max_update, interval, keep=n)
    found = update_candidates(tmp_path / "c")
    picked = update_checkpoints(tmp_path / "c", min(n, len(found)))
    assert [u for u, _ in picked] == expected
    last = os.path.basename(picked[-1][1])
    assert last == ("checkpoint_last.pt" if max_update % interval else f"checkpoint_1_{max_update}.pt")


@pytest.mark.parametrize("max_update,warmup,expected", [
    (213, 400, [213]),  # a 4-minute budget stopped the run inside its 400-update warm-up: the final model alone
    (450, 400, [400, 450]),  # the checkpoint at the warm-up's last update counts
    (1000, 400, [600, 700, 800, 900, 1000]),  # the bundled run: nothing left out
    (60, 20, [20, 30, 40, 50, 60]),  # the smoke run: nothing left out
])
def test_no_averaged_checkpoint_comes_from_before_the_warmups_end(tmp_path, max_update, warmup, expected):
    """A time budget can stop a run inside its warm-up (Multi30k with --train-minutes 4 stopped at
    update 213 of 400 and averaged updates 100, 200 and 213: sacreBLEU 9.77 against 12.70 with
    two): the recipes average none from before the warm-up's end, the final model always."""
    _fake_run(tmp_path / "c", max_update, 100 if max_update > 100 else 10, keep=5)
    picked = update_checkpoints(tmp_path / "c", 5, or_fewer=True, first=warmup)
    assert [u for u, _ in picked] == expected


@pytest.mark.parametrize("recipe", ["wmt14", "parallel", "wsj"])
def test_the_recipes_average_from_the_warmups_end(tmp_path, recipe):
    """Every recipe's average stage, as its dry run prints it, averages from the end of the warm-up the
    user gave (--warmup-updates 37: the script's --from-update 37), none from before it (Sec. 6.1)."""
    from conftest import run_main

    from attn_kit.recipes import parallel, translation, wsj

    corpus = []
    if recipe == "parallel":
        for split in ("train", "dev", "test"):
            for lang in ("en", "de"):
                (tmp_path / f"{split}.{lang}").write_text("a b\n")
        corpus = ["--src", "en", "--tgt", "de", *(x for split, opt in (("train", "--train"), ("dev", "--valid"),
                                                                       ("test", "--test"))
                                                  for x in (opt, tmp_path / split)), "--preset", "small"]
    main = {"wmt14": translation.main, "parallel": parallel.main, "wsj": wsj.main}[recipe]
    proc = run_main(main, "--dry-run", *(["--smoke"] if recipe != "parallel" else corpus), "--warmup-updates", "37",
                    "--workdir", tmp_path / "w")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "attn_kit.fairseq_layer.checkpoints" in line)
    cmd = line.split()
    assert cmd[cmd.index("--from-update") + 1] == "37", line


def test_average_script_records_the_updates_and_rejects_a_bad_count(tmp_path):
    import json

    _fake_run(tmp_path / "c", 1000, 300, keep=3)  # 300, 600, 900 and the final 1000
    for name in os.listdir(tmp_path / "c"):  # give the files a tensor to average: its update number
        state = torch.load(tmp_path / "c" / name, weights_only=True)
        u = state["optimizer_history"][-1]["num_updates"]
        state["model"] = {"w": torch.tensor([float(u)])}
        torch.save(state, tmp_path / "c" / name)
    out, info = tmp_path / "avg.pt", tmp_path / "avg.json"
    done = average("--inputs", tmp_path / "c", "--num-update-checkpoints", "2", "--output", out, "--info-json", info)
    assert done.returncode == 0, done.stderr  # the script's bad counts, below, run as processes
    assert json.loads(info.read_text())["updates"] == [900, 1000]
    assert torch.load(out, weights_only=True)["model"]["w"].item() == pytest.approx(950.0)  # (900 + 1000) / 2
    for bad in ("0", "-1"):
        proc = run([cli("python"), AVERAGE, "--inputs", tmp_path / "c", "--num-update-checkpoints", bad,
                    "--output", tmp_path / "x.pt"], check=False)
        assert proc.returncode == 2
        assert last_line(proc).startswith(f"error: argument --num-update-checkpoints: {bad} is not >= 1")

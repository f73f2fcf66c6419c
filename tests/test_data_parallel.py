"""Data parallel = update frequency: N processes through the launcher the recipes use compute what
one process with --update-freq N computes (fairseq gives rank r the batches r, r+N, ...; update
frequency groups N consecutive batches: the same batches per update, gradients summed, normalized
by the same sample size). What "8 GPUs" rests on, checked on CPU with gloo; it cannot check NCCL
or GPU kernels, which the GPU runs on file do."""
import pytest
import torch
from conftest import USER_DIR, run, train_cmd

from attn_kit.fairseq_layer.fairseq_commands import launcher

pytestmark = pytest.mark.slow  # trains models (left out by scripts/test.sh --quick)

DETERMINISTIC = ["--user-dir", USER_DIR, "--arch", "attn_paper_base", "--dropout", "0", "--attention-dropout", "0"]
SCHEDULE = ["--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "4", "--lr-scale", "2",
            "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", "0.1", "--max-update", "5",
            "--no-epoch-checkpoints", "--disable-validation"]


def parameters(save_dir):
    from attn_plugin.checkpoint import load_checkpoint

    return load_checkpoint(str(save_dir / "checkpoint_last.pt"))["model"]


def train(data_bin, save_dir, procs, extra=()):
    """The one-process trainings are forked from the worker's preloaded interpreter (conftest.run); the
    data-parallel ones start their own processes through the launcher, as the recipes do."""
    cmd = train_cmd(data_bin, save_dir, DETERMINISTIC, [*SCHEDULE, *extra])
    if procs > 1:  # the recipes' CPU data parallel: python -m attn_kit.fairseq_layer.fairseq_cpu_ddp --nprocs N -- fairseq-train
        run([*launcher(0, procs, log_dir=str(save_dir)), *cmd[1:]])
    else:
        save_dir.mkdir(parents=True)
        proc = run(cmd)
        (save_dir / "train.log").write_text(proc.stdout + proc.stderr)
    return parameters(save_dir)


def differ(a, b):
    """The largest difference between two models' parameters, relative to the parameter's size."""
    return max(float((a[k] - b[k]).abs().max() / (b[k].abs().max() + 1e-12)) for k in b)


@pytest.mark.parametrize("precision", [[], ["--task", "attn_translation", "--bf16-autocast"]], ids=["fp32", "bf16"])
def test_two_processes_train_as_one_with_update_freq_2(data_bin, tmp_path, precision):
    together = train(data_bin, tmp_path / "dp", 2, precision)
    accumulated = train(data_bin, tmp_path / "uf", 1, [*precision, "--update-freq", "2"])
    assert differ(together, accumulated) < 1e-4  # fp32 rounding of the sums' order
    if not precision:  # the check has power: half of each update's batches (one process's gradient dropped)
        half = train(data_bin, tmp_path / "half", 1)
        assert differ(half, accumulated) > 1e-2

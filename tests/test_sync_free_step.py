"""fairseq-train's update waits for no GPU with attn_adam (attn_plugin/fairseq_patches.py, patches 10 and 11):
fairseq reads the gradient norm's finiteness on the host twice per update, and rounds loss, nll_loss and
ppl into a dict nobody reads; on a GPU each read makes the host wait for every kernel queued so far.
attn_adam keeps the finiteness on the device instead (a non-finite update, and any after it, is not
applied there), reads its copy once it has arrived, and raises fairseq's error naming the update, at the
latest before a checkpoint is written. A CPU has no GPU to wait for, but every such read goes through an
aten operator (``_local_scalar_dense``, ``is_nonzero``, ``equal``), which these tests count."""
import json
import sys

import fairseq.trainer
import pytest
import torch
from conftest import TINY_MODEL, USER_DIR, cli, run
from fairseq.logging.meters import AverageMeter, MetersDict
from fairseq.trainer import Trainer
from torch.utils._python_dispatch import TorchDispatchMode

from attn_plugin import fairseq_patches
from attn_plugin.checkpoint import load_checkpoint
from attn_plugin.fairseq_patches import LazySmoothedValues
from attn_plugin.optim.attn_adam import AttnAdam, AttnAdamConfig

READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default, torch.ops.aten.equal.default}


class CountReads(TorchDispatchMode):
    """Counts the operators behind a tensor -> Python value read (.item(), bool(), torch.equal)."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in READS:
            self.reads += 1
        return func(*args, **(kwargs or {}))


# fairseq-train with the reads of each Trainer.train_step counted (argv: the output file, fairseq-train's arguments)
COUNTING_TRAIN = '''
import json, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from fairseq.trainer import Trainer
READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default, torch.ops.aten.equal.default}
counts = []
class Count(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in READS:
            counts[-1] += 1
        return func(*args, **(kwargs or {}))
train_step = Trainer.train_step
def counted(self, samples, raise_oom=False):
    counts.append(0)
    with Count():
        return train_step(self, samples, raise_oom)
Trainer.train_step = counted
out, sys.argv = sys.argv[1], ["fairseq-train", *sys.argv[2:]]
from fairseq_cli.train import cli_main
try:
    cli_main()
finally:
    with open(out, "w") as f:
        json.dump(counts, f)
'''


def plugin_train(data_bin, save_dir, *extra):
    return [data_bin, "--user-dir", USER_DIR, "--task", "attn_translation", "--arch", "attn_paper_base", *TINY_MODEL,
            "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--optimizer", "attn_adam", "--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "4",
            "--max-tokens", "400", "--cpu", "--seed", "1", "--no-progress-bar", "--log-format", "json",
            "--save-dir", save_dir, *extra]


@pytest.mark.slow
@pytest.mark.parametrize("extra, lean", [([], True), (["--check-finite-every-update"], False),
                                         (["--optimizer", "adam"], False)],
                         ids=["attn_adam", "check_finite_every_update", "fairseqs_adam"])
def test_an_update_reads_nothing_back_with_attn_adam(data_bin, tmp_path, extra, lean):
    script = tmp_path / "count.py"
    script.write_text(COUNTING_TRAIN)
    out = tmp_path / "counts.json"
    run([sys.executable, script, out, *plugin_train(data_bin, tmp_path / "ckpt", "--max-update", "6", "--no-save",
                                                     "--disable-validation", "--log-interval", "100", *extra)],
        fork=True)
    counts = json.loads(out.read_text())[2:]  # after the first two updates (fairseq's first-update extras)
    assert len(counts) == 4
    if lean:
        assert counts == [0] * 4, counts
    else:  # fairseq's check (2 reads) and the rounded values (3), at every update
        assert all(c >= 5 for c in counts), counts


TIMINGS = {"wps", "ups", "wall", "train_wall", "gb_free"}  # also prefixed: valid_wps, train_train_wall, ...


def train_log(proc):
    """The json log lines (train_inner, valid, train) without the timings."""
    lines = []
    for line in proc.stdout.splitlines():
        tag, _, rest = line.partition(" | {")
        tag = tag.rsplit("| ", 1)[-1]
        if tag in ("train_inner", "valid", "train"):
            stats = json.loads("{" + rest)
            lines.append((tag, {k: v for k, v in stats.items() if not {k, k.split("_", 1)[-1]} & TIMINGS}))
    return lines


@pytest.mark.slow
def test_the_same_training_with_the_check_at_every_update(data_bin, tmp_path):
    logs, models = [], []
    for name, extra in (("lean", []), ("every", ["--check-finite-every-update"])):
        proc = run([cli("fairseq-train"), *plugin_train(data_bin, tmp_path / name, "--max-update", "8",
                                                        "--log-interval", "2", "--validate-interval-updates", "4",
                                                        "--no-epoch-checkpoints", *extra)])
        logs.append(train_log(proc))
        models.append(load_checkpoint(tmp_path / name / "checkpoint_last.pt")["model"])
    lean, every = logs
    assert [tag for tag, _ in lean].count("train_inner") == 4 and [tag for tag, _ in lean].count("valid") == 2
    assert all("loss" in stats and "gnorm" in stats for tag, stats in lean if tag == "train_inner")
    assert lean == every
    assert models[0].keys() == models[1].keys() and all(torch.equal(models[0][k], models[1][k]) for k in models[0])


# the first update throws the weights to ~1e30: the second's gradients are not finite
NAN_AT_UPDATE_2 = ["--lr-scale", "1e30", "--warmup-updates", "1", "--max-update", "8", "--log-interval", "1",
                   "--disable-validation"]


@pytest.mark.slow
def test_non_finite_gradients_end_the_run_before_any_checkpoint(data_bin, tmp_path):
    proc = run([cli("fairseq-train"), *plugin_train(data_bin, tmp_path, *NAN_AT_UPDATE_2,
                                                    "--save-interval-updates", "1")], check=False)
    assert proc.returncode != 0
    assert "FloatingPointError: gradients are Nan/Inf at update 2 " in proc.stdout + proc.stderr
    saved = sorted(p.name for p in tmp_path.glob("checkpoint*.pt"))
    assert saved == ["checkpoint_1_1.pt", "checkpoint_last.pt"]  # none from update 2 on
    for name in saved:
        state = load_checkpoint(tmp_path / name)
        assert state["optimizer_history"][-1]["num_updates"] == 1
        assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@pytest.mark.slow
def test_non_finite_gradients_leave_fairseqs_crash_checkpoint(data_bin, tmp_path):
    """Found at a later update, the error still goes through fairseq's handler of its own (crash.pt, the
    NanDetector), and crash.pt holds what fairseq's own check leaves: the weights and moments of update 1."""
    crashes = []
    for name, extra in (("lean", []), ("every", ["--check-finite-every-update"])):
        proc = run([cli("fairseq-train"), *plugin_train(data_bin, tmp_path / name, *NAN_AT_UPDATE_2, *extra)],
                   check=False)
        assert proc.returncode != 0
        output = proc.stdout + proc.stderr
        assert "FloatingPointError: gradients are Nan/Inf" in output and "fairseq.nan_detector" in output
        assert ("gradients are Nan/Inf at update 2 " in output) == (name == "lean")
        crashes.append(load_checkpoint(tmp_path / name / "crash.pt"))
    lean, every = crashes
    assert all(torch.equal(lean["model"][k], every["model"][k]) for k in every["model"])
    assert all(torch.isfinite(v).all() for v in lean["model"].values() if v.is_floating_point())
    ours, theirs = lean["last_optimizer_state"]["state"], every["last_optimizer_state"]["state"]
    for i in theirs:
        assert torch.equal(ours[i]["exp_avg"], theirs[i]["exp_avg"])
        assert torch.equal(ours[i]["exp_avg_sq"], theirs[i]["exp_avg_sq"])
        assert ours[i]["step"] == theirs[i]["step"] + 1  # the skipped update 2 counted (MultiTensorAdam.step)


def adam(shapes=((4, 3), (5,))):
    g = torch.Generator().manual_seed(0)
    ps = [torch.randn(s, generator=g).requires_grad_() for s in shapes]
    return AttnAdam(AttnAdamConfig(lr=[1e-2]), ps), ps, g


def test_the_deferred_check_names_the_update_and_applies_nothing_after_it():
    opt, ps, g = adam()
    reference, ref_ps, _ = adam()
    update = [0]
    opt.defer_finite_check(lambda: update[0])
    for update[0] in (1, 2, 3):
        grads = [torch.randn(p.shape, generator=g) for p in ps]
        if update[0] == 3:
            grads[1][2] = float("nan")
        for p, ref, grad in zip(ps, ref_ps, grads):
            p.grad = grad.clone()
            ref.grad = grad.clone()
        norm = opt.clip_grad_norm(0)
        opt.step()
        if update[0] < 3:
            reference.clip_grad_norm(0)
            reference.step()
    assert norm.isnan()
    assert fairseq.trainer.torch.isfinite(norm).all()  # fairseq's read of this norm: answered on the host
    assert not fairseq.trainer.torch.isfinite(torch.tensor(float("nan"))).all()  # any other: torch's
    update[0] = 4  # a later update with finite gradients: not applied either
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    with pytest.raises(FloatingPointError, match="gradients are Nan/Inf at update 3 "):
        opt.clip_grad_norm(0)  # checks the flags that have arrived (on a CPU: all of them)
    opt.step()
    assert all(torch.equal(p, ref) for p, ref in zip(ps, ref_ps))  # the weights after update 2
    for p, ref in zip(ps, ref_ps):
        assert torch.equal(opt.optimizer.state[p]["exp_avg"], reference.optimizer.state[ref]["exp_avg"])
        assert torch.equal(opt.optimizer.state[p]["exp_avg_sq"], reference.optimizer.state[ref]["exp_avg_sq"])


def test_before_a_checkpoint_every_pending_check_is_waited_for():
    opt, ps, _ = adam()
    opt.defer_finite_check(lambda: 7)
    for p in ps:
        p.grad = torch.full(p.shape, float("inf"))
    opt.clip_grad_norm(0)
    opt.step()
    with pytest.raises(FloatingPointError, match="gradients are Nan/Inf at update 7 "):
        opt.check_deferred(wait=True)
    opt.check_deferred(wait=True)  # reported once


def test_without_the_deferred_check_nothing_changes():
    opt, ps, _ = adam()
    for p in ps:
        p.grad = torch.full(p.shape, float("nan"))
    norm = opt.clip_grad_norm(0)
    assert not fairseq.trainer.torch.isfinite(norm).all()  # fairseq's own check sees it
    assert opt.optimizer.finite is None


def test_smoothed_values_are_computed_when_read():
    meters = MetersDict()
    for key, value in (("loss", 2.34567), ("nll_loss", 1.23456), ("ppl", 9.87654), ("_hidden", 1.0)):
        meters.add_meter(key, AverageMeter(round=3), priority=len(meters))
        meters[key].update(torch.tensor(value))
    counter = CountReads()
    with counter:
        lazy = LazySmoothedValues(meters)
        lazy["sample_size"] = 17.0
        for key in ["ppl", "wps"]:
            if key in lazy:
                del lazy[key]
    assert counter.reads == 0
    assert list(lazy) == ["loss", "nll_loss", "sample_size"] and len(lazy) == 3 and "ppl" not in lazy
    eager = meters.get_smoothed_values()
    del eager["ppl"]
    eager["sample_size"] = 17.0
    assert dict(lazy) == dict(eager) and lazy["loss"] == 2.346
    with pytest.raises(KeyError):
        lazy["ppl"]


def test_installing_again_changes_nothing():
    patched = (fairseq.trainer.torch, Trainer._build_optimizer, Trainer.lr_step, Trainer._reduce_and_log_stats,
               MetersDict.get_smoothed_values)
    assert all(getattr(f, "_attn_plugin", False) for f in patched[1:4])
    fairseq_patches.install()
    assert (fairseq.trainer.torch, Trainer._build_optimizer, Trainer.lr_step, Trainer._reduce_and_log_stats,
            MetersDict.get_smoothed_values) == patched
    assert fairseq.trainer.torch.nn is torch.nn and fairseq.trainer.torch.isfinite is not torch.isfinite

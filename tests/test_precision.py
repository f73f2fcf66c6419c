"""--precision: what each choice trains in, and the plugin task's bf16 autocast (--bf16-autocast)
checked on CPU, where torch has bf16 autocast too: the matmuls run in bf16, the weights, their
gradients and the loss stay fp32, and the loss equals the fp32 loss within bf16's precision."""
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from conftest import REPO, TINY_MODEL, USER_DIR
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from attn_kit.cli import UsageError
from attn_kit.fairseq_layer.fairseq_commands import BF16_FLAG, flags_for, precision_of, used_precision


# --------------------------------------------------------------------------- what --precision means
@pytest.mark.parametrize("asked,gpus,bf16_ok,used", [
    ("auto", 0, None, "fp32"), ("auto", 8, True, "bf16"), ("auto", 8, False, "fp16"),
    ("auto", 8, None, "bf16"),  # no GPU visible (a login node): bf16 hardware assumed
    ("bf16", 8, False, "bf16"), ("bf16", 0, None, "bf16"),  # asked for: bf16 autocast, also on CPU
    ("fp16", 8, True, "fp16"), ("fp16", 0, None, "fp32"),  # fairseq's fp16 does not run on CPU
    ("fp32", 8, True, "fp32"),
])
def test_used_precision(asked, gpus, bf16_ok, used):
    assert used_precision(asked, gpus, bf16_ok=bf16_ok) == used
    # the flags say it, and the flags are read back as the same precision (results.json's "precision")
    assert precision_of(["fairseq-train", "data", *flags_for(used)]) == used
    assert (BF16_FLAG in flags_for(used)) == (used == "bf16") and ("--fp16" in flags_for(used)) == (used == "fp16")
    assert "--bf16" not in flags_for(used)  # fairseq 0.12's --bf16 means TPU


def test_unknown_precision_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown --precision 'fp8'"):
        used_precision("fp8", 8)


# --------------------------------------------------------------------------- the task's bf16 autocast
def setup(data_bin, *flags):
    argv = [str(data_bin), "--user-dir", USER_DIR, "--task", "attn_translation", "--arch", "attn_paper_base",
            *TINY_MODEL, "--criterion", "attn_label_smoothed_cross_entropy", "--cpu", *flags]
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
    task = tasks.setup_task(cfg.task)
    task.load_dataset("valid")
    torch.manual_seed(0)
    model, criterion = task.build_model(cfg.model), task.build_criterion(cfg.criterion)
    dataset = task.dataset("valid")
    sample = dataset.collater([dataset[i] for i in range(16)])
    return task, model, criterion, sample


class PlainBackward:
    """What train_step needs of fairseq's optimizer: backward(loss), no loss scaling."""

    def backward(self, loss):
        loss.backward()


def step(task, model, criterion, sample):
    """One train_step; the dtype of every Linear output it computed, its loss and gradients."""
    dtypes = set()
    hooks = [m.register_forward_hook(lambda m, i, o: dtypes.add(o.dtype))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    model.zero_grad()
    loss, sample_size, logging = task.train_step(sample, model, criterion, PlainBackward(), update_num=0)
    for h in hooks:
        h.remove()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return dtypes, loss, grads, {p.grad.dtype for p in model.parameters() if p.grad is not None}


def test_bf16_autocast_trains_matmuls_in_bf16_and_keeps_fp32_weights_and_loss(data_bin):
    task, model, criterion, sample = setup(data_bin, BF16_FLAG)
    assert task.cfg.bf16_autocast
    dtypes, loss, grads, grad_dtypes = step(task, model, criterion, sample)
    assert dtypes == {torch.bfloat16}  # every projection, FFN and the output layer
    assert loss.dtype == torch.float32 and grad_dtypes == {torch.float32}
    assert {p.dtype for p in model.parameters()} == {torch.float32}  # fp32 master weights, nothing to scale

    # the same weights and batch without the flag: fp32 everywhere, and the same loss within bf16's precision
    plain, _, _, _ = setup(data_bin)
    assert not plain.cfg.bf16_autocast
    dtypes32, loss32, grads32, _ = step(plain, model, criterion, sample)
    assert dtypes32 == {torch.float32}
    # bf16 keeps 8 significant bits (relative rounding 2^-9 = 0.2%); sums of many rounded products stay close
    assert loss.item() == pytest.approx(loss32.item(), rel=1e-2)
    assert torch.nn.functional.cosine_similarity(grads, grads32, dim=0) > 0.99
    assert loss.item() != loss32.item()  # the bf16 run really computed in bf16

    # validation is fp32 whatever the training precision (the option is saved in every checkpoint);
    # --bf16-inference asks for autocast there, and gives fp32's loss within bf16's precision
    model.eval()
    with torch.no_grad():
        eval32, _, _ = plain.valid_step(sample, model, criterion)
        assert task.valid_step(sample, model, criterion)[0].item() == eval32.item()
        bf16, _, _, _ = setup(data_bin, BF16_FLAG, "--bf16-inference")
        valid16, _, _ = bf16.valid_step(sample, model, criterion)
    assert valid16.item() == pytest.approx(eval32.item(), rel=1e-2) and valid16.item() != eval32.item()


class Casts(TorchDispatchMode):
    """Counts the elements of activations (batch x length x width: 3-D tensors; weights are 1- and 2-D)
    whose dtype the ops convert (aten._to_copy) while active, and the dtypes of the layer norms' inputs."""

    def __init__(self):
        super().__init__()
        self.activations, self.norm_inputs = 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args[0].dim() == 3:
            self.activations += args[0].numel()
        if func is torch.ops.aten.native_layer_norm.default:
            self.norm_inputs.add(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_bf16_residual_keeps_the_stream_in_bf16_with_fewer_casts_and_the_same_loss_within_bf16(data_bin):
    """--bf16-residual under --bf16-autocast: the layer norms take bf16 (under autocast alone they take
    fp32: autocast runs them in fp32 and the next matmul casts back), a train step converts a small share
    of the activations it converted (forward and backward: the embeddings' once), and the loss and
    gradients equal autocast's within bf16's precision; the weights, their gradients and the loss stay
    fp32. Without autocast the flag changes nothing."""
    results = {}
    for flags in ((BF16_FLAG,), (BF16_FLAG, "--bf16-residual")):
        task, model, criterion, sample = setup(data_bin, *flags)
        with Casts() as casts:
            dtypes, loss, grads, grad_dtypes = step(task, model, criterion, sample)
        results[flags] = casts, loss, grads
        assert dtypes == {torch.bfloat16} and loss.dtype == torch.float32 and grad_dtypes == {torch.float32}
    (plain, loss, grads), (lean, loss_lean, grads_lean) = results.values()
    assert plain.norm_inputs == {torch.float32} and lean.norm_inputs == {torch.bfloat16}
    assert lean.activations < 0.2 * plain.activations, (lean.activations, plain.activations)
    assert loss_lean.item() == pytest.approx(loss.item(), rel=1e-2) and loss_lean.item() != loss.item()
    assert torch.nn.functional.cosine_similarity(grads, grads_lean, dim=0) > 0.99
    # fp32 training: the same step bit for bit with the flag or without
    fp32 = [step(*setup(data_bin, *flags)) for flags in ((), ("--bf16-residual",))]
    assert fp32[0][1].item() == fp32[1][1].item() and torch.equal(fp32[0][2], fp32[1][2])


def linear_dtypes(model, fn):
    """The dtypes of every Linear output computed while ``fn()`` runs."""
    seen = set()
    hooks = [m.register_forward_hook(lambda mod, inp, out: seen.add(out.dtype))
             for m in model.modules() if isinstance(m, torch.nn.Linear)]
    try:
        with torch.no_grad():
            fn()
    finally:
        for h in hooks:
            h.remove()
    return seen


@pytest.mark.slow  # trains a model
def test_a_checkpoint_trained_in_bf16_validates_and_decodes_in_fp32(data_bin, tmp_path):
    """The task is rebuilt from the checkpoint, as fairseq-validate, from_pretrained and translate.py
    load it: --bf16-autocast is in its options, and evaluation still runs in fp32 unless asked."""
    from argparse import Namespace

    from conftest import run, train_cmd
    from fairseq import checkpoint_utils

    import attn_plugin  # noqa: F401 -- registers the task, as --user-dir does

    run(train_cmd(data_bin, tmp_path, ["--user-dir", USER_DIR, "--task", "attn_translation",
                                       "--arch", "attn_paper_base", BF16_FLAG],
                  ["--lr", "0.001", "--max-update", "3", "--no-epoch-checkpoints", "--disable-validation"]))
    for overrides, expected in [({}, {torch.float32}), ({"bf16_inference": True}, {torch.bfloat16})]:
        models, _, task = checkpoint_utils.load_model_ensemble_and_task(
            [str(tmp_path / "checkpoint_last.pt")], arg_overrides={"data": str(data_bin), **overrides})
        model = models[0].eval()
        assert task.cfg.bf16_autocast
        task.load_dataset("valid")
        dataset = task.dataset("valid")
        sample = dataset.collater([dataset[i] for i in range(8)])
        criterion = task.build_criterion(Namespace(criterion="cross_entropy", sentence_avg=False))
        generator = task.build_generator([model], Namespace(beam=2, max_len_b=10))
        assert linear_dtypes(model, lambda: task.valid_step(sample, model, criterion)) == expected
        assert linear_dtypes(model, lambda: task.inference_step(generator, [model], sample)) == expected


@pytest.mark.slow  # trains a model
def test_fairseq_train_with_bf16_autocast_has_no_loss_scale(data_bin, tmp_path):
    """fairseq-train --bf16-autocast: the plain fp32 optimizer (no FP16Optimizer, no loss_scale in
    the log), and training runs: the loss goes down."""
    from conftest import run, train_cmd

    proc = run(train_cmd(data_bin, tmp_path, ["--user-dir", USER_DIR, "--task", "attn_translation",
                                              "--arch", "attn_paper_base", BF16_FLAG],
                         ["--lr", "1", "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "5",
                          "--lr-scale", "2", "--criterion", "attn_label_smoothed_cross_entropy",
                          "--max-update", "12", "--log-interval", "4", "--no-save"]))
    out = proc.stdout + proc.stderr
    assert "'bf16_autocast': True" in out and "'fp16': False" in out and "'bf16': False" in out
    inner = [line for line in out.splitlines() if "| train_inner |" in line]
    assert len(inner) == 3 and not any("loss_scale" in line for line in inner)  # fairseq logs it with --fp16
    losses = [float(line.split(" loss=")[1].split(",")[0]) for line in inner]
    assert losses[-1] < losses[0]


# --------------------------------------------------------------------------- the comparison in bf16
def test_comparison_trains_both_models_under_the_plugin_task_in_bf16():
    from lab.compare import commands
    from lab.compare.cli import parse_args
    from lab.compare.report import device_label

    args = parse_args(["unused-data", "--max-update", "10", "--precision", "bf16"])
    assert args.precision == "bf16"  # asked for bf16 on CPU: bf16 autocast there too
    for which in ("plugin", "stock"):
        cmd = commands.train_command(which, args, REPO, True, 1, REPO / "x")
        assert BF16_FLAG in cmd and cmd[cmd.index("--task") + 1] == "attn_translation" and "--cpu" in cmd
        assert "--fp16" not in cmd and "--bf16" not in cmd
    stock = commands.train_command("stock", args, REPO, True, 1, REPO / "x")
    assert stock[stock.index("--arch") + 1] == "transformer_wmt_en_de" and "--user-dir" in stock
    assert BF16_FLAG not in commands.generate_command(args, REPO, REPO / "c.pt", "test")  # evaluation in fp32
    assert device_label(args).startswith("CPU, bf16 autocast")
    assert device_label(replace(args, ngpus=8)) == "8 GPU(s), bf16 autocast (fp32 weights)"

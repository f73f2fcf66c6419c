"""lab.compare (scripts/compare_baselines.py) and lab.bench (benchmarks/):
the plugin against stock fairseq.

The schedule equivalence goes through fairseq's own scheduler classes, the
model sizes through fairseq's option parser and registries, and one tiny
comparison runs the real script end to end (two fairseq-train runs, two
fairseq-generate runs) on the conftest corpus.
"""
import json
import sys
from dataclasses import replace

import pytest
import torch
from conftest import REPO, assert_one_error_line, run, run_main
from fairseq import options, tasks

from attn_kit.cli import UsageError, UserError
from lab.compare import commands
from lab.compare.cli import main, parse_args
from lab.compare.report import plot
from lab.pairs import MODELS, PAIRS, arch_size
from attn_kit.planning.sizes import SIZES

SCRIPT = REPO / "scripts" / "compare_baselines.py"


def parsed(argv):
    return options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])


def comparison_args(*extra):
    return parse_args(["unused-data", "--max-update", "10", *extra])


# ---------------------------------------------------------------------------
# Same schedule values, same model sizes
# ---------------------------------------------------------------------------
def lr_sequence(argv, updates):
    """The learning rate of updates 1..``updates`` as fairseq's trainer sets it:
    step_update(0) at the start, then step_update(n) after update n."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.optim import build_optimizer
    from fairseq.optim.lr_scheduler import build_lr_scheduler

    cfg = convert_namespace_to_omegaconf(parsed(argv))
    optimizer = build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    scheduler = build_lr_scheduler(cfg.lr_scheduler, optimizer)
    lrs = []
    for n in range(updates):
        scheduler.step_update(n)
        lrs.append(optimizer.get_lr())
    return lrs


@pytest.mark.parametrize("argv,d_model", [
    (["unused-data", "--arch", "base", "--lr-scale", "2"], 512),
    (["unused-data", "--arch", "big"], 1024),
    (["unused-data", "--arch", "big", "--d-model", "256", "--lr-scale", "0.8"], 256),
    (["--bundled"], 256),  # the bundled recipe's small model
])
def test_stock_inverse_sqrt_runs_through_the_plugins_eq3_values(argv, d_model):
    from attn_plugin.lr_scheduler.attn_inverse_sqrt import noam_lr

    args = parse_args([*argv, "--max-update", "10", "--warmup-updates", "40"])
    assert commands.d_model(args) == d_model
    common = ["unused-data", "--optimizer", "adam"]
    plugin = lr_sequence(common + commands.model_flags("plugin", args, joined=True), 200)
    stock = lr_sequence(common + commands.model_flags("stock", args, joined=True), 201)
    eq3 = [noam_lr(k, d_model, 40, args.lr_scale) for k in range(1, 201)]
    assert plugin == pytest.approx(eq3, rel=1e-12)
    # fairseq's inverse_sqrt with the script's --lr and --warmup-init-lr: the same first rate, the
    # same peak, and within 1/warmup of eq. 3 at every update
    assert stock[0] == pytest.approx(plugin[0], rel=1e-12)
    assert max(stock) == pytest.approx(commands.peak_lr(args), rel=1e-12)
    assert max(plugin) == pytest.approx(commands.peak_lr(args), rel=1e-12)
    assert max(abs(s / p - 1) for s, p in zip(stock, plugin)) <= 1 / 40
    # with --warmup-init-lr 0 the same values would come one update late
    late = lr_sequence(common + [f if f != repr(commands.warmup_init_lr(args)) else "0"
                                 for f in commands.model_flags("stock", args, joined=True)], 201)
    assert late[0] == 0.0 and late[1:] == pytest.approx(plugin, rel=1e-9)


@pytest.mark.parametrize("arch,sizes", [
    ("base", ["--layers", "2", "--d-model", "32", "--d-ff", "64", "--h", "4"]),
    ("big", ["--layers", "1", "--d-model", "64", "--d-ff", "96", "--h", "4", "--p-drop", "0.2"]),
])
def test_plugin_and_stock_models_have_the_same_sizes_and_parameter_count(data_bin, arch, sizes):
    args = comparison_args("--arch", arch, *sizes)
    models = {}
    for which in MODELS:
        a = parsed([data_bin, "--cpu", *commands.model_flags(which, args, joined=True)])
        models[which] = tasks.setup_task(a).build_model(a)
        assert (a.encoder_layers, a.decoder_embed_dim, a.decoder_ffn_embed_dim, a.encoder_attention_heads) == \
            tuple(int(sizes[i]) for i in (1, 3, 5, 7))
        if arch == "big":
            assert a.dropout == 0.2
    counts = {w: sum(p.numel() for p in m.parameters()) for w, m in models.items()}
    assert counts["plugin"] == counts["stock"]


def test_bundled_sizes_are_the_bundled_recipes():
    """--bundled compares the bundled recipe's model, batch and schedule (recipes/configs/wmt14.yaml)."""
    from attn_kit.recipes.config import settings

    bundled = SIZES["bundled"]
    args = parse_args(["--bundled", "--train-minutes", "5"])
    assert args.size == bundled
    size_flags = bundled.flags()
    for which in MODELS:  # the bundled model's flags, whole and in order, on both sides
        flags = commands.model_flags(which, args, joined=True)
        assert any(flags[k:k + len(size_flags)] == size_flags for k in range(len(flags)))
    b = settings("wmt14", "paper", "bundled")
    assert (args.max_tokens, args.warmup_updates, args.lr_scale) == (b["max_tokens_per_gpu"], b["warmup_updates"],
                                                                     b["lr_scale"])
    assert commands.BUNDLED_TRAINING == dict(max_tokens=b["max_tokens_per_gpu"], warmup_updates=b["warmup_updates"],
                                             lr_scale=b["lr_scale"])
    assert args.max_tokens * args.update_freq == b["tokens_per_update"]  # one CPU process, as the recipe
    assert commands.d_model(args) == bundled.d_model
    cmd = commands.train_command("stock", args, REPO, True, 1, REPO / "x")
    assert float(cmd[cmd.index("--stop-time-hours") + 1]) == pytest.approx(5 / 60)  # --train-minutes 5: 5 min each
    # eq. 3's peak, lr_scale * d_model^-0.5 * warmup^-0.5, as stock's --lr
    assert float(cmd[cmd.index("--lr") + 1]) == pytest.approx(
        b["lr_scale"] * bundled.d_model ** -0.5 * b["warmup_updates"] ** -0.5)
    # resizing --bundled changes only what is given
    args = parse_args(["--bundled", "--train-minutes", "5", "--layers", "3", "--p-drop", "0.1"])
    assert args.size == bundled.replace(layers=3, p_drop=0.1)


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_both_archs_of_a_pair_default_to_the_papers_size(pair):
    """arch_size (Table 3's row) is what both archs build when no size flag is given, so
    --arch base/big compare the paper's models and eq. 3 uses their d_model."""
    size = arch_size(pair)
    for arch in (PAIRS[pair].plugin_arch, PAIRS[pair].stock_arch):
        flags = ["unused-data", "--arch", arch] + (["--user-dir", str(REPO / "attn_plugin")]
                                                   if arch.startswith("attn") else [])
        a = parsed(flags)
        assert (a.encoder_layers, a.decoder_layers, a.encoder_embed_dim, a.decoder_embed_dim, a.encoder_ffn_embed_dim,
                a.decoder_ffn_embed_dim, a.encoder_attention_heads, a.decoder_attention_heads, a.dropout) == \
            (size.layers, size.layers, size.d_model, size.d_model, size.d_ff, size.d_ff, size.h, size.h, size.p_drop)
    args = parse_args(["unused-data", "--arch", pair, "--max-update", "10"])
    assert args.size is None and commands.d_model(args) == size.d_model
    assert "--encoder-embed-dim" not in commands.model_flags("plugin", args, joined=True)  # the arch's own


def test_precision_is_what_runs():
    args = comparison_args()
    assert args.precision == "fp32" and "--fp16" not in commands.train_command("plugin", args, REPO, True, 1, REPO)
    assert comparison_args("--precision", "fp16").precision == "fp32"  # fairseq's fp16 does not run on CPU
    with pytest.raises(UsageError, match="unknown --precision 'fp8'"):
        comparison_args("--precision", "fp8")
    # on GPUs (the count is checked against torch in parse_args, so set it afterwards): fp16 trains with
    # fairseq's fp16 mixed precision, bf16 (auto on bf16 GPUs) with the plugin task's bf16 autocast, and
    # the report says which; several GPUs run the worker under torchrun
    from lab.compare.report import device_label
    from attn_kit.fairseq_layer.fairseq_commands import used_precision

    args = replace(args, ngpus=8)  # the settings are frozen: a changed copy
    for asked, bf16_ok, used in (("auto", True, "bf16"), ("auto", False, "fp16"), ("fp16", True, "fp16"),
                                 ("bf16", True, "bf16"), ("fp32", True, "fp32")):
        args = replace(args, precision=used_precision(asked, args.ngpus, bf16_ok=bf16_ok))
        assert args.precision == used
        cmd = commands.train_command("stock", args, REPO, True, 1, REPO / "x")
        assert ("--fp16" in cmd) == (used == "fp16") and ("--bf16-autocast" in cmd) == (used == "bf16")
        assert "--bf16" not in cmd and "--cpu" not in cmd
        assert cmd[cmd.index("-m") + 1] == commands.WORKER and "--nproc-per-node" in cmd
        gen = commands.generate_command(args, REPO, REPO / "c.pt", "test")  # evaluation in fp32, whatever trained
        assert "--fp16" not in gen and "--bf16-autocast" not in gen and "--cpu" not in gen
    assert device_label(args) == "8 GPU(s), fp32"
    args = replace(args, precision="fp16")
    assert device_label(args) == "8 GPU(s), fp16 mixed precision"


# ---------------------------------------------------------------------------
# The script end to end, and its errors
# ---------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_comparison_prints_the_table_and_writes_json_and_png(data_bin, tmp_path):
    sizes = ["--layers", "2", "--d-model", "32", "--d-ff", "64", "--h", "4"]
    proc = run([sys.executable, SCRIPT, data_bin, "--max-update", "12", *sizes, "--max-tokens", "400",
                "--warmup-updates", "5", "--validate-every", "4", "--log-every", "4", "--workdir", tmp_path])
    out = proc.stdout
    for row in ("| parameters |", "| train tokens/s |", "| peak memory (process RSS) |",
                "| train nll_loss (last log interval) |", "| valid nll_loss at the end |",
                "| valid perplexity at update 12 (both) |", "| BLEU (test, beam 4, tokenized) |"):
        assert row in out, row
    result = json.loads((tmp_path / "comparison.json").read_text())
    assert (tmp_path / "comparison.md").read_text().strip() == result["table"]
    assert (tmp_path / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = {r["model"]: r for r in result["runs"]}
    assert runs["plugin"]["params"] == runs["stock"]["params"]
    for r in runs.values():
        assert r["updates"] == 12 and r["tokens_per_s"] > 0 and r["peak_memory_bytes"] > 0
        assert [v["num_updates"] for v in r["valid_curve"]] == [4, 8, 12]
        assert all(v["ppl"] == pytest.approx(2 ** v["nll_loss"], rel=2e-3) for v in r["valid_curve"])
        assert 0 <= r["bleu"] <= 100
    assert result["precision"] == "fp32" and ", CPU, fp32, " in result["table"].splitlines()[0]
    assert {"command", "commit", "machine", "date"} <= set(result)
    cmds = result["commands"]
    plugin, stock = cmds["plugin-seed1"], cmds["stock-seed1"]
    for which, cmd in (("plugin", plugin), ("stock", stock)):  # fairseq-train through the worker module
        stats = tmp_path.resolve() / f"{which}-seed1" / "stats.json"
        assert cmd[:4] == [sys.executable, "-m", "lab.compare.worker", str(stats)]
    for flag in ("--max-tokens", "--seed", "--max-update", "--warmup-updates", "--adam-betas", "--adam-eps",
                 "--label-smoothing", "--encoder-embed-dim", "--decoder-layers"):
        assert plugin[plugin.index(flag) + 1] == stock[stock.index(flag) + 1], flag
    assert stock[stock.index("--lr") + 1] == repr(result["stock_peak_lr"])
    assert stock[stock.index("--warmup-init-lr") + 1] == repr(result["stock_warmup_init_lr"])
    assert "--warmup-init-lr" in stock and "attn_inverse_sqrt" in plugin


def test_the_kits_option_names_and_the_papers_alpha_by_default():
    """--h, --p-drop, --gnmt-alpha and --train-minutes (the kit's one vocabulary; the old names are
    refused, tests/test_option_ranges.py); no --gnmt-alpha gives the paper's 0.6 (Sec. 6.1)."""
    commands_of = []
    for argv in (["--max-update", "7", "--gnmt-alpha", "0.6"], ["--max-update", "7"]):
        args = parse_args(["unused-data", *argv])
        commands_of.append([commands.train_command(w, args, REPO, True, 1, REPO / "x") for w in MODELS]
                           + [commands.generate_command(args, REPO, REPO / "c.pt", "test")])
    assert commands_of[0] == commands_of[1]
    help_text = run([sys.executable, SCRIPT, "--help"]).stdout
    assert all(f"--{name} " in help_text for name in ("h", "p-drop", "gnmt-alpha", "train-minutes"))
    assert not any(f"--{name} " in help_text for name in ("heads", "dropout", "alpha", "minutes"))


@pytest.mark.parametrize("argv,message,status", [
    (["/no/such/dir", "--max-update", "5"], "data directory not found", 1),
    (["--bundled", "--train-minutes", "5", "--arch", "huge"], "unknown --arch 'huge'", 2),
    (["--bundled"], "give a training budget", 2),
    (["--max-update", "5"], "give a binarized data directory or --bundled", 2),
])
def test_bad_input_is_one_error_line(argv, message, status):
    proc = run([sys.executable, SCRIPT, *argv], check=False)
    assert proc.returncode == status  # 2: a command line that does not make sense, as argparse's own errors
    assert_one_error_line(proc, message)
    assert proc.stderr.startswith("error: ")


def test_data_without_binarized_training_split_is_one_error_line(tmp_path):
    (tmp_path / "dict.en.txt").write_text("a 1\n")
    proc = run([sys.executable, SCRIPT, tmp_path, "--max-update", "5"], check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "no binarized training data" in proc.stderr


# ---------------------------------------------------------------------------
# The benchmarks
# ---------------------------------------------------------------------------
def test_peak_memory_counts_live_tensor_bytes():
    from lab.bench.measure import PeakMemory

    weight = torch.zeros(1000, 250)  # 1 MB, there before
    with PeakMemory() as tracker:
        tracker.track(weight)
        x = torch.ones(500, 1000)  # +2 MB
        y = x @ weight  # +0.5 MB
        del x
        z = y * 2  # +0.5 MB, x freed already
    assert tracker.peak == 4 * (250_000 + 500_000 + 125_000)
    assert tracker.current == 4 * (250_000 + 125_000 + 125_000)
    del y, z


def test_benchmark_shapes_are_the_bundled_model_and_the_papers():
    from lab.bench.models import SHAPES, shape_flags

    # small: the bundled model's dims at the P_drop 0.1 the committed results were measured with
    assert SHAPES["small"].size == SIZES["bundled"].replace(p_drop=0.1) and SHAPES["small"].vocab == 8000
    for name in ("base", "big"):  # the archs' own sizes: no size flags
        assert SHAPES[name].size is None and SHAPES[name].dims == arch_size(name) and SHAPES[name].vocab == 32000
        assert not any(f.startswith("--encoder-") for w in MODELS for f in shape_flags(w, name))
    flags = {w: parsed(["unused-data", *shape_flags(w, "small")]) for w in MODELS}
    assert flags["plugin"].arch == "attn_paper_base" and flags["stock"].arch == "transformer_wmt_en_de"
    for key in ("encoder_layers", "decoder_layers", "encoder_embed_dim", "decoder_ffn_embed_dim",
                "decoder_attention_heads", "dropout", "label_smoothing"):
        assert getattr(flags["plugin"], key) == getattr(flags["stock"], key), key


def benchmark_main(script, argv):
    """The main() of benchmarks/SCRIPT run here, in this process that has fairseq imported already (a
    process of its own imports it again, ~3.5 s CPU; test_benchmark_bad_input_is_one_error_line runs the
    scripts as processes). What it changes in the process is put back: the warnings and logging it quiets,
    torch's threads (--threads 1: one, as OMP_NUM_THREADS=1 gives the scripts' processes) and seed."""
    import logging
    import runpy
    import warnings

    main = runpy.run_path(str(REPO / "benchmarks" / script))["main"]  # what the script runs, main_guard aside
    threads, rng, disabled = torch.get_num_threads(), torch.get_rng_state(), logging.root.manager.disable
    try:
        with warnings.catch_warnings():
            main([*argv, "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
        logging.disable(disabled)


@pytest.mark.slow  # times training and decoding
@pytest.mark.parametrize("script,ratio_key", [("train_throughput.py", "ratio_tokens_per_s"),
                                              ("generate_throughput.py", "ratio_sentences_per_s")])
def test_benchmark_writes_its_ratio_table_and_json(tmp_path, script, ratio_key, capsys):
    out = tmp_path / "bench.json"
    benchmark_main(script, ["--shapes", "small", "--repeats", "2", "--sentences", "2", "--length", "6",
                            "--out", str(out)])
    stdout = capsys.readouterr().out
    assert "| small |" in stdout and "ratio" in stdout
    result = json.loads(out.read_text())["results"]["small"]
    assert len(result["trial_ratios"]) == 2 and result[ratio_key] > 0
    assert result["plugin"]["params"] == result["stock"]["params"]
    assert result["plugin"]["peak_bytes"] > result["plugin"]["params"] * 4  # weights and more
    if "same_best_hypothesis" in result:
        assert result["same_best_hypothesis"] == "2/2"


def test_benchmark_bad_input_is_one_error_line(tmp_path):
    proc = run([sys.executable, REPO / "benchmarks" / "train_throughput.py", "--shapes", "huge"], check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown shape 'huge'")
    proc = run([sys.executable, REPO / "benchmarks" / "generate_throughput.py", "--dtype", "bf16"], check=False)
    assert proc.returncode == 2 and "--precision bf16 needs --ngpus 1" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_matplotlib_is_one_clear_error_after_the_table(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(UserError, match="plotting needs matplotlib"):
        plot([], tmp_path / "x.png", "title")
    assert not (tmp_path / "x.png").exists()


def test_tokens_per_update_is_the_recipes_option_and_sets_update_freq():
    """compare_baselines.py took only --max-tokens/--update-freq where the recipes take
    --tokens-per-update: the same option, the same split (devices x --max-tokens x --update-freq)."""
    from attn_kit.fairseq_layer.fairseq_commands import batch_plan

    args = parse_args(["unused-data", "--max-update", "10", "--max-tokens", "4096", "--tokens-per-update", "25000"])
    plan = batch_plan(25000, 1, 4096)
    assert (args.max_tokens, args.update_freq) == (plan.max_tokens, plan.update_freq) == (3572, 7)
    assert parse_args(["unused-data", "--max-update", "10"]).update_freq == 1
    proc = run_main(main, "unused-data", "--max-update", "10", "--tokens-per-update", "25000", "--update-freq", "2")
    assert_one_error_line(proc, "give --tokens-per-update or --update-freq, not both")

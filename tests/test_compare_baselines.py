"""scripts/compare_baselines.py and benchmarks/: the plugin against stock fairseq.

The schedule equivalence goes through fairseq's own scheduler classes, the
model sizes through fairseq's option parser and registries, and one tiny
comparison runs the real script end to end (two fairseq-train runs, two
fairseq-generate runs) on the conftest corpus.
"""
import json
import sys

import pytest
import torch
from conftest import REPO, TINY_MODEL, USER_DIR, run
from fairseq import options, tasks

sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "benchmarks"))

import compare_baselines as cb  # noqa: E402

SCRIPT = REPO / "scripts" / "compare_baselines.py"


def parsed(argv):
    return options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])


def comparison_args(*extra):
    return cb.parse_args(["unused-data", "--max-update", "10", *extra])


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

    args = cb.parse_args([*argv, "--max-update", "10", "--warmup-updates", "40"])
    assert cb.d_model(args) == d_model
    common = ["unused-data", "--optimizer", "adam"]
    plugin = lr_sequence(common + cb.model_flags("plugin", args, joined=True), 200)
    stock = lr_sequence(common + cb.model_flags("stock", args, joined=True), 201)
    eq3 = [noam_lr(k, d_model, 40, args.lr_scale) for k in range(1, 201)]
    assert plugin == pytest.approx(eq3, rel=1e-12)
    # fairseq's inverse_sqrt with the script's --lr and --warmup-init-lr: the same first rate, the
    # same peak, and within 1/warmup of eq. 3 at every update
    assert stock[0] == pytest.approx(plugin[0], rel=1e-12)
    assert max(stock) == pytest.approx(cb.peak_lr(args), rel=1e-12)
    assert max(plugin) == pytest.approx(cb.peak_lr(args), rel=1e-12)
    assert max(abs(s / p - 1) for s, p in zip(stock, plugin)) <= 1 / 40
    # with --warmup-init-lr 0 the same values would come one update late
    late = lr_sequence(common + [f if f != repr(cb.warmup_init_lr(args)) else "0"
                                 for f in cb.model_flags("stock", args, joined=True)], 201)
    assert late[0] == 0.0 and late[1:] == pytest.approx(plugin, rel=1e-9)


@pytest.mark.parametrize("arch,sizes", [
    ("base", ["--layers", "2", "--d-model", "32", "--d-ff", "64", "--heads", "4"]),
    ("big", ["--layers", "1", "--d-model", "64", "--d-ff", "96", "--heads", "4", "--dropout", "0.2"]),
])
def test_plugin_and_stock_models_have_the_same_sizes_and_parameter_count(data_bin, arch, sizes):
    args = comparison_args("--arch", arch, *sizes)
    models = {}
    for which in cb.MODELS:
        a = parsed([data_bin, "--cpu", *cb.model_flags(which, args, joined=True)])
        models[which] = tasks.setup_task(a).build_model(a)
        assert (a.encoder_layers, a.decoder_embed_dim, a.decoder_ffn_embed_dim, a.encoder_attention_heads) == \
            tuple(int(sizes[i]) for i in (1, 3, 5, 7))
        if arch == "big":
            assert a.dropout == 0.2
    counts = {w: sum(p.numel() for p in m.parameters()) for w, m in models.items()}
    assert counts["plugin"] == counts["stock"]


def test_bundled_sizes_are_the_bundled_recipes():
    from recipes.wmt14 import BUNDLED_SIZE, MODES, model_flags

    args = cb.parse_args(["--bundled", "--minutes", "5"])
    assert cb.size_flags(args) == model_flags(**BUNDLED_SIZE)
    b = MODES["bundled"]
    assert (args.max_tokens, args.warmup_updates, args.lr_scale) == (b["max_tokens_per_gpu"], b["warmup_updates"],
                                                                     b["lr_scale"])
    assert cb.d_model(args) == BUNDLED_SIZE["d_model"]
    cmd = cb.train_command("stock", args, REPO, True, 1, REPO / "x")
    assert float(cmd[cmd.index("--stop-time-hours") + 1]) == pytest.approx(2.5 / 60)  # half of 5 min each
    # eq. 3's peak, lr_scale * d_model^-0.5 * warmup^-0.5, as stock's --lr
    assert float(cmd[cmd.index("--lr") + 1]) == pytest.approx(
        b["lr_scale"] * BUNDLED_SIZE["d_model"] ** -0.5 * b["warmup_updates"] ** -0.5)


# ---------------------------------------------------------------------------
# The script end to end, and its errors
# ---------------------------------------------------------------------------
def test_tiny_comparison_prints_the_table_and_writes_json_and_png(data_bin, tmp_path):
    sizes = ["--layers", "2", "--d-model", "32", "--d-ff", "64", "--heads", "4"]
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
    commands = result["commands"]
    plugin, stock = commands["plugin-seed1"], commands["stock-seed1"]
    for flag in ("--max-tokens", "--seed", "--max-update", "--warmup-updates", "--adam-betas", "--adam-eps",
                 "--label-smoothing", "--encoder-embed-dim", "--decoder-layers"):
        assert plugin[plugin.index(flag) + 1] == stock[stock.index(flag) + 1], flag
    assert stock[stock.index("--lr") + 1] == repr(result["stock_peak_lr"])
    assert stock[stock.index("--warmup-init-lr") + 1] == repr(result["stock_warmup_init_lr"])
    assert "--warmup-init-lr" in stock and "attn_inverse_sqrt" in plugin


@pytest.mark.parametrize("argv,message", [
    (["/no/such/dir", "--max-update", "5"], "data directory not found"),
    (["--bundled", "--minutes", "5", "--arch", "huge"], "unknown --arch 'huge'"),
    (["--bundled"], "give a training budget"),
    (["--max-update", "5"], "give a binarized data directory or --bundled"),
])
def test_bad_input_is_one_error_line(argv, message):
    proc = run([sys.executable, SCRIPT, *argv], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == proc.stderr.strip().splitlines()[0]
    assert proc.stderr.startswith("error: ") and message in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_data_without_binarized_training_split_is_one_error_line(tmp_path):
    (tmp_path / "dict.en.txt").write_text("a 1\n")
    proc = run([sys.executable, SCRIPT, tmp_path, "--max-update", "5"], check=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "no binarized training data" in proc.stderr


# ---------------------------------------------------------------------------
# The model's performance work keeps its results: beam search with a
# per-sentence encoder-decoder cache decodes exactly as stock fairseq does
# ---------------------------------------------------------------------------
def test_beam_search_matches_stock_fairseq_with_the_same_weights(data_bin):
    from fairseq.sequence_generator import SequenceGenerator

    from attn_plugin.models.attn_transformer import convert_fairseq_transformer_state_dict

    torch.manual_seed(0)
    a = parsed([data_bin, "--cpu", "--arch", "transformer_wmt_en_de", "--share-all-embeddings", *TINY_MODEL])
    task = tasks.setup_task(a)
    stock = task.build_model(a).eval()
    b = parsed([data_bin, "--cpu", "--user-dir", USER_DIR, "--arch", "attn_paper_base",
                "--sinusoid-layout", "fairseq", *TINY_MODEL])
    plugin = tasks.setup_task(b).build_model(b).eval()
    plugin.load_state_dict(convert_fairseq_transformer_state_dict(stock.state_dict()))
    task.load_dataset("test")
    batches = task.get_batch_iterator(task.dataset("test"), max_sentences=21, required_batch_size_multiple=1)
    sample = next(batches.next_epoch_itr(shuffle=False))
    out = {}
    for name, model in (("stock", stock), ("plugin", plugin)):
        generator = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=20)
        with torch.no_grad():
            out[name] = generator.generate([model], sample)
    assert plugin.decoder.layers[0].cross_attn.beam_size == 4
    lengths = {len(h[0]["tokens"]) for h in out["stock"]}
    assert len(lengths) > 2  # sentences finished at different steps: the batch shrank
    for s, p in zip(out["stock"], out["plugin"]):
        for hs, hp in zip(s, p):
            assert hs["tokens"].tolist() == hp["tokens"].tolist()
            assert hs["score"].item() == pytest.approx(hp["score"].item(), abs=1e-4)


def test_encoder_decoder_cache_is_per_sentence_only_for_beam_copies(data_bin):
    b = parsed([data_bin, "--cpu", "--user-dir", USER_DIR, "--arch", "attn_paper_base", *TINY_MODEL])
    task = tasks.setup_task(b)
    model = task.build_model(b).eval()
    model.set_beam_size(4)
    d = task.source_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 6))
    src[1, :2] = d.pad()
    prev = torch.full((2, 1), d.eos())
    cross = model.decoder.layers[0].cross_attn
    with torch.no_grad():
        enc = model.encoder(src)
        full = model.decoder(prev, enc)[0]
        # beam copies (as fairseq's beam search expands the encoder output): one cached row per sentence
        order = torch.arange(2).repeat_interleave(4)
        state = {}
        step = model.decoder(prev.index_select(0, order), model.encoder.reorder_encoder_out(enc, order),
                             incremental_state=state)[0]
        assert cross.get_incremental_state(state, "kv")["k"].size(0) == 2
        assert torch.allclose(step, full.index_select(0, order), atol=1e-5)
        # distinct sentences (beam 1 after a beam-4 search): one row each, nothing shared
        state = {}
        src4 = torch.randint(d.nspecial, len(d), (4, 6))
        enc4 = model.encoder(src4)
        step = model.decoder(torch.full((4, 1), d.eos()), enc4, incremental_state=state)[0]
        assert cross.get_incremental_state(state, "kv")["k"].size(0) == 4
        assert torch.allclose(step, model.decoder(torch.full((4, 1), d.eos()), enc4)[0], atol=1e-5)


# ---------------------------------------------------------------------------
# The benchmarks
# ---------------------------------------------------------------------------
def test_peak_memory_counts_live_tensor_bytes():
    from common import PeakMemory

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


@pytest.mark.parametrize("script,ratio_key", [("train_throughput.py", "ratio_tokens_per_s"),
                                              ("generate_throughput.py", "ratio_sentences_per_s")])
def test_benchmark_writes_its_ratio_table_and_json(tmp_path, script, ratio_key):
    out = tmp_path / "bench.json"
    proc = run([sys.executable, REPO / "benchmarks" / script, "--shapes", "small", "--repeats", "2",
                "--sentences", "2", "--length", "6", "--out", out])
    assert "| small |" in proc.stdout and "ratio" in proc.stdout
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
    assert proc.returncode == 2 and "needs --device cuda" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_matplotlib_is_one_clear_error_after_the_table(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(cb.CompareError, match="plotting needs matplotlib"):
        cb.plot([], tmp_path / "x.png", "title")
    assert not (tmp_path / "x.png").exists()

"""attn_kit.planning.cost (scripts/training_cost.py and the recipes' --dry-run): the paper's own Table 2
arithmetic, the analytic FLOP count against a hand count, model shapes against fairseq's parser,
and the wall time's estimate (attn_kit.planning.step_model: tests/test_step_model.py)."""
import subprocess
import sys

import pytest
from conftest import REPO, run_main

from attn_kit.planning import cost, step_model, training_cost
from attn_kit.cli import UsageError
from attn_kit.planning.paper import TABLE2_FLOPS
from attn_kit.planning.sizes import ARCH_SIZES
from attn_kit.recipes import translation

SCRIPT = REPO / "scripts" / "training_cost.py"


def test_table2_arithmetic_reproduces_the_papers_costs():
    """Table 2's footnote: time x GPUs x 9.5 TFLOPS. Base: 12 h x 8 x 9.5e12 = 3.28e18 (printed 3.3e18);
    big: 3.5 days x 8 x 9.5e12 = 2.298e19 (printed 2.3e19)."""
    assert cost.table2_arithmetic("attn_paper_base") == pytest.approx(12 * 3600 * 8 * 9.5e12)
    assert cost.table2_arithmetic("attn_paper_big") == pytest.approx(3.5 * 86400 * 8 * 9.5e12)
    for arch, printed in TABLE2_FLOPS.items():
        assert float(f"{cost.table2_arithmetic(arch):.1e}") == printed  # two significant digits, as printed


def test_forward_flops_by_hand_for_a_small_model():
    """N=1, d=4, d_ff=8, h=2 (d_k=d_v=2), V=10, one sentence of 3 source and 2 target tokens.
    Encoder, per source position: W^Q,W^K,W^V,W^O 4*2*4*4 = 128, QK^T and .V 2*3*2*(2+2) = 48, FFN
    2*2*4*8 = 128 -> 304, x3 positions = 912. Decoder, per target position: self-attention 128 +
    2*(2/2)*2*4 = 16, encoder-decoder W^Q,W^O 2*(4*4+4*4) = 64 and attention 2*3*2*4 = 48, FFN 128 ->
    384, x2 = 768; W^K,W^V of the encoder output per source position 2*(16+16) = 64, x3 = 192.
    Output layer 2*4*10 = 80 per target position, x2 = 160. Total 912 + 768 + 192 + 160 = 2032."""
    side = cost.Side(layers=1, d_model=4, d_ff=8, h=2, d_k=2, d_v=2)
    shape = cost.Shape(side, side, vocab=10)
    assert cost.forward_flops(shape, src_tokens=3, tgt_tokens=2, src_len=3, tgt_len=2) == 2032
    # layers scale the layer terms only; training is 3 x forward
    deep = cost.Shape(cost.Side(2, 4, 8, 2, 2, 2), cost.Side(2, 4, 8, 2, 2, 2), 10)
    assert cost.forward_flops(deep, 3, 2, 3, 2) == 2 * (2032 - 160) + 160
    assert cost.train_flops_per_update(shape, 5, mean_length=5) == 3 * cost.forward_flops(shape, 5, 5, 5, 5)


def test_base_model_cost_is_the_familiar_6_n_params_estimate():
    """Independent check: for a Transformer, training FLOPs per token ~ 6 x parameters in matmuls
    (2 per multiply-add, x3 for forward and backward). Base: encoder 6 x (4 d^2 + 2 d d_ff) weights,
    decoder 6 x (8 d^2 + 2 d d_ff) plus the 37000 x 512 output layer; per (source, target) token pair
    the attention terms come on top (L = 30: under 2%)."""
    d, f, v = 512, 2048, 37000
    weights = 6 * (4 * d * d + 2 * d * f) + 6 * (8 * d * d + 2 * d * f) + d * v
    shape = cost.model_shape("attn_paper_base", (), v)
    per_pair = cost.train_flops_per_update(shape, 1, mean_length=30)
    assert 6 * weights < per_pair < 6 * weights * 1.02


@pytest.mark.parametrize("arch", sorted(ARCH_SIZES))
def test_the_kits_size_table_is_the_plugins_arch_functions(arch):
    """attn_kit.planning.sizes.ARCH_SIZES (known without importing fairseq) says what the plugin's arch
    function sets, P_drop included: fairseq's parser of --arch ARCH with no other flag."""
    from attn_kit.fairseq_layer.build import PLUGIN_DIR, parse_train_args

    if arch == "attn_transformer":  # the model's own name: its config dataclass's defaults
        from attn_plugin.models.attn_transformer import AttnTransformerConfig

        a = AttnTransformerConfig()
    else:
        a = parse_train_args(["--user-dir", str(PLUGIN_DIR), "--arch", arch])
    size = ARCH_SIZES[arch]
    for side in ("encoder", "decoder"):
        assert (getattr(a, f"{side}_layers"), getattr(a, f"{side}_embed_dim"), getattr(a, f"{side}_ffn_embed_dim"),
                getattr(a, f"{side}_attention_heads")) == (size.layers, size.d_model, size.d_ff, size.h)
    assert a.dropout == size.p_drop


@pytest.mark.parametrize("arch,flags", [
    ("attn_paper_base", []), ("attn_paper_big", []), ("attn_paper_big_en_fr", []), ("attn_paper_parse", []),
    ("attn_paper_base", ["--encoder-layers", "4"]),  # the decoder follows the encoder, as the plugin's archs do
    ("attn_paper_base", ["--encoder-layers=2", "--decoder-layers", "3", "--attention-key-dim", "16"]),
    ("attn_paper_big", ["--encoder-attention-heads", "8", "--decoder-ffn-embed-dim", "1024"]),
])
def test_model_shapes_match_fairseqs_parser(arch, flags):
    """The recipes' cost estimate reads the shape without importing fairseq (attn_kit.planning.sizes.ARCH_SIZES
    plus the size flags); fairseq's own parser of the plugin's archs says the same."""
    fast = cost.model_shape(arch, flags, 1000)
    assert fast == cost._fairseq_shape(arch, flags, 1000)
    if not flags:
        assert (fast.encoder.layers, fast.encoder.d_model, fast.encoder.d_ff, fast.encoder.h) == \
            tuple(getattr(ARCH_SIZES[arch], k) for k in ("layers", "d_model", "d_ff", "h"))


def test_a_stock_arch_goes_through_fairseq():
    shape = cost.model_shape("transformer_vaswani_wmt_en_de_big", ["--encoder-layers", "2"], 1000)
    assert (shape.encoder.layers, shape.decoder.layers, shape.encoder.d_model, shape.encoder.h) == (2, 6, 1024, 16)


def test_wall_time_and_unknown_gpu():
    shape = cost.model_shape("attn_paper_base", (), 37000)
    lines = training_cost.describe_run(shape, "attn_paper_base", 25000, 100000,
                                       training_cost.Devices(8, "bf16", name="H100", utilization=0.25))
    total = cost.train_flops_per_update(shape, 25000) * 100000
    hours = total / (8 * 989e12 * 0.25) / 3600  # --utilization: the arithmetic alone at that share of the peak
    assert f"{hours * 60:.0f} min" in lines[2] and "8 x 989 TFLOPS at 25% of it (--utilization" in lines[2]
    assert "3.3e+18" in lines[1] and f"{total / 3.3e18:.0%}" in lines[1]
    v100 = training_cost.describe_run(shape, "attn_paper_base", 25000, 100000, training_cost.Devices(8, "bf16", "V100"))
    assert "V100 has no bf16 units" in v100[2]
    with pytest.raises(UsageError, match="unknown --gpu 'Z80'; known: H200, H100"):
        cost.gpu("Z80")


def test_the_script_prints_table2_and_an_estimate():
    proc = subprocess.run([sys.executable, SCRIPT, "--arch", "attn_paper_big", "--gpu", "A100"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "| attn_paper_base | 12 hours x 8 P100 x 9.5 TFLOPS | 3.28e+18 | 3.3e+18 |" in proc.stdout
    assert "| attn_paper_big | 3.5 days x 8 P100 x 9.5 TFLOPS | 2.30e+19 | 2.3e+19 |" in proc.stdout
    assert "x 300000 updates" in proc.stdout and "training wall time on 8 x A100 (3500-token forwards, 1 per update" \
        in proc.stdout and "  range: " in proc.stdout


def test_recipe_dry_run_prints_the_cost():
    # the recipe's main() here (conftest.run_main): its process would import torch again (~2 s of CPU); what the
    # dry run prints is the check
    proc = run_main(translation.main, "--dry-run", "--ngpus", "8", "--arch", "attn_paper_big", "--gpu", "H100",
                    "--workdir", "/tmp/never-created-cost")
    assert proc.returncode == 0, proc.stderr
    shape = cost.model_shape("attn_paper_big", (), 37000)
    total = cost.train_flops_per_update(shape, 28000) * 300000  # the recipe's 28000 padded tokens, 300K updates
    assert f"x 300000 updates = {total:.2e} FLOPs" in proc.stdout
    assert "the paper's Table 2 for attn_paper_big: 2.3e+19 FLOPs" in proc.stdout
    assert "training wall time on 8 x H100 (3500-token forwards, 1 per update, bf16)" in proc.stdout


def test_the_script_and_the_recipes_dry_run_print_the_same_cost():
    """One cost model (issue 27): for the same run, scripts/training_cost.py and the recipe's --dry-run
    print the same lines (one meaning of tokens per update: the recipe's padded 28000)."""
    for arch in ("attn_paper_base", "attn_paper_big"):
        script = subprocess.run([sys.executable, SCRIPT, "--arch", arch, "--gpu", "H100", "--ngpus", "8"],
                                capture_output=True, text=True, check=True).stdout
        dry = run_main(translation.main, "--dry-run", "--ngpus", "8", "--arch", arch, "--gpu", "H100",
                       "--workdir", "/tmp/never-created-cost", "--stage", "train", "--stop-stage", "train")
        assert dry.returncode == 0, dry.stderr
        recipe = dry.stdout
        ours = [line.removeprefix("  # ") for line in recipe.splitlines() if line.startswith("  # ")]
        ours = [line.replace(" (the paper's; the binarize stage prints the real one)", "") for line in ours]
        theirs = script.split("\n\n", 1)[1].strip().splitlines()
        assert theirs == ours[-len(theirs):] and theirs[0].startswith("training cost"), (theirs, ours)
        for start in ("checkpoints:", "checkpoint writes: every", "all-reduce of the gradients", "fewest GPU-hours"):
            assert any(line.startswith(start) for line in theirs), start


@pytest.mark.parametrize("arch,flags", [("attn_paper_base", []), ("attn_paper_big", []),
                                        ("attn_paper_base", ["--attention-key-dim", "16", "--decoder-layers", "3",
                                                             "--encoder-ffn-embed-dim", "512"])])
def test_parameters_counted_from_the_shape_are_the_built_models(arch, flags):
    """The checkpoint disk estimate's parameter count (Shape.parameters) is the count of the model
    attn_plugin builds (shared embeddings counted once)."""
    from attn_kit.fairseq_layer.build import build_model, plugin_flags

    model = build_model(plugin_flags(*flags, arch=arch), vocab_size=1000)
    assert cost.model_shape(arch, flags, 1000).parameters() == sum(p.numel() for p in set(model.parameters()))


# ---------------------------------------------------------------------------------------------- issue 50
def test_the_all_reduce_is_the_ring_transfer_by_hand():
    """A ring all-reduce sends 2 (n - 1) / n of the gradients' bytes from each GPU: big's fp32 gradients on
    8 H100s over NVLink's 450 GB/s at 80% / 50% of it; across two nodes the 25 GB/s network is the
    slowest hop; fp16 gradients are half the bytes; one GPU sends nothing."""
    shape = cost.model_shape("attn_paper_big", (), 37000)
    grads = shape.parameters() * 4
    fast, slow = training_cost.allreduce_seconds(shape, training_cost.link_of("H100", 8, 1), "bf16")
    assert fast == pytest.approx(2 * 7 / 8 * grads / (450e9 * 0.8)) and slow == pytest.approx(2 * 7 / 8 * grads / 225e9)
    two_nodes = training_cost.link_of("H100", 16, 2)
    assert two_nodes.gb_per_s == 25.0 and "network" in two_nodes.what
    assert training_cost.allreduce_seconds(shape, two_nodes, "fp16")[0] == pytest.approx(2 * 15 / 16 * grads / 2 / 20e9)
    assert training_cost.allreduce_seconds(shape, training_cost.link_of("H100", 1, 1), "bf16") == (0.0, 0.0)
    given = training_cost.link_of("H100", 8, 1, gb_per_s=100)
    assert training_cost.allreduce_seconds(shape, given, "bf16")[1] == pytest.approx(2 * 7 / 8 * grads / 50e9)


def test_layouts_count_gpu_hours_and_name_the_cheapest():
    """Big on one node of 8 H100s: 8, 4, 2 and 1 GPUs per run; a run's GPU-hours are its GPUs x its hours;
    one GPU's update time is step_model's own (no all-reduce); the line names the fewest GPU-hours."""
    shape = cost.model_shape("attn_paper_big", (), 37000)
    found = training_cost.layouts(shape, 28000, 8, 1, "H100", "bf16")
    assert [(lay.gpus, lay.runs) for lay in found] == [(8, 1), (4, 2), (2, 4), (1, 8)]
    one = found[-1]
    p = step_model.predict(shape, *one.forward, "H100", "bf16", cost.MEAN_LENGTH)
    assert one.time.estimate == p.estimate.seconds_per_update and one.time.allreduce == 0
    assert all(lay.forward[0] * lay.forward[1] * lay.gpus >= 28000 for lay in found)
    cheapest = min(found, key=lambda lay: lay.gpus * lay.time.estimate)
    lines = training_cost.layout_lines(shape, 28000, 300000, 8, 1, "H100", "bf16")
    gpu_hours = cheapest.gpus * cheapest.time.estimate * 300000 / 3600
    assert lines[-1].startswith(f"fewest GPU-hours: {cheapest.gpus} GPU") and f"{gpu_hours:,.1f} GPU-hours" in lines[-1]
    for lay, line in zip(found, lines[1:]):
        assert f"{lay.gpus * lay.time.estimate * 300000 / 3600:,.1f} GPU-hours" in line


def test_save_interval_is_the_papers_ten_minutes():
    """Sec. 6.1's 10-minute checkpoints at Sec. 5.2's step times on the paper's P100s: base 0.4 s ->
    1500 updates, big 1.0 s -> 600 (the intervals the recipes used before auto); a multiple of 100."""
    assert training_cost.save_interval(0.4) == 1500 and training_cost.save_interval(1.0) == 600
    assert training_cost.paper_save_interval("attn_paper_base") == 1500
    assert training_cost.paper_save_interval("attn_paper_big") == 600
    assert training_cost.save_interval(0.139) == 4300 and training_cost.save_interval(100.0) == 100


def _dry_run(*argv):
    proc = run_main(translation.main, "--dry-run", *map(str, argv), "--stage", "train", "--stop-stage", "train")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    command = next(line for line in out.splitlines() if line.startswith("  $ ") and "fairseq_cli.train" in line
                   or line.startswith("  $ ") and "fairseq-train " in line)
    words = command.split()
    return out, int(words[words.index("--save-interval-updates") + 1])


def test_big_on_eight_h100s_checkpoints_every_ten_minutes_and_a_resumed_run_keeps_its_interval(tmp_path):
    """Issue 50: --save-interval-updates x the predicted seconds per update is about 10 minutes (within
    the rounding to 100 updates), and the plan shows the checkpoints' writes and disk; a canary's
    measurement in the work directory sizes it instead; a run that started keeps the interval it
    recorded (a resume on another GPU must not change what the last 20 checkpoints span)."""
    out, interval = _dry_run("--ngpus", "8", "--arch", "attn_paper_big", "--gpu", "H100", "--workdir", tmp_path / "w")
    wall = next(line for line in out.splitlines() if "training wall time on 8 x H100" in line)
    seconds = float(wall.split(" s per update")[0].rsplit("(", 1)[1])
    assert abs(interval * seconds - 600) <= 50 * seconds + interval * 0.0005, (interval, seconds)  # 3 decimals shown
    assert f"checkpoint writes: every {interval} updates" in out and "checkpoints: 2.57 GB each" in out
    canary = tmp_path / "c" / "canary" / "canary.json"
    canary.parent.mkdir(parents=True)
    canary.write_text('{"seconds_per_update": 0.3, "failed": null, "checkpoint": {"write_seconds": 4.0}}')
    out, measured = _dry_run("--ngpus", "8", "--arch", "attn_paper_big", "--gpu", "H100", "--workdir", tmp_path / "c")
    assert measured == 2000 and "(4.0 s each, one write as the canary timed it)" in out
    (tmp_path / "c" / "train_command.json").write_text('{"argv": ["fairseq-train", "--save-interval-updates", "777"]}')
    assert _dry_run("--ngpus", "8", "--arch", "attn_paper_big", "--gpu", "H100", "--workdir", tmp_path / "c")[1] == 777
    explicit = _dry_run("--ngpus", "8", "--arch", "attn_paper_big", "--gpu", "H100", "--workdir", tmp_path / "c",
                        "--save-interval-updates", "900")[1]
    assert explicit == 900

"""attn_kit.planning.cost (scripts/training_cost.py and the recipes' --dry-run): the paper's own Table 2
arithmetic, the analytic FLOP count against a hand count, model shapes against fairseq's parser,
and the wall time's estimate (attn_kit.planning.step_model: tests/test_step_model.py)."""
import subprocess
import sys

import pytest
from conftest import REPO

from attn_kit.planning import cost, training_cost
from attn_kit.cli import UsageError
from attn_kit.planning.paper import TABLE2_FLOPS
from attn_kit.planning.sizes import ARCH_SIZES

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
    proc = subprocess.run([sys.executable, "-m", "attn_kit.recipes.translation", "--dry-run", "--ngpus", "8",
                           "--arch", "attn_paper_big", "--gpu", "H100", "--workdir", "/tmp/never-created-cost"],
                          capture_output=True, text=True)
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
        recipe = subprocess.run([sys.executable, "-m", "attn_kit.recipes.translation", "--dry-run", "--ngpus", "8",
                                 "--arch", arch, "--gpu", "H100", "--workdir", "/tmp/never-created-cost",
                                 "--stage", "train", "--stop-stage", "train"], capture_output=True, text=True,
                                check=True).stdout
        ours = [line.removeprefix("  # ") for line in recipe.splitlines() if line.startswith("  # ")]
        ours = [line.replace(" (the paper's; the binarize stage prints the real one)", "") for line in ours]
        theirs = script.split("\n\n", 1)[1].strip().splitlines()
        assert theirs == ours[-len(theirs):] and len(theirs) == 8, (theirs, ours)
        assert any(line.startswith("checkpoints:") for line in theirs)


@pytest.mark.parametrize("arch,flags", [("attn_paper_base", []), ("attn_paper_big", []),
                                        ("attn_paper_base", ["--attention-key-dim", "16", "--decoder-layers", "3",
                                                             "--encoder-ffn-embed-dim", "512"])])
def test_parameters_counted_from_the_shape_are_the_built_models(arch, flags):
    """The checkpoint disk estimate's parameter count (Shape.parameters) is the count of the model
    attn_plugin builds (shared embeddings counted once)."""
    from attn_kit.fairseq_layer.build import build_model, plugin_flags

    model = build_model(plugin_flags(*flags, arch=arch), vocab_size=1000)
    assert cost.model_shape(arch, flags, 1000).parameters() == sum(p.numel() for p in set(model.parameters()))

"""The model against the paper's formulas and against stock fairseq."""
import math

import pytest
import torch
from conftest import TINY_MODEL, USER_DIR
from fairseq import options, tasks

from attn_kit.fairseq_layer.build import build_model, count_parameters, plugin_flags
from attn_kit.planning.paper import TABLE3
from attn_plugin.convert import convert_fairseq_transformer_state_dict
from attn_plugin.models.attn_transformer import PositionalEncoding, sinusoidal_encoding


def build(data_bin, flags):
    args = options.parse_args_and_arch(options.get_training_parser(), [str(data_bin), "--cpu", *TINY_MODEL, *flags])
    task = tasks.setup_task(args)
    model = task.build_model(args)
    model.eval()
    return task, model


def plugin_model(data_bin, *flags):
    return build(data_bin, ["--user-dir", USER_DIR, "--arch", "attn_paper_base", *flags])


def random_batch(d, B=3, S=7, T=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (B, S), generator=g)
    if B > 1:
        src[0, :2] = d.pad()  # fairseq left-pads sources
        src[B - 1, :1] = d.pad()
    prev = torch.randint(d.nspecial, len(d), (B, T), generator=g)
    prev[:, 0] = d.eos()
    return src, src.ne(d.pad()).sum(1), prev


def log_probs(model, src, lengths, prev):
    with torch.no_grad():
        return model.get_normalized_probs(model(src, lengths, prev), log_probs=True)


def incremental_log_probs(model, src, lengths, prev, reorder=None):
    """Decode step by step as fairseq's beam search does; ``reorder`` = (step, new_order)."""
    with torch.no_grad():
        enc = model.encoder(src, lengths)
        state, out = {}, []
        for t in range(1, prev.size(1) + 1):
            if reorder and t == reorder[0]:
                model.decoder.reorder_incremental_state_scripting(state, reorder[1])
                enc = model.encoder.reorder_encoder_out(enc, reorder[1])
                prev = prev.index_select(0, reorder[1])
                out = [o.index_select(0, reorder[1]) for o in out]
            step = model.decoder(prev[:, :t], enc, incremental_state=state)
            out.append(model.get_normalized_probs(step, log_probs=True)[:, -1])
        return torch.stack(out, dim=1), prev


@pytest.fixture(scope="module")
def stock_and_plugin(data_bin):
    """Stock fairseq transformer_wmt_en_de and the plugin's base model with its weights."""
    torch.manual_seed(0)
    task, stock = build(data_bin, ["--arch", "transformer_wmt_en_de", "--share-all-embeddings"])
    _, plugin = plugin_model(data_bin, "--sinusoid-layout", "fairseq")
    plugin.load_state_dict(convert_fairseq_transformer_state_dict(stock.state_dict()), strict=True)
    return task.source_dictionary, stock, plugin


def test_parity_with_stock_fairseq_full_forward(stock_and_plugin):
    d, stock, plugin = stock_and_plugin
    src, lengths, prev = random_batch(d)
    prev[1, -2:] = d.pad()  # right-padded target
    keep = prev.ne(d.pad())
    diff = (log_probs(stock, src, lengths, prev) - log_probs(plugin, src, lengths, prev)).abs()[keep]
    assert diff.max().item() <= 1e-5
    assert count_parameters(stock) == count_parameters(plugin)


def test_parity_with_stock_fairseq_incremental_decoding(stock_and_plugin):
    d, stock, plugin = stock_and_plugin
    src, lengths, prev = random_batch(d, seed=1)
    a, _ = incremental_log_probs(stock, src, lengths, prev)
    b, _ = incremental_log_probs(plugin, src, lengths, prev)
    assert (a - b).abs().max().item() <= 1e-5


def test_incremental_decoding_with_beam_reordering_matches_full_forward(data_bin):
    _, model = plugin_model(data_bin)
    d = model.decoder.dictionary
    src, lengths, prev = random_batch(d, seed=2)
    new_order = torch.tensor([2, 2, 0])
    inc, prev_reordered = incremental_log_probs(model, src, lengths, prev, reorder=(3, new_order))
    full = log_probs(model, src.index_select(0, new_order), lengths.index_select(0, new_order), prev_reordered)
    assert (inc - full).abs().max().item() <= 1e-5


def test_causal_mask_leaks_nothing_from_the_future(data_bin):
    _, model = plugin_model(data_bin)
    d = model.decoder.dictionary
    src, lengths, prev = random_batch(d, seed=3)
    base = log_probs(model, src, lengths, prev)
    for t in range(1, prev.size(1)):
        changed = prev.clone()
        changed[:, t:] = torch.randint(d.nspecial, len(d), changed[:, t:].shape)
        out = log_probs(model, src, lengths, changed)
        assert torch.allclose(out[:, :t], base[:, :t], atol=1e-6), f"position < {t} saw the future"
        if t < prev.size(1):
            assert not torch.allclose(out[:, t:], base[:, t:], atol=1e-4)  # the change is visible later


def test_padding_changes_no_real_output(data_bin):
    _, model = plugin_model(data_bin)
    d = model.decoder.dictionary
    src, lengths, prev = random_batch(d, B=1, seed=4)
    src = src[:, src.ne(d.pad())[0]]  # one sentence, no padding
    alone = log_probs(model, src, src.ne(d.pad()).sum(1), prev)
    padded_src = torch.cat([torch.full((1, 4), d.pad()), src], dim=1)  # left-padded as in a batch
    padded_prev = torch.cat([prev, torch.full((1, 3), d.pad())], dim=1)  # right-padded target
    padded = log_probs(model, padded_src, padded_src.ne(d.pad()).sum(1), padded_prev)
    assert (padded[:, : prev.size(1)] - alone).abs().max().item() <= 1e-5


def test_sinusoid_matches_the_papers_formula_element_by_element():
    d_model = 16
    pe = sinusoidal_encoding(torch.arange(50), d_model, layout="paper")
    for pos in range(50):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positions_start_at_the_first_real_token():
    enc = PositionalEncoding(8, 32, padding_idx=1)
    tokens = torch.tensor([[1, 1, 5, 6, 7]])
    expected = sinusoidal_encoding(torch.arange(3), 8)
    assert torch.allclose(enc(tokens)[0, 2:], expected)


def test_attention_sizes_follow_d_k_and_d_v(data_bin):
    _, model = plugin_model(data_bin, "--attention-key-dim", "5", "--attention-value-dim", "3")
    attn = model.encoder.layers[0].self_attn
    h, d_model = 4, 32
    assert attn.w_qkv.weight.shape == (h * (5 + 5 + 3), d_model)  # [W^Q | W^K | W^V]
    assert attn.w_o.weight.shape == (d_model, h * 3)
    cross = model.decoder.layers[0].cross_attn
    assert cross.w_q.weight.shape == (h * 5, d_model)
    assert cross.w_kv.weight.shape == (h * (5 + 3), d_model)
    src, lengths, prev = random_batch(model.decoder.dictionary)
    assert torch.isfinite(log_probs(model, src, lengths, prev)).all()


def test_learned_positions_are_parameters(data_bin):
    _, sinusoidal = plugin_model(data_bin)
    _, learned = plugin_model(data_bin, "--positional-encoding", "learned")
    extra = count_parameters(learned) - count_parameters(sinusoidal)
    assert extra == 2 * 1024 * 32  # encoder and decoder, max 1024 positions, d_model 32


def test_embeddings_are_shared_and_scaled(data_bin):
    _, model = plugin_model(data_bin)
    assert model.encoder.embed.embed_tokens is model.decoder.embed.embed_tokens
    assert model.encoder.embed.scale == pytest.approx(math.sqrt(32))


@pytest.mark.parametrize("row", [r for r in TABLE3 if r.params], ids=lambda r: r.name)
def test_table3_parameter_counts_within_7_percent_of_paper(row):
    n = count_parameters(build_model(plugin_flags(*row.flags()))) / 1e6
    assert abs(n - row.params) / row.params <= 0.07, f"row {row.name} ({row.describe()}): {n:.1f}M vs paper {row.params}M"


def test_stacked_projections_are_initialized_like_separate_ones(data_bin):
    """W^Q, W^K, W^V each get fairseq's Xavier-uniform init with gain 1/sqrt(2)
    for a d_model x d_model matrix: bound = gain * sqrt(6 / (2 d_model))."""
    _, model = plugin_model(data_bin)
    d_model = 32
    bound = (1 / math.sqrt(2)) * math.sqrt(6 / (d_model + d_model))
    for w in (model.encoder.layers[0].self_attn.w_qkv.weight, model.decoder.layers[0].cross_attn.w_kv.weight):
        for block in w.detach().split(d_model):
            assert block.abs().max() <= bound
            assert block.abs().max() > 0.9 * bound  # uniform over [-bound, bound], 1024 draws
            assert abs(block.std().item() - bound / math.sqrt(3)) < 0.1 * bound


def test_checkpoints_with_separate_q_k_v_still_load(data_bin):
    """attn_plugin 0.1 stored W^Q, W^K, W^V as separate layers; fairseq's
    load_state_dict (what fairseq-generate and training resumption call) upgrades them."""
    _, model = plugin_model(data_bin)
    old = {}
    for name, t in model.state_dict().items():
        if ".w_qkv." in name:
            for part, w in zip(t.chunk(3), ("w_q", "w_k", "w_v")):
                old[name.replace("w_qkv", w)] = part.clone()
        elif ".w_kv." in name:
            for part, w in zip(t.chunk(2), ("w_k", "w_v")):
                old[name.replace("w_kv", w)] = part.clone()
        else:
            old[name] = t.clone()
    _, fresh = plugin_model(data_bin, "--seed", "7")
    fresh.load_state_dict(old, strict=True)
    src, lengths, prev = random_batch(model.decoder.dictionary)
    assert torch.equal(log_probs(model.eval(), src, lengths, prev), log_probs(fresh.eval(), src, lengths, prev))


@pytest.mark.slow  # trains a model
def test_compiled_layers_train_exactly_like_the_plain_ones(data_bin):
    """--compile-layers changes kernels, not the function: same loss and gradients."""
    _, plain = plugin_model(data_bin, "--dropout", "0")
    _, compiled = plugin_model(data_bin, "--dropout", "0", "--compile-layers")
    compiled.load_state_dict(plain.state_dict())
    src, lengths, prev = random_batch(plain.decoder.dictionary)
    grads = []
    for model in (plain, compiled):
        model.train()
        lp = model.get_normalized_probs(model(src, lengths, prev), log_probs=True)
        lp[..., 5].sum().backward()
        grads.append((lp.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert compiled.encoder._compiled_layers is not None and compiled.decoder._compiled_layers is not None
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    for name, g in grads[0][1].items():
        assert torch.allclose(g, grads[1][1][name], atol=1e-5), name
    # Decoding (incremental state) runs the plain layers.
    compiled.eval()
    assert torch.allclose(log_probs(compiled, src, lengths, prev), log_probs(plain.eval(), src, lengths, prev),
                          atol=1e-5)


@pytest.mark.slow  # compiles
def test_compiled_layers_compile_once_not_per_batch(data_bin):
    """fairseq's batches change shape at every step, and now and then have no padding at all:
    --compile-layers compiles each layer kind once, for any size, with no graph break (a break
    splits a layer in pieces and compiles the rest per shape: a SymBool passed to the fused
    kernel's is_causal did, and a GPU run made 2 updates in 30 s), padded or not."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    _, model = plugin_model(data_bin, "--compile-layers")
    model.train()
    d = model.decoder.dictionary
    graphs = []
    for i, (B, S, T) in enumerate([(3, 7, 6), (4, 9, 5), (2, 12, 11), (5, 6, 8)]):
        src, lengths, prev = random_batch(d, B, S, T, seed=i)
        if i == 2:
            src[src.eq(d.pad())] = d.eos()  # no padding: one length
            lengths = torch.full_like(lengths, S)
        model(src, lengths, prev)[0].float().sum().backward()
        graphs.append(counters["stats"]["unique_graphs"])
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert graphs == [2] * len(graphs), graphs  # the encoder layer's and the decoder layer's


def test_fused_attention_never_runs_cudnns_per_shape_kernel(data_bin, monkeypatch):
    """Every fused eq. 1 call (training, both attention kinds) runs with cuDNN attention off and the
    flash, memory-efficient and math kernels on, and the process-wide setting is restored after.
    cuDNN builds a plan per batch shape, which made fairseq-train's bf16 steps several times slower
    than fp32 on a GPU (benchmarks/results/h200_recipe_train_path.json); CPUs cannot show the cost,
    so this checks the switch torch reads when it picks the kernel."""
    backends = torch.backends.cuda
    seen, fused = [], torch.nn.functional.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append((backends.cudnn_sdp_enabled(), backends.flash_sdp_enabled(),
                     backends.mem_efficient_sdp_enabled(), backends.math_sdp_enabled()))
        return fused(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    task, model = plugin_model(data_bin, "--dropout", "0")
    model.train()
    src, lengths, prev = random_batch(task.source_dictionary)
    model(src, lengths, prev)[0].sum().backward()
    # 2 encoder layers x self-attention, 2 decoder layers x (self + encoder-decoder)
    assert len(seen) == 6
    assert set(seen) == {(False, True, True, True)}
    assert backends.cudnn_sdp_enabled()

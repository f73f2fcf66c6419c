"""Attention weights: eq. 1 computed by hand from each layer's own projections, the
encoder-decoder weights stock fairseq's decoder returns (alignments), and
fairseq-generate --print-alignment through the plugin."""
import math
import re
import subprocess

import pytest
import torch
from conftest import USER_DIR, cli, run
from test_model import incremental_log_probs, plugin_model, random_batch, stock_and_plugin  # noqa: F401


def by_hand(attention, x, memory=None, key_padding_mask=None, causal=False):
    """softmax(Q K^T / sqrt(d_k)) from the module's own W^Q, W^K (and biases), B x h x L x S."""
    h, d_k = attention.h, attention.d_k
    if memory is None:
        w, b = attention.w_qkv.weight[: 2 * h * d_k], attention.w_qkv.bias[: 2 * h * d_k]
        q, k = (x @ w.T + b).split(h * d_k, dim=-1)
    else:
        q = x @ attention.w_q.weight.T + attention.w_q.bias
        w, b = attention.w_kv.weight[: h * d_k], attention.w_kv.bias[: h * d_k]
        k = memory @ w.T + b
    q = q.view(q.size(0), -1, h, d_k).transpose(1, 2)
    k = k.view(k.size(0), -1, h, d_k).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_k)
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    if causal:
        L = scores.size(-1)
        scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1)


def test_weights_are_eq1_from_each_layers_projections(data_bin):
    """Encoder self-attention and decoder encoder-decoder attention weights of every layer equal
    softmax(QK^T/sqrt(d_k)) computed here from the layer's input and its W^Q, W^K; every row sums
    to 1 and padding gets weight 0."""
    task, model = plugin_model(data_bin)
    d = task.source_dictionary
    src, lengths, prev = random_batch(d)
    pad = src.eq(d.pad())
    assert pad.any()
    with torch.no_grad():
        enc = model.encoder(src, lengths, need_head_weights=True)
        x = model.encoder.embed(src)
        for layer, weights in zip(model.encoder.layers, enc["self_attn_weights"]):
            assert weights.shape == (3, layer.self_attn.h, 7, 7)
            torch.testing.assert_close(weights, by_hand(layer.self_attn, x, key_padding_mask=pad), atol=1e-6, rtol=1e-5)
            assert torch.allclose(weights.sum(-1)[~pad[:, None, :].expand(-1, weights.size(1), -1)],
                                  torch.tensor(1.0), atol=1e-6)
            assert weights.masked_select(pad[:, None, None, :]).abs().max() == 0
            x, _ = layer(x, pad)
        _, extra = model.decoder(prev, enc, need_head_weights=True)
        y = model.decoder.embed(prev)
        memory = enc["encoder_out"][0]
        for layer, weights in zip(model.decoder.layers, extra["cross_attn_weights"]):
            self_out = layer.self_attn_norm(y, lambda y: layer.self_attn(y, y, causal=True)[0])
            torch.testing.assert_close(weights, by_hand(layer.cross_attn, self_out, memory, pad), atol=1e-6, rtol=1e-5)
            assert weights.masked_select(pad[:, None, None, :]).abs().max() == 0
            y, _ = layer(y, memory, pad)


def test_without_being_asked_no_weights_are_made(data_bin):
    """The default path (training, plain decoding) runs the fused kernel: no weights."""
    task, model = plugin_model(data_bin)
    src, lengths, prev = random_batch(task.source_dictionary)
    enc = model.encoder(src, lengths)
    assert "self_attn_weights" not in enc
    assert model.decoder(prev, enc)[1]["attn"] == [None]


@pytest.mark.parametrize("layer,heads", [(None, None), (0, None), (1, 2)])
def test_alignment_attention_equals_stock_fairseqs(stock_and_plugin, layer, heads):  # noqa: F811
    """With the same weights, the attention stock fairseq's decoder returns for alignments
    (encoder-decoder weights of a layer, averaged over its first heads) and the plugin's."""
    d, stock, plugin = stock_and_plugin
    src, lengths, prev = random_batch(d)
    kwargs = {} if layer is None else {"alignment_layer": layer, "alignment_heads": heads}
    with torch.no_grad():
        expected = stock(src, lengths, prev, **kwargs)[1]["attn"][0]
        plugin.decoder.make_generation_fast_(need_attn=layer is None)  # what --print-alignment does
        got = plugin(src, lengths, prev, **kwargs)[1]["attn"][0]
        plugin.decoder.make_generation_fast_(need_attn=False)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_incremental_decoding_gives_the_same_weights_as_a_full_pass(stock_and_plugin):  # noqa: F811
    """Beam search decodes step by step with the encoder output cached per sentence; each step's
    weights are the row of the full pass's."""
    d, _, plugin = stock_and_plugin
    src, lengths, prev = random_batch(d)
    with torch.no_grad():
        plugin.decoder.make_generation_fast_(need_attn=True)
        full = plugin(src, lengths, prev)[1]["attn"][0]
        enc, state, rows = plugin.encoder(src, lengths), {}, []
        for t in range(1, prev.size(1) + 1):
            rows.append(plugin.decoder(prev[:, :t], enc, incremental_state=state)[1]["attn"][0][:, -1])
        plugin.decoder.make_generation_fast_(need_attn=False)
    torch.testing.assert_close(torch.stack(rows, dim=1), full, atol=1e-5, rtol=1e-4)


def test_fairseq_generate_prints_alignments(data_bin, plugin_run):
    """--print-alignment: one source-target pair per target word, the source position of the
    strongest encoder-decoder weight (fairseq's hard alignment)."""
    save, _ = plugin_run
    proc = run([cli("fairseq-generate"), data_bin, "--user-dir", USER_DIR, "--path", save / "checkpoint_last.pt",
                "--cpu", "--beam", "2", "--required-batch-size-multiple", "1", "--print-alignment"])
    hypos = {m[0]: m[1] for m in re.findall(r"^H-(\d+)\t\S+\t(.*)$", proc.stdout, re.M)}
    aligns = {m[0]: m[1] for m in re.findall(r"^A-(\d+)\t(.*)$", proc.stdout, re.M)}
    assert len(hypos) == 21 and hypos.keys() == aligns.keys()
    for i, text in hypos.items():
        pairs = [tuple(map(int, p.split("-"))) for p in aligns[i].split()]
        assert [t for _, t in pairs] == list(range(len(text.split())))
        assert all(0 <= s < 10 for s, _ in pairs)  # the tiny task's sources have at most 9 words

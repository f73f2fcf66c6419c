"""The model's performance work keeps its results: beam search with a
per-sentence encoder-decoder cache decodes exactly as stock fairseq does."""
import pytest
import torch
from conftest import TINY_MODEL, USER_DIR
from fairseq import options, tasks


def parsed(argv):
    return options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])


def test_beam_search_matches_stock_fairseq_with_the_same_weights(data_bin):
    from fairseq.sequence_generator import SequenceGenerator

    from attn_plugin.convert import convert_fairseq_transformer_state_dict

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

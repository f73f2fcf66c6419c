"""Hugging Face transformers: scripts/export_hf.py (attn_kit.inference.hf_export) against the plugin itself.

The truth is the plugin and fairseq: the plugin's own log-probabilities (teacher forcing), fairseq's
greedy search (its SequenceGenerator with beam 1, or the hub's ``generate`` with --beam-stop fairseq),
the token ids the run's tokenizer and BPE give raw text (the hub's ``encode``, subword-nmt itself). The
exported folder is always read back as a user reads it: transformers' Auto classes, no remote code.
Quick tests use small random plugin models and a BPE learned here; the slow ones the WMT14 --smoke run
(conftest.smoke_run) and a copy of it with noisy weights, whose outputs vary from sentence to sentence
(the smoke model answers nearly everything alike).
"""
import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, assert_one_error_line, command, run_main
from test_translate import add_noise, copy_run

pytest.importorskip("transformers")

from attn_kit.inference import hf_export as hfx  # noqa: E402

EXPORT = [sys.executable, str(REPO / "scripts" / "export_hf.py")]


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def export_here(*args):
    """scripts/export_hf.py's main() in this process (conftest.run_main); the script itself runs in the
    ``exported`` fixture and in the missing-transformers test (its process-level contract)."""
    return run_main(hfx.main, *args)


def no_export_left(out: Path) -> bool:
    return not out.exists() and not Path(str(out) + ".partial").exists()


# --------------------------------------------------------------------------------------------- quick: weights
VARIANTS = {  # plugin options -> exported and compared with the plugin
    "paper sinusoids": [],
    "fairseq layout": ["--sinusoid-layout", "fairseq"],
    "learned positions": ["--positional-encoding", "learned"],
    "separate embeddings": ["--no-share-all-embeddings"],
    "decoder: 2 heads, 3 layers, d_ff 40": ["--decoder-attention-heads", "2", "--decoder-layers", "3",
                                          "--decoder-ffn-embed-dim", "40"],
}


def random_model(*flags, seed=1):
    """A small plugin model with its LayerNorms and biases moved off 1 and 0, and weights large enough that
    its greedy outputs differ from sentence to sentence."""
    from attn_kit.fairseq_layer.build import build_model, make_dictionary, plugin_flags

    d = make_dictionary(60)
    torch.manual_seed(seed)
    model = build_model(plugin_flags("--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
                                     "--encoder-ffn-embed-dim", "48", "--encoder-attention-heads", "4",
                                     "--max-source-positions", "64", "--max-target-positions", "64", *flags), d)
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape))
    return model, d


def fairseq_greedy(model, d, source, max_len_b):
    """fairseq's own greedy search (SequenceGenerator, beam 1, fairseq's max_len_a 1 and min_len 1)."""
    from fairseq.sequence_generator import SequenceGenerator

    gen = SequenceGenerator([model], d, beam_size=1, max_len_a=1, max_len_b=max_len_b)
    sample = {"net_input": {"src_tokens": source[None], "src_lengths": torch.tensor([source.numel()])}}
    tokens = gen.generate([model], sample)[0][0]["tokens"].tolist()
    return tokens[:-1] if tokens[-1] == d.eos() else tokens


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_saved_fsmt_model_scores_and_decodes_as_the_plugin(variant, tmp_path):
    """Saved and loaded with AutoModelForSeq2SeqLM: the same log-probabilities as the plugin on random
    pairs, and transformers' greedy generate gives fairseq's greedy output, for every variant FSMT holds."""
    from transformers import AutoModelForSeq2SeqLM

    model, d = random_model(*VARIANTS[variant])
    hfx.quiet_transformers()
    hfx.build_fsmt(model, d, d, ("en", "de")).save_pretrained(str(tmp_path))
    fsmt = AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path)).eval()
    assert type(fsmt).__name__ == "FSMTForConditionalGeneration"
    g = torch.Generator().manual_seed(2)
    outputs = []
    for n in (3, 7, 12, 20):
        source = torch.cat([torch.randint(4, 60, (n,), generator=g), torch.tensor([d.eos()])])
        target = torch.cat([torch.randint(4, 60, (n + 2,), generator=g), torch.tensor([d.eos()])]).tolist()
        got, want = hfx.log_probs(fsmt, source.tolist(), target), hfx.plugin_log_probs(model, source.tolist(), target)
        assert (got - want).abs().max() < 1e-4
        ours = fairseq_greedy(model, d, source, max_len_b=5)
        assert hfx.generate(fsmt, [source.tolist()], 1, 5) == [ours]
        outputs.append(tuple(ours))
    assert len(set(outputs)) == 4 and max(map(len, outputs)) > 3  # outputs that depend on the input


@pytest.mark.parametrize("lenpen", [1.0, 0.6])
def test_beam_search_is_fairseqs_with_its_lenpen(lenpen):
    """The exported generation_config with num_beams 4 and length_penalty p (early_stopping true) finds
    fairseq's beam-4 output with --lenpen p (SequenceGenerator, fairseq's stopping rule) for every source
    whose search ends before the length limit (there fairseq scores a forced </s>, transformers does not).
    The </s> row of the random model's embedding is scaled up, so that many searches end early."""
    from fairseq.sequence_generator import SequenceGenerator

    model, d = random_model(seed=2)
    with torch.no_grad():
        model.decoder.embed.embed_tokens.weight[d.eos()] *= 3
    fsmt = hfx.build_fsmt(model, d, d, ("en", "de"), 4, lenpen)
    gen = SequenceGenerator([model], d, beam_size=4, max_len_a=1, max_len_b=20, len_penalty=lenpen)
    g = torch.Generator().manual_seed(3)
    ended = set()
    for n in range(2, 18):
        source = torch.cat([torch.randint(4, 60, (n,), generator=g), torch.tensor([d.eos()])])
        sample = {"net_input": {"src_tokens": source[None], "src_lengths": torch.tensor([n + 1])}}
        ours = gen.generate([model], sample)[0][0]["tokens"][:-1].tolist()
        if len(ours) < n + 1 + 20:
            assert hfx.generate(fsmt, [source.tolist()], 1, 20) == [ours]  # generation_config's search
            ended.add(tuple(ours))
    assert len(ended) >= 4


def test_a_model_fsmt_cannot_hold_is_named():
    """d_k != d_model / h and unequal encoder/decoder widths, a parsing run, another tokenizer: each a
    phrase naming its option."""
    model, _ = random_model("--attention-key-dim", "16", "--attention-value-dim", "16")
    card, args = {"kind": "translation"}, {"tokenizer": "attn_moses", "bpe": "attn_subword_nmt"}
    assert hfx.unsupported(model, card, args) == [
        "--attention-key-dim 16 / --attention-value-dim 16 with 4 heads: FSMT's head size is d_model / h = 8"]
    model, _ = random_model()
    assert hfx.unsupported(model, card, args) == []
    problems = hfx.unsupported(model, {"kind": "parsing"}, {"tokenizer": "attn_treebank", "bpe": None})
    assert len(problems) == 3 and "parsing run" in problems[0] and "--tokenizer attn_treebank" in problems[1]
    assert "--moses-no-normalize" in hfx.unsupported(model, card, {**args, "moses_no_dash_splits": True})[0]


# --------------------------------------------------------------------------------------------- quick: tokenizer
WORDS = ["Tom", "Mary", "isn't", "don't", "it's", "house", "houses", "small", "smaller", "station", "stations",
         "coffee", "the", "a", "and", "&", "AT&T", "\"quoted\"", "[note]", "a|b", "<tag>", "well-known", "'s",
         "children's", "nation", "national", "rational", "mother", "brother", "other", "others", "1,000", "...",
         "Mr.", "U.S.", "rock'n'roll", "e-mail", "x>y", "so-called", "o'clock", "sing", "singer", "singing"]


FILTER = 20  # apply-bpe's --vocabulary-threshold in the tests below: it undoes some merges of this small BPE


def corpus(n, seed):
    """``n`` lines of WORDS drawn with Zipf's law (rare words make rare subwords, which the filter undoes)."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(len(WORDS))]
    return [" ".join(rng.choices(WORDS, weights, k=rng.randint(3, 12))) + rng.choice([".", "?", "!", ""])
            for _ in range(n)]


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory):
    """BPE codes (version 0.2) and a vocabulary learned here with subword-nmt on Moses-tokenized text
    with every character FSMTTokenizer escapes, and a fairseq dictionary of the BPE units."""
    from fairseq.data import Dictionary
    from subword_nmt.apply_bpe import BPE
    from subword_nmt.learn_bpe import learn_bpe

    from attn_plugin.encoders.attn_moses import AttnMosesConfig, AttnMosesTokenizer

    folder = tmp_path_factory.mktemp("bpe")
    moses = AttnMosesTokenizer(AttnMosesConfig(source_lang="en", target_lang="en"))
    tokenized = [moses.encode(line) for line in corpus(400, 0)]
    with open(folder / "codes", "w", encoding="utf-8") as codes:
        learn_bpe(tokenized, codes, 120, min_frequency=2)
    with open(folder / "codes", encoding="utf-8") as codes:
        bpe = BPE(codes)
    counts = {}
    for line in tokenized:
        for unit in bpe.process_line(line).split():
            counts[unit] = counts.get(unit, 0) + 1
    (folder / "vocab").write_text("".join(f"{u} {c}\n" for u, c in counts.items()), encoding="utf-8")
    d = Dictionary()  # the units of the BPE with and without the filter, as a run's joined dictionary has them
    for threshold in (None, FILTER):
        moses, bpe = run_pipeline(folder, threshold)
        for line in corpus(400, 0):
            for unit in bpe.encode(moses.encode(line)).split():
                d.add_symbol(unit)
    return folder, d


def run_pipeline(folder, vocabulary_threshold):
    """The run's pre-processing (the plugin's attn_moses and attn_subword_nmt) with or without the filter."""
    from attn_plugin.encoders.attn_moses import AttnMosesConfig, AttnMosesTokenizer
    from attn_plugin.encoders.attn_subword_nmt import AttnSubwordNMTBPE, AttnSubwordNMTConfig

    moses = AttnMosesTokenizer(AttnMosesConfig(source_lang="en", target_lang="en"))
    vocab = dict(bpe_vocabulary=str(folder / "vocab"), bpe_vocabulary_threshold=vocabulary_threshold) \
        if vocabulary_threshold else {}
    return moses, AttnSubwordNMTBPE(AttnSubwordNMTConfig(bpe_codes=str(folder / "codes"), **vocab))


@pytest.mark.parametrize("threshold", [None, FILTER])
def test_the_tokenizer_gives_the_runs_token_ids(bpe_run, threshold, tmp_path):
    """AutoTokenizer on raw text with & | < > ' " [ ] and dashes: the run's ids on every line without
    the vocabulary filter; with it, on every line where apply-bpe's filter changes nothing,
    and the others are segmented as the kept merges say. Decoding gives the run's detokenized text."""
    from transformers import AutoTokenizer

    folder, d = bpe_run
    args = {"source_lang": "en", "target_lang": "en", "bpe_codes": str(folder / "codes")}
    if threshold:
        args.update(bpe_vocabulary=str(folder / "vocab"), bpe_vocabulary_threshold=threshold)
    _, kept = hfx.write_tokenizer(tmp_path, d, d, args, 1024)
    tokenizer = AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(tokenizer).__name__ == "FSMTTokenizer"
    moses, bpe = run_pipeline(folder, threshold)
    _, unfiltered = run_pipeline(folder, None)
    designed = hfx.plain_bpe(kept, "@@")
    same = filtered = 0
    for line in corpus(300, 1):
        words = moses.encode(line)
        run_ids = d.encode_line(bpe.encode(words), add_if_not_exist=False).tolist()
        ids = tokenizer(line).input_ids
        if bpe.encode(words) == unfiltered.encode(words):  # the filter changes nothing here
            assert ids == run_ids, line
            same += 1
        else:
            assert ids == d.encode_line(" ".join(designed.segment_tokens(words.split())),
                                        add_if_not_exist=False).tolist(), line
            filtered += 1
        if d.unk() not in run_ids:  # (decode drops <unk>, a special token; fairseq writes it)
            units = d.string(torch.tensor(run_ids))
            assert tokenizer.decode(run_ids, skip_special_tokens=True) == moses.decode(bpe.decode(units))
    assert same > 150 and (filtered > 20 if threshold else filtered == 0)
    assert "&apos;" in tokenizer.convert_ids_to_tokens(tokenizer("isn't").input_ids)[1]


def test_kept_merges_are_those_the_filter_keeps_and_their_builders():
    merges = [("a", "b"), ("ab", "c</w>"), ("x", "y"), ("ab", "d"), ("q", "r</w>")]
    vocabulary = {"abc", "qr"}  # abc kept (and ab, which builds it); xy and abd@@ rare
    assert hfx.kept_merges(merges, vocabulary, "@@") == [("a", "b"), ("ab", "c</w>"), ("q", "r</w>")]
    assert hfx.kept_merges(merges, None, "@@") == merges


# --------------------------------------------------------------------------------------------- quick: command line
def test_bad_command_lines_are_one_line(tmp_path):
    assert_one_error_line(export_here(tmp_path / "nowhere", "--output", tmp_path / "out"), "no such run directory")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert_one_error_line(export_here(tmp_path, "--output", keep), "is not an earlier export", "give a new folder")
    assert (keep / "notes.txt").read_text() == "mine"
    assert_one_error_line(export_here(tmp_path), "--output DIR")


def test_without_transformers_the_script_says_how_to_install_it(tmp_path):
    """The script as a process, where transformers cannot be imported (a package of that name that fails
    to import shadows the real one)."""
    fake = tmp_path / "fake" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named transformers')\n")
    proc = command([*EXPORT, tmp_path / "run", "--output", tmp_path / "out"],
                   {**os.environ, "PYTHONPATH": str(fake.parent)}, timeout=120)
    assert_one_error_line(proc, "transformers is not installed", f"pip install transformers=={hfx.TESTED}")


# --------------------------------------------------------------------------------------------- slow: the smoke run
@pytest.fixture(scope="module")
def exported(smoke_run, tmp_path_factory):
    """The smoke run exported by the script, as a process."""
    out = tmp_path_factory.mktemp("hf") / "smoke_hf"
    proc = command([*EXPORT, smoke_run, "--output", out], dict(os.environ), timeout=300, fork=True)
    assert proc.returncode == 0, proc.stderr
    assert "AutoModelForSeq2SeqLM.from_pretrained" in proc.stderr and "Traceback" not in proc.stderr
    return out


@pytest.fixture(scope="module")
def noisy_unfiltered(smoke_run, tmp_path_factory):
    """(run dir, export): the smoke run with noisy weights and BPE without the vocabulary filter (the one
    step FSMTTokenizer cannot do exactly), exported in this process."""
    work = add_noise(copy_run(smoke_run, tmp_path_factory.mktemp("noisy") / "w"))
    card = json.loads((work / "inference.json").read_text())
    del card["args"]["bpe_vocabulary"], card["args"]["bpe_vocabulary_threshold"]
    card["paths"] = ["bpe_codes"]
    (work / "inference.json").write_text(json.dumps(card))
    hfx.export(work, work.parent / "hf")
    return work, work.parent / "hf"


def test_the_export_is_transformers_own_classes(exported, smoke_run):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == "fsmt" and "auto_map" not in config
    assert type(AutoModelForSeq2SeqLM.from_pretrained(str(exported))).__name__ == "FSMTForConditionalGeneration"
    assert type(AutoTokenizer.from_pretrained(str(exported))).__name__ == "FSMTTokenizer"
    card = json.loads((exported / hfx.CARD).read_text())
    assert card["check"]["greedy_identical"] + card["check"]["greedy_ties"] == 8
    assert card["check"]["max_log_prob_difference"] < 1e-4
    assert (exported / "bpe_codes").read_bytes() == (smoke_run / "bpe" / "codes").read_bytes()


def test_greedy_generate_on_raw_text_is_fairseqs_greedy_on_every_test_sentence(noisy_unfiltered):
    """Raw test sentences through AutoTokenizer and generate (greedy, fairseq's length limit for each):
    the run's token ids, fairseq's greedy output and its detokenized text, on all 200."""
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    work, out = noisy_unfiltered
    hub = AttnTransformerModel.from_pretrained(str(work), beam_stop="fairseq")
    exported = hfx.Exported(out)
    raw = lines(work / "raw" / "test.en")
    ids = [exported.tokenizer(line).input_ids for line in raw]
    assert ids == [hub.encode(line).tolist() for line in raw]
    ours = exported.generate(ids, 1, 50)
    groups = {}  # fairseq's search over sources of one length: each sentence's own length limit
    for i, source in enumerate(ids):
        groups.setdefault(len(source), []).append(i)
    theirs = [None] * len(ids)
    for members in groups.values():
        for i, hypos in zip(members, hub.generate([torch.tensor(ids[i]) for i in members], beam=1)):
            theirs[i] = hypos[0]["tokens"][:-1].tolist() if hypos[0]["tokens"][-1] == 2 else hypos[0]["tokens"].tolist()
    assert ours == theirs
    assert len({tuple(t) for t in theirs}) > 50  # the noisy model's outputs differ from sentence to sentence
    texts = exported.tokenizer.batch_decode(ours, skip_special_tokens=True)
    assert texts == [hub.decode(torch.tensor(t)) for t in theirs]


def test_with_the_vocabulary_filter_the_tokenizer_differs_only_where_the_filter_acts(exported, smoke_run):
    """The smoke run's BPE (threshold 50 on 2400 pairs: most merges undone): the run's ids on every test
    line where apply-bpe's filter changes nothing; the other lines segmented by the kept merges."""
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    hub = AttnTransformerModel.from_pretrained(str(smoke_run))
    exported_ = hfx.Exported(exported)
    _, unfiltered = run_pipeline(smoke_run / "bpe", None)
    args = json.loads((smoke_run / "inference.json").read_text())["args"]
    bpe = hfx.plain_bpe(hfx.run_merges({**args, "bpe_codes": str(smoke_run / args["bpe_codes"]),
                                        "bpe_vocabulary": str(smoke_run / args["bpe_vocabulary"])})[1], "@@")
    counts = {}
    for line in lines(smoke_run / "raw" / "test.en"):
        run_ids = hub.encode(line).tolist()
        category = hfx.token_category(exported_, hub, bpe, True, line, run_ids)
        counts[category] = counts.get(category, 0) + 1
        words = hub.tokenize(line)
        if hub.apply_bpe(words) == unfiltered.encode(words):
            assert category == "same", line
    assert set(counts) == {"same", "vocabulary filter"} and counts["same"] >= 120, counts


@pytest.mark.parametrize("damage,message", [
    ("weight", "the exported model does not reproduce the run"),
    ("merges", "the exported tokenizer gives check sentence 1"),
])
def test_an_export_that_does_not_reproduce_the_run_is_refused(damage, message, noisy_unfiltered, smoke_run, tmp_path,
                                                               monkeypatch):
    """A conversion mistake (W^K and W^V of the first encoder layer swapped, in the noisy model, whose
    output depends on its input) or the smoke run's merges in another order: one error line, exit 1,
    nothing left where the folder would be."""
    if damage == "weight":
        state_dict = hfx.fsmt_state_dict

        def damaged(model, padding_idx):
            state = state_dict(model, padding_idx)
            k, v = (f"model.encoder.layers.0.self_attn.{name}.weight" for name in ("k_proj", "v_proj"))
            state[k], state[v] = state[v], state[k]
            return state
        monkeypatch.setattr(hfx, "fsmt_state_dict", damaged)
    else:
        merges = hfx.escaped_merges
        monkeypatch.setattr(hfx, "escaped_merges", lambda kept, escaped: list(reversed(merges(kept, escaped))))
    out = tmp_path / "out"
    proc = export_here(noisy_unfiltered[0] if damage == "weight" else smoke_run, "--output", out)
    assert_one_error_line(proc, message, "nothing was written")
    assert proc.returncode == 1 and no_export_left(out)


def test_the_runs_checksums_are_respected(smoke_run, exported, tmp_path):
    """A run whose BPE vocabulary changed since the run made it: refused, naming --ignore-changed-files;
    with it, exported; an earlier export is replaced only with --force."""
    work = copy_run(smoke_run, tmp_path / "w")
    with open(work / "bpe" / "vocab.en", "a", encoding="utf-8") as f:
        f.write("zzz 1\n")
    out = tmp_path / "hf"
    assert_one_error_line(export_here(work, "--output", out), "changed since the run made it",
                          "--ignore-changed-files")
    assert no_export_left(out)
    shutil.copytree(exported, out)
    (out / "model.safetensors").write_bytes(b"mine")
    assert_one_error_line(export_here(work, "--output", out, "--ignore-changed-files"), "exists", "--force")
    assert (out / "model.safetensors").read_bytes() == b"mine"
    proc = export_here(work, "--output", out, "--ignore-changed-files", "--force")
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").read_bytes() == (exported / "model.safetensors").read_bytes()

"""CTranslate2: scripts/export_ctranslate2.py and scripts/translate.py --engine ctranslate2
(attn_kit.inference.ctranslate2) against the plugin itself.

The truth is the plugin: its own log-probabilities of given target sentences (teacher forcing),
fairseq's beam search over it (the hub's ``generate``, scripts/translate.py's fairseq engine),
and fairseq's scores. Two models: the WMT14 --smoke run (conftest.smoke_run; it barely learned,
so </s> as first token is likely enough to enter the beam: the engine's repair of CTranslate2's
min-length scoring is exercised) and a copy with noisy weights whose outputs vary and often
run to the length limit (the engine's scoring of hypotheses cut at the limit).
"""
import json
import os
import shutil
import sys

import numpy as np
import pytest
import torch
from conftest import REPO, assert_one_error_line, command, run_main
from test_translate import add_noise, copy_run

ctranslate2 = pytest.importorskip("ctranslate2")

from attn_kit.inference import ctranslate2 as engine  # noqa: E402
from attn_plugin.checkpoint import load_checkpoint  # noqa: E402

EXPORT = [sys.executable, str(REPO / "scripts" / "export_ctranslate2.py")]
TRANSLATE = [sys.executable, str(REPO / "scripts" / "translate.py")]


def run(cmd, *args, stdin=None, env=None, timeout=300, fork=True):
    """``fork``: forked from the worker's preloaded interpreter (conftest.command), which each of these
    scripts imports first; else a process of its own, for a script's process-level contract."""
    return command([*cmd, *args], env or dict(os.environ), timeout=timeout, input_text=stdin, fork=fork)


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def export_here(*args):
    """scripts/export_ctranslate2.py's main() in this process (conftest.run_main): for what the process
    boundary does not change; the script itself runs in the ``exported`` fixture and in
    test_missing_inputs_and_ctranslate2_are_one_line (its process-level contract)."""
    return run_main(engine.main, *args)


def translate_here(*args, stdin=b""):
    """scripts/translate.py's main() in this process, as export_here for the export."""
    from attn_kit.inference.translate import main

    return run_main(main, *args, stdin=stdin)


@pytest.fixture(scope="module")
def exported(smoke_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("ct2") / "smoke_ct2"
    proc = run(EXPORT, smoke_run, out)
    assert proc.returncode == 0, proc.stderr
    assert "--engine ctranslate2" in proc.stderr
    return out


@pytest.fixture(scope="module")
def hub(smoke_run):
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    return AttnTransformerModel.from_pretrained(str(smoke_run))


@pytest.fixture(scope="module")
def noisy(smoke_run, tmp_path_factory):
    """(run dir, export): the smoke run's weights plus N(0, 1) noise (seeded), exported in-process."""
    work = add_noise(copy_run(smoke_run, tmp_path_factory.mktemp("noisy") / "w"))
    engine.export(work, work.parent / "ct2")
    return work, work.parent / "ct2"


def plugin_log_probs(model, src: torch.Tensor, tgt: torch.Tensor) -> np.ndarray:
    """log P(tgt_t | src, tgt_<t) of every target token (</s> last) under the plugin model (teacher forcing)."""
    prev = torch.cat([tgt[-1:], tgt[:-1]]).unsqueeze(0)  # fairseq: </s> first, then the target shifted right
    with torch.no_grad():
        logits, _ = model(src.unsqueeze(0), torch.tensor([src.numel()]), prev)
    return torch.log_softmax(logits.float(), -1)[0].gather(-1, tgt.unsqueeze(-1)).squeeze(-1).numpy()


def ct2_log_probs(translator, src_dict, tgt_dict, sources, targets):
    """CTranslate2's score_batch of the same pairs (id tensors ending in </s>, which it adds itself)."""
    results = translator.score_batch([[src_dict[i] for i in s[:-1]] for s in sources],
                                     [[tgt_dict[i] for i in t[:-1]] for t in targets], max_input_length=0)
    return [np.array(r.log_probs) for r in results]


# --------------------------------------------------------------------------------------------- weights
@pytest.mark.parametrize("which", ["smoke", "noisy"])
def test_exported_model_scores_the_reference_translations_as_the_plugin(which, smoke_run, exported, noisy):
    """score_batch's log-probabilities of the test set's reference translations (BPE units, as the
    model was trained on them) equal the plugin's own, token by token. (The smoke model barely
    depends on its input; the noisy one does, so positions, scaling and attention all count.)"""
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    run_dir, out_dir = (smoke_run, exported) if which == "smoke" else noisy
    hub = AttnTransformerModel.from_pretrained(str(run_dir))
    model = hub.models[0]
    model.eval()
    sources = [hub.encode(s) for s in lines(smoke_run / "raw" / "test.en")[:40]]
    targets = [hub.tgt_dict.encode_line(t, add_if_not_exist=False) for t in lines(smoke_run / "bpe" / "test.de")[:40]]
    assert sum(t.numel() for t in targets) > 500 and len({int(i) for t in targets for i in t}) > 100
    ours = ct2_log_probs(ctranslate2.Translator(str(out_dir)), hub.src_dict, hub.tgt_dict, sources, targets)
    tolerance = 1e-4 if which == "smoke" else 1e-3  # noisy: logits in the hundreds, float32 rounds them
    for s, t, got in zip(sources, targets, ours):
        want = plugin_log_probs(model, s, t)
        assert got.shape == want.shape
        assert np.abs(got - want).max() < tolerance * max(1.0, np.abs(want).max()), np.abs(got - want).max()
    card = json.loads((out_dir / engine.CARD).read_text())
    assert card["args"]["bpe_codes"] == "bpe_codes" and (out_dir / "bpe_codes").read_bytes() == \
        (smoke_run / "bpe" / "codes").read_bytes()
    vocab = json.loads((out_dir / "shared_vocabulary.json").read_text())
    assert vocab == [engine.PAD_NAME if s == "<pad>" else s for s in hub.tgt_dict.symbols]


VARIANTS = {  # plugin options -> every one exported and scored against the plugin
    "paper sinusoids": [],
    "fairseq layout": ["--sinusoid-layout", "fairseq"],
    "learned positions": ["--positional-encoding", "learned"],
    "d_k = d_v != d_model/h": ["--attention-key-dim", "16", "--attention-value-dim", "16"],
    "decoder: 2 heads, 3 layers, d_ff 40": ["--decoder-attention-heads", "2", "--decoder-layers", "3",
                                          "--decoder-ffn-embed-dim", "40"],
    "separate embeddings": ["--no-share-all-embeddings"],
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_representable_variant_scores_as_the_plugin(variant, tmp_path):
    from attn_kit.fairseq_layer.build import build_model, make_dictionary, plugin_flags

    d = make_dictionary(60)
    torch.manual_seed(1)
    flags = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "32",
             "--encoder-ffn-embed-dim", "48", "--encoder-attention-heads", "4"]
    model = build_model(plugin_flags(*flags, *VARIANTS[variant]), d)
    model.eval()
    with torch.no_grad():  # LayerNorm and biases away from their initial 1 and 0
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape))
    engine.save_spec(engine.build_spec(model, d, d), tmp_path / "m")
    g = torch.Generator().manual_seed(2)
    sources = [torch.cat([torch.randint(4, 60, (n,), generator=g), torch.tensor([d.eos()])]) for n in (5, 9, 2)]
    targets = [torch.cat([torch.randint(4, 60, (n,), generator=g), torch.tensor([d.eos()])]) for n in (7, 1, 12)]
    ours = ct2_log_probs(ctranslate2.Translator(str(tmp_path / "m")), d, d, sources, targets)
    for s, t, got in zip(sources, targets, ours):
        assert np.abs(got - plugin_log_probs(model, s, t)).max() < 1e-4


def test_int8_export_is_smaller_and_close(hub, tmp_path):
    model = hub.models[0]
    d = hub.tgt_dict
    for q in ("float32", "int8"):
        engine.save_spec(engine.build_spec(model, hub.src_dict, d), tmp_path / q, None if q == "float32" else q)
    assert (tmp_path / "int8" / "model.bin").stat().st_size < 0.6 * (tmp_path / "float32" / "model.bin").stat().st_size
    src, tgt = [hub.encode("The house is small.")], [d.encode_line("Das Haus ist klein .", add_if_not_exist=False)]
    exact = ct2_log_probs(ctranslate2.Translator(str(tmp_path / "float32")), hub.src_dict, d, src, tgt)[0]
    int8 = ct2_log_probs(ctranslate2.Translator(str(tmp_path / "int8"), compute_type="int8"), hub.src_dict, d, src,
                         tgt)[0]
    assert 0 < np.abs(int8 - exact).max() < 0.2


# --------------------------------------------------------------------------------------------- length penalty
def test_ctranslate2s_length_penalty_divides_by_length_with_eos_counted(exported, smoke_run):
    """What the engine relies on: CTranslate2 ranks by log P / |Y|^p with |Y| counting </s> (with or
    without return_end_token) and log P including the </s> step, which is fairseq's --lenpen; GNMT's
    ((5 + |Y|) / 6)^alpha is not of that form, hence the engine's reranking."""
    translator = ctranslate2.Translator(str(exported))
    sources = [s.split() for s in lines(smoke_run / "bpe" / "test.en")[:10]]
    checked = 0
    for end_token in (False, True):
        for p in (0.6, 2.0):
            results = translator.translate_batch(sources, beam_size=3, num_hypotheses=3, length_penalty=p,
                                                 return_end_token=end_token, return_scores=True,
                                                 min_decoding_length=0, max_decoding_length=200)
            for s, r in zip(sources, results):
                for hyp, score in zip(r.hypotheses, r.scores):
                    words = [t for t in hyp if t != "</s>"]
                    assert (bool(hyp) and hyp[-1] == "</s>") == end_token
                    log_p = float(sum(translator.score_batch([s], [words])[0].log_probs))  # </s> step included
                    assert score == pytest.approx(log_p / (len(words) + 1) ** p, rel=1e-5, abs=1e-5)
                    if words:
                        assert score != pytest.approx(log_p / len(words) ** p, rel=1e-3)
                    checked += 1
    assert checked == 120


# --------------------------------------------------------------------------------------------- decoding
def fairseq_and_engine(run_dir, out_dir, n, options, batch_size):
    """(fairseq's hypotheses, the engine's (tokens, score)) for the first n test sentences, in
    batches of ``batch_size`` (fairseq's length limit comes from the longest source of a batch)."""
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    raw = lines(run_dir / "raw" / "test.en")[:n]
    # CTranslate2's own beam search stops as fairseq's rule does, not as the paper's (attn_plugin.beam_search)
    hub = AttnTransformerModel.from_pretrained(str(run_dir), batch_size=batch_size, beam_stop="fairseq", **options)
    fairseq = hub.generate([hub.encode(s) for s in raw], beam=hub.cfg.generation.beam)
    ct2 = engine.CT2Translator(out_dir, dict(options))
    sources = [ct2.encode(s) for s in raw]
    ours = [None] * n
    for batch in engine.fairseq_batches([len(s) for s in sources], batch_size):
        for k, best in zip(batch, ct2.search([sources[k] for k in batch])):
            ours[k] = best
    return hub, fairseq, ours


@pytest.mark.parametrize("model,options,batch_size", [
    ("smoke", {}, 128),                                  # GNMT alpha 0.6, the run's: reranked n-best
    ("smoke", {"lenpen": 1.0, "beam": 5}, 128),          # fairseq's penalty: CTranslate2's own
    ("noisy", {"max_len_b": 6}, 8),                       # GNMT, most hypotheses cut at the length limit
    ("noisy", {"lenpen": 0.0, "beam": 2, "max_len_b": 3}, 6),  # no normalization
])
def test_engine_finds_fairseqs_best_hypothesis_with_fairseqs_score(model, options, batch_size, smoke_run, exported,
                                                                   noisy):
    run_dir, out_dir = (smoke_run, exported) if model == "smoke" else noisy
    hub, fairseq, ours = fairseq_and_engine(run_dir, out_dir, 48, options, batch_size)
    same = [hub.tgt_dict.string(f[0]["tokens"]) == " ".join(tokens) for f, (tokens, _) in zip(fairseq, ours)]
    scores = [(f[0]["score"].item(), score) for f, (_, score) in zip(fairseq, ours)]
    assert sum(same) >= 0.95 * len(same), sum(same)
    # the noisy weights make logits in the hundreds, which float32 rounds to ~1e-4 a token, both engines
    tolerance = 1e-4 if model == "smoke" else 5e-4
    assert all(abs(a - b) <= tolerance * max(1.0, abs(a)) for a, b in scores), scores
    if model == "noisy":
        assert len({" ".join(t) for t, _ in ours}) > 20  # outputs that differ from sentence to sentence


def test_a_batch_cut_into_parallel_calls_keeps_the_whole_batchs_length_limit(noisy):
    """On 2 threads a batch of more than PARALLEL_CALL sentences is decoded in several calls at once;
    every call keeps the limit fairseq gives the whole batch (from its longest source), so the
    hypotheses are those of the batch decoded in one call."""
    work, out = noisy
    ct2 = engine.CT2Translator(out, {"max_len_b": 2, "lenpen": 1.0}, threads=2)
    assert ct2.max_len_a == 1  # the recipe's --max-len-a
    sources = sorted((ct2.encode(s) for s in lines(work / "raw" / "test.en")[:80]), key=len)
    batch = sources[:engine.PARALLEL_CALL] + sources[-engine.PARALLEL_CALL:]  # the short ones, then the long ones
    # fairseq-generate's limit: max_len_a x (longest source of the batch, </s> included) + max_len_b tokens
    limit = 1 * (len(batch[-1]) + 1) + 2
    assert len(batch[engine.PARALLEL_CALL - 1]) + 1 + 2 < limit  # the short call's own limit would be lower
    [whole] = ct2.search_batches([batch], parallel=False)
    [cut] = ct2.search_batches([batch], parallel=True)
    short = [tokens for tokens, _ in cut[:engine.PARALLEL_CALL]]
    assert max(len(t) for t in short) == limit  # the noisy weights run hypotheses to the limit
    same = sum(a[0] == b[0] for a, b in zip(whole, cut))
    assert same >= 0.95 * len(batch), same


def test_translate_engine_ctranslate2_matches_the_fairseq_engine(smoke_run, exported, noisy, tmp_path):
    """scripts/translate.py --engine ctranslate2 on the test source: the fairseq engine's lines."""
    from attn_kit.inference.translate import Translator

    source = smoke_run / "raw" / "test.en"
    proc = run(TRANSLATE, "--engine", "ctranslate2", exported, "--input", source, "--output", tmp_path / "out.de")
    assert proc.returncode == 0, proc.stderr
    assert "translate: 200 sentences in" in proc.stderr and "Traceback" not in proc.stderr
    ours = lines(tmp_path / "out.de")
    theirs = Translator(smoke_run, {}).translate(lines(source), 64)
    assert len(ours) == len(theirs) == 200
    assert sum(a == b for a, b in zip(ours, theirs)) >= 0.95 * len(theirs)
    # outputs that vary, with --lenpen and a batch of 16 (several batches decoded at once)
    work, out = noisy
    raw = lines(source)[:64]
    threads = torch.get_num_threads()
    try:  # in this process (the script ran above): --threads sets torch's, which is put back after
        proc = translate_here("--engine", "ctranslate2", out, "--lenpen", "1.0", "--max-len-b", "8", "--batch-size",
                              "16", "--threads", "2", stdin="".join(s + "\n" for s in raw))
    finally:
        torch.set_num_threads(threads)
    assert proc.returncode == 0, proc.stderr
    ours = proc.stdout.split("\n")[:-1]
    theirs = Translator(work, {"lenpen": 1.0, "max_len_b": 8}).translate(raw, 16)
    assert len(set(theirs)) > 20 and sum(a == b for a, b in zip(ours, theirs)) >= 0.95 * len(theirs)


def test_empty_lines_stay_and_tokenized_input_skips_moses(exported):
    ct2 = engine.CT2Translator(exported, {})
    out = ct2.translate(["Tom is here.", "", "  ", "Where are you?"], 2)
    assert len(out) == 4 and out[1] == out[2] == "" and out[0] and out[3]
    assert ct2.encode("Tom's here.") != engine.CT2Translator(exported, {"tokenizer": None}).encode("Tom's here.")


# --------------------------------------------------------------------------------------------- errors
def test_d_k_not_d_v_is_refused_in_one_line(smoke_run, tmp_path):
    """A run with --attention-key-dim 8 --attention-value-dim 16 (d_model 64, 4 heads)."""
    work = copy_run(smoke_run, tmp_path / "w")
    ckpt = load_checkpoint(work / "checkpoint_avg.pt")  # weights_only=True with fairseq's types allowed
    ckpt["cfg"]["model"]["attention_key_dim"], ckpt["cfg"]["model"]["attention_value_dim"] = 8, 16
    state = ckpt["model"]
    for name in list(state):
        if ".w_qkv." in name:  # rows [Q | K | V]: 64 each -> Q, K 32 each, V 64
            q, k, v = state[name].split(64)
            state[name] = torch.cat([q[:32], k[:32], v])
        elif ".cross_attn.w_q." in name:
            state[name] = state[name][:32]
        elif ".cross_attn.w_kv." in name:  # rows [K | V]
            k, v = state[name].split(64)
            state[name] = torch.cat([k[:32], v])
    torch.save(ckpt, work / "checkpoint_avg.pt")
    proc = export_here(work, tmp_path / "out")
    assert_one_error_line(proc, "CTranslate2 cannot represent this model", "--attention-key-dim 8 != "
                          "--attention-value-dim 16")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_missing_inputs_and_ctranslate2_are_one_line(smoke_run, exported, tmp_path):
    """The bad inputs in this process; the two scripts as processes (their process-level contract) where
    ctranslate2 cannot be imported, below."""
    assert_one_error_line(export_here(tmp_path / "nowhere", tmp_path / "out"), "no such run directory")
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert_one_error_line(export_here(smoke_run, keep), "is not an earlier export", "give a new folder")
    assert (keep / "notes.txt").read_text() == "mine"
    assert_one_error_line(translate_here("--engine", "ctranslate2", smoke_run, stdin="x\n"),
                          "is a recipe run, not a CTranslate2 model", "export_ctranslate2.py")
    assert_one_error_line(translate_here("--engine", "ctranslate2", tmp_path, stdin="x\n"), "ct2_card.json")
    proc = translate_here("--engine", "ctranslate2", exported, stdin="Hello.\n" + " ".join(["Tom"] * 1100) + "\n")
    assert_one_error_line(proc, "line 2 is ", "at most 1024", "split it")
    assert proc.stdout == ""
    # no ctranslate2 importable: a package of that name that fails to import shadows the real one
    fake = tmp_path / "fake" / "ctranslate2"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ctranslate2')\n")
    env = {**os.environ, "PYTHONPATH": str(fake.parent)}
    for proc in (run(EXPORT, smoke_run, tmp_path / "out", env=env),
                 run(TRANSLATE, "--engine", "ctranslate2", exported, stdin="x\n", env=env)):
        assert_one_error_line(proc, "CTranslate2 is not installed", "pip install attn_plugin[ct2]",
                              "pip install ctranslate2")


@pytest.mark.parametrize("damage,key", [("args", "'args'"), ("paths", "'paths'"), ("bpe", "'args.bpe'")])
def test_a_damaged_card_is_one_line_naming_the_key(exported, tmp_path, damage, key):
    """A card without its pre-processing translated, exit 0, with BPE left in the output; now the
    schema (attn_plugin.run_cards.CT2) names the missing key before anything loads."""
    out = tmp_path / "ct2"
    shutil.copytree(exported, out)
    card = json.loads((out / engine.CARD).read_text())
    del (card["args"] if damage == "bpe" else card)[damage]
    (out / engine.CARD).write_text(json.dumps(card))
    proc = translate_here("--engine", "ctranslate2", out, stdin="Tom is here.\n")
    assert_one_error_line(proc, str(out / engine.CARD), f"has no {key}", "export the run again")
    assert proc.stdout == ""


def test_the_export_copies_no_file_from_outside_the_run(smoke_run, tmp_path):
    """inference.json's bpe_vocabulary pointing at a file outside RUN_DIR (here the original run's):
    refused in one line naming the key and where it points, before the export writes anything."""
    work = copy_run(smoke_run, tmp_path / "w")
    card = json.loads((work / "inference.json").read_text())
    card["args"]["bpe_vocabulary"] = str(smoke_run / "bpe" / "vocab.en")
    (work / "inference.json").write_text(json.dumps(card))
    proc = export_here(work, tmp_path / "out")
    assert_one_error_line(proc, "'args.bpe_vocabulary' points outside", str(smoke_run / "bpe" / "vocab.en"))
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_an_earlier_export_is_replaced_only_with_force(smoke_run, exported, tmp_path):
    out = tmp_path / "ct2"
    shutil.copytree(exported, out)
    (out / "model.bin").write_bytes(b"mine")
    assert_one_error_line(export_here(smoke_run, out), "OUT_DIR", "exists", "--force")
    assert (out / "model.bin").read_bytes() == b"mine"
    proc = export_here(smoke_run, out, "--force")
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.bin").read_bytes() == (exported / "model.bin").read_bytes()


def test_a_parsing_run_gives_the_fairseq_engines_trees(smoke_run, exported, tmp_path):
    """kind "parsing" (the WSJ recipe's card): treebank tokens in, the repaired tree over the words out,
    as the fairseq engine makes it (here from the smoke model, relabelled as a parser)."""
    from attn_kit.inference.translate import Translator

    def as_parser(card_path, args_key):
        card = json.loads(card_path.read_text())
        card["kind"] = "parsing"
        args = {k: v for k, v in card[args_key].items() if not k.startswith("moses_")}
        card[args_key] = {**args, "tokenizer": "attn_treebank"}
        card_path.write_text(json.dumps(card))

    work = copy_run(smoke_run, tmp_path / "w")
    as_parser(work / "inference.json", "args")
    out = tmp_path / "ct2"
    shutil.copytree(exported, out)
    as_parser(out / engine.CARD, "args")
    raw = ["I don't know (yet).", "", "Where is the station?"] + lines(smoke_run / "raw" / "test.en")[:10]
    ours = engine.CT2Translator(out, {}).translate(raw, 8)
    assert ours == Translator(work, {}).translate(raw, 8)
    assert ours[0].startswith("(TOP") and "n't" in ours[0] and "-LRB-" in ours[0] and ours[1] == ""


@pytest.mark.slow
def test_benchmark_ctranslate2_rows(tmp_path):
    """benchmarks/generate_throughput.py --ctranslate2: the plugin and CTranslate2 rows, in the JSON too."""
    out = tmp_path / "bench.json"
    proc = run([sys.executable, str(REPO / "benchmarks" / "generate_throughput.py")], "--ctranslate2", "--shapes",
               "small", "--repeats", "2", "--sentences", "4", "--length", "5", "--threads", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| ct2 int8, 2 x 1 thread |" in proc.stdout
    data = json.loads(out.read_text())
    assert data["benchmark"] == "generate_throughput_ctranslate2" and data["commit"] and data["machine"]
    engines = data["results"]["small"]["engines"]
    assert list(engines) == ["plugin", "plugin, 2 procs", "ct2 float32", "ct2 float32, 2 x 1 thread", "ct2 int8",
                             "ct2 int8, 2 x 1 thread"]
    assert all(e["ratio_sentences_per_s"] > 0 and len(e["trial_ratios"]) == 2 for n, e in engines.items()
               if n != "plugin")
    assert engines["ct2 int8"]["model_bytes"] < 0.5 * engines["ct2 float32"]["model_bytes"]


def test_benchmark_run_times_the_recipes_fairseq_generate_against_ctranslate2(smoke_run, tmp_path):
    """--ctranslate2 --run RUN_DIR: the recipe's own fairseq-generate (its output scores as the run
    scored itself) against CTranslate2 exports of the run's model on the same test sentences."""
    out = tmp_path / "bench.json"
    bench = [sys.executable, str(REPO / "benchmarks" / "generate_throughput.py")]
    proc = run(bench, "--ctranslate2", "--run", smoke_run, "--repeats", "1", "--threads", "2", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "generate_throughput_ctranslate2_run" and data["commit"] and data["machine"]
    r = data["results"]
    results = json.loads((smoke_run / "results.json").read_text())
    assert r["sentences"] == results["test_sentences"] and r["batch_size"] == 128
    engines = r["engines"]
    assert list(engines) == ["fairseq-generate", "ct2 float32", "ct2 float32, 2 x 1 thread", "ct2 int8",
                             "ct2 int8, 2 x 1 thread"]
    # fairseq-generate's translations, detokenized by the run's tokenizer, score what the recipe scored
    assert engines["fairseq-generate"]["sacrebleu"] == pytest.approx(results["sacrebleu"], abs=0.01)
    same, total = map(int, engines["ct2 float32"]["same_output"].split("/"))
    assert total == r["sentences"] and same >= 0.95 * total  # the bar for float32
    assert all(e["ratio_sentences_per_s"] > 0 for n, e in engines.items() if n != "fairseq-generate")
    assert "| ct2 int8, 2 x 1 thread |" in proc.stdout


def test_benchmark_run_refuses_what_it_cannot_time(smoke_run, tmp_path):
    bench = [sys.executable, str(REPO / "benchmarks" / "generate_throughput.py")]
    proc = run(bench, "--run", smoke_run, fork=False)
    assert proc.returncode == 2
    assert_one_error_line(proc, "--ctranslate2")
    from lab.bench.generate import main  # the script's main() in this process: its contract is checked above

    assert_one_error_line(run_main(main, "--ctranslate2", "--run", tmp_path / "nothing"), "no such run directory")

"""Using a trained run: scripts/translate.py, from_pretrained and fairseq-interactive translate
raw text exactly as the recipe translated its test set (the WMT14 --smoke run of conftest.smoke_run;
the WSJ parser's in tests/test_recipe_wsj.py)."""
import json
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import REPO, assert_one_error_line, cli

TRANSLATE = [sys.executable, str(REPO / "scripts" / "translate.py")]


def run(*args, stdin=None, timeout=300):
    return subprocess.run([*TRANSLATE, *map(str, args)], input=stdin, capture_output=True, text=True,
                          timeout=timeout)


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def hub(smoke_run):
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    return AttnTransformerModel.from_pretrained(str(smoke_run))


def test_raw_text_reaches_the_model_as_the_recipes_test_set_did(smoke_run, hub):
    """The run's pre-processing of raw text (Moses normalization and tokenization, BPE with the
    vocabulary filter) gives, sentence by sentence, the token ids that subword-nmt's command
    line and fairseq-preprocess made of the test set."""
    from fairseq.data import data_utils

    dataset = data_utils.load_indexed_dataset(str(smoke_run / "data-bin" / "test.en-de.en"), hub.src_dict)
    raw = lines(smoke_run / "raw" / "test.en")
    assert len(dataset) == len(raw) == 200
    for i, sentence in enumerate(raw):
        assert torch.equal(hub.encode(sentence), dataset[i]), (i, sentence)
    # the vocabulary filter matters here: without it some words split differently
    from attn_plugin.encoders.attn_subword_nmt import AttnSubwordNMTBPE, AttnSubwordNMTConfig

    plain = AttnSubwordNMTBPE(AttnSubwordNMTConfig(bpe_codes=hub.cfg.bpe.bpe_codes))
    assert any(plain.encode(hub.tokenize(s)) != hub.apply_bpe(hub.tokenize(s)) for s in raw)


def test_translate_reproduces_the_recipes_test_output(smoke_run, tmp_path):
    results = json.loads((smoke_run / "results.json").read_text())
    proc = run(smoke_run, "--input", results["test_source"], "--output", tmp_path / "out.de")
    assert proc.returncode == 0, proc.stderr
    assert "translate: 200 sentences in" in proc.stderr  # progress on stderr, nothing else there
    assert "INFO" not in proc.stderr and "Warning" not in proc.stderr
    ours, recipe = lines(tmp_path / "out.de"), lines(smoke_run / "gen" / "test.detok.de")
    assert results["test_output"] == str(smoke_run / "gen" / "test.detok.de")
    assert len(ours) == len(recipe) == 200
    assert sum(a == b for a, b in zip(ours, recipe)) >= 0.99 * len(recipe)


def test_the_same_scores_as_fairseq_generate(smoke_run, hub):
    """The best hypothesis and its score for every test sentence, against the H- lines of the
    recipe's fairseq-generate output: the same model, search and length penalty."""
    expected = {}
    for line in lines(smoke_run / "gen" / "test.out"):
        if line.startswith("H-"):
            key, score, _ = line.split("\t")
            expected[int(key[2:])] = float(score)
    raw = lines(smoke_run / "raw" / "test.en")
    hypos = hub.generate([hub.encode(s) for s in raw], beam=hub.cfg.generation.beam)
    # fairseq-generate prints the score in base 2
    scores = [best[0]["score"].item() / torch.log(torch.tensor(2.0)).item() for best in hypos]
    assert max(abs(scores[i] - expected[i]) for i in range(len(raw))) < 1e-3


def test_stdin_to_stdout_keeps_order_and_empty_lines(smoke_run, hub):
    text = "Tom is here.\n\nWhere are you?\n"
    proc = run(smoke_run, stdin=text)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")[:-1]
    assert len(out) == 3 and out[1] == ""
    assert [out[0], out[2]] == hub.translate(["Tom is here.", "Where are you?"])  # the Python hub, same settings
    assert proc.stderr == ""  # no progress lines for stdin


def test_fairseq_interactive_with_the_plugins_encoders_matches(smoke_run, tmp_path):
    proc = run(smoke_run, "--print-interactive-command")
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout.strip())
    assert cmd[0] == "fairseq-interactive" and "--tokenizer" in cmd and "--bpe-vocabulary" in cmd
    raw = "".join(line + "\n" for line in lines(smoke_run / "raw" / "test.en")[:40])
    inter = subprocess.run([cli("fairseq-interactive"), *cmd[1:]], input=raw, capture_output=True, text=True,
                           timeout=300)
    assert inter.returncode == 0, inter.stderr[-2000:]
    got = [line.split("\t")[2] for line in inter.stdout.splitlines() if line.startswith("D-")]
    assert got == lines(smoke_run / "gen" / "test.detok.de")[:40]


def test_overrides_change_the_decoding(smoke_run, hub):
    """--beam 1 is greedy search: every hypothesis list has one entry."""
    proc = run(smoke_run, "--beam", "1", "--lenpen", "1.0", stdin="Tom is here.\n")
    assert proc.returncode == 0, proc.stderr
    greedy = hub.generate([hub.encode("Tom is here.")], beam=1)
    assert len(greedy[0]) == 1 and proc.stdout.strip() == hub.decode(greedy[0][0]["tokens"])


def test_a_run_without_inference_json_or_average_is_one_line(smoke_run, tmp_path):
    assert_one_error_line(run(tmp_path / "nowhere", stdin="x\n"), "no such run directory")
    work = tmp_path / "w"
    shutil.copytree(smoke_run, work, ignore=shutil.ignore_patterns("checkpoints", "*.bin"))
    (work / "checkpoint_avg.pt").unlink()
    assert_one_error_line(run(work, stdin="x\n"), "checkpoint_avg.pt is missing", "average stage")
    (work / "inference.json").unlink()
    assert_one_error_line(run(work, stdin="x\n"), "has no inference.json", "finish the run first")
    assert_one_error_line(run(smoke_run, "--input", tmp_path / "missing.txt"), "--input", "no such file")


def test_a_sentence_longer_than_the_models_positions_is_one_line(smoke_run):
    long_line = " ".join(["Tom"] * 1100)
    proc = run(smoke_run, stdin=f"Hello.\n{long_line}\n")
    assert_one_error_line(proc, "line 2 is ", "at most 1024", "split it")
    assert proc.stdout == ""  # nothing translated and printed before the check


def test_text_in_another_script_gets_a_translation(smoke_run):
    proc = run(smoke_run, stdin="東京は日本の首都です。\nМосква — столица России.\n")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split("\n")[:-1]) == 2


# --------------------------------------------------------------------------- attention figures
PLOT = [sys.executable, str(REPO / "scripts" / "plot_attention.py")]


def test_plot_attention_draws_the_figure_and_dumps_every_weight(smoke_run, hub, tmp_path):
    import numpy as np

    sentence = "The law will never be perfect, but its application should be just."
    proc = subprocess.run([*PLOT, smoke_run, "--sentence", sentence, "--out", tmp_path / "fig.png",
                           "--dump", tmp_path / "w.npz", "--heads", "1,3"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "fig.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    w = np.load(tmp_path / "w.npz")
    src = [hub.src_dict[int(i)] for i in hub.encode(sentence)]
    assert list(w["source_tokens"]) == src and src[-1] == "</s>"
    assert proc.stdout.strip() == str(w["translation"]) == hub.translate(sentence)
    S, T = len(src), len(w["target_tokens"])
    assert w["encoder_self_attention"].shape == (2, 4, S, S)  # the smoke model: 2 layers, 4 heads
    assert w["encoder_decoder_attention"].shape == (2, 4, T, S)
    for name in ("encoder_self_attention", "encoder_decoder_attention"):
        assert np.allclose(w[name].sum(-1), 1.0, atol=1e-5) and (w[name] >= 0).all()


@pytest.mark.parametrize("argv,message", [
    (["--layer", "3"], "--layer 3: the encoder has layers 1..2"),
    (["--heads", "5"], "--heads '5': the model has heads 1..4"),
    (["--out", "fig.jpg"], "give a .png, .pdf or .svg file"),
    ([], "give --out FIG.png, --dump WEIGHTS.npz or both"),
])
def test_plot_attention_bad_options_are_one_line(smoke_run, tmp_path, argv, message):
    argv = [str(tmp_path / a) if a.endswith(".jpg") else a for a in argv]
    if "--out" not in argv and argv:
        argv += ["--out", str(tmp_path / "fig.png")]
    proc = subprocess.run([*PLOT, smoke_run, "--sentence", "Hello.", *argv], capture_output=True, text=True,
                          timeout=300)
    assert_one_error_line(proc, message)


def test_check_test_set_compares_with_the_recipes_output(smoke_run):
    proc = run(smoke_run, "--check-test-set", "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["sentences"] == 200 and report["identical_lines"] >= 198
    assert abs(report["sacrebleu_translate"] - report["sacrebleu_recipe"]) <= 0.1

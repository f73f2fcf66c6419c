"""benchmarks/decode_rules.py on the smoke run: the run's own decoding scores what the recipe scored,
and a test set given as raw text goes through the run's pre-processing exactly as the recipe's did."""
import json
import sys

import pytest
from conftest import REPO, assert_one_error_line, run


def test_both_stopping_rules_scored_and_timed_on_a_trained_run(smoke_run, tmp_path):
    out = tmp_path / "rules.json"
    # --threads 1: fairseq-generate's default 2 threads spin for each other on a busy machine (this decoding
    # took 2x the CPU with them); no check here depends on the speed, only on what is decoded
    proc = run([sys.executable, REPO / "benchmarks" / "decode_rules.py", "--run", smoke_run, "--trials", "1",
                "--threads", "1", "--decodings", "own,t2t,min0", "--test-set", "raw again", smoke_run / "raw" / "test.en",
                smoke_run / "raw" / "test.de", "--out", out], fork=True)  # the script's contract: the test below
    data = json.loads(out.read_text())
    assert data["commit"] and data["machine"] and "decode_rules.py" in data["command"]
    recipe = json.loads((smoke_run / "results.json").read_text())
    own, again = data["result"]["test_sets"]["the run's test set"], data["result"]["test_sets"]["raw again"]
    assert own["decodings"]["the run's own"]["sacrebleu"] == pytest.approx(recipe["sacrebleu"], abs=0.01)
    assert own["decodings"]["the run's own"]["bleu_t2t"] == pytest.approx(recipe["bleu_t2t"], abs=0.01)
    assert list(own["decodings"]) == ["the run's own", "paper, t2t stop", "paper, t2t stop, --min-len 0"]
    # fairseq's --min-len 1 never outputs an empty translation; with 0 (the paper's code) each empty one
    # is a sentence the two decodings translate differently
    assert own["decodings"]["paper, t2t stop"]["empty_outputs"] == 0
    assert own["decodings"]["paper, t2t stop, --min-len 0"]["empty_outputs"] <= \
        own["sentences"] - own["same_output_min_len_1_vs_0"]
    for name in own["decodings"]:  # the same sentences through the benchmark's pre-processing: same scores
        for key in ("sacrebleu", "bleu_t2t", "bleu_t2t_2018", "bleu_compound_split"):
            assert again["decodings"][name][key] == own["decodings"][name][key], (name, key)
    assert own["sentences"] == recipe["test_sentences"] and "sent/s" in proc.stdout


def test_it_refuses_a_missing_test_set_file(smoke_run, tmp_path):
    proc = run([sys.executable, REPO / "benchmarks" / "decode_rules.py", "--run", smoke_run, "--test-set", "x",
                tmp_path / "no.en", tmp_path / "no.de", "--out", tmp_path / "o.json"], check=False)
    assert_one_error_line(proc, "--test-set x", "is not a file")

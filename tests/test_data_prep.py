"""The data-preparation benchmark's arithmetic and corpus (attn_kit.prep_cost, attn_kit.bench.corpus),
the recipes' --bpe-learn-pairs (BPE learned on a sample reaches subword-nmt as the sample), and
the projection the recipes' --dry-run prints. No big corpus: the benchmark itself is
benchmarks/data_prep.py, its results benchmarks/results/cpu2core_data_prep.json."""
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from attn_kit import prep_cost
from attn_kit.bench import corpus as C
from attn_kit.bench.data_prep import part_of_command, part_of_step

SENTENCES = [  # shapes: punctuation, capitals, numbers
    ("The 3 houses, near Berlin, were sold on Monday.", "Die 3 Häuser bei Berlin wurden am Montag verkauft."),
    ("\"We won't stop,\" she said.", "\"Wir hören nicht auf\", sagte sie."),
    ("NATO met in 2014 - again?", "Die NATO traf sich 2014 - wieder?"),
    ("Prices rose by 12.5 percent last year.", "Die Preise stiegen letztes Jahr um 12,5 Prozent."),
]  # each pair with its own chunk counts (the test below finds a pair's shape by them)


def toy_vocabulary(size=3000, tail=0.02, burstiness=0.0) -> C.Vocabulary:
    """Zipf's law over made-up words: p(rank r) proportional to 1/r."""
    words = [f"w{chr(97 + i % 26)}{i}" for i in range(size)]
    probs = 1 / np.arange(1, size + 1)
    return C.Vocabulary(words, probs / probs.sum() * (1 - tail), tail, burstiness)


def shapes():
    return [(C.parse_shape(s), C.parse_shape(t)) for s, t in SENTENCES]


# ---------------------------------------------------------------------------------------------- arithmetic
def test_power_fit_amdahl_and_memory_by_hand():
    """Points on t = 0.002 n exactly give a = 0.002, b = 1; on t = sqrt(n): a = 1, b = 0.5. A part that
    takes 100 s on one worker and 60 s on two has serial share (0.6 - 0.5) / 0.5 = 0.2, so 100 s on two
    workers is 100 * (0.2 + 0.8/16) / (0.2 + 0.8/2) = 41.67 s on 16. Memory 100 MB on one worker and
    150 MB on two: 50 MB + 50 MB per worker, so 850 MB on 16."""
    fit = prep_cost.fit_power([(1000, 2.0), (10000, 20.0), (100000, 200.0)])
    assert fit["a"] == pytest.approx(0.002) and fit["b"] == pytest.approx(1.0)
    fit = prep_cost.fit_power([(100, 10.0), (10000, 100.0)])
    assert fit["a"] == pytest.approx(1.0) and fit["b"] == pytest.approx(0.5)
    assert prep_cost.power(fit, 1e6) == pytest.approx(1000.0)
    assert prep_cost.serial_share(100, 60, 2) == pytest.approx(0.2)
    assert prep_cost.serial_share(100, 40, 2) == 0.0 and prep_cost.serial_share(100, 120, 2) == 1.0  # kept in [0, 1]
    assert prep_cost.amdahl(100, 0.2, 2, 16) == pytest.approx(100 * 0.25 / 0.6)
    r = prep_cost.worker_share(100, 150, 2)
    assert r == pytest.approx(1 / 3)
    assert 150 * (1 + r * (16 - 2)) == pytest.approx(850)
    with pytest.raises(ValueError):
        prep_cost.fit_power([(1000, 1.0)])


FITS = {"workers": 2,
        "time": {"tokenize": {"a": 1e-3, "b": 1.0}, "learn_bpe": {"a": 2e-4, "b": 1.2},
                 "learn_bpe@1": {"a": 3e-4, "b": 1.2}, "apply_bpe": {"a": 5e-4, "b": 1.0},
                 "sample": {"a": 1e-6, "b": 1.0}, "clean": {"a": 1e-5, "b": 1.0}, "binarize": {"a": 2e-4, "b": 1.0}},
        "serial_share": {"tokenize": 0.0, "learn_bpe": 0.5, "apply_bpe": 0.1, "sample": 1.0, "clean": 1.0,
                         "binarize": 0.2},
        "memory": {"tokenize": {"a": 100.0, "b": 0.0}, "learn_bpe": {"a": 0.001, "b": 1.0},
                   "learn_bpe@1": {"a": 0.0008, "b": 1.0}},
        "worker_memory_share": {"tokenize": 0.25, "learn_bpe": 0.0}}


def test_projection_by_hand():
    """4.5M pairs on 16 workers, BPE learned on 1M: tokenize 4500 s on 2 workers, serial share 0, is
    4500 * (1/16) / (1/2) = 562.5 s; learn 2e-4 * (1e6)^1.2 = 3169.8 s on 2, share 0.5: * (0.5 + 0.5/16) /
    (0.5 + 0.25) = 2245.3 s; apply 2250 s, share 0.1: * (0.1 + 0.9/16) / 0.55 = 639.2 s; sample (one
    process) 4.5 s; clean 45 s; binarize 900 s, share 0.2: * 0.25 / 0.6 = 375 s. Memory: tokenize
    100 MB at 2 workers, 100 * (1 + 0.25 * 14) = 450 MB on 16; learn 1000 MB (1M pairs).
    Before the speed-ups: learn on 4.5M pairs on one worker by its own fit, 3e-4 * 4.5e6^1.2, and apply
    on one worker, 2250 * (0.1 + 0.9) / (0.1 + 0.45) = 4090.9 s; no sample."""
    p = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)
    s = p["seconds"]
    assert s["tokenize"] == pytest.approx(562.5)
    assert s["learn_bpe"] == pytest.approx(2e-4 * 1e6 ** 1.2 * 0.53125 / 0.75)
    assert s["apply_bpe"] == pytest.approx(2250 * (0.1 + 0.9 / 16) / 0.55)
    assert s["sample"] == pytest.approx(4.5) and s["clean"] == pytest.approx(45)
    assert s["binarize"] == pytest.approx(375)
    assert p["total_seconds"] == pytest.approx(sum(s.values()))
    assert p["peak_mb"]["tokenize"] == pytest.approx(450) and p["peak_mb"]["learn_bpe"] == pytest.approx(1000)
    assert p["peak_mb_max"] == pytest.approx(1000) and p["learn_pairs"] == 1_000_000

    before = prep_cost.project(FITS, 4_500_000, 16, 1_000_000, legacy=True)
    assert "sample" not in before["seconds"] and before["learn_pairs"] == 4_500_000
    assert before["seconds"]["learn_bpe"] == pytest.approx(3e-4 * 4.5e6 ** 1.2)
    assert before["seconds"]["apply_bpe"] == pytest.approx(2250 / 0.55)
    assert before["peak_mb"]["learn_bpe"] == pytest.approx(0.0008 * 4.5e6)
    assert before["seconds"]["tokenize"] == s["tokenize"]  # unchanged parts project the same

    small = prep_cost.project(FITS, 500_000, 2, 1_000_000)  # fewer pairs than the sample: learn on all, no sample
    assert "sample" not in small["seconds"] and small["learn_pairs"] == 500_000
    assert small["seconds"]["learn_bpe"] == pytest.approx(2e-4 * 5e5 ** 1.2)


# ---------------------------------------------------------------------------------------------- the corpus
def test_corpus_is_deterministic_keeps_shapes_and_its_prefixes():
    vocab = (toy_vocabulary(), toy_vocabulary(tail=0.05))
    a = list(C.generate(shapes(), vocab, 300, seed=7))
    assert a == list(C.generate(shapes(), vocab, 300, seed=7))
    assert a != list(C.generate(shapes(), vocab, 300, seed=8))
    assert a[:120] == list(C.generate(shapes(), vocab, 120, seed=7))  # the benchmark's sizes are prefixes
    real = {(len(s.split()), len(t.split())) for s, t in SENTENCES}
    for s, t in a:  # each pair keeps a real pair's chunk counts, punctuation, capitals and number lengths
        assert (len(s.split()), len(t.split())) in real
        shape = [p for p in shapes() if len(p[0]) == len(s.split()) and len(p[1]) == len(t.split())][0]
        for (kind, lead, core, trail), chunk in zip(shape[0], s.split()):
            if kind == "k":
                assert chunk == lead
            elif kind == "d":  # digits redrawn, everything else kept
                original = lead + core + trail
                assert len(chunk) == len(original)
                assert all(c.isdigit() if o.isdigit() else c == o for c, o in zip(chunk, original))
            else:
                assert chunk.startswith(lead) and chunk.endswith(trail)
                word = chunk[len(lead):len(chunk) - len(trail) if trail else None]
                assert word[:1].isupper() == core[:1].isupper()


def test_type_growth_is_heaps_like_and_topics_slow_it():
    """Types grow sublinearly and keep growing (compounds below the list); repeating a document's
    words gives fewer types after as many tokens, which is how the benchmark matches news text."""
    plain = [s for s, _ in C.generate(shapes(), (toy_vocabulary(), toy_vocabulary()), 3000, seed=1)]
    growth = C.type_growth(plain)
    fit = C.heaps_fit(growth)
    assert 0.3 < fit["beta"] < 0.95
    assert all(v1 >= v0 for (_, v0), (_, v1) in zip(growth, growth[1:]))
    assert growth[-1][1] > 3000 * 0.5  # more types than a 3000-word list can hold alone: compounds
    bursty = [s for s, _ in C.generate(shapes(), (toy_vocabulary(burstiness=0.5), toy_vocabulary()), 3000, seed=1)]
    tokens = growth[-1][0]
    assert C.type_growth(bursty)[-1][1] < C.types_at(growth, min(tokens, C.type_growth(bursty)[-1][0]))
    assert C.types_at([(1000, 100), (10000, 1000)], 3162) == pytest.approx(316.2, rel=1e-3)  # log-log interpolation
    assert C.heaps_fit([(1000, 100), (10000, 1000), (100000, 10000)])["beta"] == pytest.approx(1.0)


def test_parts_are_named_by_the_recipes_commands():
    assert part_of_command(["subword-nmt", "learn-joint-bpe-and-vocab", "--input", "a"]) == "learn_bpe"
    assert part_of_command(["subword-nmt", "apply-bpe", "-c", "codes"]) == "apply_bpe"
    assert part_of_command(["/x/bin/fairseq-preprocess", "--source-lang", "en"]) == "binarize"
    assert part_of_step("sacremoses normalize + tokenize -l en: a -> b") == "tokenize"
    assert part_of_step("clean-corpus-n: keep training pairs of 1-250 tokens") == "clean"
    assert part_of_step("learn on 5 training pairs drawn at random (seed 1) into x when there are more "
                        "(--bpe-learn-pairs)") == "sample"


# ---------------------------------------------------------------------------------------------- the recipe
def bpe_stage(tmp_path, n_pairs, *options, dry_run=False):
    """The recipe's bpe stage (recipes/parallel.sh's arguments) on ``n_pairs`` tokenized toy pairs;
    the learn command's input files and their line counts as subword-nmt got them."""
    from attn_kit.pipeline.stages import Context
    from attn_kit.recipes import parallel, wmt14

    tmp_path.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (tmp_path / f"{split}.{lang}").write_text("x\n")
    args = parallel.parse_args(["--src", "en", "--tgt", "de", *(x for s in ("train", "valid", "test")
                                                                   for x in (f"--{s}", str(tmp_path / s))),
                                "--workdir", str(tmp_path / "w"), "--workers", "1", "--bpe-merges", "30",
                                "--ngpus", "0", *options])
    stage = next(s for s in wmt14.stages(args) if s.name == "bpe")
    vocab = (toy_vocabulary(size=200), toy_vocabulary(size=200))
    pairs = list(C.generate(shapes(), vocab, n_pairs, seed=2))
    for path in stage.inputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        side = 0 if path.name.endswith(".en") else 1
        path.write_text("".join(p[side] + "\n" for p in (pairs if path.name.startswith("train") else pairs[:20])))
    learned = []

    class Recording(Context):
        def sh(self, cmd, *a, **k):
            cmd = [str(c) for c in cmd]
            if "learn-joint-bpe-and-vocab" in cmd:
                inputs = cmd[cmd.index("--input") + 1:cmd.index("-s")]
                learned.append([(Path(i).name, Path(i).read_text().splitlines() if Path(i).exists() else None)
                                for i in inputs])
            return super().sh(cmd, *a, **k)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stage.run(Recording(args.workdir, dry_run=dry_run, stage="bpe"))
    return stage, pairs, learned, out.getvalue()


def test_bpe_learned_on_a_sample_reaches_subword_nmt_as_the_sample(tmp_path):
    stage, pairs, learned, _ = bpe_stage(tmp_path, 120, "--bpe-learn-pairs", "40")
    assert stage.options["bpe_learn_pairs"] == 40
    (src_name, src_lines), (tgt_name, tgt_lines) = learned[0]
    assert (src_name, tgt_name) == ("learn-sample.en", "learn-sample.de")
    assert len(src_lines) == len(tgt_lines) == 40
    index = {p: i for i, p in enumerate(pairs)}  # whole pairs, in corpus order, no repeats
    picked = [index[p] for p in zip(src_lines, tgt_lines)]
    assert picked == sorted(set(picked))
    bpe = Path(stage.outputs[0]).parent
    assert not (bpe / "learn-sample.en").exists()  # the sample is scratch: removed once learned
    assert len((bpe / "train.en").read_text().splitlines()) == 120  # applied to every pair
    assert (bpe / "codes").read_text().count("\n") > 1


def test_bpe_learned_on_every_pair_when_there_are_fewer_or_0(tmp_path):
    _, _, learned, _ = bpe_stage(tmp_path / "a", 30, "--bpe-learn-pairs", "40")
    assert [name for name, _ in learned[0]] == ["train.en", "train.de"]
    _, _, learned, printed = bpe_stage(tmp_path / "b", 30, "--bpe-learn-pairs", "0", dry_run=True)
    assert [name for name, _ in learned[0]] == ["train.en", "train.de"] and "--bpe-learn-pairs" not in printed
    assert "--num-workers 1" in printed  # learn and apply both get --workers
    assert "apply-bpe" in printed and "--input" in printed.split("apply-bpe", 1)[1].splitlines()[0]


def write_results(path: Path):
    path.write_text(json.dumps({"machine": "a test machine", "result": {"fits": FITS,
                                                                       "settings": {"sizes": [1000, 1000000]}}}))


def dry_run(*options) -> str:
    from attn_kit.recipes import wmt14

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        wmt14.main(["--dry-run", "--ngpus", "0", "--workdir", "/tmp/never-created-data-prep", *options])
    return out.getvalue()


def test_dry_run_prints_the_projection_for_the_runs_pair_and_workers(tmp_path, monkeypatch):
    results = tmp_path / "data_prep.json"
    write_results(results)
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    printed = dry_run("--workers", "16", "--bpe-learn-pairs", "1000000")
    line = next(l for l in printed.splitlines() if "data preparation, projected" in l)
    p = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)
    assert "WMT14 en-de (~4.5M pairs) on --workers 16" in line and "1000000 sampled pairs" in line
    assert prep_cost.minutes_text(p["total_seconds"]) in line and "peak memory 1.0 GB" in line
    fr = next(l for l in dry_run("--pair", "en-fr", "--workers", "2", "--bpe-learn-pairs", "0").splitlines()
              if "data preparation, projected" in l)
    assert "WMT14 en-fr (~36M pairs) on --workers 2" in fr and "every pair" in fr
    bundled = dry_run("--bundled")  # a corpus of its own: no WMT projection
    assert "data preparation, projected" not in bundled and "no projection" not in bundled
    monkeypatch.setattr(prep_cost, "RESULTS", tmp_path / "missing.json")
    assert "no projection" in dry_run()
    assert not Path("/tmp/never-created-data-prep").exists()

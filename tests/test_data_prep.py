"""The data-preparation benchmark's arithmetic and corpus (attn_kit.planning.prep_cost, lab.bench.corpus),
the recipes' --bpe-learn-pairs (BPE learned on a sample reaches subword-nmt as the sample), and
the projection the recipes' --dry-run prints. No big corpus: the benchmark itself is
benchmarks/data_prep.py, its results benchmarks/results/cpu2core_data_prep.json."""
import contextlib
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from attn_kit.planning import prep_cost
from lab.bench import corpus as C
from lab.bench.data_prep import part_of_command, part_of_step, planning_table

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
def test_power_fit_by_hand():
    """Points on t = 0.002 n exactly give a = 0.002, b = 1; on t = sqrt(n): a = 1, b = 0.5."""
    fit = prep_cost.fit_power([(1000, 2.0), (10000, 20.0), (100000, 200.0)])
    assert fit["a"] == pytest.approx(0.002) and fit["b"] == pytest.approx(1.0)
    fit = prep_cost.fit_power([(100, 10.0), (10000, 100.0)])
    assert fit["a"] == pytest.approx(1.0) and fit["b"] == pytest.approx(0.5)
    assert prep_cost.power(fit, 1e6) == pytest.approx(1000.0) and prep_cost.power(None, 1e6) == 0.0
    with pytest.raises(ValueError):
        prep_cost.fit_power([(1000, 1.0)])


FITS = {"workers": 2, "fitted_from_pairs": 100000,
        "cpu_serial": {"tokenize": {"a": 1e-4, "b": 1.0}, "learn_bpe": {"a": 2e-4, "b": 1.2},
                       "apply_bpe": {"a": 5e-5, "b": 1.0}, "sample": {"a": 1e-6, "b": 1.0},
                       "clean": {"a": 1e-5, "b": 1.0}, "binarize": {"a": 1e-4, "b": 1.0}},
        "cpu_parallel": {"tokenize": {"a": 2e-3, "b": 1.0}, "learn_bpe": {"a": 1e-4, "b": 1.0},
                         "apply_bpe": {"a": 1e-3, "b": 1.0}, "binarize": {"a": 3e-4, "b": 1.0}},
        "memory_main": {"tokenize": {"a": 50.0, "b": 0.0}, "learn_bpe": {"a": 0.001, "b": 1.0},
                        "apply_bpe": {"a": 40.0, "b": 0.0}, "sample": {"a": 30.0, "b": 0.0},
                        "clean": {"a": 30.0, "b": 0.0}, "binarize": {"a": 300.0, "b": 0.0}},
        "memory_workers": {"tokenize": {"a": 100.0, "b": 0.0}, "learn_bpe": {"a": 200.0, "b": 0.0},
                           "apply_bpe": {"a": 60.0, "b": 0.0}},
        "main_chunk_share": {"binarize": 0.5, "tokenize": 0.0}}


def test_linear_fit_with_a_floor_by_hand():
    """The per-token parts: y = c + k x by least squares; where the free fit's c is negative (a part
    whose small sizes ran relatively slower), through the origin instead, never below 0."""
    fit = prep_cost.fit_linear([(1000, 3.0), (2000, 5.0), (3000, 7.0)])
    assert fit["c"] == pytest.approx(1.0) and fit["k"] == pytest.approx(0.002)
    fit = prep_cost.fit_linear([(1000, 1.0), (2000, 3.0)])  # free: c = -1, k = 0.002
    # through the origin: k = (1000 * 1 + 2000 * 3) / (1000^2 + 2000^2) = 7000 / 5e6
    assert fit["c"] == 0.0 and fit["k"] == pytest.approx(0.0014)
    assert prep_cost.power(fit, 10000) == pytest.approx(14.0)


def test_the_filed_fits_never_make_a_per_token_part_sublinear_or_negative():
    """issue 38: apply-bpe was fitted as pairs^0.37 and binarize on 16 cores had a negative serial
    term; per-token parts are linear with c >= 0 in the filed results, and every projection of
    every part is positive and grows at least linearly with the pairs beyond the fitted sizes."""
    fits = prep_cost.load()["result"]["fits"]
    for kind in ("cpu_serial", "cpu_parallel"):
        for part, fit in fits[kind].items():
            if part in prep_cost.PER_TOKEN:
                assert "k" in fit and fit["c"] >= 0 and fit["k"] >= 0, (kind, part, fit)
            else:
                assert fit["b"] > 0, (kind, part, fit)
    for workers in (2, 16):
        zero, small, big = (prep_cost.project(fits, n, workers, 1)["seconds"] for n in (2, 1_000_000, 36_000_000))
        for part in prep_cost.PER_TOKEN:
            if part in small:  # what a part adds per pair does not shrink with the corpus
                assert zero[part] >= 0 and big[part] - zero[part] >= 0.99 * 36 * (small[part] - zero[part]), \
                    (workers, part)


def test_workers_memory_grows_by_the_factor_measured_per_doubling():
    """Workers share pages (PSS counts a shared page once): the benchmark's 2- and 4-worker runs grew
    their workers' memory ~1.4x, not 2x. With 1.5x per doubling measured, 16 workers (3 doublings of 2):
    tokenize 50 + 100 x 1.5^3 = 387.5 MB; without a measured factor, in proportion: 50 + 100 x 8."""
    fits = {**FITS, "memory_workers_per_doubling": {"tokenize": 1.5}}
    assert prep_cost.part_peak_mb(fits, "tokenize", 1e6, 16) == pytest.approx(387.5)
    assert prep_cost.part_peak_mb(FITS, "tokenize", 1e6, 16) == pytest.approx(850.0)
    assert prep_cost.part_peak_mb(fits, "tokenize", 1e6, 2) == pytest.approx(150.0)  # as measured


def test_projection_by_hand():
    """4.5M pairs on 16 workers, BPE learned on 1M: tokenize 450 s serial + 9000 s parallel / 16 =
    1012.5 s; learn 2e-4 * (1e6)^1.2 = 3169.8 s serial + 100 s / 16; apply 225 + 4500 / 16 = 506.25 s;
    sample (one process) 4.5 s; clean 45 s. Binarize: 450 s serial, 1350 s parallel, and its main process
    binarized a chunk itself after its pool, half of the work, c = 0.5 * 1800 = 900 s, of which it did
    c / 2 = 450 s when measured on 2 workers: 450 - 450 + (1350 + 450) / 16 + 900 / 16 = 168.75 s (on one
    worker: all of it, 1800 s). Memory on 16 workers:
    main + workers * 16 / 2: tokenize 50 + 800 = 850 MB, learn 1000 + 1600 = 2600 MB (1M pairs).
    Before the speed-ups: learn on 4.5M pairs in one process, 2e-4 * 4.5e6^1.2 + 450 s, and apply in one
    process, 225 + 4500 = 4725 s; no sample."""
    p = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)
    s = p["seconds"]
    assert s["tokenize"] == pytest.approx(1012.5)
    assert s["learn_bpe"] == pytest.approx(2e-4 * 1e6 ** 1.2 + 100 / 16)
    assert s["apply_bpe"] == pytest.approx(506.25)
    assert s["sample"] == pytest.approx(4.5) and s["clean"] == pytest.approx(45)
    assert s["binarize"] == pytest.approx(168.75)
    assert prep_cost.part_seconds(FITS, "binarize", 4_500_000, 1) == pytest.approx(1800)
    assert p["total_seconds"] == pytest.approx(sum(s.values()))
    assert p["peak_mb"]["tokenize"] == pytest.approx(850) and p["peak_mb"]["learn_bpe"] == pytest.approx(2600)
    assert p["peak_mb_max"] == pytest.approx(2600) and p["learn_pairs"] == 1_000_000

    before = prep_cost.project(FITS, 4_500_000, 16, 1_000_000, legacy=True)
    assert "sample" not in before["seconds"] and before["learn_pairs"] == 4_500_000
    assert before["seconds"]["learn_bpe"] == pytest.approx(2e-4 * 4.5e6 ** 1.2 + 450)
    assert before["seconds"]["apply_bpe"] == pytest.approx(4725)
    assert before["peak_mb"]["learn_bpe"] == pytest.approx(4500 + 200 / 2)
    assert before["seconds"]["tokenize"] == s["tokenize"]  # unchanged parts project the same

    small = prep_cost.project(FITS, 500_000, 2, 1_000_000)  # fewer pairs than the sample: learn on all, no sample
    assert "sample" not in small["seconds"] and small["learn_pairs"] == 500_000
    assert small["seconds"]["learn_bpe"] == pytest.approx(2e-4 * 5e5 ** 1.2 + 50 / 2)


def test_planning_table_is_the_projection():
    from attn_kit.recipes.wmt14_data import PAIRS

    table = planning_table(FITS, PAIRS, 1_000_000).splitlines()
    assert len(table) == 2 + 2 * 2 * 2  # header, rule; 2 pairs x 2 core counts x before/now
    p = prep_cost.project(FITS, 36_000_000, 16, 1_000_000)
    row = next(r for r in table if r.startswith("| EN-FR | 36M | 16 | now"))
    assert f"**{prep_cost.minutes_text(p['total_seconds'])}**" in row and f"{p['peak_mb_max'] / 1024:.1f} GB" in row
    # a pair measured on a corpus of its own (docs/scaling.md's table once EN-FR's file is filed): its rows
    # come from its own fits and words per pair, the other pair's stay as they were
    slower = {**FITS, "cpu_parallel": {**FITS["cpu_parallel"], "tokenize": {"a": 4e-3, "b": 1.0}}}
    own = planning_table(FITS, PAIRS, 1_000_000, own={"en-fr": (slower, None)}).splitlines()
    q = prep_cost.project(slower, 36_000_000, 16, 1_000_000)
    assert f"**{prep_cost.minutes_text(q['total_seconds'])}**" in next(
        r for r in own if r.startswith("| EN-FR | 36M | 16 | now")) and q["total_seconds"] > p["total_seconds"]
    assert [r for r in own if r.startswith("| EN-DE")] == [r for r in table if r.startswith("| EN-DE")]


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


def test_crawled_text_joins_pairs_and_adds_noise_only_to_them():
    """``long_share``: that share of pairs are two real pairs joined (both sides), so the words per pair
    grow by the share; ``noise``: in those pairs only, that share of words are strings no list holds.
    Without them the corpus is the one the filed measurements ran on (no extra random numbers drawn)."""
    vocab = (toy_vocabulary(), toy_vocabulary())
    plain = list(C.generate(shapes(), vocab, 4000, seed=3))
    assert plain == list(C.generate(shapes(), vocab, 4000, seed=3, long_share=0.0, noise=0.0))
    crawled = list(C.generate(shapes(), vocab, 4000, seed=3, long_share=0.3, noise=0.1))
    assert crawled[:1000] == list(C.generate(shapes(), vocab, 1000, seed=3, long_share=0.3, noise=0.1))
    singles = {(len(s.split()), len(t.split())) for s, t in SENTENCES}
    doubles = {(a + c, b + d) for a, b in singles for c, d in singles}
    lengths = [(len(s.split()), len(t.split())) for s, t in crawled]
    assert all(n in singles or n in doubles for n in lengths)
    long = [pair for pair, n in zip(crawled, lengths) if n not in singles]
    assert 0.3 * 4000 * 0.85 < len(long) < 0.3 * 4000 * 1.15  # some doubles have a single's lengths too
    listed = set(vocab[0].words)

    def words(pairs):  # the source side's words (not numbers, not punctuation), case undone
        ws = [w.strip(".,;:!?\"'()-").lower() for s, _ in pairs for w in s.split()]
        return [w for w in ws if w.isalnum() and not w.isdigit()]

    def unlisted(ws):  # neither a list word nor a compound of two
        return [w for w in ws if not all(p in listed for p in re.findall(r"w[a-z]\d+", w))
                or not re.fullmatch(r"(w[a-z]\d+){1,2}", w)]
    short_words = words([pair for pair, n in zip(crawled, lengths) if n in singles and n not in doubles])
    assert not unlisted(short_words)
    long_words = words(long)
    assert 0.05 < len(unlisted(long_words)) / len(long_words) < 0.15


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
    assert part_of_command(["/x/bin/python", "-m", "subword_nmt.apply_bpe", "-c", "codes"]) == "apply_bpe"
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
    from attn_kit.recipes import parallel, translation

    tmp_path.mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        for lang in ("en", "de"):
            (tmp_path / f"{split}.{lang}").write_text("x\n")
    args = parallel.parse_args(["--src", "en", "--tgt", "de", *(x for s in ("train", "valid", "test")
                                                                   for x in (f"--{s}", str(tmp_path / s))),
                                "--workdir", str(tmp_path / "w"), "--workers", "1", "--bpe-merges", "30",
                                "--ngpus", "0", *options])
    stage = next(s for s in translation.stages(args) if s.name == "bpe")
    vocab = (toy_vocabulary(size=200), toy_vocabulary(size=200))
    pairs = list(C.generate(shapes(), vocab, n_pairs, seed=2))
    for path in stage.inputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        side = 0 if path.name.endswith(".en") else 1
        path.write_text("".join(p[side] + "\n" for p in (pairs if path.name.startswith("train") else pairs[:20])))
    learned, thresholds = [], []

    class Recording(Context):
        def sh(self, cmd, *a, **k):
            cmd = [str(c) for c in cmd]
            if "learn-joint-bpe-and-vocab" in cmd:
                inputs = cmd[cmd.index("--input") + 1:cmd.index("-s")]
                learned.append([(Path(i).name, Path(i).read_text().splitlines() if Path(i).exists() else None)
                                for i in inputs])
            if "subword_nmt.apply_bpe" in cmd:
                thresholds.append(int(cmd[cmd.index("--vocabulary-threshold") + 1]))
            return super().sh(cmd, *a, **k)

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stage.run(Recording(args.workdir, dry_run=dry_run, stage="bpe"))
    return stage, pairs, learned, thresholds, out.getvalue()


def test_bpe_learned_on_a_sample_reaches_subword_nmt_as_the_sample(tmp_path):
    stage, pairs, learned, thresholds, _ = bpe_stage(tmp_path, 120, "--bpe-learn-pairs", "40")
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
    # the vocabulary counts the sample only: apply-bpe keeps a subword seen 50 x 40/120 times in it
    assert json.loads((bpe / "learn.json").read_text()) == {"pairs": 40, "of": 120, "seed": 1,
                                                             "vocabulary_threshold": 17}
    assert thresholds == [17] * 6 and bpe / "learn.json" in stage.scratch


def test_bpe_learned_on_every_pair_when_there_are_fewer_or_0(tmp_path):
    _, _, learned, thresholds, _ = bpe_stage(tmp_path / "a", 30, "--bpe-learn-pairs", "40")
    assert [name for name, _ in learned[0]] == ["train.en", "train.de"] and thresholds == [50] * 6
    _, _, learned, _, printed = bpe_stage(tmp_path / "b", 30, "--bpe-learn-pairs", "0", dry_run=True)
    assert [name for name, _ in learned[0]] == ["train.en", "train.de"] and "--bpe-learn-pairs" not in printed
    assert "--num-workers 1" in printed  # learn and apply both get --workers
    apply = printed.split("-m subword_nmt.apply_bpe", 1)[1].splitlines()[0]  # the module: the command is one process
    assert "--num-workers 1" in apply and "--input" in apply


# Issue 50: what the dry run adds before the data stages, from the archives' sizes. By hand, EN-DE:
EN_DE_ARCHIVES = 657_632_379 + 918_311_367 + 80_418_416 + 1_900_000 + 3_300_000  # published + the test sets' estimates
EN_DE_TEXT, EN_DE_PAIRS = 1_358_406_800, 4_508_785  # the training split's text as Hugging Face's copy stores it
MIB = 1 << 20
ASSUMED_DOWNLOAD = EN_DE_ARCHIVES / MIB / 10  # seconds at the assumed 10 MB/s


def write_results(path: Path):
    path.write_text(json.dumps({"machine": "a test machine", "result": {"fits": FITS,
                                                                       "settings": {"sizes": [1000, 1000000]}}}))


def dry_run(*options) -> str:
    from attn_kit.recipes import translation

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        translation.main(["--dry-run", "--ngpus", "0", "--workdir", "/tmp/never-created-data-prep", *options])
    return out.getvalue()


def test_dry_run_prints_the_projection_for_the_runs_pair_and_workers(tmp_path, monkeypatch):
    results = tmp_path / "data_prep.json"
    write_results(results)
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    monkeypatch.setattr(prep_cost, "EXTRACT_RESULTS", tmp_path / "missing.json")  # the download alone added
    printed = dry_run("--workers", "16", "--bpe-learn-pairs", "1000000")
    line = next(l for l in printed.splitlines() if "data preparation, projected" in l)
    p = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)
    assert "WMT14 en-de (~4.5M pairs) on --workers 16" in line and "1000000 sampled pairs" in line
    assert f": {prep_cost.minutes_text(p['total_seconds'] + ASSUMED_DOWNLOAD)} (" in line
    assert f"peak memory {p['peak_mb_max'] / 1024:.1f} GB" in line
    fr = next(l for l in dry_run("--pair", "en-fr", "--workers", "2", "--bpe-learn-pairs", "0").splitlines()
              if "data preparation, projected" in l)
    assert "WMT14 en-fr (~36M pairs) on --workers 2" in fr and "every pair" in fr
    bundled = dry_run("--bundled")  # a corpus of its own: no WMT projection
    assert "data preparation, projected" not in bundled and "no projection" not in bundled
    monkeypatch.setattr(prep_cost, "RESULTS", tmp_path / "missing.json")
    assert "no projection" in dry_run()
    assert not Path("/tmp/never-created-data-prep").exists()


def test_a_corpus_of_longer_pairs_costs_what_as_many_more_pairs_cost():
    """Issue 38: the parts work per word, so pairs twice as long as the benchmark corpus's cost what
    twice the pairs cost (and BPE learned on a sample of them, what a sample of twice the pairs costs)."""
    longer = prep_cost.project(FITS, 4_500_000, 16, 1_000_000, words_scale=2.0)
    more = prep_cost.project(FITS, 9_000_000, 16, 2_000_000)
    assert longer["seconds"] == pytest.approx(more["seconds"]) and longer["peak_mb"] == pytest.approx(more["peak_mb"])
    assert longer["learn_pairs"] == 1_000_000  # still the sample's pairs


def test_the_dry_run_projects_a_range_by_words_then_the_extracted_texts_size(tmp_path, monkeypatch):
    """Issue 38: before extraction, from the benchmark corpus's words per pair (newstest's lengths,
    the low end) to WMT14's estimated words per pair (the high end); once the training text is
    extracted, one projection at its size in words (its bytes / newstest2014's bytes per word)."""
    from attn_kit.recipes.wmt14_data import NEWSTEST2014_BYTES_PER_WORD, PAIRS

    results = tmp_path / "data_prep.json"
    results.write_text(json.dumps({"machine": "a test machine", "result": {
        "fits": FITS, "settings": {"sizes": [1000, 1000000]}, "corpus": {"words_per_pair": {"1000000": 37.5}}}}))
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    monkeypatch.setattr(prep_cost, "EXTRACT_RESULTS", tmp_path / "missing.json")  # the download alone added
    data = tmp_path / "data"
    lines = dry_run("--workers", "16", "--bpe-learn-pairs", "1000000", "--data-workdir", str(data)).splitlines()
    line = next(l for l in lines if "data preparation, projected" in l)
    low, high = (prep_cost.project(FITS, 4_500_000, 16, 1_000_000, words_scale=x)["total_seconds"] + ASSUMED_DOWNLOAD
                 for x in (1.0, PAIRS["en-de"].words_per_pair / 37.5))
    assert f": {prep_cost.minutes_text(low)} to {prep_cost.minutes_text(high)} (" in line
    assert "low end at 37.5 words per pair" in lines[lines.index(line) + 1]
    assert f"high end at {PAIRS['en-de'].words_per_pair:.1f} words per pair" in lines[lines.index(line) + 1]
    (data / "raw").mkdir(parents=True)
    for lang, size in (("en", 300_000_000), ("de", 365_000_000)):
        with open(data / "raw" / f"train.{lang}", "wb") as f:
            f.truncate(size)  # sparse: only the size is read
    lines = dry_run("--workers", "16", "--bpe-learn-pairs", "1000000", "--data-workdir", str(data)).splitlines()
    line = next(l for l in lines if "data preparation, projected" in l)
    words = 665_000_000 / NEWSTEST2014_BYTES_PER_WORD["de"]
    at = prep_cost.project(FITS, 4_500_000, 16, 1_000_000, words_scale=words / 4_500_000 / 37.5)
    assert f": {prep_cost.minutes_text(at['total_seconds'] + ASSUMED_DOWNLOAD)} (" in line
    assert f"at {words / 4_500_000:.1f} words per pair (~{words / 1e6:.0f}M words, from the size of" \
        in lines[lines.index(line) + 1]


def test_each_pair_is_projected_from_its_own_corpus_shape_where_filed(tmp_path, monkeypatch):
    """EN-FR was projected from the EN-DE-shaped corpus; a results file measured on the EN-FR corpus
    (benchmarks/data_prep.py --pair en-fr) is what its projection reads once filed, and the dry run
    names the corpus each projection comes from; EN-DE's stays on its own."""
    en_de = tmp_path / "cpu2core_data_prep.json"
    monkeypatch.setattr(prep_cost, "RESULTS", en_de)
    en_fr = prep_cost.results_path("en-fr")
    assert en_fr.parent == tmp_path and en_fr != en_de and prep_cost.results_path("en-de") == en_de
    fr_fits = {**FITS, "cpu_parallel": {k: {**v, "a": 2 * v["a"]} for k, v in FITS["cpu_parallel"].items()}}
    for path, fits, corpus in ((en_de, FITS, {"pair": "en-de"}), (en_fr, fr_fits, {"pair": "en-fr", "long_share": 0.36})):
        path.write_text(json.dumps({"machine": "a test machine", "result": {
            "fits": fits, "settings": {"sizes": [1000, 1000000]}, "corpus": {**corpus, "words_per_pair": {"1000000": 40.0}}}}))
    fr = prep_cost.recipe_lines("en-fr", 36_000_000, 16, 1_000_000)
    p = prep_cost.project(fr_fits, 36_000_000, 16, 1_000_000)
    assert p["total_seconds"] > prep_cost.project(FITS, 36_000_000, 16, 1_000_000)["total_seconds"]
    assert prep_cost.minutes_text(p["total_seconds"]) in fr[0] and en_fr.name in fr[2]
    assert "EN-FR newstest shapes, 36% of pairs joined as crawled long lines" in fr[1]
    de = prep_cost.recipe_lines("en-de", 4_500_000, 16, 1_000_000)
    assert en_de.name in de[2] and "EN-DE newstest shapes)" in de[1]
    en_fr.unlink()  # not filed: EN-FR from the EN-DE corpus, said so
    assert en_de.name in prep_cost.recipe_lines("en-fr", 36_000_000, 16, 1_000_000)[2]


def test_words_per_pair_counts_both_sides_of_the_first_n_pairs(tmp_path):
    from lab.bench.data_prep import words_per_pair

    (tmp_path / "c.en").write_text("a b\nc d e f\n  g  \nh\n")
    (tmp_path / "c.de").write_text("x\ny z\n\nw v u\n")
    # pair 1: 2 + 1 words; pair 2: 4 + 2; pair 3: 1 + 0; pair 4: 1 + 3
    assert words_per_pair(tmp_path / "c", [2, 4]) == {"2": 4.5, "4": 3.5}


# ---------------------------------------------------------------------------------------------- download, extraction, disk


def write_extract_results(path: Path, rates=(2000, 100, 50, 80), tokenized=((1.0, 5.0), (1.1, 4.0))):
    """A results file of benchmarks/data_extract.py with round rates (MB per CPU second) and ratios."""
    path.write_text(json.dumps({"machine": "a test machine", "result": {
        "rates_mb_per_cpu_s": dict(zip(("sha256", "extract_tgz", "extract_tar_of_gz", "concatenate"), rates)),
        "tokenized": {pair: {"growth": g, "bytes_per_token": b} for pair, (g, b) in zip(("en-de", "en-fr"), tokenized)}}}))


def test_the_dry_run_adds_download_and_extraction_and_prints_the_disk_by_hand(tmp_path, monkeypatch):
    """Download: 1661562162 bytes at the assumed 10 MB/s = 158.5 s. Extraction at the file's rates (sha256
    2000, .tgz 100 MB per CPU second of archive, joining 80 MB of text a second): 1584.6 MB x (1/2000 + 1/100)
    + 1295.5 MB / 80 = 32.8 s. Disk (growth 1.0, 5 bytes a token, 1.05-1.35 BPE pieces a token): 9.5 to 10.2 GB."""
    results, extract = tmp_path / "data_prep.json", tmp_path / "extract.json"
    write_results(results)
    write_extract_results(extract)
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    monkeypatch.setattr(prep_cost, "EXTRACT_RESULTS", extract)
    data = tmp_path / "data"
    lines = [l.lstrip(" #") for l in dry_run("--workers", "16", "--bpe-learn-pairs", "1000000", "--data-workdir",
                                             str(data)).splitlines()]
    line = next(l for l in lines if l.startswith("data preparation, projected"))
    download, extract_s = EN_DE_ARCHIVES / MIB / 10, EN_DE_ARCHIVES / MIB * (1 / 2000 + 1 / 100) + EN_DE_TEXT / MIB / 80
    assert round(download, 1) == 158.5 and round(extract_s, 1) == 32.8
    total = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)["total_seconds"] + download + extract_s
    assert f": {prep_cost.minutes_text(total)} (download 3 min, extract 33 s, tokenize " in line
    assert "fits of" in lines[lines.index(line) + 2] and "not included" not in lines[lines.index(line) + 2]
    dl = next(l for l in lines if l.startswith("download:"))
    assert dl.startswith("download: 1.66 GB, 5 archives (sizes as published; estimated: wmt13-test.tgz ~2 MB")
    assert "at 10.0 MB/s (assumed, not measured" in dl and dl.endswith(": 3 min")
    assert next(l for l in lines if l.startswith("extraction:")).split(" (CPU rates")[0].endswith(": 33 s")
    tokens = EN_DE_TEXT / 5.0
    bpe = [EN_DE_TEXT + 3 * tokens * (r - 1) for r in (1.05, 1.35)]  # "@@ " per added piece
    sample = EN_DE_TEXT * 1_000_000 / EN_DE_PAIRS  # bpe/learn-sample.*: 1M pairs of the tokenized text
    binarized = [2 * (tokens * r + 2 * EN_DE_PAIRS) + 2 * 12 * EN_DE_PAIRS for r in (1.05, 1.35)]  # uint16, index
    low, high = (EN_DE_ARCHIVES + 3 * EN_DE_TEXT + 2 * bpe[i] + sample + binarized[i] for i in (0, 1))
    assert (round(low / 1e9, 1), round(high / 1e9, 1)) == (9.5, 10.2)
    disk = next(l for l in lines if l.startswith("disk:"))
    assert disk.startswith(f"disk: 9.5 to 10.2 GB in {data}: downloads 1.7 GB, extracted text (orig/, raw/) 2.7 GB, "
                           "tokenized (tok/) 1.4 GB, BPE (bpe/, with its learning sample) 1.7 to 1.9 GB, cleaned copy "
                           "(prep/) 1.4 to 1.6 GB, binarized (data-bin/) 0.7 to 0.9 GB")
    assert [round(x / 1e9, 1) for x in (bpe[0] + sample, bpe[1] + sample, *bpe, *binarized)] == [
        1.7, 1.9, 1.4, 1.6, 0.7, 0.9]


def test_a_measured_download_rate_replaces_the_assumed_one_and_no_extraction_file_says_so(tmp_path, monkeypatch):
    """Records of earlier downloads in the data folder (200 MiB in 10 s: 20.0 MB/s) give the rate: 1584.6 MB
    / 20 = 79 s; below 64 MiB measured the assumption stands. Without the extraction results file the dry
    run says so and adds the download alone."""
    from attn_kit.pipeline.download import measured_rate

    results = tmp_path / "data_prep.json"
    write_results(results)
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    monkeypatch.setattr(prep_cost, "EXTRACT_RESULTS", tmp_path / "missing.json")
    records = tmp_path / "data" / "downloads" / ".verified"
    records.mkdir(parents=True)
    (records / "a.tgz.json").write_text(json.dumps({"transfer": {"bytes": 200 * MIB, "seconds": 10.0,
                                                                  "from": "www.statmt.org"}}))
    lines = [l.lstrip(" #") for l in dry_run("--workers", "16", "--bpe-learn-pairs", "1000000", "--data-workdir",
                                             str(tmp_path / "data")).splitlines()]
    dl = next(l for l in lines if l.startswith("download:"))
    assert "at 20.0 MB/s (measured: 0.21 GB downloaded from www.statmt.org into" in dl and dl.endswith(": 1 min")
    line = next(l for l in lines if l.startswith("data preparation, projected"))
    total = prep_cost.project(FITS, 4_500_000, 16, 1_000_000)["total_seconds"] + EN_DE_ARCHIVES / MIB / 20
    assert f": {prep_cost.minutes_text(total)} (download 1 min, tokenize " in line
    assert lines[lines.index(line) + 2].startswith("(extraction not included; fits of")
    assert any(l.startswith("extraction and disk: no projection (") for l in lines)
    (records / "a.tgz.json").write_text(json.dumps({"transfer": {"bytes": 60 * MIB, "seconds": 1.0}}))
    assert prep_cost.download_rate(measured_rate(records.parent))[0] == 10.0  # too little measured


def test_extraction_counts_each_archive_at_its_layouts_rate_and_en_fr_its_own_tokenization(tmp_path, monkeypatch):
    """By hand: a 100 MB .tgz and a 50 MB .tar of .gz members, 80 MB of text, at sha256 1000, .tgz 100,
    .tar 50, joining 40 MB/s: 100 x (1/1000 + 1/100) + 50 x (1/1000 + 1/50) + 80 / 40 = 4.15 s. EN-FR's
    dry run: 7 archives, 6.62 GB, and its own tokenization ratio (x1.100)."""
    fetch = prep_cost.Fetch("en-fr", [("a.tgz", 100 * MIB, "tgz", ""), ("b.tar", 50 * MIB, "tar_of_gz", "")],
                            80 * MIB, 1000, "text", 10.0, "assumed")
    rates = {"sha256": 1000, "extract_tgz": 100, "extract_tar_of_gz": 50, "concatenate": 40}
    assert prep_cost.extract_seconds(rates, fetch) == pytest.approx(4.15)
    results, extract = tmp_path / "data_prep.json", tmp_path / "extract.json"
    write_results(results)
    write_extract_results(extract)
    monkeypatch.setattr(prep_cost, "RESULTS", results)
    monkeypatch.setattr(prep_cost, "EXTRACT_RESULTS", extract)
    lines = [l.lstrip(" #") for l in dry_run("--pair", "en-fr", "--workers", "2").splitlines()]
    assert next(l for l in lines if l.startswith("download:")).startswith("download: 6.62 GB, 7 archives")
    assert "Moses tokenization x1.100, 4.00 bytes a token" in next(l for l in lines if l.startswith("(disk from:"))

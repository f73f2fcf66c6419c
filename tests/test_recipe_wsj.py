"""The WSJ parsing recipe (recipes/wsj_parsing.sh): its command line, its error
lines for bad input, the whole --smoke run (about a minute on 2 CPU cores),
the --smoke --tune run (dev-set tuning as Sec. 6.3, about 2 minutes) and the
tree/scoring stages on real WSJ trees (NLTK's sample in ../shared, skipped
when absent)."""
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SHARED, assert_one_error_line, run_main

from attn_kit.cli import UserError
from attn_kit.inference.translate import main as translate_main
from attn_kit.metrics import evalb
from attn_kit.pipeline.stages import Pipeline
from attn_kit.recipes import config, wsj

RECIPE = [sys.executable, "-m", "attn_kit.recipes.wsj"]
SH = ["bash", str(REPO / "recipes" / "wsj_parsing.sh")]
PTB_SAMPLE = SHARED / "data" / "ptb-sample" / "treebank.zip"
STAGES = ["prepare", "bpe", "binarize", "train", "average", "generate", "trees", "score"]
# The smoke runs below train 200 updates, not --smoke's 600: the dev loss is within 7% of its value at 600 by
# then, and no check depends on how well the parser learned.
SMOKE_UPDATES = 200
SMOKE = ["--smoke", "--max-update", str(SMOKE_UPDATES)]


def recipe(argv, cwd=None, cmd=RECIPE, timeout=120):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([*cmd, *[str(a) for a in argv]], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def here(argv):
    """The recipe's main() in this process (conftest.run_main), for what it prints and its error line: its
    process costs ~0.2 s of CPU, ~2 s where it imports torch or fairseq. Its process-level contract (one
    error line, exit status, no traceback) is test_missing_ptb_says_what_is_expected_and_where_it_comes_from's,
    the shell script's test_help_through_the_shell_script's and test_dry_run_prints_the_papers_commands_...'s."""
    return run_main(wsj.main, *argv)


def fake_ptb(root, sections=("02", "22", "23"), tree="( (S (NP-SBJ (DT A) (NN test)) (VP (VBZ works)) (. .)) )\n"):
    """A treebank laid out as LDC's: root/parsed/mrg/wsj/NN/wsj_NN01.mrg."""
    for s in sections:
        d = root / "parsed" / "mrg" / "wsj" / s
        d.mkdir(parents=True)
        (d / f"wsj_{s}01.mrg").write_text(tree)
    return root


# --------------------------------------------------------------------------- command line
def test_help_through_the_shell_script(tmp_path):
    proc = recipe(["--help"], cwd=tmp_path, cmd=SH, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for option in ("--smoke", "--ptb", "--extra-trees", "--workdir", "--dry-run", "--stage", "--stop-stage",
                   "--ngpus", "--pos-tags", "--vocab", "--beam", "--gnmt-alpha", "--p-drop", "--evalb", "LDC99T42",
                   "parsed/mrg/wsj/NN/wsj_NNNN.mrg", "--tune", "--tune-grid", "--attention-dropout",
                   "dropout=0.1,0.2;attention_dropout=0.1,0.2;lr_scale=0.5,1;beam=10,21;alpha=0.3,1",
                   "JSON"):
        assert option in proc.stdout, option
    assert "bundled" not in proc.stdout  # this recipe has --smoke, no --bundled
    assert "--dropout DROPOUT" not in proc.stdout and "--alpha ALPHA" not in proc.stdout  # hidden aliases


def _dry_run_lines(argv, tmp_path):
    proc = here(["--smoke", "--dry-run", "--workdir", tmp_path / "w", *argv])
    assert proc.returncode == 0, proc.stderr
    return [line.split("] ", 1)[-1] for line in proc.stdout.splitlines()]  # without the time stamps


def test_the_options_have_the_kits_names(tmp_path):
    """--p-drop and --gnmt-alpha (the kit's one vocabulary; --dropout and --alpha are refused,
    tests/test_option_ranges.py) reach fairseq's --dropout and --gnmt-alpha; the --tune-grid keys p_drop
    and gnmt_alpha are those of dropout and alpha."""
    new = _dry_run_lines(["--p-drop", "0.3", "--gnmt-alpha", "0.7"], tmp_path)
    assert "--dropout 0.3" in "\n".join(new) and "--gnmt-alpha 0.7" in "\n".join(new)
    assert wsj.parse_tune_grid("p_drop=0.1,0.2;gnmt-alpha=0.6") == wsj.parse_tune_grid("dropout=0.1,0.2;alpha=0.6")


def test_dry_run_prints_the_papers_commands_and_creates_nothing(tmp_path):
    """--dry-run --ngpus 8 --ptb DIR: the WSJ-only setting of Sec. 6.3 (DIR need not exist yet)."""
    proc = recipe(["--dry-run", "--ngpus", "8", "--gpu", "H100", "--ptb", tmp_path / "treebank_3", "--workdir", "w"],
                  cwd=tmp_path, cmd=SH, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for i, name in enumerate(STAGES, 1):
        assert f"stage {i}/8 {name}:" in out
    for command in (f"read {tmp_path / 'treebank_3'}/parsed/mrg/wsj sections train 02-21, dev 22, test 23",
                    "subword-nmt learn-bpe -s 16000 --total-symbols", "fairseq-preprocess", "--joined-dictionary",
                    "torchrun --nproc-per-node 8 --standalone -m fairseq_cli.train", "--arch attn_paper_parse",
                    "--task attn_translation", "--lr-scheduler attn_inverse_sqrt --warmup-updates 16000",
                    "--lr 1 --lr-scale 0.5",  # t2t transformer_parsing_base: warmup 16000, 0.5 x eq. 3
                    "--criterion attn_label_smoothed_cross_entropy --label-smoothing 0.1",
                    "--max-tokens 3500 --update-freq 1", "--max-update 100000",
                    "--save-interval-updates 1500",
                    "--keep-interval-updates 5", "attn_kit.fairseq_layer.checkpoints", "--num-update-checkpoints 5",
                    "fairseq-generate", "--gen-subset valid", "--gen-subset test", "--beam 21", "--gnmt-alpha 0.3",
                    "--max-len-a 1 --max-len-b 300", "attn_kit.metrics.evalb"):
        assert command in out, command
    commands = "\n".join(line for line in out.splitlines() if line.startswith("  $ "))
    assert "--cpu" not in commands and "--encoder-layers" not in out  # the paper's model, on GPUs
    assert ("--bf16-autocast" in out) != ("--fp16" in out)  # --precision auto: bf16 GPUs, or fp16 on older ones
    assert "--dropout" not in out and "--attention-dropout" not in out  # the arch's: 0.1 and 0.2
    assert list(tmp_path.iterdir()) == []


def test_dry_run_of_the_semi_supervised_setting_uses_32k(tmp_path):
    proc = here(["--dry-run", "--ptb", tmp_path, "--extra-trees", tmp_path / "silver.txt",
                 "--workdir", tmp_path / "w"])
    assert proc.returncode == 0, proc.stderr
    assert "subword-nmt learn-bpe -s 32000" in proc.stdout
    assert f"add {tmp_path / 'silver.txt'} to training" in proc.stdout


# --------------------------------------------------------------------------- bad input: one line each
# --ngpus 0: a run that trains on GPUs checks them first (tests/test_devices.py); these are about the treebank
def test_missing_ptb_says_what_is_expected_and_where_it_comes_from(tmp_path):
    # the recipe's own process: its process-level contract (the other bad inputs below run its main() here)
    line = assert_one_error_line(recipe(["--workdir", tmp_path / "w", "--ngpus", "0"]), "--ptb DIR is required")
    assert "parsed/mrg/wsj/NN/wsj_NNNN.mrg" in line and "LDC99T42" in line and "--smoke" in line


@pytest.mark.parametrize("setup,fragments", [
    (lambda t: t / "nowhere", ["no such folder", "parsed/mrg/wsj/NN/wsj_NNNN.mrg", "LDC99T42"]),
    (lambda t: (t / "empty").mkdir() or t / "empty", ["no WSJ section folders", "LDC99T42"]),
    (lambda t: fake_ptb(t / "p", sections=("02", "22")), ["section 23 is missing"]),
    (lambda t: (fake_ptb(t / "p"), (t / "p/parsed/mrg/wsj/22/wsj_2201.mrg").unlink())[0],
     ["holds no .mrg files"]),
    (lambda t: fake_ptb(t / "p", tree="( (S (NP (DT a) (NN b))\n  (VP (VBZ c) word)) )\n"),
     ["malformed tree", "wsj_0201.mrg:2: word 'word' outside a (TAG word) pair"]),
])
def test_bad_treebanks_are_one_error_line(tmp_path, setup, fragments):
    ptb = setup(tmp_path)
    proc = here(["--ptb", ptb, "--train-sections", "02", "--workdir", tmp_path / "w", "--ngpus", "0"])
    assert_one_error_line(proc, *fragments)
    # nothing made, nothing marked done (.stages/prepare.started records what it started from: if the treebank
    # is fixed before the rerun, the stage starts over instead of resuming)
    assert not (tmp_path / "w" / "prep").exists() and not (tmp_path / "w" / ".stages" / "prepare.done").exists()


def test_the_wsj_folder_itself_is_accepted(tmp_path):
    ptb = fake_ptb(tmp_path / "p")
    proc = here(["--ptb", ptb / "parsed" / "mrg" / "wsj", "--train-sections", "02", "--workdir", tmp_path / "w",
                 "--stop-stage", "prepare"])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "w" / "prep" / "train.tree").read_text() == "(S (NP XX XX )NP (VP XX )VP XX )S\n"
    assert (tmp_path / "w" / "prep" / "test.gold").read_text() == \
        "(TOP (S (NP-SBJ (DT A) (NN test)) (VP (VBZ works)) (. .)))\n"


@pytest.mark.parametrize("content,fragments", [
    (None, ["--extra-trees", "no such file"]),
    ("(TOP (S (NN a)))\n(TOP (S (NN b))\n",
     ["malformed tree", "silver.txt:2: the tree that starts here is never closed"]),
])
def test_bad_extra_trees_are_one_error_line(tmp_path, content, fragments):
    silver = tmp_path / "silver.txt"
    if content is not None:
        silver.write_text(content)
    proc = here(["--ptb", fake_ptb(tmp_path / "p"), "--train-sections", "02", "--extra-trees", silver,
                 "--workdir", tmp_path / "w", "--ngpus", "0"])
    assert_one_error_line(proc, *fragments)


def test_extra_trees_join_the_training_data(tmp_path):
    silver = tmp_path / "silver.txt"
    silver.write_text("(TOP (S (NP (PRP It)) (VP (VBD worked)) (. .)))\n\n( (S (NP (NNS Trees)) (VP (VBP grow))) )\n")
    proc = here(["--ptb", fake_ptb(tmp_path / "p"), "--train-sections", "02", "--extra-trees", silver,
                 "--workdir", tmp_path / "w", "--stop-stage", "prepare"])
    assert proc.returncode == 0, proc.stderr
    prep = tmp_path / "w" / "prep"
    assert prep.joinpath("train.words").read_text() == "A test works .\nIt worked .\nTrees grow\n"
    stats = json.loads(prep.joinpath("stats.json").read_text())
    assert (stats["train_trees"], stats["extra_trees"], stats["valid_trees"], stats["test_trees"]) == (3, 2, 1, 1)


@pytest.mark.parametrize("argv,fragment", [
    (["--smoke", "--train-sections", "2-x"], "bad section list '2-x'"),
    (["--smoke", "--dev-sections", "25"], "WSJ sections are 00-24"),
    (["--smoke", "--evalb", "/nonexistent/evalb"], "--evalb /nonexistent/evalb: not an executable file"),
    (["--smoke", "--stage", "nonsense"], "unknown stage 'nonsense'"),
    (["--smoke", "--beam", "0"], "--beam must be >= 1"),
    (["--smoke", "--p-drop", "1"], "--p-drop must be in [0, 1)"),
    (["--smoke", "--tune-grid", "dropout=0.1", "--p-drop", "0.2"], "--p-drop and --tune-grid both set dropout"),
    (["--smoke", "--attention-dropout", "1.5"], "--attention-dropout must be in [0, 1)"),
    (["--smoke", "--tune-grid", "dropout=0.1;heads=8"], "unknown key 'heads'; keys: dropout, attention_dropout"),
    (["--smoke", "--tune-grid", "dropout=0.1,x"], "dropout value 'x' is not a number"),
    (["--smoke", "--tune-grid", "beam=2.5"], "beam value '2.5' is not an integer >= 1"),
    (["--smoke", "--tune-grid", "dropout=1.2"], "dropout 1.2 is not in [0, 1)"),
    (["--smoke", "--tune-grid", "lr_scale=0"], "lr_scale 0 must be > 0"),
    (["--smoke", "--tune-grid", "dropout=0.1;dropout=0.2"], "dropout is given twice"),
    (["--smoke", "--tune-grid", "dropout 0.1"], "'dropout 0.1' is not KEY=V,V,..."),
    (["--smoke", "--tune-grid", "beam="], "beam has no values"),
    (["--smoke", "--tune-grid", ";"], "empty"),
    (["--smoke", "--tune-grid", "beam=5", "--beam", "10"], "--beam and --tune-grid both set beam"),
    (["--smoke", "--tune-grid", "/nonexistent/grid.json"], "--tune-grid /nonexistent/grid.json: cannot read it"),
])
def test_bad_options_are_one_error_line(tmp_path, argv, fragment):
    assert_one_error_line(here([*argv, "--workdir", tmp_path / "w"]), fragment)


# --------------------------------------------------------------------------- --tune: the grid
def test_tune_grid_syntax_and_defaults(tmp_path):
    g = wsj.parse_tune_grid("dropout=0.1, 0.2 ; attention-dropout=0;lr_scale=1,0.5,1;beam=10;alpha=1")
    assert g == {"dropout": [0.1, 0.2], "attention_dropout": [0.0], "lr_scale": [1.0, 0.5], "beam": [10],
                 "alpha": [1.0]}
    assert isinstance(g["beam"][0], int)
    spec = tmp_path / "grid.json"
    spec.write_text('{"dropout": [0.1, 0.3], "beam": 21, "alpha": [0.3, 0.6]}')
    assert wsj.parse_tune_grid(str(spec)) == {"dropout": [0.1, 0.3], "beam": [21], "alpha": [0.3, 0.6]}
    spec.write_text('{"dropout": [0.1,')
    with pytest.raises(UserError, match="not valid JSON"):
        wsj.parse_tune_grid(str(spec))

    # keys left out take their option's value; an option given fixes its key in the default grid
    a = wsj.parse_args(["--ptb", str(tmp_path), "--tune-grid", "dropout=0.1,0.3", "--beam", "12"])
    assert a.tune and a.grid == {"dropout": [0.1, 0.3], "attention_dropout": [0.2], "lr_scale": [0.5],
                                 "beam": [12], "alpha": [0.3]}
    a = wsj.parse_args(["--ptb", str(tmp_path), "--tune"])
    assert a.grid == config.settings("wsj", "wsj")["tune_grid"] and len(wsj.tune_trials(a.grid)) == 8 and len(wsj.decode_settings(a.grid)) == 4
    a = wsj.parse_args(["--ptb", str(tmp_path), "--tune", "--lr-scale", "0.5"])
    assert a.grid["lr_scale"] == [0.5] and a.grid["dropout"] == [0.1, 0.2]
    a = wsj.parse_args(["--smoke", "--tune"])
    assert [t["stage"] for t in wsj.tune_trials(a.grid)] == ["tune-d0.1-a0-lr0.25", "tune-d0.1-a0.2-lr0.25"]
    assert [d["name"] for d in wsj.decode_settings(a.grid)] == ["beam21-alpha0.3", "beam21-alpha1"]
    assert not wsj.parse_args(["--smoke"]).tune


def test_dry_run_tune_prints_every_trials_commands(tmp_path):
    """--dry-run --tune, the paper setting: 8 trainings, each decoded 4 ways on section 22,
    section 23 decoded once (with the selected setting); nothing is created."""
    proc = here(["--dry-run", "--tune", "--ngpus", "8", "--ptb", tmp_path / "ptb", "--workdir", tmp_path / "w"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    names = [f"tune-d{d}-a{a}-lr{lr}" for d in ("0.1", "0.2") for a in ("0.1", "0.2") for lr in ("0.5", "1")]
    order = ["prepare", "bpe", "binarize", *names, "select", "generate", "trees", "score"]
    for i, name in enumerate(order, 1):
        assert f"stage {i}/{len(order)} {name}:" in out, name
    blocks = out.split("] stage ")
    for name in names:
        block = next(b for b in blocks if b.startswith(f"{order.index(name) + 1}/{len(order)} {name}:"))
        d, a, lr = (part[1:] for part in name[len("tune-"):].replace("lr", "l").split("-"))
        folder = tmp_path / "w" / "tune" / name[len("tune-"):]
        assert block.count("fairseq_cli.train") == 1
        assert f"--dropout {d} --attention-dropout {a}" in block
        assert (f"--lr-scale {lr}" in block) == (lr != "1")
        assert f"--save-dir {folder / 'checkpoints'}" in block
        assert f"--output {folder / 'checkpoint_avg.pt.partial'}" in block
        assert block.count("--gen-subset valid") == 4 and "--gen-subset test" not in block
        for beam in ("10", "21"):
            for alpha in ("0.3", "1.0"):
                assert f"--path {folder / 'checkpoint_avg.pt'} --gen-subset valid --beam {beam} --gnmt-alpha {alpha}" \
                    in block
        assert block.count("attn_kit.metrics.evalb") == 4
    assert out.count("--gen-subset test") == 1
    assert "--gen-subset test --beam SELECTED_BEAM --gnmt-alpha SELECTED_ALPHA" in out
    assert "pick the highest section 22 F1 of 32 settings" in out
    assert not (tmp_path / "w").exists()


# --------------------------------------------------------------------------- the smoke run
@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    work = tmp_path_factory.mktemp("wsj") / "smoke"
    proc = recipe([*SMOKE, "--workdir", work], cmd=SH, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work, proc


def test_smoke_runs_every_stage_and_writes_results(smoke):
    work, proc = smoke
    for i, name in enumerate(STAGES, 1):
        assert f"stage {i}/8 {name}: finished" in proc.stdout
    r = json.loads((work / "results.json").read_text())
    assert r["mode"] == "smoke" and r["arch"] == "attn_paper_parse"
    for name in ("dev", "test"):
        assert isinstance(r[f"{name}_f1"], float) and 0 <= r[f"{name}_f1"] <= 100
        assert r[name]["evalb_all"]["sentences"] == 6
        # repaired outputs always carry the input words: no EVALB error sentence
        assert r[name]["evalb_all"]["error_sentences"] == 0 and r[name]["evalb_all"]["skip_sentences"] == 0
        assert r[name]["repairs"]["sentences"] == 6
        assert set(r[name]["repairs"]) == {"sentences", "repaired_sentences", *wsj.REPAIRS}
    # the test set's 45-word sentence is left out of the len<=40 section
    assert r["test"]["evalb_len<=40"]["sentences"] == 5
    assert r["data"]["train_trees"] == 36 and r["decoding"]["beam"] == 21
    assert f"EVALB F1: dev {r['dev_f1']:.2f}, test {r['test_f1']:.2f}" in proc.stdout
    # results.json holds what the documented scripts/evalb.py reports for the written trees
    again = subprocess.run([sys.executable, REPO / "scripts" / "evalb.py", work / "prep" / "test.gold",
                            work / "eval" / "test.parsed"], capture_output=True, text=True)
    f1 = evalb.parse_summary(again.stdout)["all"]["f1"]
    assert r["test_f1"] == (round(f1, 2) if f1 == f1 else None)


def test_smoke_twice_skips_every_stage(smoke):
    work, _ = smoke
    proc = recipe([*SMOKE, "--workdir", work])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("done already, skipping") == len(STAGES)
    assert "EVALB F1: dev" in proc.stdout


def test_a_removed_output_reruns_only_its_stage(smoke, tmp_path):
    """Delete the scored trees of a copy of the smoke run: the trees stage notices and runs again."""
    copy = tmp_path / "copy"
    shutil.copytree(smoke[0], copy, ignore=shutil.ignore_patterns("checkpoints"))
    (copy / "checkpoints").mkdir()
    (copy / "checkpoints" / "checkpoint_last.pt").write_text("stand-in")
    (copy / "eval" / "test.parsed").unlink()
    proc = recipe([*SMOKE, "--workdir", copy, "--stage", "trees"])
    assert proc.returncode == 0, proc.stderr
    assert "stage 7/8 trees: output eval/test.parsed is missing; running it again" in proc.stdout
    assert (copy / "eval" / "test.parsed").read_text() == (smoke[0] / "eval" / "test.parsed").read_text()


@pytest.mark.slow
def test_a_canary_before_the_full_run_is_checked_when_the_run_ends(smoke, tmp_path, capfd):
    """recipes/wsj_parsing.sh --canary, then the full run in the same work directory: the run's end
    fills in the canary's checked_against (tests/test_canary.py's assert_checked_by_the_run). The run is
    the smoke run up to its last stage (a copy without results.json, which its score stage writes again);
    the canary, a real one of 8 updates, runs there first. Both in this process (recipe_here)."""
    from test_canary import assert_checked_by_the_run, canary_json

    work = tmp_path / "w"
    shutil.copytree(smoke[0], work)
    (work / "results.json").unlink()
    out = recipe_here(capfd, ["--smoke", "--max-update", "8", "--canary", "--canary-minutes", "0.5",
                              "--workdir", work])
    assert "passed" in out and canary_json(work)["checked_against"] is None  # no run's results yet
    out = recipe_here(capfd, [*SMOKE, "--workdir", work])
    assert "stage 8/8 score: output results.json is missing" in out
    assert_checked_by_the_run(work)


def translate(work, *args, stdin=""):
    """scripts/translate.py's main in this process (conftest.run_main; its command line, one error line and
    exit status are tests/test_translate.py's): a subprocess would import fairseq again, ~4 s of CPU each.
    --threads 1 as the recipe's --smoke decoding. Returns its stdout."""
    proc = run_main(translate_main, work, "--threads", "1", *args, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_translate_parses_the_test_words_as_the_recipe_did(smoke):
    """scripts/translate.py on the run's test words gives the trees the recipe made of its
    fairseq-generate output (with the model's own XX tags: raw text has no gold tags)."""
    work, _ = smoke
    r = json.loads((work / "results.json").read_text())
    assert r["test_source_tokenized"] and r["test_output"] == "eval/test.trees"  # relative to the run
    out = translate(work, "--tokenized", "--input", work / r["test_source"])
    assert out.splitlines() == (work / "eval" / "test.trees").read_text().splitlines()
    gold_tagged = (work / "eval" / "test.parsed").read_text().splitlines()
    assert len(gold_tagged) == 6 and all("(XX " in t for t in out.splitlines())


def test_translate_parses_a_raw_sentence_into_a_tree_over_its_treebank_words(smoke):
    work, _ = smoke
    out = translate(work, stdin='The coach said "I can\'t go (now)."\n')
    from attn_kit.metrics.trees import parse_trees

    (tree, _), = parse_trees(out)
    assert tree.words() == ["The", "coach", "said", "``", "I", "ca", "n't", "go", "-LRB-", "now", "-RRB-", ".", "''"]


# --------------------------------------------------------------------------- the --smoke --tune run
SMOKE_TRIALS = ["tune-d0.1-a0-lr0.25", "tune-d0.1-a0.2-lr0.25"]


DATA_STAGES = ("prepare", "bpe", "binarize")


@pytest.fixture(scope="module")
def smoke_tune(smoke, tmp_path_factory):
    """--smoke --tune: 2 trainings (attention dropout 0 and 0.2) x 2 decodings (alpha 0.3 and 1), in a
    work directory holding the smoke run's finished data stages (their folders and stamps), which the
    tuned run, with the same data options, skips: the smoke run checks them (~6 s of CPU saved)."""
    work = tmp_path_factory.mktemp("wsj-tune") / "tune"
    (work / ".stages").mkdir(parents=True)
    for folder in ("prep", "bpe", "data-bin"):
        shutil.copytree(smoke[0] / folder, work / folder)
    for stage in DATA_STAGES:
        shutil.copy(smoke[0] / ".stages" / f"{stage}.done", work / ".stages")
    proc = recipe([*SMOKE, "--tune", "--workdir", work], cmd=SH, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return work, proc


def test_smoke_tune_selects_on_dev_and_scores_test_once(smoke_tune):
    work, proc = smoke_tune
    stages = ["prepare", "bpe", "binarize", *SMOKE_TRIALS, "select", "generate", "trees", "score"]
    for i, name in enumerate(stages, 1):  # the data stages: the smoke run's, copied by the fixture
        assert f"stage {i}/{len(stages)} {name}: {'done already' if name in DATA_STAGES else 'finished'}" \
            in proc.stdout
    r = json.loads((work / "results.json").read_text())
    tune = r["tune"]
    assert tune["grid"] == {"dropout": [0.1], "attention_dropout": [0.0, 0.2], "lr_scale": [0.25], "beam": [21],
                            "alpha": [0.3, 1.0]}
    trials = tune["trials"]
    assert [t["name"] for t in trials] == [f"{s}/beam21-alpha{a}" for s in SMOKE_TRIALS for a in ("0.3", "1")]
    for t in trials:
        assert set(t) >= {"name", "stage", "workdir", "dropout", "attention_dropout", "lr_scale", "beam", "alpha",
                          "dev_f1", "averaged_updates"}
        assert t["dev_f1"] is None or 0 <= t["dev_f1"] <= 100
        assert t["workdir"] == str(work / "tune" / t["stage"][len("tune-"):])
        assert (t["lr_scale"], t["beam"]) == (0.25, 21) and t["updates"] == SMOKE_UPDATES
        if t["averaged_updates"] is not None:  # recorded by attn_kit.fairseq_layer.fairseq_commands.read_averaged
            assert t["averaged_updates"][-1] == SMOKE_UPDATES and len(t["averaged_updates"]) == 5
    # the selected setting is the argmax of dev F1 over the file's own trial list (ties: the first)
    scores = [-1.0 if t["dev_f1"] is None else t["dev_f1"] for t in trials]
    best = trials[scores.index(max(scores))]
    assert tune["selected"] == best
    assert r["dev_f1"] == best["dev_f1"]
    assert isinstance(r["test_f1"], float) and 0 <= r["test_f1"] <= 100
    assert (r["dropout"], r["attention_dropout"], r["lr_scale"]) == (best["dropout"], best["attention_dropout"], 0.25)
    assert r["decoding"]["beam"] == best["beam"] and r["decoding"]["length_penalty"] == f"GNMT alpha {best['alpha']:g}"
    assert r["checkpoint"] == f"tune/{best['stage'][len('tune-'):]}/checkpoint_avg.pt"
    if "averaged_updates" in r:
        assert r["averaged_updates"] == best["averaged_updates"]
    # section 23 was decoded once, with the selected setting, and not by any trial
    assert len(list(work.glob("tune/*/gen/test*"))) == 0 and (work / "gen" / "test.out").exists()
    assert f"--gen-subset test --beam {best['beam']} --gnmt-alpha {best['alpha']}" in proc.stdout
    assert proc.stdout.count("--gen-subset test") == 1
    assert f"{best['name']}: " in proc.stdout and "<- selected" in proc.stdout


def recipe_here(capfd, argv):
    """The recipe's main in this process, what it and its commands print: for the reruns of the --tune run,
    whose process imports fairseq for the arch's dropouts (~4 s of CPU; the fixture runs the shell script)."""
    capfd.readouterr()
    assert wsj.main([str(a) for a in argv]) is None
    return capfd.readouterr().out


def test_smoke_tune_twice_trains_nothing(smoke_tune, capfd):
    work, _ = smoke_tune
    out = recipe_here(capfd, [*SMOKE, "--tune", "--workdir", work])
    assert out.count("done already, skipping") == 9
    assert "fairseq-train" not in out


def test_smoke_tune_with_more_decoding_settings_decodes_but_does_not_train(smoke_tune, tmp_path, capfd):
    """A copy of the tuned run, with beam 1 added to the grid and alpha 1 left out: each trial decodes
    section 22 for the new setting only (no training, no averaging, no decoding done before), the
    selection is made again over 4."""
    copy = tmp_path / "copy"
    shutil.copytree(smoke_tune[0], copy)
    out = recipe_here(capfd, [*SMOKE, "--tune-grid", "attention_dropout=0,0.2;beam=21,1;alpha=0.3",
                              "--workdir", copy])
    assert "the --tune grid changed since the last selection: selecting again" in out
    assert "fairseq-train" not in out and "attn_kit.fairseq_layer.checkpoints" not in out
    assert out.count("# train: done already") == 2 and out.count("--gen-subset valid --beam 1 ") == 2
    assert "--gen-subset valid --beam 21 " not in out
    r = json.loads((copy / "results.json").read_text())
    assert len(r["tune"]["trials"]) == 4 and {t["alpha"] for t in r["tune"]["trials"]} == {0.3}
    scores = [-1.0 if t["dev_f1"] is None else t["dev_f1"] for t in r["tune"]["trials"]]
    assert r["tune"]["selected"] == r["tune"]["trials"][scores.index(max(scores))]


# --------------------------------------------------------------------------- real WSJ trees
def pseudo_split(root):
    """NLTK's WSJ sample (sections 00-01) as a treebank: wsj_0001-0179 as section 02,
    wsj_0180-0189 as 22, wsj_0190-0199 as 23."""
    if not PTB_SAMPLE.exists():
        pytest.skip("../shared/data/ptb-sample is not here")
    with zipfile.ZipFile(PTB_SAMPLE) as z:
        for name in z.namelist():
            base = os.path.basename(name)
            if base.startswith("wsj_") and base.endswith(".mrg"):
                n = int(base[4:8])
                section = "02" if n <= 179 else "22" if n <= 189 else "23"
                d = root / "parsed" / "mrg" / "wsj" / section
                d.mkdir(parents=True, exist_ok=True)
                (d / base).write_bytes(z.read(name))
    return root


@pytest.mark.slow  # runs the recipe's data, trees and score stages for real
def test_real_trees_through_prepare_bpe_binarize_trees_and_score(tmp_path):
    """The sample's trees through every stage but training: prepare, BPE and fairseq-preprocess
    for real, then a stand-in for fairseq-generate that "predicts" the reference sequence,
    except for one sentence per split cut off after 5 tokens. Scores: every other sentence
    100%, the cut one repaired (its words appended where the sequence stopped), no EVALB error."""
    ptb = pseudo_split(tmp_path / "ptb")
    work = tmp_path / "w"
    args = wsj.parse_args(["--smoke", "--ptb", str(ptb), "--train-sections", "02", "--vocab", "1000",
                           "--workdir", str(work), "--workers", "1"])
    stages = wsj.stages(args)
    Pipeline(work, stages, first="prepare", last="binarize").run()
    stats = json.loads((work / "prep" / "stats.json").read_text())
    assert (stats["train_trees"], stats["valid_trees"], stats["test_trees"]) == (3669, 127, 118)
    assert stats["train_trees"] + stats["valid_trees"] + stats["test_trees"] == 3914
    assert (work / "data-bin" / "dict.tree.txt").exists()

    (work / "gen").mkdir()
    for split in ("valid", "test"):
        targets = (work / "prep" / f"{split}.tree").read_text().splitlines()
        with open(work / "gen" / f"{split}.out", "w") as f:
            for i, t in enumerate(targets):
                hyp = " ".join(t.split()[:5]) if i == 3 else t
                f.write(f"S-{i}\tsource\nH-{i}\t-0.1\t{hyp}\nD-{i}\t-0.1\t{hyp}\n")
    Pipeline(work, stages, first="trees", last="trees").run()
    # the score stage, less write_results' training facts: run scripts/evalb.py as it does
    repairs = json.loads((work / "eval" / "repairs.json").read_text())
    for split in ("valid", "test"):
        assert repairs[split]["repaired_sentences"] == 1 and repairs[split]["missing_leaves"] > 0
        proc = subprocess.run([*map(str, wsj.evalb_command(args.evalb, work / "prep" / f"{split}.gold",
                                                           work / "eval" / f"{split}.parsed"))],
                              capture_output=True, text=True)
        s = evalb.parse_summary(proc.stdout)["all"]
        assert s["error_sentences"] == 0 and s["valid_sentences"] == stats[f"{split}_trees"]
        assert 98.0 < s["f1"] < 100.0
        assert s["complete_match"] == pytest.approx(100 * (1 - 1 / s["sentences"]), abs=0.005)


def test_a_tuned_run_translates_with_the_selected_model_and_decoding(smoke_tune):
    work, _ = smoke_tune
    selected = json.loads((work / "tune" / "selected.json").read_text())["selected"]
    card = json.loads((work / "inference.json").read_text())
    assert work / card["checkpoint"] == Path(selected["checkpoint"])
    assert card["generation"]["beam"] == selected["beam"] and card["args"]["gnmt_alpha"] == selected["alpha"]
    out = translate(work, "--tokenized", "--input", work / "prep" / "test.words")
    assert out.splitlines() == (work / "eval" / "test.trees").read_text().splitlines()

"""Every number checked once, where settings are built (issue 36, item 3): NaN, infinity, a negative
and a wrong-typed value for every numeric option of every recipe, a wrong type in a YAML config, and
scripts/training_cost.py's own options, each one error line before any work. NaN passed every range
check before (``nan <= 0`` is false): --canary-minutes nan trained the whole run as its canary."""
import argparse
import importlib

import pytest
from conftest import assert_one_error_line, run_main

from attn_kit import options
from attn_kit.recipes import config, settings

RECIPES = {
    "translation": ["--smoke"],
    "parallel": ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s", "--ngpus", "0"],
    "wsj": ["--smoke"],
    "table3": ["--smoke", "--rows", "base"],
}
NUMERIC = (int, float, options.count_or_auto)


def numeric_options(recipe):
    parser = importlib.import_module(f"attn_kit.recipes.{recipe}").parser()
    return sorted({a.option_strings[0]: a.type for a in parser._actions
                   if a.option_strings and a.type in NUMERIC}.items())


CASES = [(recipe, option, value) for recipe in RECIPES for option, kind in numeric_options(recipe)
         for value in (("nan", "inf", "-1") if kind is float else ("-1", "2.5"))]


@pytest.mark.parametrize("recipe,option,value", CASES, ids=[f"{r}{o}={v}" for r, o, v in CASES])
def test_a_bad_number_is_one_line_before_any_work(recipe, option, value, tmp_path):
    module = importlib.import_module(f"attn_kit.recipes.{recipe}")
    work = tmp_path / "w"
    proc = run_main(module.main, *RECIPES[recipe], option, value, "--workdir", work, "--dry-run")
    assert proc.returncode in (1, 2), (option, value, proc.stdout[-500:])
    assert_one_error_line(proc)
    assert not work.exists()


def test_nan_canary_minutes_no_longer_trains_the_whole_run(tmp_path):
    from attn_kit.recipes import translation

    proc = run_main(translation.main, "--smoke", "--canary", "--canary-minutes", "nan", "--workdir", tmp_path / "w")
    assert_one_error_line(proc, "--canary-minutes: nan is not a finite number")


def test_what_fails_after_the_data_stages_is_refused_before_them(tmp_path):
    """A dropout out of [0, 1), heads that do not divide d_model, a batch smaller than the longest
    sentence the cleaned data keeps, no BPE merges, no workers: one line, nothing prepared."""
    from attn_kit.recipes import translation

    for argv, fragment in [(["--p-drop", "1.5"], "--p-drop must be in [0, 1) (a dropout rate)"),
                           (["--h", "3", "--d-model", "64"], "--h 3 does not divide --d-model 64"),
                           (["--max-tokens-per-gpu", "5"], "give more than 250"),
                           (["--bpe-merges", "0"], "--bpe-merges must be >= 1"),
                           (["--workers", "0"], "--workers must be >= 1")]:
        proc = run_main(translation.main, "--smoke", *argv, "--workdir", tmp_path / "w")
        assert_one_error_line(proc, fragment)
        assert not (tmp_path / "w").exists()


def test_a_wrong_type_in_a_yaml_config_names_the_key_and_the_file(tmp_path, monkeypatch):
    from attn_kit.recipes import translation

    real = config.load("wmt14")
    changed = {**real, "smoke": {**real["smoke"], "beam": "four"}}
    monkeypatch.setattr(config, "load", lambda recipe: changed if recipe == "wmt14" else real)
    proc = run_main(translation.main, "--smoke", "--workdir", tmp_path / "w", "--dry-run")
    assert_one_error_line(proc, "recipes/configs/wmt14.yaml: beam: 'four' is not a whole number")


@pytest.mark.parametrize("argv,fragment", [
    (["--ngpus", "-8"], "argument --ngpus: -8 is not >= 0"),
    (["--ngpus", "0"], "--ngpus 0: the cost is that of GPUs"),
    (["--utilization", "7", "--gpu", "H100"], "argument --utilization: 7 is not <= 1"),
    (["--utilization", "0", "--gpu", "H100"], "argument --utilization: 0 is not > 0"),
    (["--utilization", "nan", "--gpu", "H100"], "argument --utilization: nan is not a finite number"),
    (["--mean-length", "-1"], "argument --mean-length: -1 is not > 0"),
    (["--max-updates", "100"], "unrecognized arguments: --max-updates 100"),
    (["--arch", "nonexistent"], "fairseq-train does not accept --arch nonexistent"),
])
def test_training_costs_options_are_checked(argv, fragment, capsys):
    """A typo is an error (no parse_known_args), every number is in range and finite, and an unknown
    arch is one line, not fairseq's whole usage."""
    from attn_kit.recipes import cost_report

    proc = run_main(cost_report.main, *argv)
    assert_one_error_line(proc, fragment)
    assert proc.stdout == ""  # nothing printed before the error


def test_the_kits_parsers_make_argparse_errors_one_line():
    from attn_kit.cli import ArgumentParser, UsageError

    p = ArgumentParser(prog="x")
    p.add_argument("--n", type=int)
    with pytest.raises(UsageError, match=r"argument --n: invalid int value: 'four' \(x --help for the options\)"):
        p.parse_args(["--n", "four"])
    assert isinstance(p, argparse.ArgumentParser)


@pytest.mark.parametrize("argv,fragment", [
    (["--", "--lr", "5"], "--lr after --: eq. 3 sets the learning rate"),
    (["--", "--label-smoothing", "0.2"], "--label-smoothing after --"),
    (["--", "--optimizer", "sgd"], "--optimizer after --"),
    (["--", "--clip-norm", "0.1"], "--clip-norm after --: it is a recipe option"),
    (["--clip-norm", "-0.5"], "--clip-norm must be >= 0 (0: no clipping)"),
    (["--lenpen", "1.2"], "--lenpen is fairseq's length penalty: it applies with --length-penalty fairseq"),
])
def test_what_would_be_ignored_or_overridden_silently_is_one_line(argv, fragment, tmp_path):
    """Issue 36: `-- --lr 5 --dropout 0.9` overrode what the recipe sets (fairseq takes the last value; its
    --lr is not even read by eq. 3's schedule), and --lenpen was ignored beside the GNMT penalty."""
    from attn_kit.recipes import translation

    mode = "--smoke" if "--lenpen" in argv else "--bundled"  # --bundled ranks by fairseq's --lenpen already
    proc = run_main(translation.main, mode, "--workdir", tmp_path / "w", "--dry-run", *argv)
    assert_one_error_line(proc, fragment)
    ok = run_main(translation.main, "--bundled", "--workdir", tmp_path / "w", "--dry-run", "--", "--tensorboard-logdir", "tb")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("argv,fragment", [
    (["--gnmt-alpha", "nan"], "argument --gnmt-alpha: nan is not a finite number"),
    (["--lenpen", "-1"], "argument --lenpen: -1 is not >= 0"),
    (["--max-len-b", "-100"], "argument --max-len-b: -100 is not >= 0"),
    (["--threads", "-2"], "argument --threads: -2 is not >= 1"),
])
def test_translate_checks_its_numbers_before_any_work(argv, fragment, tmp_path):
    """translate.py --gnmt-alpha nan printed 55 dots for "A man." (exit 0); --max-len-b -100 and
    --threads -2 were tracebacks."""
    from attn_kit.inference import translate

    proc = run_main(translate.main, tmp_path / "no-run", *argv)
    assert_one_error_line(proc, fragment)


def test_a_test_sentence_too_long_to_decode_is_refused_before_training(tmp_path):
    """Issue 36: a 5,000-token test line failed at the generate stage, after the training. The train stage
    now checks the valid and test sentences (in word pieces) against the positions fairseq decodes with,
    before fairseq-train starts: one line naming the file and the line."""
    from test_slurm import corpus, parallel

    from attn_kit.fairseq_layer.fairseq_commands import MAX_POSITIONS

    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    for lang in ("en", "de"):
        lines = (data / f"test.{lang}").read_text(encoding="utf-8").split("\n")
        lines[2] = " ".join(["word"] * 5000)
        (data / f"test.{lang}").write_text("\n".join(lines), encoding="utf-8")
    work = tmp_path / "w"
    proc = parallel(["--src", "en", "--tgt", "de", *(x for s in ("train", "valid", "test") for x in (f"--{s}", data / s)),
                     "--workdir", work, "--ngpus", "0", "--workers", "1", "--preset", "small", "--stop-stage", "train",
                     "--max-update", "1"])
    assert_one_error_line(proc, "test.en line 3 has", f"more than the {MAX_POSITIONS - 1} fairseq decodes")
    assert (work / "data-bin").exists() and not (work / "checkpoints").exists()  # data kept, nothing trained


def test_the_positions_checked_are_fairseqs_and_the_plugins():
    from fairseq.tasks.translation import TranslationConfig

    from attn_kit.fairseq_layer.fairseq_commands import MAX_POSITIONS
    from attn_plugin.models.attn_transformer import AttnTransformerConfig

    assert MAX_POSITIONS == TranslationConfig().max_source_positions == TranslationConfig().max_target_positions
    assert MAX_POSITIONS == AttnTransformerConfig().max_source_positions == AttnTransformerConfig().max_target_positions


@pytest.mark.parametrize("module,argv", [
    ("attn_kit.inference.attention", ["run", "--sentence", "a", "--min-weight", "nan"]),
    ("lab.compare.cli", ["--train-minutes", "inf"]),
    ("attn_kit.recipes.cost_report", ["--mean-length", "nan"]),
    ("attn_kit.inference.translate", ["run", "--gnmt-alpha", "inf"]),
])
def test_every_kit_command_refuses_a_float_option_that_is_not_finite(module, argv):
    """attn_kit.cli.ArgumentParser, every kit command's parser: NaN or infinity for an option of
    type float is one error line naming the option, whatever the command's own checks."""
    main = importlib.import_module(module).main
    option = next(a for a in argv if a.startswith("--") and argv[argv.index(a) + 1] in ("nan", "inf"))
    proc = run_main(main, *argv)
    assert_one_error_line(proc, f"argument {option}: ", "is not a finite number")


# The keys that name a section's whole setting, with the options that stand for them (the YAML
# headers say so); every other key is an option of the recipe that reads the file.
WHOLE_SETTING_KEYS = {"data": "--bundled, --smoke, --mirror; parallel.sh: --train/--valid/--test",
                      "preset": "parallel.sh --preset", "size": "--layers, --d-model, --d-ff, --h, --p-drop",
                      "train_flags": "fairseq-train options after --", "pair": "--pair; parallel.sh --src/--tgt"}


@pytest.mark.parametrize("recipe,yaml_name", [("translation", "wmt14"), ("parallel", "wmt14"), ("wsj", "wsj")])
def test_every_yaml_key_is_an_option(recipe, yaml_name):
    """The YAML's `clean` (which dropped 7% of Multi30k's pairs), `log_interval` and
    `validate_interval_updates` had no option, though the YAML said every key has one."""
    import yaml

    from attn_kit.checkout import REPO
    from attn_kit.recipes.settings import option_of

    def keys(node):
        return {k for key, value in node.items()
                for k in (keys(value) if isinstance(value, dict) else {key})}

    options = {o for a in importlib.import_module(f"attn_kit.recipes.{recipe}").parser()._actions
               for o in a.option_strings}
    config = yaml.safe_load((REPO / "recipes" / "configs" / f"{yaml_name}.yaml").read_text())
    missing = sorted(k for k in keys(config) - set(WHOLE_SETTING_KEYS)
                     if option_of(k) not in options)
    assert not missing, f"{yaml_name}.yaml keys with no option of {recipe}: {missing}"


def test_no_clean_keeps_every_training_pair():
    from attn_kit.recipes import parallel, translation

    assert translation.build(["--smoke", "--no-clean", "--dry-run"]).clean is False
    assert translation.build(["--bundled", "--clean", "--dry-run"]).clean is True
    base = ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s", "--dry-run"]
    assert parallel.build(base).clean is True and parallel.build([*base, "--no-clean"]).clean is False

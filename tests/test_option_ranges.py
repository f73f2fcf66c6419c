"""Every numeric option of every kit command that is not a recipe (scripts/*.py, benchmarks/*.py)
has its range beside it (attn_kit.cli.Number), and a value out of it, NaN, infinity or a wrong type
is one error line naming the option before any work (issue 36, item 3). The recipes check theirs
where their settings are built: tests/test_values.py."""
import argparse
import importlib
import importlib.util
import math
import re

import pytest
from conftest import REPO, assert_one_error_line, run_main

from attn_kit import cli


def commands():
    """{script: its main}: the function each script under scripts/ and benchmarks/ runs."""
    out = {}
    for path in sorted([*(REPO / "scripts").glob("*.py"), *(REPO / "benchmarks").glob("*.py")]):
        text = path.read_text()
        called = re.search(r"(?:main_guard\((\w+)\)|^\s+(entry)\(\))", text, re.M)
        if not called:
            continue
        name = called.group(1) or called.group(2)
        imported = re.search(rf"^from ((?:attn_kit|lab)[\w.]*) import .*\b{name}\b", text, re.M)
        if imported:
            module = importlib.import_module(imported.group(1))
        else:  # the script defines it
            spec = importlib.util.spec_from_file_location(f"script_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        main = getattr(module, name)
        if name == "entry":  # compare_baselines.py: entry() is main_guard(main)
            main = module.main
        out[str(path.relative_to(REPO))] = main
    return out


class Captured(Exception):
    pass


def parser_of(main, monkeypatch):
    """The parser ``main`` builds: the first ArgumentParser it asks to parse."""
    seen = []

    def capture(self, args=None, namespace=None):
        seen.append(self)
        raise Captured

    monkeypatch.setattr(cli.ArgumentParser, "parse_known_args", capture)
    try:
        main([])
    except Captured:
        pass
    monkeypatch.undo()
    assert seen, "no attn_kit.cli.ArgumentParser parsed its command line"
    return seen[0]


def numeric_actions(parser, prefix=()):
    """[(the arguments that reach it: a subcommand or none, the action)] of every option taking a number."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += numeric_actions(sub, (*prefix, name))
        elif action.option_strings and (action.type in (int, float) or isinstance(action.type, cli.Number)):
            out.append((prefix, action))
    return out


COMMANDS = commands()



@pytest.mark.parametrize("script", sorted(COMMANDS))
def test_every_numeric_option_states_its_range(script, monkeypatch):
    """A bare type=int or type=float takes -1, or an int 0 where 1 is the least that means
    anything; each option says its range with attn_kit.cli.Number (or lists its choices)."""
    parser = parser_of(COMMANDS[script], monkeypatch)
    bare = [a.option_strings[0] for _, a in numeric_actions(parser) if not isinstance(a.type, cli.Number)
            and not a.choices]
    assert not bare, f"{script}: {bare} take any number; give each a type=Number(...) with its range"


def bad_values(number: cli.Number):
    """Values each option must refuse: below its least, above its most, not finite, not a number."""
    out = ["many"]
    step = 1 if number.kind is int else 0.5
    if number.minimum is not None:
        out.append(number.minimum - step)
    if number.above is not None:
        out.append(number.above)
    if number.maximum is not None:
        out.append(number.maximum + step)
    if number.below is not None:
        out.append(number.below)
    if number.kind is float:
        out += [math.nan, math.inf]
    else:
        out.append(2.5)
    return out


CASES = []
for _script, _main in COMMANDS.items():
    _mp = pytest.MonkeyPatch()
    for _prefix, _action in numeric_actions(parser_of(_main, _mp)):
        if isinstance(_action.type, cli.Number):
            CASES += [(_script, _prefix, _action.option_strings[0], v) for v in bad_values(_action.type)]


@pytest.mark.parametrize("script,prefix,option,value", CASES,
                         ids=[f"{s.split('/')[-1]}:{' '.join(p)}{o}={v}" for s, p, o, v in CASES])
def test_a_number_out_of_range_is_one_line_naming_the_option(script, prefix, option, value, tmp_path,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = run_main(COMMANDS[script], *prefix, option, value)
    assert proc.returncode == 2, proc.stdout[-300:]
    assert_one_error_line(proc, f"argument {option}")
    assert not any(tmp_path.iterdir())  # nothing written


def test_number_says_what_range_a_value_left():
    """The error names the bound the value crossed, as argparse reports a type's error."""
    n = cli.Number(float, minimum=0, below=1)
    assert n("0") == 0.0 and n("0.5") == 0.5
    for text, message in (("-0.1", "-0.1 is not >= 0"), ("1", "1 is not < 1"), ("nan", "nan is not a finite number")):
        with pytest.raises(argparse.ArgumentTypeError, match=re.escape(message)):
            n(text)
    with pytest.raises(ValueError):
        cli.Number(int, minimum=1)("2.5")


# One name for each concept the commands share (README: the same option means the same thing
# everywhere): the name shown, and the names before it.
SHARED_NAMES = {"--output": ["--out"], "--p-drop": ["--dropout"], "--gnmt-alpha": ["--alpha"], "--h": ["--heads"],
                "--train-minutes": ["--minutes", "--minutes-per-row"], "--ngpus": ["--device"],
                "--precision": ["--dtype"]}
# The old names that still work, out of --help: only where a results file on record was made with one
# (its command must stay runnable), each with a file that did
KEPT_FOR_RESULTS = {"--out": "benchmarks/results/cpu2core_intel_ctranslate2_fp32_int8.json",
                    "--device": "benchmarks/results/h100_generate_bf16.json",
                    "--dtype": "benchmarks/results/h100_generate_bf16.json"}


OTHER_MEANING = {("scripts/plot_attention.py", "--heads"): "which heads to draw (1,3), not the model's h"}


def every_parser(monkeypatch):
    """{command: its parser}: every script's and benchmark's, and the recipes'."""
    out = {script: parser_of(main, monkeypatch) for script, main in COMMANDS.items()}
    for recipe in ("translation", "parallel", "wsj", "table3"):
        out[f"recipes ({recipe})"] = importlib.import_module(f"attn_kit.recipes.{recipe}").parser()
    return out


def shown_and_hidden(parser):
    shown, hidden = set(), set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                s, h = shown_and_hidden(sub)
                shown |= s
                hidden |= h
        else:
            (hidden if action.help == argparse.SUPPRESS else shown).update(action.option_strings)
    return shown, hidden


def test_every_command_shows_the_shared_names_only(monkeypatch):
    """plot_attention's --out beside translate's --output, the benchmarks' --device/--dtype beside the
    recipes' --ngpus/--precision: each --help shows the one name; an old name still works, hidden, only
    beside the new one and only where a results file on record was made with it (issue 51: no hidden
    aliases otherwise)."""
    for name in KEPT_FOR_RESULTS.values():
        assert (REPO / name).exists(), name
    for command, parser in every_parser(monkeypatch).items():
        shown, hidden = shown_and_hidden(parser)
        for name, old in SHARED_NAMES.items():
            clash = {o for o in shown & set(old) if (command, o) not in OTHER_MEANING}
            assert not clash, f"{command} shows {sorted(clash)}: name it {name}"
            for alias in hidden & set(old):
                assert name in shown, f"{command} takes {alias} but not {name}"
                assert alias in KEPT_FOR_RESULTS, f"{command} takes {alias}, a hidden alias no results file needs"
                assert alias.encode() in (REPO / KEPT_FOR_RESULTS[alias]).read_bytes()


def test_a_renamed_option_is_refused_with_its_new_name():
    """The recipes' and the comparison's old names are no aliases: one line saying the new name."""
    from attn_kit.recipes import translation, wsj
    from lab.compare import cli as compare

    for main, argv, said in ((translation.main, ["--dry-run", "--alpha", "0.5"], "--alpha is now --gnmt-alpha"),
                             (wsj.main, ["--dry-run", "--smoke", "--dropout", "0.2"], "--dropout is now --p-drop"),
                             (compare.main, ["--bundled", "--minutes", "3"], "--minutes is now --train-minutes")):
        proc = run_main(main, *argv)
        assert proc.returncode == 2 and said in proc.stderr, proc.stderr

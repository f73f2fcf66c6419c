"""Each option declared once (issue 51, item 3): a recipe setting's flag, type, range, help and the stage
it shapes are one entry of attn_kit.options.CATALOGUE, from which every parser that offers it is generated;
the paper's decoding constants are named once."""
import ast
import importlib
from pathlib import Path

import pytest
import yaml

from attn_kit import options
from attn_kit.checkout import REPO
from attn_kit.planning import paper

RECIPES = ("translation", "parallel", "wsj", "table3")
# The same name for another thing in another command, each with its reason (a results file on record uses it)
ON_RECORD = "text files: the command of recipes/results/tokens_per_update_newstest_en_de.json"
OTHER_MEANING = {("--src", "attn_kit/planning/tokens_per_update.py"): ON_RECORD,
                 ("--tgt", "attn_kit/planning/tokens_per_update.py"): ON_RECORD}


def literal_declarations():
    """{flag: [file, ...]} of every add_argument("--flag", ...) written out in the kit."""
    found = {}
    for path in sorted((REPO / "attn_kit").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        if (arg.value, rel) not in OTHER_MEANING:
                            found.setdefault(arg.value, []).append(rel)
                    elif not isinstance(arg, (ast.Constant, ast.Starred)) and rel != "attn_kit/options.py":
                        pytest.fail(f"{rel}:{node.lineno}: add_argument of a computed flag: declare it in "
                                    "attn_kit/options.py")
    return found


def test_no_option_is_declared_twice():
    """A flag written out in two add_argument calls, or written out where the catalogue declares it, is
    declared twice (the issue's --gnmt-alpha was declared in four modules, with the paper's 0.6 in each)."""
    written = literal_declarations()
    twice = {flag: files for flag, files in written.items() if len(files) > 1}
    beside = {o.flag: written[o.flag] for o in options.CATALOGUE if o.flag in written}
    assert twice == {} and beside == {}


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_option_with_a_range_is_the_catalogues(recipe):
    """Every numeric option a recipe offers comes from the catalogue (its range is checked on the YAML's
    values and the command line's alike), and its help is the catalogue's."""
    parser = importlib.import_module(f"attn_kit.recipes.{recipe}").parser()
    numeric = [a for a in parser._actions if a.option_strings and a.type in (int, float, options.count_or_auto)]
    assert numeric
    for action in numeric:
        declared = options.OPTIONS.get(action.dest)
        assert declared is not None and declared.flag in action.option_strings, (recipe, action.option_strings)
        assert action.help.startswith(declared.help), (recipe, declared.flag)


def test_a_range_error_names_the_option_or_the_yaml_key():
    messages = []
    for named in (lambda n: options.OPTIONS[n].flag, lambda n: f"recipes/configs/wmt14.yaml: {n}"):
        with pytest.raises(options.UsageError) as err:
            options.check_ranges({"beam": 0}, named)
        messages.append(str(err.value))
    assert messages == ["--beam must be >= 1", "recipes/configs/wmt14.yaml: beam must be >= 1"]
    for name, bad, good in (("p_drop", 1.0, 0.0), ("utilization", 0.0, 1.0), ("signal_seconds", 65536, 0),
                            ("bpe_learn_pairs", -1, 0), ("lr_scale", 0.0, 1e-9)):
        with pytest.raises(options.UsageError):
            options.check_ranges({name: bad})
        options.check_ranges({name: good})


def test_the_papers_decoding_is_named_once():
    """Sec. 6.1's beam 4, alpha 0.6 and input + 50: the WMT14 recipes' settings are the paper's."""
    P = yaml.safe_load((REPO / "recipes" / "configs" / "wmt14.yaml").read_text())["paper"]
    assert (P["beam"], P["alpha"]) == (paper.PAPER_BEAM, paper.PAPER_ALPHA) == (4, 0.6)
    assert paper.PAPER_MAX_LEN_B == 50
    for path in (REPO / "attn_kit").rglob("*.py"):
        if path.name != "paper.py":
            text = path.read_text(encoding="utf-8")
            assert "= 4, 0.6" not in text and "max_len_b=50" not in text, path


def test_the_kit_reads_the_plugins_beam_stop_rule():
    """One rule (attn_plugin/beam_stop.py): the recipes' beam_stop is the plugin's for every setting,
    and t2t without GNMT's penalty is refused by both."""
    from types import SimpleNamespace

    from attn_kit.cli import UsageError
    from attn_kit.recipes.common import beam_stop
    from attn_plugin import beam_stop as plugin

    for asked in (None, "t2t", "fairseq"):
        for penalty in ("gnmt", "fairseq"):
            s = SimpleNamespace(beam_stop=asked, length_penalty=penalty)
            try:
                want = plugin.stop_rule(asked, penalty == "gnmt")
            except ValueError:
                with pytest.raises(UsageError, match="--beam-stop t2t needs --length-penalty gnmt"):
                    beam_stop(s)
                continue
            assert beam_stop(s) == want
    assert (plugin.stop_rule(None, True), plugin.stop_rule(None, False)) == ("t2t", "fairseq")


STAGE_OF = {"bpe": "bpe", "train": "train", "average": "average", "decode": "generate"}


def test_an_option_changes_the_recorded_options_of_the_stage_it_declares():
    """``makes``: a changed value of an option changes the recorded options (a change of which starts
    the stage again) of exactly the stage it declares, and of none where it declares none; through the
    translation recipe's own settings and stages (--smoke --dry-run)."""
    from attn_kit.recipes import translation

    def recorded(*argv):
        s = translation.build(["--smoke", "--dry-run", "--workdir", "/tmp/attn-options-test", *argv])
        return s, {stage.name: stage.options for stage in translation.stages(s)}

    s, before = recorded()
    checked = []
    for action in translation.parser()._actions:
        o = options.OPTIONS.get(action.dest)
        if o is None or o.kind in (bool, str, Path) or (o.kind == "bool?") or o.name in options.SBATCH_ONLY \
                or o.name in ("ngpus", "nnodes", "node_rank", "lenpen", "canary_min_utilization", "utilization"):
            continue  # switches and names; values that need other options (GPUs, Slurm, fairseq's penalty)
        value = getattr(s, o.name, None) if o.name not in translation.SIZE_OPTIONS else getattr(s.size, o.name)
        if o.choices:
            given = next(c for c in o.choices if c != value and c != "auto")
        elif o.kind is float:
            given = (value or 0.5) / 2 if o.below or o.maximum else (value or 1.0) * 2
        else:  # a forward's cap is above the update's 1000 tokens already: smaller
            given = value // 2 if o.name == "max_tokens_per_gpu" else (value or 1) * 2
        after = recorded(o.flag, str(given))[1]
        changed = sorted(name for name in after if after[name] != before.get(name))
        assert changed == ([STAGE_OF[o.makes]] if o.makes else []), (o.flag, given, changed)
        checked.append(o.flag)
    assert {"--seed", "--beam", "--average", "--bpe-merges", "--threads", "--log-interval"} <= set(checked)

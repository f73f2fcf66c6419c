"""A run directory is data, never code: inference.json, results.json (and ct2_card.json, in
tests/test_ctranslate2.py) are checked against their schema (attn_plugin.run_cards) before any
command uses them. On copies of the WMT14 --smoke run (conftest.smoke_run)."""
import copy
import importlib.util
import json
import os
import pickle
import sys

import pytest
from conftest import REPO, assert_one_error_line, command, run_main
from test_translate import copy_run, finish, start

from attn_plugin.errors import ConfigError
from attn_plugin.run_cards import read_run_card

SCRIPTS = REPO / "scripts"
TRANSLATE = [sys.executable, str(SCRIPTS / "translate.py")]
HAS_CT2 = importlib.util.find_spec("ctranslate2") is not None


def run_all(commands, stdin="Tom is here.\n"):
    """Run ``commands`` at once (each a list), each a process of its own; their CompletedProcesses, in order."""
    return finish(*(start(cmd, stdin) for cmd in commands))


def translate(work, stdin="Tom is here.\n"):
    """scripts/translate.py on ``work``, forked from the worker's preloaded interpreter (conftest.command):
    for what it says of a run directory, once every_command has checked the script's process-level contract."""
    return command([*TRANSLATE, work], dict(os.environ), input_text=stdin, fork=True)


def every_command(work, tmp_path):
    """Each command that reads RUN_DIR/inference.json, run on ``work``: scripts/translate.py as a process
    (the scripts' process-level contract), the others' main() in this process (conftest.run_main)."""
    from attn_kit.inference import attention, translate

    procs = run_all([[*TRANSLATE, work]])
    procs.append(run_main(translate.main, work, "--print-interactive-command", stdin="Tom is here.\n"))
    procs.append(run_main(attention.main, work, "--sentence", "Tom is here.", "--out", tmp_path / "fig.png"))
    if HAS_CT2:
        from attn_kit.inference import ctranslate2

        procs.append(run_main(ctranslate2.main, work, tmp_path / "ct2"))
    return procs


def edit_card(work, change):
    """``change`` the card of ``work`` in place (a list it returns replaces the card)."""
    card = json.loads((work / "inference.json").read_text())
    new = change(card)
    (work / "inference.json").write_text(json.dumps(new if isinstance(new, list) else card))


@pytest.fixture
def work(smoke_run, tmp_path):
    return copy_run(smoke_run, tmp_path / "w")


def test_a_user_dir_in_the_run_card_is_refused_and_never_imported(work, tmp_path):
    """args.user_dir naming a folder in the run (as fairseq's --user-dir) was imported by translate and
    plot_attention (exit 0), by the export (which then failed), by from_pretrained; and
    --print-interactive-command printed a second --user-dir. Now each refuses it in one line naming
    the key, and the marker the payload would write never appears."""
    marker = tmp_path / "imported"
    (work / "payload").mkdir()
    (work / "payload" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")

    def hook(card):
        card["args"]["user_dir"] = "payload"
        card["paths"].append("user_dir")  # resolved in RUN_DIR, as the card's files are

    edit_card(work, hook)
    for proc in every_command(work, tmp_path):
        assert_one_error_line(proc, str(work / "inference.json"), "'args.user_dir'", "never code")
        assert proc.stdout == ""
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    with pytest.raises(ConfigError, match="'args.user_dir'"):
        AttnTransformerModel.from_pretrained(str(work))
    assert not marker.exists()
    assert not (tmp_path / "fig.png").exists() and not (tmp_path / "ct2").exists()


DAMAGE = [  # (what is done to the card, the key the one line names)
    (lambda c: c.pop("checkpoint"), "has no 'checkpoint'"),
    (lambda c: c.pop("args"), "has no 'args'"),
    (lambda c: c.pop("data"), "has no 'data'"),
    (lambda c: [c], "holds a JSON list, not an object"),
    (lambda c: c["args"].pop("source_lang"), "has no 'args.source_lang'"),
    (lambda c: c["generation"].update(beam="4"), "'generation.beam' is \"4\", not an integer"),
    (lambda c: c["generation"].update(beam=0), "'generation.beam' is 0; it must be at least 1"),
    (lambda c: c["args"].update(bpe_vocabulary_threshold=True), "'args.bpe_vocabulary_threshold' is true"),
    (lambda c: c["args"].update(eval_bleu=True), "unknown key 'args.eval_bleu'"),
    (lambda c: c["args"].update(tokenizer="moses"), "'args.tokenizer' is \"moses\"; it must be one of"),
    (lambda c: c["args"].pop("bpe_codes"), "no 'args.bpe_codes'"),
    (lambda c: c.update(data="bpe"), "'data' names"),
    (lambda c: c["args"].update(bpe_codes="raw/test.en"), "'args.bpe_codes' names"),
    (lambda c: c["args"].update(bpe_codes="bpe/vocab.en"), "'args.bpe_codes' names"),
    (lambda c: c["args"].update(bpe_vocabulary="bpe/codes"), "'args.bpe_vocabulary' names"),
    (lambda c: c["args"].update(bpe_vocabulary="bpe/nothing"), "'args.bpe_vocabulary' names"),
    (lambda c: c["args"].update(bpe_codes="../../../../../../etc/hostname"), "'args.bpe_codes' points outside"),
    (lambda c: c.update(checkpoint="bpe/codes"), "'checkpoint' names"),
    (lambda c: c["generation"].update(user_dir="x"), "'generation.user_dir'"),
]


@pytest.mark.parametrize("damage,message", DAMAGE, ids=[m.split("'")[1] if "'" in m else "list" for _, m in DAMAGE])
def test_a_damaged_or_foreign_run_card_is_one_error_naming_file_and_key(work, damage, message):
    """Missing keys were KeyErrors, a list a TypeError, unknown keys and wrong types reached fairseq,
    wrong files reached subword-nmt (which printed their first line and exited) or torch."""
    edit_card(work, damage)
    with pytest.raises(ConfigError) as caught:
        read_run_card(work)
    assert str(work / "inference.json") in str(caught.value) and message in str(caught.value)


def test_a_file_that_is_not_bpe_codes_is_named_not_echoed(work):
    """bpe_codes naming the raw test source: subword-nmt printed two lines of its own, one echoing the
    file's first line, and exited; now one line names the key and what is wrong, not the content."""
    first = (work / "raw" / "test.en").read_text().splitlines()[0]
    edit_card(work, lambda c: c["args"].update(bpe_codes="raw/test.en"))
    proc = translate(work)
    line = assert_one_error_line(proc, "'args.bpe_codes' names", "is not subword-nmt BPE codes: line 1")
    assert first not in line


def test_a_raw_pickle_checkpoint_is_the_projects_one_line_only(work, smoke_run, tmp_path):
    """A checkpoint that is a plain pickle (not torch.save's zip), here one that would run a command:
    torch printed a two-line warning before the refusal; now the refusal is the only line, for the
    card's checkpoint and for --checkpoint, and nothing ran."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with open(work / "checkpoint_avg.pt", "wb") as f:
        pickle.dump({"model": Payload()}, f, protocol=4)
    from attn_kit.inference.translate import main

    card = translate(work)  # --checkpoint in this process (warnings shown as in a new one)
    option = run_main(main, smoke_run, "--checkpoint", work / "checkpoint_avg.pt", stdin="Tom is here.\n")
    assert_one_error_line(card, "'checkpoint' names", "is not a PyTorch checkpoint")
    assert_one_error_line(option, str(work / "checkpoint_avg.pt"), "is not a PyTorch checkpoint")
    assert not marker.exists()


# --------------------------------------------------------------------------- results.json (--check-test-set)
@pytest.mark.parametrize("case", ["no_output", "list", "gone", "outside"])
def test_check_test_set_checks_results_json_before_translating(work, capsys, case):
    """results.json without test_output: the whole test set was translated, then a KeyError; as a list it
    was "scored by an older version"; a test_source that is gone was reported as --input, which the user
    never gave; a test_reference outside the run was read. Now each is one error naming results.json
    and the key, before anything is translated."""
    from attn_kit.inference.translate import main

    results = json.loads((work / "results.json").read_text())
    content, message = {
        "no_output": ({k: v for k, v in results.items() if k != "test_output"}, "has no 'test_output'"),
        "list": ([], "holds a JSON list, not an object"),
        "gone": ({**results, "test_source": str(work / "raw" / "gone.en")}, "'test_source' names"),
        "outside": ({**results, "test_reference": "/etc/hostname"}, "'test_reference' points outside"),
    }[case]
    (work / "results.json").write_text(json.dumps(content))
    with pytest.raises(ConfigError) as caught:
        main([str(work), "--check-test-set"])
    line = str(caught.value)
    assert str(work / "results.json") in line and message in line
    assert "--input" not in line and ("older version" not in line or case == "no_output")
    assert capsys.readouterr().out == ""


def test_a_sound_card_is_read_as_written(work):
    """The recipe's own card passes, with the optional keys filled in, nothing else changed."""
    written = json.loads((work / "inference.json").read_text())
    card = read_run_card(work)
    assert card == {**written, "kind": written.get("kind", "translation")}
    minimal = copy.deepcopy(written)
    for key in ("kind", "paths", "generation", "batch_size"):
        minimal.pop(key)
    (work / "inference.json").write_text(json.dumps(minimal))
    assert read_run_card(work) == {**minimal, "kind": "translation", "paths": [], "generation": {},
                                   "batch_size": None}


def test_the_card_records_the_inference_precision_and_loading_follows_it(work):
    """The recipe decoded the test set in fp32 and its card says so (bf16_inference false, issue 26);
    a card asking for bf16 inference gets it in the task that from_pretrained builds."""
    from attn_plugin.hub import from_pretrained

    assert json.loads((work / "inference.json").read_text())["args"]["bf16_inference"] is False
    assert from_pretrained(work).task.cfg.bf16_inference is False
    edit_card(work, lambda card: card["args"].update(bf16_inference=True))
    assert from_pretrained(work).task.cfg.bf16_inference is True
    edit_card(work, lambda card: card["args"].update(bf16_inference="yes"))
    with pytest.raises(ConfigError, match="bf16_inference"):
        read_run_card(work)

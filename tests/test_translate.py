"""Using a trained run: scripts/translate.py, from_pretrained and fairseq-interactive translate
raw text exactly as the recipe translated its test set (the WMT14 --smoke run of conftest.smoke_run;
the WSJ parser's in tests/test_recipe_wsj.py)."""
import io
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import BIN, REPO, assert_one_error_line, command, run_main, train_cmd

TRANSLATE = [sys.executable, str(REPO / "scripts" / "translate.py")]


def start(cmd, stdin=None, env=None):
    """Start ``cmd`` with ``stdin`` (text, or bytes as they are; a few lines) written at once."""
    proc = subprocess.Popen([str(c) for c in cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        proc.stdin.write(stdin.encode() if isinstance(stdin, str) else stdin or b"")
        proc.stdin.close()
    except BrokenPipeError:  # it ended before reading
        pass
    proc.stdin = None  # written and closed: communicate() only reads
    return proc


def finish(*procs, timeout=300):
    """The CompletedProcess of each started command (output as text), in order."""
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode()))
    return done


def run(*args, stdin=None, timeout=300, env=None, fork=True):
    """scripts/translate.py ARGS with ``stdin``; its output as text. ``fork``: forked from the worker's
    preloaded interpreter (conftest.command), for a test of what it translates; else a process of its own."""
    return command([*TRANSLATE, *args], env or dict(os.environ), timeout=timeout, input_text=stdin, fork=fork)


def translate(*args, stdin=b""):
    """scripts/translate.py's main() in this process (conftest.run_main): for what the process boundary
    does not change; the script itself runs in the tests that check its process-level contract."""
    from attn_kit.inference.translate import main

    return run_main(main, *args, stdin=stdin)


def plot(*args):
    """scripts/plot_attention.py's main() in this process, as translate() for scripts/translate.py."""
    from attn_kit.inference.attention import main

    return run_main(main, *args)


def lines(path):
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def copy_run(smoke_run, dst):
    """A copy of the smoke run with what from_pretrained, the export and --check-test-set read (no
    training data); its results.json names the copy's files, as if the copy had been scored."""
    shutil.copytree(smoke_run, dst, ignore=shutil.ignore_patterns("checkpoints", "*.bin", "*.idx", "mirror",
                                                                  "downloads", "orig", "prep", "tok", "logs"))
    results = dst / "results.json"
    results.write_text(results.read_text(encoding="utf-8").replace(str(smoke_run), str(dst)), encoding="utf-8")
    return dst


def add_noise(run_dir):
    """N(0, 1) noise (seeded) on the weights of ``run_dir``'s checkpoint_avg.pt: a model whose output
    changes with its input (the smoke model answers nearly everything with the same few tokens)."""
    from attn_plugin.checkpoint import load_checkpoint

    ckpt = load_checkpoint(run_dir / "checkpoint_avg.pt")  # weights_only=True with fairseq's types allowed
    g = torch.Generator().manual_seed(0)
    for name, value in ckpt["model"].items():
        if value.dtype.is_floating_point and "norm" not in name:
            ckpt["model"][name] = value + torch.randn(value.shape, generator=g)
    torch.save(ckpt, run_dir / "checkpoint_avg.pt")
    return run_dir


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
    proc = run(smoke_run, "--input", smoke_run / results["test_source"], "--output", tmp_path / "out.de")
    assert proc.returncode == 0, proc.stderr
    assert "translate: 200 sentences in" in proc.stderr  # progress on stderr, nothing else there
    assert "INFO" not in proc.stderr and "Warning" not in proc.stderr
    ours, recipe = lines(tmp_path / "out.de"), lines(smoke_run / "gen" / "test.detok.de")
    assert results["test_output"] == "gen/test.detok.de"  # relative to the run: a copy works where it lands
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


def test_fairseq_interactive_with_the_plugins_encoders_matches(smoke_run, tmp_path, capsys):
    """README's usage line, run by bash as written, on a copy of the run whose path has a space: the
    printed command is shell-quoted and the usage evaluates it, so fairseq-interactive gets the run's
    files and the plugin's encoders, and translates as the recipe did."""
    from attn_kit.inference.translate import main

    work = copy_run(smoke_run, tmp_path / "my run")
    assert main([str(work), "--print-interactive-command"]) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[0] == "fairseq-interactive" and cmd.count("--user-dir") == 1
    assert "--tokenizer" in cmd and "--bpe-vocabulary" in cmd and str(work / "bpe" / "codes") in cmd
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    usage, = [line for line in readme.splitlines() if "--print-interactive-command)" in line]
    (tmp_path / "my.en").write_text("".join(line + "\n" for line in lines(smoke_run / "raw" / "test.en")[:40]))
    command = (usage.replace("python scripts/translate.py", shlex.join(TRANSLATE))
               .replace("runs/wmt14_en_de_bundled", shlex.quote(str(work))))
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == lines(smoke_run / "gen" / "test.detok.de")[:40]


def test_overrides_change_the_decoding(smoke_run, hub):
    """--beam 1 is greedy search: every hypothesis list has one entry."""
    proc = translate(smoke_run, "--beam", "1", "--lenpen", "1.0", stdin="Tom is here.\n")
    assert proc.returncode == 0, proc.stderr
    greedy = hub.generate([hub.encode("Tom is here.")], beam=1)
    assert len(greedy[0]) == 1 and proc.stdout.strip() == hub.decode(greedy[0][0]["tokens"])


def test_loading_a_model_as_the_docs_do_prints_only_the_translation(smoke_run):
    """docs/using-a-model.md's three lines in a fresh Python: they printed fairseq's info lines (the
    dictionaries, the batches), its text_to_speech task's "Please install tensorboardX" on import and
    torch's warning that a CPU has no pinned memory, none of which asks anything of the user; now
    nothing but the translation. A process of its own, since the import is part of it, with warnings
    shown as a plain interpreter shows them (PYTHONWARNINGS unset)."""
    code = ("from attn_plugin.models.attn_transformer import AttnTransformerModel\n"
            f"model = AttnTransformerModel.from_pretrained({str(smoke_run)!r})\n"
            "print(model.translate(['Where is the train station?']))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.startswith("['") and len(proc.stdout.splitlines()) == 1


def test_a_quiet_load_leaves_the_callers_logging_as_it_was(smoke_run, caplog):
    """from_pretrained and translate hold back fairseq's and the plugin's info lines only while they
    run: a warning the user must act on still passes (--gnmt-alpha replacing --lenpen), the loggers'
    levels are as before after, and the caller's own logger and translate's verbose sentences log as
    they would without the plugin."""
    import logging
    import warnings

    from attn_plugin.hub import from_pretrained

    caplog.set_level(logging.DEBUG)  # the root logger at DEBUG, as fairseq's import leaves it
    for name in ("fairseq", "attn_plugin"):  # as a fresh process has them (another test may have set them)
        caplog.set_level(logging.NOTSET, logger=name)
    levels = {name: logging.getLogger(name).level for name in ("fairseq", "attn_plugin")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = from_pretrained(smoke_run, lenpen=1.5, gnmt_alpha=0.6)
        model.translate(["Tom is here."])
    records = [(r.name, r.levelno) for r in caplog.records]
    assert [r for r in records if r[1] < logging.WARNING] == []
    assert ("attn_plugin.tasks.attn_translation", logging.WARNING) in records
    assert [str(w.message) for w in caught if "pin_memory" in str(w.message)] == []
    assert {name: logging.getLogger(name).level for name in levels} == levels
    caplog.clear()
    logging.getLogger("caller").info("the caller's own line")
    model.translate(["Tom is here."], verbose=True)
    infos = [r.name for r in caplog.records if r.levelno == logging.INFO]  # the sentence, its hypotheses
    assert infos[0] == "caller" and set(infos[1:]) == {"fairseq.hub_utils"}


def test_a_run_without_inference_json_or_average_is_one_line(smoke_run, tmp_path):
    assert_one_error_line(run(tmp_path / "nowhere", stdin="x\n", fork=False), "no such run directory")
    work = tmp_path / "w"
    shutil.copytree(smoke_run, work, ignore=shutil.ignore_patterns("checkpoints", "*.bin"))
    (work / "checkpoint_avg.pt").unlink()
    # the script's process-level contract is the line above; the other inputs in this process
    assert_one_error_line(translate(work, stdin="x\n"), "checkpoint_avg.pt is missing", "average stage")
    (work / "inference.json").unlink()
    assert_one_error_line(translate(work, stdin="x\n"), "has no inference.json", "finish the run first")
    assert_one_error_line(translate(smoke_run, "--input", tmp_path / "missing.txt"), "--input", "no such file")


def test_a_sentence_longer_than_the_models_positions_is_one_line(smoke_run):
    long_line = " ".join(["Tom"] * 1100)
    proc = translate(smoke_run, stdin=f"Hello.\n{long_line}\n")
    assert_one_error_line(proc, "line 2 is ", "at most 1024", "split it")
    assert proc.stdout == ""  # nothing translated and printed before the check


def test_text_in_another_script_gets_a_translation(smoke_run):
    proc = translate(smoke_run, stdin="東京は日本の首都です。\nМосква — столица России.\n")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split("\n")[:-1]) == 2


# --------------------------------------------------------------------------- attention figures
PLOT = [sys.executable, str(REPO / "scripts" / "plot_attention.py")]


def test_plot_attention_draws_the_figure_and_dumps_every_weight(smoke_run, hub, tmp_path):
    import numpy as np

    sentence = "The law will never be perfect, but its application should be just."
    proc = command([*PLOT, smoke_run, "--sentence", sentence, "--out", tmp_path / "fig.png", "--dump",
                    tmp_path / "w.npz", "--heads", "1,3", "--query", "its"], dict(os.environ), timeout=300, fork=True)
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


def test_gnmt_alpha_is_the_one_name(capsys):
    """One vocabulary of options (issues 28, 51): --gnmt-alpha is the name; the recipes' old --alpha is
    refused saying so."""
    from attn_kit.cli import UsageError
    from attn_kit.inference.translate import parse_args

    assert parse_args(["run", "--gnmt-alpha", "0.8"]).alpha == 0.8
    with pytest.raises(UsageError, match="--alpha is now --gnmt-alpha"):
        parse_args(["run", "--alpha", "0.8"])
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    help_text = capsys.readouterr().out
    assert "--gnmt-alpha" in help_text and "--alpha" not in help_text


def test_query_finds_every_bpe_piece_of_every_occurrence():
    from attn_kit.inference.attention import word_positions

    tokens = ["The", "mak@@", "ing", "of", "mak@@", "ing", "its", ".", "</s>"]
    assert word_positions(tokens, "making") == [1, 2, 4, 5]
    assert word_positions(tokens, "its") == [6]
    assert word_positions(tokens, "mak") == [] and word_positions(tokens, "ing") == []  # pieces are not words


@pytest.mark.parametrize("argv,message", [
    (["--query", "zebra"], "--query 'zebra' is not a word of the sentence as the model reads it: Hello . </s>"),
    (["--layer", "3"], "--layer 3: the encoder has layers 1..2"),
    (["--heads", "5"], "--heads '5': the model has heads 1..4"),
    (["--output", "fig.jpg"], "give a .png, .pdf or .svg file"),
    ([], "give --output FIG.png, --dump WEIGHTS.npz or both"),
])
def test_plot_attention_bad_options_are_one_line(smoke_run, tmp_path, argv, message):
    """In this process: the script's own one line is checked in test_an_existing_folder_given_as_output_is_left_alone."""
    argv = [str(tmp_path / a) if a.endswith(".jpg") else a for a in argv]
    if "--output" not in argv and argv:
        argv += ["--out", str(tmp_path / "fig.png")]  # the name before --output, still taken
    assert_one_error_line(plot(smoke_run, "--sentence", "Hello.", *argv), message)


def test_check_test_set_compares_with_the_recipes_output(smoke_run):
    proc = translate(smoke_run, "--check-test-set", "--quiet")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["sentences"] == 200 and report["identical_lines"] >= 198
    assert abs(report["sacrebleu_translate"] - report["sacrebleu_recipe"]) <= 0.1


# --------------------------------------------------------------------------- text in, files out
def stdin_of(monkeypatch, data: bytes):
    """``data`` as the standard input of a command run in this process."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_bytes_that_are_not_utf8_are_one_line_naming_the_input_and_line(smoke_run, tmp_path, monkeypatch, capsys):
    """Strict decoding (attn_kit.textio) for stdin, whatever the locale says (here Python's own
    strict decoding, which was a UnicodeDecodeError traceback), and for --input, which replaced the
    bytes silently; --errors replace reads them as U+FFFD."""
    from attn_kit.cli import UserError
    from attn_kit.inference.translate import main

    text = b"Tom is here.\nWhere \xff are you?\n"
    proc = run(smoke_run, stdin=text, env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert_one_error_line(proc, "standard input: line 2 is not UTF-8", "--errors replace")
    (tmp_path / "in.en").write_bytes(text)
    with pytest.raises(UserError, match=f"--input {tmp_path / 'in.en'}: line 2 is not UTF-8"):
        main([str(smoke_run), "--input", str(tmp_path / "in.en")])
    stdin_of(monkeypatch, text)
    assert main([str(smoke_run), "--errors", "replace"]) == 0
    assert len(capsys.readouterr().out.split("\n")[:-1]) == 2


def test_a_byte_order_mark_does_not_change_the_translation(smoke_run, tmp_path, monkeypatch, capsys):
    """A UTF-8 BOM before line 1 (what Windows editors write) is removed: kept, it became <unk> in the
    model's input and changed line 1's translation (the noisy model shows it)."""
    from attn_kit.inference.translate import main

    work = add_noise(copy_run(smoke_run, tmp_path / "noisy"))
    text = "Tom is here.\nWhere are you?\n".encode()
    (tmp_path / "bom.en").write_bytes(b"\xef\xbb\xbf" + text)
    outputs = []
    for data, argv in ((text, []), (b"\xef\xbb\xbf" + text, []), (b"", ["--input", str(tmp_path / "bom.en")])):
        stdin_of(monkeypatch, data)
        assert main([str(work), "--quiet", "--max-len-b", "5", *argv]) == 0  # short: the noisy model rambles
        outputs.append(capsys.readouterr().out)
    assert outputs[1] == outputs[2] == outputs[0] and len(outputs[0].split("\n")[:-1]) == 2


def test_an_existing_folder_given_as_output_is_left_alone(smoke_run, tmp_path):
    """--output DIR (and plot_attention.py's --out/--dump DIR) is one line before any work (no
    progress line, nothing translated) and touches nothing; an existing file is replaced only with --force."""
    folder, figures = tmp_path / "mine", tmp_path / "fig.png"
    folder.mkdir()
    figures.mkdir()
    (folder / "notes.txt").write_text("keep me")
    (tmp_path / "in.en").write_text("Hello.\n")
    source = ["--input", tmp_path / "in.en"]  # progress lines on stderr while it translates
    # each script once as a process (its process-level contract), the other command lines in this process
    for proc in [*finish(*(start(cmd) for cmd in (
            [*TRANSLATE, smoke_run, *source, "--output", folder],
            [*PLOT, smoke_run, "--sentence", "Hello.", "--dump", folder]))),
            translate(smoke_run, *source, "--output", folder, "--force"),
            plot(smoke_run, "--sentence", "Hello.", "--out", figures, "--force")]:
        assert_one_error_line(proc, "is a folder")
        assert proc.stdout == ""  # plot_attention.py prints the translation once it has one
    assert [p.name for p in folder.iterdir()] == ["notes.txt"] and (folder / "notes.txt").read_text() == "keep me"
    assert not any(figures.iterdir())
    mine = tmp_path / "mine.de"
    mine.write_text("mine\n")
    assert_one_error_line(translate(smoke_run, "--output", mine, stdin="Hello.\n"), "exists", "--force")
    assert mine.read_text() == "mine\n"
    replaced = translate(smoke_run, "--output", mine, "--force", stdin="Hello.\n")
    assert replaced.returncode == 0, replaced.stderr
    assert mine.read_text() != "mine\n" and len(lines(mine)) == 1


def test_an_output_that_cannot_be_written_fails_before_any_translation(smoke_run, tmp_path):
    """--output /proc/x: one line naming --output before the input is even looked at (here its
    line 2 is too long for the model, which translating would report first)."""
    (tmp_path / "in.en").write_text("Hello.\n" + " ".join(["Tom"] * 1100) + "\n")
    proc = translate(smoke_run, "--input", tmp_path / "in.en", "--output", "/proc/x")
    assert_one_error_line(proc, "--output /proc/x", "cannot write in /proc")
    assert proc.stdout == ""


def test_the_printed_interactive_command_refuses_a_path_with_a_line_break(smoke_run, tmp_path, capsys):
    """Issue 36: a run whose path holds a newline printed a command line in two lines (quoted, but a line
    of its own that the user's path made); now one error line naming the path, nothing printed."""
    from attn_kit.inference.translate import main

    work = copy_run(smoke_run, tmp_path / "run\nrm -rf ~")
    proc = run_main(main, str(work), "--print-interactive-command")
    assert_one_error_line(proc, "a printed command line cannot hold a control character")
    assert proc.stdout == ""


@pytest.mark.slow  # trains a stock model for one update
def test_plot_attention_on_a_stock_fairseq_checkpoint_is_one_line(smoke_run, tmp_path):
    """Stock fairseq's transformer layers return no per-head weights: plot_attention.py on a run whose
    checkpoint is stock fairseq's says so in one line and writes nothing (it was a traceback)."""
    run_dir = copy_run(smoke_run, tmp_path / "run")
    import conftest

    stock = ["--arch", "transformer", "--share-all-embeddings"]
    conftest.run(train_cmd(smoke_run / "data-bin", tmp_path / "stock", stock,
                           ["--lr", "0.001", "--criterion", "label_smoothed_cross_entropy", "--max-update", "1",
                            "--max-tokens", "2000"]))
    shutil.copy(tmp_path / "stock" / "checkpoint_last.pt", run_dir / "checkpoint_avg.pt")
    proc = plot(run_dir, "--sentence", "The law.", "--output", tmp_path / "fig.png")
    assert_one_error_line(proc, "the checkpoint's model is TransformerModel (--arch transformer), not "
                                "attn_plugin's attn_transformer")
    assert not (tmp_path / "fig.png").exists()


def test_a_dictionary_or_bpe_file_changed_after_the_run_is_refused_unless_asked(smoke_run, tmp_path):
    """Two lines of data-bin/dict.en.txt swapped after the run: translate.py printed a wrong token for every
    line, exit 0; BPE codes from another run were taken too. The run card records the sha256 of every file
    the model's token ids depend on when the run makes it; translate.py, plot_attention.py, the export and
    from_pretrained refuse a changed one in one line naming it and --ignore-changed-files, which goes on."""
    from attn_kit.inference import ctranslate2
    from attn_plugin.errors import ConfigError
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    work = copy_run(smoke_run, tmp_path / "run")
    card = json.loads((work / "inference.json").read_text())
    assert set(card["checksums"]) == {"data-bin/dict.en.txt", "data-bin/dict.de.txt", "bpe/codes", "bpe/vocab.en"}
    dictionary = work / "data-bin" / "dict.en.txt"
    entries = dictionary.read_text(encoding="utf-8").splitlines(keepends=True)
    entries[10], entries[11] = entries[11], entries[10]
    for side in ("en", "de"):  # the joined dictionary edited alike on both sides: it loads, and means other words
        (work / "data-bin" / f"dict.{side}.txt").write_text("".join(entries), encoding="utf-8")
    message = f"{dictionary} changed since the run made it"
    assert_one_error_line(translate(work, stdin="A man .\n"), message, "--ignore-changed-files")
    assert_one_error_line(plot(work, "--sentence", "A man .", "--output", tmp_path / "a.png"), message)
    assert_one_error_line(run_main(ctranslate2.main, str(work), str(tmp_path / "ct2")), message)
    with pytest.raises(ConfigError, match=message):
        AttnTransformerModel.from_pretrained(str(work))
    AttnTransformerModel.from_pretrained(str(work), ignore_changed_files=True)
    went_on = translate(work, "--ignore-changed-files", stdin="A man .\n")
    assert went_on.returncode == 0 and went_on.stdout.count("\n") == 1
    # the dictionary put back; another run's BPE codes (one merge more) in place of the run's own
    entries[10], entries[11] = entries[11], entries[10]
    for side in ("en", "de"):
        (work / "data-bin" / f"dict.{side}.txt").write_text("".join(entries), encoding="utf-8")
    assert translate(work, stdin="A man .\n").returncode == 0
    codes = work / "bpe" / "codes"
    codes.write_text(codes.read_text(encoding="utf-8") + "e n</w>\n", encoding="utf-8")
    assert_one_error_line(translate(work, stdin="A man .\n"), f"{codes} changed since the run made it")


def test_a_dictionary_line_without_a_count_is_one_line_even_going_on_anyway(smoke_run, tmp_path):
    """A dictionary line without a count was fairseq's ValueError traceback in translate.py and from_pretrained
    (a word twice, its RuntimeError): the run card's check reads the dictionaries as fairseq does, one line."""
    from attn_plugin.errors import ConfigError
    from attn_plugin.models.attn_transformer import AttnTransformerModel

    work = copy_run(smoke_run, tmp_path / "run")
    dictionary = work / "data-bin" / "dict.de.txt"
    entries = dictionary.read_text(encoding="utf-8").splitlines(keepends=True)
    dictionary.write_text("".join(entries[:5] + ["lonely\n"] + entries[5:]), encoding="utf-8")
    proc = translate(work, "--ignore-changed-files", stdin="A man .\n")
    assert_one_error_line(proc, f"{dictionary} has a line without a count (line 6: 'lonely')")
    dictionary.write_text("".join(entries + entries[3:4]), encoding="utf-8")
    with pytest.raises(ConfigError, match=f"{dictionary} holds .* twice"):
        AttnTransformerModel.from_pretrained(str(work), ignore_changed_files=True)

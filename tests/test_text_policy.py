"""One text policy (attn_kit.textio) in the commands that read text besides translate: the same
bytes read the same way in scripts/score_bleu.py, scripts/evalb.py, recipes/parallel.sh and the
recipes' tokenization. A byte that is not UTF-8 is one error line naming the file and the line
(U+FFFD with --errors replace, which --help documents); a byte-order mark at the start is
removed; CR, CRLF and LF each end a line. (Its warnings about the corpus:
tests/test_recipe_parallel.py.)"""
import io
import subprocess
import sys

import pytest
from conftest import REPO, assert_one_error_line
from test_slurm import corpus, parallel

from attn_kit.cli import UserError
from attn_kit.metrics import evalb
from attn_kit.pipeline import text
from attn_kit.textio import read_lines

BOM = b"\xef\xbb\xbf"
ENDINGS = {"LF": "\n", "CRLF": "\r\n", "CR": "\r"}


def script(name, *args, stdin=None):
    return subprocess.run([sys.executable, str(REPO / "scripts" / name), *map(str, args)], input=stdin,
                          capture_output=True, timeout=300)


def decoded(proc):
    """The process with its output as text (for conftest.assert_one_error_line)."""
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def lines_as(lines, ending, bom=False) -> bytes:
    return (BOM if bom else b"") + "".join(line + ending for line in lines).encode("utf-8")


@pytest.mark.parametrize("command", [["score_bleu.py"], ["evalb.py"], ["parallel"]])
def test_help_documents_errors_replace(command):
    proc = (parallel(["--help"]) if command == ["parallel"] else
            decoded(script(command[0], "--help")))
    assert proc.returncode == 0, proc.stderr
    help_text = " ".join(proc.stdout.split())
    assert "--errors {strict,replace}" in help_text and "replace reads them as U+FFFD" in help_text


# ---------------------------------------------------------------------------- score_bleu
REF = ["das Haus ist groß", "er kommt heute nicht"]
BLEU_100 = b"BLEU = 100.00, 100.0/100.0/100.0/100.0 (BP=1.000, ratio=1.000, hyp_len=8, ref_len=8)\n"


@pytest.mark.parametrize("stdin", [False, True])
def test_score_bleu_refuses_bytes_that_are_not_utf8_in_one_line(tmp_path, stdin):
    """A Latin-1 ß in the hypotheses: one line naming the file (or stdin) and the line, not a score
    of the bytes; --errors replace scores it as U+FFFD (one word of eight differs)."""
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_bytes(b"er kommt heute nicht\ndas Haus ist gro\xdf\n")
    ref.write_bytes(lines_as(REF[::-1], "\n"))
    given = ["--hyp", "-"] if stdin else ["--hyp", hyp]
    proc = decoded(script("score_bleu.py", *given, "--ref", ref, stdin=hyp.read_bytes() if stdin else None))
    assert_one_error_line(proc, f"{'stdin' if stdin else hyp}: line 2 is not UTF-8 (byte 0xdf at byte 17 of the "
                                "line)", "--errors replace")
    assert proc.stdout == ""
    replaced = script("score_bleu.py", *given, "--ref", ref, "--errors", "replace",
                      stdin=hyp.read_bytes() if stdin else None)
    # 7 of 8 words match; 2-grams 5/6, 3-grams 3/4, 4-grams 1/2 ("das Haus ist gro\ufffd" has none right)
    assert replaced.returncode == 0 and replaced.stdout.startswith(b"BLEU = ")
    assert b" 87.5/83.3/75.0/50.0 " in replaced.stdout


@pytest.mark.parametrize("ending", ENDINGS)
def test_score_bleu_reads_a_bom_and_every_line_end_as_plain_lines(tmp_path, ending):
    """The reference itself as the hypotheses, with a byte-order mark and CR, CRLF or LF line
    ends: BLEU 100 as for the plain file (a BOM kept would be part of the first word; a lone CR
    kept inside a line would make one segment of two)."""
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    ref.write_bytes(lines_as(REF, "\n"))
    hyp.write_bytes(lines_as(REF, ENDINGS[ending], bom=True))
    proc = script("score_bleu.py", "--hyp", hyp, "--ref", ref)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, BLEU_100, b"")
    t2t = script("score_bleu.py", "--protocol", "t2t", "--hyp", hyp, "--ref", ref)
    assert t2t.returncode == 0 and t2t.stdout.startswith(b"BLEU = 100.00, "), t2t.stderr


# ---------------------------------------------------------------------------- evalb
TREES = ["(TOP (S (NP (DT The) (NN café)) (VP (VBD closed)) (. .)))",
         "(TOP (S (NP (PRP It)) (VP (VBD rained)) (. .)))"]


def test_evalb_refuses_bytes_that_are_not_utf8_in_one_line(tmp_path):
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_bytes(lines_as(TREES[::-1], "\n").replace("café".encode(), b"caf\xe9"))
    test.write_bytes(lines_as(TREES[::-1], "\n"))
    proc = decoded(script("evalb.py", gold, test))
    assert_one_error_line(proc, f"{gold}: line 2 is not UTF-8 (byte 0xe9 at byte 29 of the line)",
                          "--errors replace")
    assert proc.stdout == ""
    # --errors replace: "caf\ufffd" is not "café", a word mismatch EVALB reports with both words (UTF-8)
    replaced = script("evalb.py", "--errors", "replace", gold, test)
    assert replaced.returncode == 0
    assert replaced.stderr == "2 : Words unmatch (caf\ufffd|café)\n".encode()
    assert evalb.parse_summary(replaced.stdout.decode())["all"]["error_sentences"] == 1


@pytest.mark.parametrize("ending", ENDINGS)
def test_evalb_reads_a_bom_and_every_line_end_as_plain_lines(tmp_path, ending):
    """Gold trees with a byte-order mark and CR, CRLF or LF line ends: the report of the plain
    file, byte for byte (a BOM kept is text outside a bracket, an error sentence; a lone CR kept
    makes one line of two trees)."""
    plain, gold, test = tmp_path / "plain", tmp_path / "gold", tmp_path / "test"
    plain.write_bytes(lines_as(TREES, "\n"))
    test.write_bytes(lines_as(TREES, "\n"))
    gold.write_bytes(lines_as(TREES, ENDINGS[ending], bom=True))
    expected = script("evalb.py", plain, test)
    assert expected.returncode == 0 and expected.stderr == b""
    assert evalb.parse_summary(expected.stdout.decode())["all"]["sentences"] == 2
    proc = script("evalb.py", gold, test)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, expected.stdout, b"")


# ---------------------------------------------------------------------------- recipes/parallel.sh
def test_parallel_reads_a_bom_and_every_line_end_as_plain_lines(tmp_path):
    """A user's corpus as Windows and old Mac editors write it: train.en with a byte-order mark,
    the validation pair with CRLF, the test pair with lone CRs. The copies in WORKDIR/raw hold the
    same lines as the plain files (whitespace normalized), and no BOM reaches a training token."""
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    plain = {f.name: f.read_text(encoding="utf-8").splitlines() for f in data.iterdir()}
    (data / "train.en").write_bytes(BOM + (data / "train.en").read_bytes())
    for name, ending in (("valid.en", "\r\n"), ("valid.de", "\r\n"), ("test.en", "\r"), ("test.de", "\r")):
        (data / name).write_bytes(lines_as(plain[name], ending))
    work = tmp_path / "w"
    proc = parallel(["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
                     data / "test", "--workdir", work, "--ngpus", "0", "--workers", "1", "--stop-stage", "tokenize"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    for name, lines in plain.items():
        assert (work / "raw" / name).read_text(encoding="utf-8").split("\n") == \
            [" ".join(line.split()) for line in lines] + [""], name
    tokens = (work / "tok" / "train.en").read_text(encoding="utf-8")
    assert "\ufeff" not in tokens and tokens.startswith("I 've ") and plain["train.en"][0].startswith("I've ")


def test_parallel_bytes_that_are_not_utf8_are_one_line_or_replaced(tmp_path):
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    lines = (data / "train.de").read_bytes().split(b"\n")
    lines[6] = lines[6] + b" caf\xe9"
    (data / "train.de").write_bytes(b"\n".join(lines))
    argv = ["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
            data / "test", "--workdir", tmp_path / "w", "--ngpus", "0", "--workers", "1", "--stop-stage", "copy"]
    assert_one_error_line(parallel(argv), f"{data / 'train.de'}: line 7 is not UTF-8 (byte 0xe9 at byte",
                          "--errors replace")
    assert not (tmp_path / "w" / "raw").exists()
    proc = parallel([*argv, "--errors", "replace"])
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert (tmp_path / "w" / "raw" / "train.de").read_text(encoding="utf-8").split("\n")[6].endswith(" caf\ufffd")


@pytest.mark.parametrize("workers", [1, 2])
def test_tokenization_reads_by_the_policy(tmp_path, workers):
    """The recipes' tokenization (attn_kit.pipeline.text.moses_tokenize, one process or a pool): a
    leading BOM is not a token, and a byte that is not UTF-8 is one error naming the file and line
    (it was read as U+FFFD without a word)."""
    src, out = tmp_path / "in.en", tmp_path / "out.en"
    src.write_bytes(BOM + b"Hello, world!\r\nIt's fine.\r\n")
    text.moses_tokenize(src, out, "en", workers)
    assert out.read_text(encoding="utf-8") == "Hello , world !\nIt 's fine .\n"
    src.write_bytes(b"Hello, world!\n" * 2500 + b"caf\xe9\n" + b"ok\n" * 10)
    with pytest.raises(UserError, match=rf"^{src}: line 2501 is not UTF-8 \(byte 0xe9 at byte 4 of the line\)"):
        text.moses_tokenize(src, out, "en", workers)


# ---------------------------------------------------------------------------- attn_kit.textio
def test_the_line_named_counts_lines_that_a_lone_cr_ended():
    """A file with old Mac line ends (CR only) is one chunk to a binary read: the error names the line
    and byte within it, not the first line."""
    with pytest.raises(UserError, match=r"^f: line 3 is not UTF-8 \(byte 0xff at byte 2 of the line\)"):
        read_lines(io.BytesIO(b"a\rbb\rc\xffd\re"), "f")
    assert read_lines(io.BytesIO(BOM + b"a\rbb\r\nc\xffd\re"), "f", "replace") == ["a", "bb", "c\ufffdd", "e"]


@pytest.mark.parametrize("command", ["score_bleu", "evalb", "translate"])
def test_a_line_without_end_is_refused_in_bounded_memory(tmp_path, command):
    """Issue 36: score_bleu.py --ref /dev/zero grew to 23 GB before the kernel killed it (a file with no
    line break was read whole). Every command reads text through attn_kit.textio, which refuses a line
    over 1 MiB, reading at most that much: /dev/zero is one line within the test's timeout."""
    ok = tmp_path / "ok.txt"
    ok.write_text("a sentence\n")
    argv = {"score_bleu": [sys.executable, REPO / "scripts" / "score_bleu.py", "--hyp", ok, "--ref", "/dev/zero"],
            "evalb": [sys.executable, REPO / "scripts" / "evalb.py", "/dev/zero", ok],
            "translate": None}[command]
    if argv is None:  # the tokenizer's reading of a corpus, as the recipes and translate.py read input
        with pytest.raises(UserError, match="line 1 is longer than 1 MiB"):
            read_lines("/dev/zero")
        return
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert_one_error_line(proc, "/dev/zero: line 1 is longer than 1 MiB")


def test_long_files_of_short_lines_and_lone_cr_endings_read_whole(tmp_path):
    """The bound is per line: 3 MiB of short lines ended by a lone CR (no \\n at all) read as lines."""
    path = tmp_path / "cr.txt"
    path.write_bytes(b"ab\r" * (1 << 20))
    lines = read_lines(path)
    assert len(lines) == 1 << 20 and set(lines) == {"ab"}


def test_a_nul_character_in_a_corpus_is_a_space_and_said_once(tmp_path):
    """Issue 36: a NUL byte inside a line was deleted by the tokenizer, joining the two words around
    it, silently. The check stage warns once per file (where and how many), and the copy reads it as
    a space, so both words reach the tokenized text."""
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    lines = (data / "train.en").read_text(encoding="utf-8").split("\n")
    lines[4] = "left\x00right " + lines[4]
    lines[9] = "one\x00two " + lines[9]
    (data / "train.en").write_text("\n".join(lines), encoding="utf-8")
    work = tmp_path / "w"
    proc = parallel(["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
                     data / "test", "--workdir", work, "--ngpus", "0", "--workers", "1", "--stop-stage", "tokenize"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"warning: {data / 'train.en'} line 5 holds a NUL character (2 lines in all): the copy reads it as a space "
        "(the tokenizer would delete it and join the words around it)"]
    tokens = (work / "tok" / "train.en").read_text(encoding="utf-8").split("\n")
    assert tokens[4].startswith("left right ") and tokens[9].startswith("one two ") and "\x00" not in "".join(tokens)


def test_a_line_of_only_invisible_characters_is_said_with_its_count(tmp_path):
    """A test or valid line of only control or zero-width characters passed the empty-line check and
    became an empty source, decoded and scored silently: the check stage warns once per file, where and
    how many. Lines with a letter, a digit, punctuation or a symbol are not counted."""
    data = corpus(tmp_path / "c", sizes=(("train", 300), ("valid", 40), ("test", 40)))
    lines = (data / "test.en").read_text(encoding="utf-8").split("\n")
    lines[2], lines[7], lines[8] = "\u200b\u200d", "\x01 \ufeff\x7f", "..."
    (data / "test.en").write_text("\n".join(lines), encoding="utf-8")
    proc = parallel(["--src", "en", "--tgt", "de", "--train", data / "train", "--valid", data / "valid", "--test",
                     data / "test", "--workdir", tmp_path / "w", "--ngpus", "0", "--workers", "1", "--stop-stage",
                     "copy"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"warning: {data / 'test.en'} line 3 holds no visible character (2 lines in all: only control, zero-width or "
        "space characters): each tokenizes to nothing, an empty sentence to train on, translate or score; remove "
        "those pairs"]

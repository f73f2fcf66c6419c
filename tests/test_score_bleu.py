"""attn_kit.metrics.bleu (scripts/score_bleu.py): tokenized BLEU as Moses' multi-bleu.perl computes and
prints it, and the EN-DE compound splitting. Expected values are worked out by
hand in the comments; perl's own split/lc/regex are used where perl exists."""
import collections
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attn_kit.cli import UserError
from attn_kit.metrics.bleu import (MultiBleuResult, ScoreError, compound_split, multi_bleu, read_lines,
                                   replace_unicode_punctuation, t2t_bleu, t2t_tokenize, words)

REPO = Path(__file__).resolve().parents[1]

SCRIPT = REPO / "scripts" / "score_bleu.py"
PERL = shutil.which("perl")
AT = "##AT##-##AT##"


def line(hyps, refs, **kw):
    return multi_bleu(hyps, refs, **kw).format()


# ---------------------------------------------------------------- hand-computed scores

def test_clipping():
    # hyp "the the the the" (c=4), ref "the cat" (r=2)
    # 1-grams: "the" x4, clipped at its ref count 1 -> 1/4 = 25.0
    # 2-grams: "the the" x3, not in ref -> 0/3; 3-grams 0/2; 4-grams 0/1
    # a zero precision -> BLEU 0; c >= r -> BP 1; ratio 4/2 = 2
    r = multi_bleu(["the the the the"], ["the cat"])
    assert (r.counts, r.totals, r.hyp_len, r.ref_len) == ((1, 0, 0, 0), (4, 3, 2, 1), 4, 2)
    assert r.score == 0.0 and r.bp == 1.0 and r.ratio == 2.0
    assert r.format() == "BLEU = 0.00, 25.0/0.0/0.0/0.0 (BP=1.000, ratio=2.000, hyp_len=4, ref_len=2)"


def test_partial_matches():
    # ref "the cat sat on the mat", hyp "the cat sat on a mat" (c = r = 6)
    # 1-grams: the cat sat on mat match, "a" not        -> 5/6
    # 2-grams: the-cat cat-sat sat-on | on-a a-mat      -> 3/5
    # 3-grams: the-cat-sat cat-sat-on | sat-on-a on-a-mat -> 2/4
    # 4-grams: the-cat-sat-on | cat-sat-on-a sat-on-a-mat -> 1/3
    # BLEU = (5/6 * 3/5 * 2/4 * 1/3)^(1/4) = (1/12)^(1/4) = 0.537285 -> 53.73
    r = multi_bleu(["the cat sat on a mat"], ["the cat sat on the mat"])
    assert (r.counts, r.totals) == ((5, 3, 2, 1), (6, 5, 4, 3))
    assert r.score == pytest.approx(100 * (1 / 12) ** 0.25, rel=1e-12)
    assert r.format() == "BLEU = 53.73, 83.3/60.0/50.0/33.3 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)"


def test_brevity_penalty():
    # segment 1: hyp = ref = "the cat sat on the mat": 6/6, 5/5, 4/4, 3/3
    # segment 2: hyp "a b c d" (4) against ref "a b c d e f g h" (8): 4/4, 3/3, 2/2, 1/1
    # corpus: all precisions 100, c = 10, r = 14
    # BP = exp(1 - 14/10) = exp(-0.4) = 0.670320 -> BLEU 67.03; ratio 10/14 = 0.714
    r = multi_bleu(["the cat sat on the mat", "a b c d"], ["the cat sat on the mat", "a b c d e f g h"])
    assert r.bp == pytest.approx(0.6703200460356393, rel=1e-12)
    assert r.format() == "BLEU = 67.03, 100.0/100.0/100.0/100.0 (BP=0.670, ratio=0.714, hyp_len=10, ref_len=14)"


def test_zero_4gram_precision_gives_zero():
    # hyp "a b c x d e" against ref "a b c y d e"
    # 1-grams: a b c d e match, x not        -> 5/6
    # 2-grams: a-b b-c d-e | c-x x-d          -> 3/5
    # 3-grams: a-b-c | b-c-x c-x-d x-d-e      -> 1/4
    # 4-grams: a-b-c-x b-c-x-d c-x-d-e        -> 0/3: no smoothing, BLEU 0
    assert line(["a b c x d e"], ["a b c y d e"]) == \
        "BLEU = 0.00, 83.3/60.0/25.0/0.0 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)"
    # three words have no 4-gram at all: precision 0 (perl: TOTAL undefined -> 0), BLEU 0
    assert line(["a b c"], ["a b c"]) == \
        "BLEU = 0.00, 100.0/100.0/100.0/0.0 (BP=1.000, ratio=1.000, hyp_len=3, ref_len=3)"


def test_statistics_are_summed_over_the_corpus():
    # the two segments above together: (5+5)/(6+6), (3+3)/(5+5), (2+1)/(4+4), (1+0)/(3+3)
    # BLEU = (10/12 * 6/10 * 3/8 * 1/6)^(1/4) = (1/32)^(1/4) = 2^(-5/4) = 0.420448 -> 42.04
    # (the second segment alone scores 0, the corpus does not)
    r = multi_bleu(["the cat sat on a mat", "a b c x d e"], ["the cat sat on the mat", "a b c y d e"])
    assert r.score == pytest.approx(100 * 2 ** -1.25, rel=1e-12)
    assert r.format() == "BLEU = 42.04, 83.3/60.0/37.5/16.7 (BP=1.000, ratio=1.000, hyp_len=12, ref_len=12)"


def test_empty_hypothesis_line_and_surrounding_whitespace():
    # words are split at runs of whitespace; leading/trailing blanks and the newline do not count.
    # segment 1 as in test_partial_matches (5/6, 3/5, 2/4, 1/3, c = r = 6);
    # segment 2: empty hypothesis against "a b": no n-grams, c += 0, r += 2
    # c = 6, r = 8: BP = exp(1 - 8/6) = 0.716531; BLEU = 0.716531 * 0.537285 = 0.384982 -> 38.50
    hyps = ["  the cat\tsat on  a mat \t\n", ""]
    r = multi_bleu(hyps, ["the cat sat on the mat\n", "a b\n"])
    assert r.format() == "BLEU = 38.50, 83.3/60.0/50.0/33.3 (BP=0.717, ratio=0.750, hyp_len=6, ref_len=8)"


def test_empty_hypotheses_score_zero():
    # c = 0 < r = 2: BP 0 (multi-bleu.perl divides by zero here), BLEU 0
    assert line([""], ["a b"]) == "BLEU = 0.00, 0.0/0.0/0.0/0.0 (BP=0.000, ratio=0.000, hyp_len=0, ref_len=2)"


def test_printed_precision_uses_perls_arithmetic():
    # perl prints 100 * (23/80) = 28.749999999999996 -> "28.7"; 100 * 23 / 80 = 28.75 would print "28.8"
    r = MultiBleuResult(counts=(23, 23, 23, 23), totals=(80, 80, 80, 80), hyp_len=80, ref_len=80)
    assert r.format().startswith("BLEU = 28.75, 28.7/28.7/28.7/28.7 (")


def test_lowercase_folds_ascii_letters_only():
    # hyp "The CAT sat on the mat" against "the cat sat on the mat", case-sensitive:
    # 1-grams: sat on the mat -> 4/6; 2-grams: sat-on on-the the-mat -> 3/5
    # 3-grams: sat-on-the on-the-mat -> 2/4; 4-grams: sat-on-the-mat -> 1/3
    # BLEU = (4/6 * 3/5 * 2/4 * 1/3)^(1/4) = (1/15)^(1/4) = 0.508133 -> 50.81; lowercased: identical -> 100
    hyp, ref = ["The CAT sat on the mat"], ["the cat sat on the mat"]
    assert line(hyp, ref) == "BLEU = 50.81, 66.7/60.0/50.0/33.3 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)"
    assert line(hyp, ref, lowercase=True) == \
        "BLEU = 100.00, 100.0/100.0/100.0/100.0 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)"
    # perl's lc on the bytes multi-bleu.perl reads leaves non-ASCII letters alone: "Über" != "über"
    assert words("Über ALLES", lowercase=True) == ["Über", "alles"]
    assert multi_bleu(["Über alles"], ["über alles"], lowercase=True).counts[0] == 1


def test_non_ascii_space_is_part_of_a_word():
    # multi-bleu.perl splits at ASCII whitespace only: "a\u00a0b" is one word (sacreBLEU alone would see two)
    nbsp = "a\u00a0b c"
    r = multi_bleu([nbsp], [nbsp])
    assert (r.hyp_len, r.counts[:2], r.totals[:2]) == (2, (2, 1), (2, 1))
    r = multi_bleu(["a\u00a0b"], ["a b"])  # one hyp word, two ref words, nothing in common
    assert (r.hyp_len, r.ref_len, r.counts[0]) == (1, 2, 0)


def test_several_references():
    # clipping at the largest count in any reference: "the" x3 against "the cat" (1) and "the the dog" (2) -> 2/3
    r = multi_bleu(["the the the"], [["the cat"], ["the the dog"]])
    assert (r.counts[0], r.totals[0]) == (2, 3)
    # the reference length closest to the hypothesis length, the shorter on a tie:
    # c = 4 against lengths 3 and 5 (both 1 away) -> r = 3, in either order
    hyp = ["a b c d"]
    assert multi_bleu(hyp, [["a b c"], ["a b c d e"]]).ref_len == 3
    assert multi_bleu(hyp, [["a b c d e"], ["a b c"]]).ref_len == 3
    # c = 4 against lengths 2 and 5 -> r = 5 (1 away), BP = exp(1 - 5/4) = 0.778801
    r = multi_bleu(hyp, [["a b"], ["a b c d e"]])
    assert r.ref_len == 5 and r.bp == pytest.approx(0.7788007830714049, rel=1e-12)


def test_unscorable_input_is_refused():
    with pytest.raises(ScoreError, match="2 hypotheses but 1 lines"):
        multi_bleu(["a", "b"], ["a"])
    with pytest.raises(ScoreError, match="ref_len=0"):
        multi_bleu(["a"], [""])
    with pytest.raises(ScoreError, match="ref_len=0"):
        multi_bleu([], [])


def oracle(hyps, streams):
    """multi-bleu.perl's counting, written out plainly (words joined by single spaces)."""
    correct, total, c, r = [0] * 4, [0] * 4, 0, 0
    for i, hyp in enumerate(hyps):
        hw = hyp.split()
        rws = [s[i].split() for s in streams]
        c += len(hw)
        r += min((abs(len(rw) - len(hw)), len(rw)) for rw in rws)[1]
        for n in range(1, 5):
            grams = collections.Counter(tuple(hw[k:k + n]) for k in range(len(hw) - n + 1))
            best = collections.Counter()
            for rw in rws:
                best |= collections.Counter(tuple(rw[k:k + n]) for k in range(len(rw) - n + 1))
            total[n - 1] += sum(grams.values())
            correct[n - 1] += sum(min(k, best[g]) for g, k in grams.items())
    return tuple(correct), tuple(total), c, r


def random_corpus(rng, n_refs, size=25):
    vocab = ["a", "b", "c", "d", "e"]

    def sent(lo):
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(lo, 12)))

    return [sent(0) for _ in range(size)], [[sent(1) for _ in range(size)] for _ in range(n_refs)]


@pytest.mark.parametrize("n_refs", [1, 2, 3])
def test_sacrebleu_statistics_follow_multi_bleu_rules(n_refs):
    from sacrebleu.metrics import BLEU

    rng = random.Random(n_refs)
    for _ in range(30):
        hyps, streams = random_corpus(rng, n_refs)
        r = multi_bleu(hyps, streams)
        assert (r.counts, r.totals, r.hyp_len, r.ref_len) == oracle(hyps, streams)
        s = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, streams)
        assert r.score == pytest.approx(s.score, rel=1e-9, abs=1e-9)


# ---------------------------------------------------------------- compound splitting

@pytest.mark.parametrize("text, split", [
    ("Auto-Werkstatt", f"Auto {AT} Werkstatt"),
    # non-overlapping, left to right: the first match consumes "b", so the second "-" has no left context
    ("a-b-c", f"a {AT} b-c"),
    ("x-y-z-w", f"x {AT} y-z {AT} w"),
    # a longer middle part keeps its last letter as left context for the next hyphen
    ("2-Euro-Job", f"2 {AT} Euro {AT} Job"),
    ("--", "--"),
    ("---", f"- {AT} -"),
    ("a--b", f"a {AT} -b"),
    ("- x", "- x"),
    ("x -", "x -"),
    ("a - b", "a - b"),
    ("-a-", "-a-"),
    ("a\t-b", "a\t-b"),
    ("Ä-ß", f"Ä {AT} ß"),
    # perl works on bytes: "è" is two, the first match consumes only the first, so both hyphens split
    ("é-è-ê", f"é {AT} è {AT} ê"),
    ("x-ü-y", f"x {AT} ü {AT} y"),
    ("a\u00a0-b", f"a\u00a0 {AT} b"),  # perl sees the UTF-8 bytes of U+00A0 as non-space
    ("ein 5-Sterne-Hotel .\n", f"ein 5 {AT} Sterne {AT} Hotel .\n"),
    ("", ""),
])
def test_compound_split(text, split):
    assert compound_split(text) == split


def test_compound_split_changes_the_score():
    # hyp "der 2-Euro-Job ist gut", ref "der 2-Euro-Job ist ganz gut"
    # as is: c = 4, r = 5; 1-grams 4/4; 2-grams der-2EJ 2EJ-ist | ist-gut -> 2/3;
    #   3-grams der-2EJ-ist | 2EJ-ist-gut -> 1/2; 4-grams 0/1 -> BLEU 0; BP = exp(1 - 5/4) = 0.779
    # split: hyp "der 2 @ Euro @ Job ist gut" (8), ref "der 2 @ Euro @ Job ist ganz gut" (9)
    #   1-grams 8/8; 2-grams: all but ist-gut -> 6/7; 3-grams: all but Job-ist-gut -> 5/6;
    #   4-grams: all but @-Job-ist-gut -> 4/5
    #   BP = exp(1 - 9/8) = 0.882497; (1 * 6/7 * 5/6 * 4/5)^(1/4) = (4/7)^(1/4) = 0.869442
    #   BLEU = 0.882497 * 0.869442 = 0.767280 -> 76.73; ratio 8/9 = 0.889
    hyp, ref = ["der 2-Euro-Job ist gut"], ["der 2-Euro-Job ist ganz gut"]
    assert line(hyp, ref) == "BLEU = 0.00, 100.0/66.7/50.0/0.0 (BP=0.779, ratio=0.800, hyp_len=4, ref_len=5)"
    split = [compound_split(h) for h in hyp], [compound_split(r) for r in ref]
    assert line(*split) == "BLEU = 76.73, 100.0/85.7/83.3/80.0 (BP=0.882, ratio=0.889, hyp_len=8, ref_len=9)"


PERL_CASES = ["Auto-Werkstatt", "a-b-c", "x-y-z-w", "2-Euro-Job", "--", "---", "a--b", "- x", "x -", "-a-",
              "a\t-b", "Ä-ß", "a\u00a0-b", "Nord-Süd-Gefälle , 1-2-3-4 und e-Mail-Adresse", "", "  -  ",
              "x\u2009-y", "\u00e9-\u00e8-\u00ea"]


@pytest.mark.skipif(PERL is None, reason="perl not installed")
def test_compound_split_matches_the_perl_one_liner(tmp_path):
    # the command fairseq's scripts/compound_split_bleu.sh runs
    src = tmp_path / "in.txt"
    src.write_bytes("".join(t + "\n" for t in PERL_CASES).encode("utf-8"))
    out = subprocess.run([PERL, "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g", str(src)],
                         capture_output=True, check=True).stdout.decode("utf-8")
    assert out.split("\n")[:-1] == [compound_split(t) for t in PERL_CASES]


@pytest.mark.skipif(PERL is None, reason="perl not installed")
def test_words_match_perls_split_and_lc(tmp_path):
    # multi-bleu.perl: chop; lc if -lc; split (on the raw bytes)
    cases = ["  a  b\tc \x0bd\fe\r", "a\u00a0b c\x1cd e\x85f g\u2028h i\u2009j", "", " \t ", "ÄÖÜ ABC Éé"]
    src = tmp_path / "in.txt"
    src.write_bytes("".join(t + "\n" for t in cases).encode("utf-8"))
    for lc in (False, True):
        prog = "chop; $_ = lc if %d; print join(qq{\\x01}, split), qq{\\n}" % lc
        out = subprocess.run([PERL, "-ne", prog, str(src)], capture_output=True, check=True).stdout
        got = [ln.split("\x01") if ln else [] for ln in out.decode("utf-8").split("\n")[:-1]]
        assert got == [words(t, lowercase=lc) for t in cases]


def find_multi_bleu():
    for path in (os.environ.get("MULTI_BLEU_PERL"), shutil.which("multi-bleu.perl")):
        if path and os.path.isfile(path):
            return path
    return None


@pytest.mark.skipif(PERL is None or find_multi_bleu() is None,
                    reason="no multi-bleu.perl installed (set MULTI_BLEU_PERL to compare with one)")
@pytest.mark.parametrize("lc", [False, True])
def test_same_line_as_installed_multi_bleu_perl(tmp_path, lc):
    rng = random.Random(7)
    for trial in range(10):
        hyps, (refs,) = random_corpus(rng, 1, size=40)
        hyps = [h.upper() if rng.random() < 0.2 else h for h in hyps]
        hyp, ref = tmp_path / f"hyp{trial}", tmp_path / f"ref{trial}"
        hyp.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        ref.write_text("".join(r + "\n" for r in refs), encoding="utf-8")
        with open(hyp, "rb") as stdin:
            out = subprocess.run([PERL, find_multi_bleu(), *(["-lc"] if lc else []), str(ref)], stdin=stdin,
                                 capture_output=True, text=True).stdout
        assert out.splitlines()[0] == line(hyps, refs, lowercase=lc)


def test_read_lines_ends_lines_at_lf_crlf_and_cr_only(tmp_path):
    """attn_kit.textio's lines: not at the other separators str.splitlines() knows; a byte that is
    not UTF-8 is an error naming the file and line, or U+FFFD with errors="replace"."""
    path = tmp_path / "f"
    path.write_bytes("a\x85b\u2028c\r\nd\x1ce\rf\n\nlast".encode("utf-8") + b" \xff\n")
    with pytest.raises(UserError, match=rf"^{path}: line 5 is not UTF-8 \(byte 0xff at byte 6 of the line\)"):
        read_lines(str(path))
    assert read_lines(str(path), "replace") == ["a\x85b\u2028c", "d\x1ce", "f", "", "last \ufffd"]


# ---------------------------------------------------------------- command line

def score(*args, stdin=None):
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.fixture
def files(tmp_path):
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("der 2-Euro-Job ist gut\nThe CAT sat on the mat\n", encoding="utf-8")
    ref.write_text("der 2-Euro-Job ist ganz gut\nthe cat sat on the mat\n", encoding="utf-8")
    return hyp, ref


def test_cli_prints_the_multi_bleu_line(files):
    hyp, ref = files
    # corpus of test_compound_split_changes_the_score and test_lowercase_folds_ascii_letters_only:
    # split + lowercase: 1-grams (8+6)/(8+6), 2-grams (6+5)/(7+5), 3-grams (5+4)/(6+4), 4-grams (4+3)/(5+3)
    # c = 14, r = 15: BP = exp(1 - 15/14) = 0.931063
    # BLEU = 0.931063 * (1 * 11/12 * 9/10 * 7/8)^(1/4) = 0.931063 * 0.921755 = 0.858212 -> 85.82
    proc = score("--hyp", hyp, "--ref", ref, "--compound-split", "--lowercase")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == \
        "BLEU = 85.82, 100.0/91.7/90.0/87.5 (BP=0.931, ratio=0.933, hyp_len=14, ref_len=15)\n"
    assert proc.stderr == ""
    assert score("--hyp", hyp, "--ref", ref, "--compound-split", "-lc").stdout == proc.stdout
    # no splitting, case-sensitive: 1-grams (4+4)/(4+6), 2-grams (2+3)/(3+5), 3-grams (1+2)/(2+4),
    # 4-grams (0+1)/(1+3); c = 10, r = 11: BP = exp(1 - 11/10) = 0.904837
    # BLEU = 0.904837 * (8/10 * 5/8 * 3/6 * 1/4)^(1/4) = 0.904837 * (1/16)^(1/4) = 0.452419 -> 45.24
    assert score("--hyp", hyp, "--ref", ref).stdout == \
        "BLEU = 45.24, 80.0/62.5/50.0/25.0 (BP=0.905, ratio=0.909, hyp_len=10, ref_len=11)\n"


def test_cli_stdin_and_several_references(files, tmp_path):
    hyp, ref = files
    ref2 = tmp_path / "ref2.de"
    ref2.write_text("der 2-Euro-Job ist gut\nThe CAT sat on the mat\n", encoding="utf-8")
    alone = score("--hyp", hyp, "--ref", ref).stdout
    assert score("--hyp", "-", "--ref", ref, stdin=hyp.read_text(encoding="utf-8")).stdout == alone
    both = score("--hyp", hyp, "--ref", ref, ref2)
    assert both.returncode == 0 and both.stdout.startswith("BLEU = 100.00, ")  # ref2 is the hypothesis
    assert score("--hyp", hyp, "--ref", ref, "--ref", ref2).stdout == both.stdout


def one_error_line(proc):
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def test_cli_missing_files(files, tmp_path):
    hyp, ref = files
    missing = tmp_path / "nope.de"
    msg = one_error_line(score("--hyp", missing, "--ref", ref))
    assert "hypothesis" in msg and str(missing) in msg and "No such file" in msg
    msg = one_error_line(score("--hyp", hyp, "--ref", missing))
    assert "reference" in msg and str(missing) in msg


def test_cli_line_count_mismatch(files, tmp_path):
    hyp, ref = files
    short = tmp_path / "short.de"
    short.write_text("der 2-Euro-Job ist gut\n", encoding="utf-8")
    msg = one_error_line(score("--hyp", hyp, "--ref", short))
    assert msg == f"error: hypothesis file {hyp} has 2 lines but reference file {short} has 1 line"
    msg = one_error_line(score("--hyp", short, "--ref", ref))
    assert str(short) in msg and str(ref) in msg and "has 1 line" in msg and "has 2 lines" in msg


def test_cli_empty_reference(tmp_path):
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("a b\n", encoding="utf-8")
    ref.write_text("\n", encoding="utf-8")
    proc = score("--hyp", hyp, "--ref", ref)
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"error: reference file {ref}: ") and "ref_len=0" in proc.stderr


def test_cli_warns_about_empty_reference_lines(tmp_path):
    hyp, ref = tmp_path / "hyp", tmp_path / "ref"
    hyp.write_text("a b c d\nx\n", encoding="utf-8")
    ref.write_text("a b c d\n\n", encoding="utf-8")
    proc = score("--hyp", hyp, "--ref", ref)
    # hyp_len 5, ref_len 4 + 0; 1-grams 4/5, 2-grams 3/3, 3-grams 2/2, 4-grams 1/1
    # BLEU = (4/5)^(1/4) = 0.945742 -> 94.57
    assert proc.returncode == 0
    assert proc.stdout == "BLEU = 94.57, 80.0/100.0/100.0/100.0 (BP=1.000, ratio=1.250, hyp_len=5, ref_len=4)\n"
    assert proc.stderr.startswith(f"warning: 1 empty line(s) in reference file {ref}")


def test_cli_help():
    proc = score("--help")
    assert proc.returncode == 0
    for text in ("--hyp", "--ref", "--compound-split", "--lowercase", "multi-bleu.perl", "##AT##-##AT##"):
        assert text in proc.stdout


# ---------------------------------------------------------------- the paper's protocol (t2t get_ende_bleu.sh)
# Expected strings are worked out from the perl scripts' rules: replace-unicode-punctuation.perl's
# substitution list (the 2018 script's first step), tokenizer.perl (2017, before its 2018-11 "split
# final dots unconditionally") with its defaults (escaping on, no -a), and the compound-split one-liner.


@pytest.mark.parametrize("raw,tokens", [
    # escaping: & < > ' " | [ ] become entities; quotes and brackets are split off first
    ("a & b <c> 'd' \"e\" | [f]", "a &amp; b &lt; c &gt; &apos; d &apos; &quot; e &quot; &#124; &#91; f &#93;"),
    # “ ” become " (then &quot;); „ and « » are not in replace-unicode-punctuation's list: own tokens
    ("Er sagte: „Das ist gut“ und «Bonjour»", "Er sagte : „ Das ist gut &quot; und « Bonjour »"),
    # full-width comma and full stop (which also swallows the spaces after it), ellipsis, full-width
    # digits; the 2018 script (the one get_ende_bleu.sh ran) maps "１" to '"' (sic; "1" since 2019)
    ("Hallo，Welt。  Ende… 【１２】 ％", "Hallo , Welt . Ende ... &#91; &quot; 2 &#93; %"),
    # ’ becomes ', and German splits an apostrophe off on both sides
    ("Das ist’s", "Das ist &apos; s"),
    # no -a: hyphens inside words stay; a lone or leading/trailing hyphen is left as it is
    ("2-Euro-Job a-b-c -a a- - x", "2-Euro-Job a-b-c -a a- - x"),
    # a final full stop is split off unless the word is a nonbreaking prefix (German lists 1-99: "24.")
    ("Wir fahren nach Hause.", "Wir fahren nach Hause ."),
    ("Bitte kommen Sie zu Gate 24.", "Bitte kommen Sie zu Gate 24."),
    ("", ""),
    # a line of only (Unicode) whitespace is printed untouched by tokenizer.perl (/^\s*$/)
    ("\u00a0", "\u00a0"),
    # \x1c-\x1f are "ASCII junk" to perl (deleted), not spaces as in Python's \s
    ("a\x1cb", "ab"),
])
def test_t2t_tokenization_follows_the_perl_rules(raw, tokens):
    assert t2t_tokenize(raw, "de", version="2018") == tokens


@pytest.mark.parametrize("raw,tokens", [
    # the 2017 script has no replace-unicode-punctuation step: “ ” ’ … and full-width signs stay, each
    # split off as a symbol by tokenizer.perl (its rule: pad every non-alphanumeric character)
    ("Er sagte: „Das ist gut“", "Er sagte : „ Das ist gut “"),
    ("Das ist’s … gut", "Das ist ’ s … gut"),
    ("a & \"b\"", "a &amp; &quot; b &quot;"),  # ASCII quotes are escaped by both
])
def test_t2t_2017_tokenization_keeps_unicode_punctuation(raw, tokens):
    assert t2t_tokenize(raw, "de") == t2t_tokenize(raw, "de", version="2017") == tokens


def test_the_2017_and_2018_scripts_score_by_hand(tmp_path):
    """The 2018 get_ende_bleu.sh runs replace-unicode-punctuation.perl on the decodes only (its
    reference is newstest2013.tok.de, tokenized without it). Hypothesis with curly quotes,
    reference with ASCII ones: 2018 turns the hypothesis's into ASCII, both read
    "Er sagte &quot; ja &quot; ." (100). 2017: hyp "Er sagte “ ja ” ." against ref
    "Er sagte &quot; ja &quot; ." (6 tokens each): 1-grams 4/6 (Er sagte ja .), 2-grams 1/5
    (Er sagte), 3-grams 0/4: BLEU 0, no smoothing. The other way round (curly quotes in the
    reference) the 2018 script normalizes nothing of the reference: 0 as well (it gave 100 here
    before, normalizing both sides)."""
    hyp, ref = "Er sagte “ja”.", 'Er sagte "ja".'
    assert t2t_bleu([hyp], [ref], version="2018").score == pytest.approx(100.0)
    expected = "BLEU = 0.00, 66.7/20.0/0.0/0.0 (BP=1.000, ratio=1.000, hyp_len=6, ref_len=6)"
    assert t2t_bleu([hyp], [ref]).format() == expected
    assert t2t_bleu([ref], [hyp], version="2018").format() == expected  # the reference is not normalized
    (tmp_path / "h").write_text(hyp + "\n", encoding="utf-8")
    (tmp_path / "r").write_text(ref + "\n", encoding="utf-8")
    assert score("--protocol", "t2t", "--hyp", tmp_path / "h", "--ref", tmp_path / "r").stdout.strip() == expected
    later = score("--protocol", "t2t-2018", "--hyp", tmp_path / "h", "--ref", tmp_path / "r").stdout
    assert later.startswith("BLEU = 100.00")


def test_the_2018_script_normalizes_the_translations_only_on_the_command_line_as_in_the_recipe(tmp_path):
    """tensor2tensor's get_ende_bleu.sh from 2018-04-05 runs replace-unicode-punctuation.perl on the
    decodes only (its reference, newstest2013.tok.de, was tokenized without it). score_bleu.py
    --protocol t2t-2018 normalized the reference too: both orders of a pair scored alike (here 100),
    where the recipe's bleu_t2t_2018 gives two scores. By hand, tokens of tokenizer.perl -l de:
    ASCII  'Er sagte &quot; ja &quot; und ging dann nach Hause .' (11 tokens)
    curly  'Er sagte “ ja ” und ging dann nach Hause .'           (11; normalized: the ASCII line)
    curly hypothesis, ASCII reference: the hypothesis normalized is the reference, 100.
    ASCII hypothesis, curly reference (kept): 1-grams 9/11 (all but the two &quot;), 2-grams 6/10
    (Er sagte, und ging, ging dann, dann nach, nach Hause, Hause .), 3-grams 4/9, 4-grams 3/8, BP 1:
    100 * (9/11 * 6/10 * 4/9 * 3/8) ** (1/4) = 53.48."""
    from conftest import run_main

    from attn_kit.metrics.bleu import main

    ascii_, curly = 'Er sagte "ja" und ging dann nach Hause.', "Er sagte “ja” und ging dann nach Hause."
    assert round(100 * (9 / 11 * 6 / 10 * 4 / 9 * 3 / 8) ** 0.25, 2) == 53.48
    swapped = "BLEU = 53.48, 81.8/60.0/44.4/37.5 (BP=1.000, ratio=1.000, hyp_len=11, ref_len=11)"
    (tmp_path / "ascii").write_text(ascii_ + "\n", encoding="utf-8")
    (tmp_path / "curly").write_text(curly + "\n", encoding="utf-8")
    assert t2t_bleu([curly], [ascii_], version="2018").score == 100.0  # the recipe's function
    assert t2t_bleu([ascii_], [curly], version="2018").format() == swapped
    as_given = run_main(main, "--protocol", "t2t-2018", "--hyp", tmp_path / "curly", "--ref", tmp_path / "ascii")
    assert as_given.stdout.startswith("BLEU = 100.00, "), as_given.stderr
    proc = score("--protocol", "t2t-2018", "--hyp", tmp_path / "ascii", "--ref", tmp_path / "curly")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, swapped + "\n", "")


def test_replace_unicode_punctuation_is_the_scripts_table():
    assert replace_unicode_punctuation("（ａ）！？；：～") == "(ａ)!?;:~"  # full-width a is not in the table
    assert replace_unicode_punctuation("x．  y") == "x. y"
    assert replace_unicode_punctuation("‘q’ – —") == "‘q' – —"  # only the right single quote is mapped


def test_t2t_compound_split_after_tokenization():
    tok = t2t_tokenize("Der 2-Euro-Job a-b-c -a a-", "de")
    # (\S)-(\S) left to right without overlap: "2-E" and then "o-J"; in "a-b-c" the "b" is used up
    assert compound_split(tok) == f"Der 2 {AT} Euro {AT} Job a {AT} b-c -a a-"


def test_t2t_bleu_by_hand_and_against_fairseqs_protocol(tmp_path):
    hyp, ref = "Der E-Mail-Test ist gut.", "Der E-Mail-Test war gut."
    # t2t: Der E ##AT##-##AT## Mail ##AT##-##AT## Test ist|war gut .  (9 tokens each)
    # 1-grams 8/9 (ist); 2-grams 6/8 (Test ist, ist gut); 3-grams 4/7; 4-grams 3/6; BP 1
    # BLEU = (8/9 * 6/8 * 4/7 * 3/6) ** (1/4) = 0.66063...
    expected = "BLEU = 66.06, 88.9/75.0/57.1/50.0 (BP=1.000, ratio=1.000, hyp_len=9, ref_len=9)"
    assert t2t_bleu([hyp], [ref]).format() == expected
    (tmp_path / "h").write_text(hyp + "\n", encoding="utf-8")
    (tmp_path / "r").write_text(ref + "\n", encoding="utf-8")
    proc = score("--protocol", "t2t", "--hyp", tmp_path / "h", "--ref", tmp_path / "r")
    assert proc.returncode == 0 and proc.stdout.strip() == expected
    # fairseq's protocol (-a, then the split) turns each hyphen into "@ ##AT##-##AT## @": more easy matches
    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang="de")
    fairseq_tok = [compound_split(tok.tokenize(x, aggressive_dash_splits=True, return_str=True)) for x in (hyp, ref)]
    assert fairseq_tok[0].count(f"@ {AT} @") == 2
    assert multi_bleu([fairseq_tok[0]], [fairseq_tok[1]]).score > t2t_bleu([hyp], [ref]).score
    # --no-compound-split: "E-Mail-Test" is one token; 5 tokens, 1-grams 4/5, 2-grams 2/4
    # (Der E-Mail-Test, gut .), 3-grams 0/3: BLEU 0, multi-bleu has no smoothing
    no_split = score("--protocol", "t2t", "--no-compound-split", "--hyp", tmp_path / "h", "--ref", tmp_path / "r")
    assert no_split.stdout.strip() == "BLEU = 0.00, 80.0/50.0/0.0/0.0 (BP=1.000, ratio=1.000, hyp_len=5, ref_len=5)"


def test_t2t_french_has_no_compound_split_and_splits_elision():
    assert t2t_tokenize("C'est l'e-mail.", "fr") == "C&apos; est l&apos; e-mail ."
    r = t2t_bleu(["C'est l'e-mail."], ["C'est l'e-mail."], lang="fr")
    assert r.hyp_len == 5 and r.score == pytest.approx(100.0)  # 5 tokens: no ##AT## pieces


def test_t2t_matches_the_real_perl_pipeline_where_it_is_installed(tmp_path):
    """With MOSES_SCRIPTS=/path/to/mosesdecoder/scripts (the 2017 tokenizer.perl), the whole pipeline
    is compared with perl's on text full of the cases above; skipped where they are not installed."""
    scripts = os.environ.get("MOSES_SCRIPTS")
    if not (PERL and scripts and Path(scripts, "tokenizer", "tokenizer.perl").exists()):
        pytest.skip("set MOSES_SCRIPTS to mosesdecoder/scripts to compare with the perl scripts")
    lines = ["Er sagte: „Das ist gut“ & <ok> 'x'", "2-Euro-Job a-b-c -a a- - x", "", "Hallo，Welt。 Ende…",
             "Dr. Müller z.B. 3.5 Mio. e-mail", "【１２】 ％-Hallo", "\u00a0", " a\x1cb ", "क्षत्रिय ...x",
             "DOTMULTI.x y..z"]
    raw = tmp_path / "raw"
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    perl = subprocess.run(f"perl {scripts}/tokenizer/replace-unicode-punctuation.perl < {raw} | "
                          f"perl {scripts}/tokenizer/tokenizer.perl -l de -q", shell=True, capture_output=True,
                          text=True).stdout.splitlines()
    assert perl == [t2t_tokenize(x, "de", version="2018") for x in lines]


def test_bleu_is_computed_in_attn_kit_metrics_only():
    """Issue 39: BLEU was scored in seven modules (sacrebleu called in recipes, inference, compare and
    bench), so that a protocol fix could miss one. Every module outside attn_kit/metrics scores
    through attn_kit.metrics.scores; none imports sacreBLEU itself."""
    import ast

    offenders = []
    for path in sorted((REPO / "attn_kit").rglob("*.py")) + sorted((REPO / "attn_plugin").rglob("*.py")):
        if path.parent.name == "metrics":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "sacrebleu" for n in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_the_shared_scores_detokenize_as_moses_and_score_a_perfect_translation_100():
    from attn_kit.metrics.scores import sacrebleu_score, tokenized_score, translation_scores

    refs = ["Der Hund läuft schnell über die Straße.", "Es ist ein schöner Tag."]
    hyps_tok = ["Der Hund läuft schnell über die Straße .", "Es ist ein schöner Tag ."]
    out = translation_scores(hyps_tok, refs, "de")
    assert out["detokenized"] == refs  # Moses' detokenizer attaches the final full stop again
    for key in ("sacrebleu", "bleu_t2t", "bleu_t2t_2018", "bleu_tokenized", "bleu_compound_split"):
        assert out[key] == 100.0, key
    assert tokenized_score(hyps_tok, hyps_tok) == 100.0
    # one word of 8 left out: every unigram matches, but not "läuft über", and the brevity penalty is
    # exp(1 - 14/13) over the corpus's 13 of 14 reference tokens
    assert 0 < sacrebleu_score(["Der Hund läuft über die Straße.", refs[1]], refs) < 100 * math.exp(1 - 14 / 13)


def test_a_target_language_the_papers_protocol_was_not_checked_for_gets_the_other_scores():
    """recipes/parallel.sh into English (say DE->EN) failed at its score stage after training: the
    t2t protocol is checked for German and French targets only and refuses the others. Its keys are
    left out there; sacreBLEU and the tokenized BLEU are there for every language."""
    from attn_kit.metrics.scores import translation_scores

    refs = ["The dog runs across the street.", "It is a fine day."]
    out = translation_scores(["The dog runs across the street .", "It is a fine day ."], refs, "en")
    assert out["sacrebleu"] == 100.0 and out["bleu_tokenized"] == 100.0 and out["detokenized"] == refs
    assert not {"bleu_t2t", "bleu_t2t_2018", "bleu_t2t_protocol", "bleu_compound_split"} & set(out)
    assert "bleu_t2t" in translation_scores(["Il fait beau ."], ["Il fait beau."], "fr")

"""attn_kit.metrics.evalb (scripts/evalb.py) against hand-computed EVALB (COLLINS.prm) numbers
and against the official program's own output.

Every expected number below is worked out by hand in the comment next to it,
from EVALB's documented rules (README sections [6] and [7]): TOP, -NONE- and
the punctuation tags , : `` '' . are deleted (a deleted tag deletes its word,
and spans are counted over the words that remain); brackets over no remaining
word do not count; function tags are cut (NP-SBJ -> NP); ADVP = PRT; the
length cut-off counts punctuation but not -NONE-; POS tags are not brackets.

Notation: a bracket is LABEL(start,end) over the remaining words, end exclusive.

The official EVALB's output for every case of this file (GOLDEN below) is
committed under tests/golden/evalb/CASE/ (its README says which EVALB and the
commands); test_golden_output compares scripts/evalb.py's stdout, stderr and
exit status with it, case by case, on every run. With the official program at
hand (``EVALB=/path/to/evalb pytest tests/test_evalb.py``),
test_official_evalb_prints_the_golden_bytes runs it again on every case.
"""
import os
import subprocess
import sys
from typing import List, NamedTuple, Optional, Tuple

import pytest
from conftest import REPO

from attn_kit.metrics import evalb

SCRIPT = [sys.executable, str(REPO / "scripts" / "evalb.py")]
GOLDEN_DIR = REPO / "tests" / "golden" / "evalb"


def score(gold, test, **params):
    """Score lists of one-line trees; return (all, len<=40, rows, report text, stderr text)."""
    import io

    out, err = io.StringIO(), io.StringIO()
    p = evalb.parse_params(evalb.COLLINS_PRM)
    for k, v in params.items():
        setattr(p, k, v)
    all_, short, rows = evalb.evaluate(gold, test, p, out, err)
    return all_.summary(), short.summary(), rows, out.getvalue(), err.getvalue()


def counts(row):
    """(status, length, words, gold, test, match, crossing, correct tags) of one sentence."""
    return (row.status, row.length, row.words, row.gold, row.test, row.match, row.crossing, row.correct_tags)


# --------------------------------------------------------------------------- the cases
# Each: (name, gold line, test line, expected counts(row), expected (recall, precision, F1) of that sentence alone).
CASES = [
    # Identical trees. Words after deleting "." : The cat sat (3); length 4 (punctuation counts).
    # Brackets: TOP deleted; S(0,3) NP(0,2) VP(2,3) -> 3 gold, 3 test, 3 matched. Tags 3/3.
    ("identical",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))",
     "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))",
     (0, 4, 3, 3, 3, 3, 0, 3), (100.0, 100.0, 100.0)),
    # Relabelled: gold S(0,4) NP(0,2) VP(2,4) NP(3,4); test has ADJP(3,4) for NP(3,4).
    # 3 of 4 match: R = P = 3/4 = 75.00, F = 75.00.
    ("relabelled",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (NP (NN d)))))",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (ADJP (NN d)))))",
     (0, 4, 4, 4, 4, 3, 0, 4), (75.0, 75.0, 75.0)),
    # Deleted: gold S(0,5) NP(0,2) VP(2,5) NP(3,5); the test lacks NP(3,5).
    # R = 3/4 = 75.00, P = 3/3 = 100.00, F = 2*75*100/175 = 85.71.
    ("deleted",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (NP (DT d) (NN e)))))",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (DT d) (NN e))))",
     (0, 5, 5, 4, 3, 3, 0, 5), (75.0, 100.0, 85.71)),
    # Inserted: gold S(0,4) NP(0,3) VP(3,4); the test adds NP(1,3) inside NP(0,3) (no crossing).
    # R = 3/3 = 100.00, P = 3/4 = 75.00, F = 85.71.
    ("inserted",
     "(TOP (S (NP (DT a) (JJ b) (NN c)) (VP (VBZ d))))",
     "(TOP (S (NP (DT a) (NP (JJ b) (NN c))) (VP (VBZ d))))",
     (0, 4, 4, 3, 4, 3, 0, 4), (100.0, 75.0, 85.71)),
    # Crossing: gold S(0,5) NP(0,2) VP(2,5) NP(3,5); test S(0,5) NP(0,3) VP(3,5).
    # Matches: S only (VP(3,5) is not VP(2,5); NP(3,5) has another label) -> 1.
    # Test NP(0,3) crosses gold VP(2,5) (0 < 2 < 3 < 5): 1 crossing; VP(3,5) is inside VP(2,5): none.
    # R = 1/4 = 25.00, P = 1/3 = 33.33, F = 2*25*33.33/58.33 = 28.57. Tags all equal: 5/5.
    ("crossing",
     "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) (NP (DT d) (NN e)))))",
     "(TOP (S (NP (DT a) (NN b) (VBZ c)) (VP (DT d) (NN e))))",
     (0, 5, 5, 4, 3, 1, 1, 5), (25.0, 33.33, 28.57)),
    # ADVP = PRT, function tags cut: gold S(0,3) NP(0,1) [NP-SBJ] VP(1,3) PRT(2,3);
    # test S NP VP ADVP(2,3) [ADVP-DIR] -> all 4 match. Tags: RP vs RB differ -> 2/3.
    ("advp_prt",
     "(TOP (S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up)))))",
     "(TOP (S (NP (PRP He)) (VP (VBD gave) (ADVP-DIR (RB up)))))",
     (0, 3, 3, 4, 4, 4, 0, 2), (100.0, 100.0, 100.0)),
    # Punctuation: `` , '' . are deleted, leaving We won the coach said (5 words); length 9.
    # Gold S(0,5) NP(0,1) VP(1,2) NP(2,4) VP(4,5) = 5. The test attaches the punctuation
    # elsewhere: S(0,5) S(0,2) [over `` We won ,] NP(0,1) VP(1,2) NP(2,4) VP(4,5) [said .],
    # and X over '' alone spans no word: not counted. 6 test brackets, 5 matched:
    # R = 100.00, P = 5/6 = 83.33, F = 90.91.
    ("punctuation",
     "(TOP (S (`` ``) (NP (PRP We)) (VP (VBD won)) (, ,) ('' '') (NP (DT the) (NN coach)) (VP (VBD said)) (. .)))",
     "(TOP (S (S (`` ``) (NP (PRP We)) (VP (VBD won)) (, ,)) (X ('' '')) (NP (DT the) (NN coach)) "
     "(VP (VBD said) (. .))))",
     (0, 9, 5, 5, 6, 5, 0, 5), (100.0, 83.33, 90.91)),
    # Traces: -NONE- is deleted and NP-SBJ over it spans no word: gold S(0,2) VP(0,2) ADVP(1,2) = 3.
    # Length: Go home . = 3 (the trace does not count, the period does). 3/3 match.
    ("traces",
     "(TOP (S (NP-SBJ (-NONE- *)) (VP (VB Go) (ADVP-DIR (RB home))) (. .)))",
     "(TOP (S (VP (VB Go) (ADVP (RB home))) (. .)))",
     (0, 3, 2, 3, 3, 3, 0, 2), (100.0, 100.0, 100.0)),
    # Unary chain, duplicated label: gold S(0,2) NP(0,1) NP(0,1) VP(1,2) = 4; the test has one NP(0,1).
    # Multiset match: min(2, 1) = 1 NP -> 3 matched. R = 3/4 = 75.00, P = 3/3 = 100.00, F = 85.71.
    ("unary_missing",
     "(TOP (S (NP (NP (NNS dogs))) (VP (VBP bark))))",
     "(TOP (S (NP (NNS dogs)) (VP (VBP bark))))",
     (0, 2, 2, 4, 3, 3, 0, 2), (75.0, 100.0, 85.71)),
    # Unary chain too long: test NP x3 over (0,1): min(2, 3) = 2 -> 4 matched of 5 test.
    # R = 100.00, P = 80.00, F = 88.89.
    ("unary_extra",
     "(TOP (S (NP (NP (NNS dogs))) (VP (VBP bark))))",
     "(TOP (S (NP (NP (NP (NNS dogs)))) (VP (VBP bark))))",
     (0, 2, 2, 4, 5, 4, 0, 2), (100.0, 80.0, 88.89)),
    # Unary chain of different labels is two brackets, matched whatever their order:
    # gold S(0,1) VP(0,1), test VP(0,1) S(0,1) -> 2/2.
    ("unary_order",
     "(TOP (S (VP (VB Go))))",
     "(TOP (VP (S (VB Go))))",
     (0, 1, 1, 2, 2, 2, 0, 1), (100.0, 100.0, 100.0)),
    # ... and a missing one is missed: test S(0,1) only -> R = 1/2 = 50.00, P = 100.00, F = 66.67.
    ("unary_collapsed",
     "(TOP (S (VP (VB Go))))",
     "(TOP (S (VB Go)))",
     (0, 1, 1, 2, 1, 1, 0, 1), (50.0, 100.0, 66.67)),
]


@pytest.mark.parametrize("name,gold,test,expected,prf", CASES, ids=[c[0] for c in CASES])
def test_single_sentence(name, gold, test, expected, prf):
    all_, short, rows, report, err = score([gold], [test])
    assert counts(rows[0]) == expected
    assert (round(all_["recall"], 2), round(all_["precision"], 2), round(all_["f1"], 2)) == prf
    assert err == ""
    assert all_["error_sentences"] == 0 and all_["valid_sentences"] == 1


FOUR = [c for c in CASES if c[0] in ("relabelled", "deleted", "inserted", "crossing")]


def test_a_file_of_sentences_sums_brackets_over_sentences():
    """relabelled + deleted + inserted + crossing, scored together.

    gold brackets 4 + 4 + 3 + 4 = 15, test 4 + 3 + 4 + 3 = 14, matched 3 + 3 + 3 + 1 = 10
    Recall = 10/15 = 66.67, Precision = 10/14 = 71.43, F = 2*66.67*71.43/138.10 = 68.97
    Complete match 0/4 = 0.00; crossings 0+0+0+1: average 1/4 = 0.25, no crossing 3/4 = 75.00,
    2 or less 4/4 = 100.00; tags 4+5+4+5 = 18 words, all correct: 100.00.
    """
    all_, short, rows, report, _ = score([c[1] for c in FOUR], [c[2] for c in FOUR])
    assert (all_["recall"], all_["precision"]) == (pytest.approx(200 / 3), pytest.approx(1000 / 14))
    summary = report.split("=== Summary ===")[1]
    for line in ("Number of sentence        =      4", "Number of Valid sentence  =      4",
                 "Bracketing Recall         =  66.67", "Bracketing Precision      =  71.43",
                 "Bracketing FMeasure       =  68.97", "Complete match            =   0.00",
                 "Average crossing          =   0.25", "No crossing               =  75.00",
                 "2 or less crossing        = 100.00", "Tagging accuracy          = 100.00"):
        assert line in summary.split("-- len<=40 --")[0], line
    # every sentence is short: the second section repeats the first
    assert summary.split("-- All --")[1].split("-- len<=40 --")[0].strip() == summary.split("-- len<=40 --")[1].strip()


def _long(n_words, extra="", label="NN"):
    words = " ".join(f"({label} w{i})" for i in range(n_words))
    return f"(TOP (S (NP {words}){extra}))"


LONG_B, LONG_C = _long(39, " (, ,) (. .)"), _long(40, " (-NONE- *) (-NONE- *T*-1) (-NONE- 0)")
LONG = ([_long(41), LONG_B, LONG_C], [f"(TOP (S {' '.join(f'(NN w{i})' for i in range(41))}))", LONG_B, LONG_C])


def test_the_len_40_section_counts_punctuation_but_not_traces():
    """Three sentences:
    A: 41 words, gold S(0,41) NP(0,41); the test is S(0,41) only -> 1 of 2 matched. Length 41: All only.
    B: 39 words + ", ." : 39 scored words but length 41 (punctuation counts): All only.
       Gold = test = S(0,39) NP(0,39): 2 of 2.
    C: 40 words + 3 traces: length 40 (traces do not count): both sections. Gold = test, 2 of 2.
    All: gold 2+2+2 = 6, test 1+2+2 = 5, matched 5 -> R = 83.33, P = 100.00, F = 90.91,
         complete 2/3 = 66.67, tags 41+39+40 = 120 words.
    len<=40 (C only): 1 sentence, R = P = F = 100.00, complete 100.00, tags 40 words.
    """
    all_, short, rows, report, _ = score(*LONG)
    assert [r.length for r in rows] == [41, 41, 40]
    assert [r.words for r in rows] == [41, 39, 40]
    assert (all_["sentences"], round(all_["recall"], 2), round(all_["precision"], 2), round(all_["f1"], 2),
            round(all_["complete_match"], 2)) == (3, 83.33, 100.0, 90.91, 66.67)
    assert (short["sentences"], short["recall"], short["precision"], short["complete_match"]) == (1, 100, 100, 100)
    assert "-- len<=40 --\nNumber of sentence        =      1\n" in report
    # the totals line: R P matched gold test crossing, words, correct tags, accuracy
    assert "                 83.33 100.00      5     6     5      0    120   120   100.00\n" in report


OK = "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))"
GOLD3 = "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (. .)))"
RELABELLED = [c for c in CASES if c[0] == "relabelled"][0]
MISMATCHES = ([OK, GOLD3, GOLD3, GOLD3, GOLD3, RELABELLED[1]],
              [OK,
               "(TOP (S (NP (DT a)) (VP (VBZ c)) (. .)))",
               "(TOP (S (NP (DT a) (NN x)) (VP (VBZ c)) (. .)))",
               "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c)) (NN .)))",
               "",
               RELABELLED[2]])


def test_length_and_word_mismatches_are_error_sentences_not_crashes():
    """EVALB reports these on stderr (``LINE : message``) and leaves them out of the scores.

    1: fine (the identical case): 3/3.
    2: the test drops a word: 3 gold words vs 2 -> "Length unmatch (3|2)", error.
    3: a different word: "Words unmatch (b|x)", error.
    4: the test tags the period NN, so its "." is not deleted: 3 vs 4 words -> error.
    5: an empty test line: no words -> skipped (no message).
    6: fine, relabelled case: 3 of 4.
    Totals over the valid sentences 1 and 6: gold 3+4 = 7, test 3+4 = 7, matched 6 -> 85.71 each.
    """
    all_, short, rows, report, err = score(*MISMATCHES)
    assert err == "2 : Length unmatch (3|2)\n3 : Words unmatch (b|x)\n4 : Length unmatch (3|4)\n"
    assert [r.status for r in rows] == [0, 1, 1, 1, 2, 0]
    assert (all_["sentences"], all_["error_sentences"], all_["skip_sentences"], all_["valid_sentences"]) == (6, 3, 1, 2)
    assert round(all_["f1"], 2) == 85.71
    # an error sentence's row: its gold length, status 1, zeros elsewhere
    assert "   2    4    1    0.00   0.00     0      0    0      0      0     0     0.00\n" in report
    for line in ("Number of Error sentence  =      3", "Number of Skip  sentence  =      1",
                 "Number of Valid sentence  =      2", "Bracketing FMeasure       =  85.71"):
        assert line in report


def test_the_report_is_evalbs_layout_byte_for_byte():
    """One sentence (the ADVP/PRT case, tags 2 of 3): the whole report, as EVALB prints it."""
    case = [c for c in CASES if c[0] == "advp_prt"][0]
    _, _, _, report, _ = score([case[1]], [case[2]])
    section = ("Number of sentence        =      1\n"
               "Number of Error sentence  =      0\n"
               "Number of Skip  sentence  =      0\n"
               "Number of Valid sentence  =      1\n"
               "Bracketing Recall         = 100.00\n"
               "Bracketing Precision      = 100.00\n"
               "Bracketing FMeasure       = 100.00\n"
               "Complete match            = 100.00\n"
               "Average crossing          =   0.00\n"
               "No crossing               = 100.00\n"
               "2 or less crossing        = 100.00\n"
               "Tagging accuracy          =  66.67\n")
    assert report == (
        "  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
        " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
        "============================================================================\n"
        "   1    3    0  100.00 100.00     4      4    4      0      3     2    66.67\n"
        "============================================================================\n"
        "                100.00 100.00      4     4     4      0      3     2    66.67\n"
        "=== Summary ===\n\n-- All --\n" + section + "\n-- len<=40 --\n" + section)


NAN = (["(TOP (S (NP (DT a) (NN b))))"], ["(TOP (XX a) (XX b))"])


def test_no_brackets_at_all_gives_evalbs_nan():
    """A flat test tree over 2 words: 0 matched of 2 gold and 0 test brackets; EVALB's
    F = 2PR/(P+R) is 0/0 and printed (glibc) as -nan; the totals line leaves out R and P."""
    _, _, _, report, _ = score(*NAN)
    assert "Bracketing FMeasure       =   -nan\n" in report
    assert "=\n      2     0     0.00\n=== Summary ===" in report
    assert evalb.parse_summary(report)["all"]["f1"] != evalb.parse_summary(report)["all"]["f1"]  # NaN


TWELVE_ERRORS = (["(TOP (S (NN a) (NN b)))"] * 12, ["(TOP (S (NN a)))"] * 12)


def _file(lines) -> str:
    """A gold or test file's text: each line followed by a newline."""
    return "".join(line + "\n" for line in lines)


def test_evalb_gives_up_after_max_error_plus_one_errors(tmp_path):
    """COLLINS.prm's MAX_ERROR 10: EVALB exits at the 12th error without a summary; -e raises the limit."""
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text(_file(TWELVE_ERRORS[0]))
    test.write_text(_file(TWELVE_ERRORS[1]))
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert proc.returncode == 1 and "=== Summary ===" not in proc.stdout
    assert proc.stderr.count("Length unmatch (2|1)") == 12
    assert proc.stderr.strip().splitlines()[-1].startswith("error: gave up after 12 errors")
    proc = subprocess.run([*SCRIPT, "-e", "100", gold, test], capture_output=True, text=True)
    assert proc.returncode == 0 and "Number of Error sentence  =     12" in proc.stdout


# --------------------------------------------------------------------------- malformed input
MALFORMED_GOLD = "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c))))"
UNCLOSED = "(TOP (S (NP (DT a) (NN b)) (VP (VBZ c))"


@pytest.mark.parametrize("test_line,message", [
    (UNCLOSED, "Bracketing is unbalanced (too many open bracket)"),
    ("(TOP (S (NP (DT a) (NN b)) (VP (VBZ c) extra)))", "Reading sentence"),
    ("(TOP (S (NP (DT a) (NN b)))) (VP (VBZ c))))", "Bracketing unbalance (too many close bracket)"),
])
def test_malformed_test_trees_are_error_sentences(test_line, message):
    """EVALB reports a malformed line; this script makes it an error sentence and goes on
    (where EVALB's C code loops or reads outside its stack, see the module docstring)."""
    all_, _, rows, _, err = score([MALFORMED_GOLD, MALFORMED_GOLD], [test_line, MALFORMED_GOLD])
    assert f"1 : {message}" in err
    assert [r.status for r in rows] == [1, 0] and all_["f1"] == 100.0


ONE = "(TOP (S (NN a)))"


def test_line_count_mismatches_are_reported_and_an_error(tmp_path):
    """EVALB's report and messages as the official program prints them, then one error line and exit 1
    (issue 36: EVALB exits 0 and prints an F1 for the lines both files have)."""
    one = ONE + "\n"
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text(one * 3)
    test.write_text(one * 2)
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert proc.returncode == 1 and "3 : Number of lines unmatch (too many lines in gold file)" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("error: ") and "has 2 lines" in proc.stderr
    assert "Number of sentence        =      2" in proc.stdout
    test.write_text(one * 4)
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert "4 : Number of lines unmatch (too many lines in test file)" in proc.stderr
    assert "Number of sentence        =      3" in proc.stdout


def test_a_gold_file_of_no_trees_is_an_error_not_a_score_of_nothing(tmp_path):
    """Plain sentences given as the gold file: EVALB scores no sentence whose gold tree it cannot read
    (an error or a skipped sentence) and exits 0 with 0 valid sentences and F-measure nan; this script
    prints the same report and messages, then one error line saying what the gold file must hold, and
    exits 1. One readable gold tree among them is scored as EVALB scores it."""
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text("The cat sits .\nA dog .\n")
    test.write_text(ONE + "\n" + ONE + "\n")
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert "Number of sentence        =      2" in proc.stdout and "Number of Valid sentence  =      0" in proc.stdout
    assert proc.returncode == 1 and proc.stderr.startswith("1 : Reading sentence\n")
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {gold}: no line is a tree EVALB reads") and "Traceback" not in proc.stderr
    gold.write_text("The cat sits .\n" + ONE + "\n")
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert proc.returncode == 0 and "Number of Valid sentence  =      1" in proc.stdout


# --------------------------------------------------------------------------- command line
def test_command_line_prints_the_report(tmp_path):
    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text("\n".join(c[1] for c in CASES) + "\n")
    test.write_text("\n".join(c[2] for c in CASES) + "\n")
    proc = subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == ""
    summary = evalb.parse_summary(proc.stdout)
    assert summary["all"]["sentences"] == len(CASES) and set(summary) == {"all", "len<=40"}
    for name in ("Bracketing Recall = ", "Bracketing Precision = ", "Bracketing FMeasure = ",
                 "Complete match = ", "Tagging accuracy = "):
        assert any(" ".join(line.split()).startswith(name) for line in proc.stdout.splitlines()), name


@pytest.mark.parametrize("argv,fragment", [
    (["missing-gold", "missing-test"], "cannot read the gold file missing-gold"),
    (["--evalb", "/nonexistent/evalb", "GOLD", "GOLD"], "--evalb /nonexistent/evalb: not an executable file"),
    (["-p", "BADPRM", "GOLD", "GOLD"], "QUOTE_LABEL is not supported"),
])
def test_bad_command_lines_are_one_error_line(tmp_path, argv, fragment):
    (tmp_path / "GOLD").write_text("(TOP (S (NN a)))\n")
    (tmp_path / "BADPRM").write_text("QUOTE_LABEL ''\n")
    proc = subprocess.run([*SCRIPT, *argv], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], proc.stderr


UNLABELLED_PRM = evalb.COLLINS_PRM.replace("LABELED 1", "LABELED 0").replace("CUTOFF_LEN 40", "CUTOFF_LEN 3")


def test_a_parameter_file_is_read_like_evalbs(tmp_path):
    """LABELED 0 (unlabelled): the relabelled case then matches 4 of 4; CUTOFF_LEN 3 moves
    the 4-word sentence out of the second section."""
    prm = tmp_path / "p.prm"
    prm.write_text(UNLABELLED_PRM)
    (tmp_path / "g").write_text(RELABELLED[1] + "\n")
    (tmp_path / "t").write_text(RELABELLED[2] + "\n")
    proc = subprocess.run([*SCRIPT, "-p", prm, tmp_path / "g", tmp_path / "t"], capture_output=True, text=True)
    s = evalb.parse_summary(proc.stdout)
    assert s["all"]["f1"] == 100.0 and s["len<=3"]["sentences"] == 0


# --------------------------------------------------------------------------- the official program
class Golden(NamedTuple):
    """One case of tests/golden/evalb: the input files and how EVALB was run on them."""

    gold: List[str]
    test: List[str]
    options: Tuple[str, ...] = ()  # between the parameter file and GOLD TEST
    prm: Optional[str] = None      # a parameter file of the case's own instead of COLLINS.prm


# Every case of this file that the official EVALB reads in a defined way; left out:
# "Reading sentence" (EVALB loops until it gives up) and a ')' too many (EVALB reads
# outside its stack), see test_malformed_test_trees_are_error_sentences.
GOLDEN = {
    **{f"case_{name}": Golden([gold], [test]) for name, gold, test, _, _ in CASES},
    "all_cases": Golden([c[1] for c in CASES], [c[2] for c in CASES]),
    "four_cases": Golden([c[1] for c in FOUR], [c[2] for c in FOUR]),
    "len40": Golden(*LONG),
    "len40_cutoff41": Golden(*LONG, options=("-c", "41")),
    "mismatches": Golden(*MISMATCHES),
    "nan": Golden(*NAN),
    "max_error": Golden(*TWELVE_ERRORS),
    "max_error_e100": Golden(*TWELVE_ERRORS, options=("-e", "100")),
    "gold_longer": Golden([ONE] * 3, [ONE] * 2),
    "test_longer": Golden([ONE] * 3, [ONE] * 4),
    "unlabelled_cutoff3": Golden([RELABELLED[1]], [RELABELLED[2]], prm=UNLABELLED_PRM),
    "unclosed": Golden([MALFORMED_GOLD, MALFORMED_GOLD], [UNCLOSED, MALFORMED_GOLD]),
}


def golden_inputs(case: Golden) -> dict:
    """The input files of a case folder, by name, as bytes."""
    files = {"gold": _file(case.gold), "test": _file(case.test)}
    if case.options:
        files["options"] = " ".join(case.options) + "\n"
    if case.prm is not None:
        files["prm"] = case.prm
    return {name: text.encode() for name, text in files.items()}


def test_the_golden_inputs_are_this_files_cases():
    """tests/golden/evalb holds one folder per case of GOLDEN, with exactly its input files
    (what EVALB printed for them is in stdout, stderr and status)."""
    assert sorted(p.name for p in GOLDEN_DIR.iterdir() if p.is_dir()) == sorted(GOLDEN)
    for name, case in GOLDEN.items():
        folder = GOLDEN_DIR / name
        inputs = golden_inputs(case)
        assert sorted(p.name for p in folder.iterdir()) == sorted([*inputs, "stdout", "stderr", "status"]), name
        for file, data in inputs.items():
            assert (folder / file).read_bytes() == data, (name, file)


def _golden(name: str):
    """(stdout, stderr, exit status) of the official EVALB on case ``name``."""
    folder = GOLDEN_DIR / name
    status = int((folder / "status").read_text())
    return (folder / "stdout").read_bytes(), (folder / "stderr").read_bytes(), status


def _args(name: str) -> list:
    """The arguments EVALB ran with on case ``name``, less ``-p COLLINS.prm`` (scripts/evalb.py's default)."""
    folder = GOLDEN_DIR / name
    prm = ["-p", folder / "prm"] if GOLDEN[name].prm is not None else []
    return [*prm, *GOLDEN[name].options, folder / "gold", folder / "test"]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_output(name):
    """scripts/evalb.py prints what the official EVALB printed on this case, byte for byte, with
    its exit status; where EVALB gives up (MAX_ERROR) this script adds one ``error:`` line."""
    stdout, stderr, status = _golden(name)
    ours = subprocess.run([*SCRIPT, *_args(name)], capture_output=True)
    assert ours.stdout == stdout
    mismatch = len(GOLDEN[name].gold) != len(GOLDEN[name].test)
    assert ours.returncode == (1 if mismatch else status)  # EVALB exits 0 on a line-count mismatch; this script 1
    if ours.returncode == 0:
        assert ours.stderr == stderr
    else:  # EVALB's messages, then the line saying why this script stopped
        assert ours.stderr.startswith(stderr) and stderr.endswith(b"\n")
        extra = ours.stderr[len(stderr):].decode()
        why = "error: gave up after " if status else "error: "
        assert extra.startswith(why) and extra.count("\n") == 1, extra
        assert not mismatch or "the parser's output must have one line per gold tree" in extra


def _official():
    path = os.environ.get("EVALB")
    return path if path and os.access(path, os.X_OK) else None


@pytest.mark.skipif(not _official(), reason="set EVALB=/path/to/evalb to compare with the official program")
@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_official_evalb_prints_the_golden_bytes(tmp_path, name):
    """The official EVALB, run now with COLLINS.prm's settings, prints the golden bytes; and so
    does scripts/evalb.py --evalb (which runs it)."""
    prm = tmp_path / "COLLINS.prm"
    prm.write_text(evalb.COLLINS_PRM)
    collins = ["-p", prm] if GOLDEN[name].prm is None else []
    theirs = subprocess.run([_official(), *collins, *_args(name)], capture_output=True)
    assert (theirs.stdout, theirs.stderr, theirs.returncode) == _golden(name)
    via = subprocess.run([*SCRIPT, "--evalb", _official(), *_args(name)], capture_output=True)
    assert (via.stdout, via.stderr, via.returncode) == (theirs.stdout, theirs.stderr, theirs.returncode)


@pytest.mark.parametrize("argv,fragment", [(["-c", "-5"], "argument -c: -5 is not >= 1"),
                                           (["-e", "-1"], "argument -e: -1 is not >= 0")])
def test_bad_options_and_an_empty_gold_file_are_one_line(tmp_path, argv, fragment):
    from conftest import assert_one_error_line

    gold, test = tmp_path / "gold", tmp_path / "test"
    gold.write_text(ONE + "\n")
    test.write_text(ONE + "\n")
    assert_one_error_line(subprocess.run([*SCRIPT, *argv, gold, test], capture_output=True, text=True), fragment)
    gold.write_text("")
    test.write_text("")
    assert_one_error_line(subprocess.run([*SCRIPT, gold, test], capture_output=True, text=True), "no trees")

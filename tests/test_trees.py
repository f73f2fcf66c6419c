"""attn_kit/metrics/trees.py: reading treebank files, the standard preprocessing,
Vinyals et al.'s linearization and its inverse with repairs.

Expected trees and counts are written out by hand. The last tests run over
NLTK's real WSJ sample in ../shared (skipped when it is absent).
"""
import io
import zipfile

import pytest
from conftest import SHARED

from attn_kit.cli import UserError
from attn_kit.metrics import evalb
from attn_kit.metrics.trees import (REPAIRS, TreeError, bare_label, delinearize, gold_tree, linearize,
                                    parse_trees, read_mrg, read_tree_lines, strip_tree)

PTB_SAMPLE = SHARED / "data" / "ptb-sample" / "treebank.zip"

# A tree in the treebank's own layout: wrapper without a label, function tags, traces, an index.
MRG = """\
( (S
    (NP-SBJ-1 (NNP Anna) )
    (VP (VBZ wants)
      (S
        (NP-SBJ (-NONE- *-1) )
        (VP (TO to)
          (VP (VB leave) ))))
    (. .) ))
( (S (NP=2 (PRP It)) (VP (VBD rained)) (. .)) )
"""


def tree(text):
    return next(parse_trees(text))[0]


# --------------------------------------------------------------------------- reading
def test_reads_multiline_trees_with_their_line_numbers():
    trees = list(parse_trees(MRG, "x.mrg"))
    assert [line for _, line in trees] == [1, 9]
    first = trees[0][0]
    assert first.label == "" and first.words() == ["Anna", "wants", "*-1", "to", "leave", "."]
    assert first.tags() == ["NNP", "VBZ", "-NONE-", "TO", "VB", "."]


@pytest.mark.parametrize("text,message", [
    ("(S (NN a))\n( (S (NP (DT a) (NN b))\n (VP (VBZ c))\n", "x.mrg:2: the tree that starts here is never closed "
                                                          "(2 ')' missing at the end of the file)"),
    ("(S (NN a)))\n", "x.mrg:1: ')' with no open bracket"),
    ("(S (NN a))\nstray (S (NN b))\n", "x.mrg:2: text outside a tree: 'stray'"),
    ("(S\n (NP (DT a) word))\n", "x.mrg:2: word 'word' outside a (TAG word) pair in (NP ...)"),
    ("(S (NN a b))\n", "x.mrg:1: more than one word in (NN a b ...)"),
    ("(S (NP))\n", "x.mrg:1: empty bracket (NP)"),
    ("(S (NN a (DT b)))\n", "x.mrg:1: a bracket inside (NN a ...)"),
])
def test_malformed_trees_name_file_and_line(text, message):
    with pytest.raises(TreeError) as info:
        list(parse_trees(text, "x.mrg"))
    assert message in str(info.value)


def test_read_mrg_and_tree_lines(tmp_path):
    (tmp_path / "wsj_0201.mrg").write_text(MRG)
    assert len(read_mrg(tmp_path / "wsj_0201.mrg")) == 2
    silver = tmp_path / "silver.txt"
    silver.write_text("(TOP (S (NN a)))\n\n(S (NN b))\n")
    assert [str(t) for t in read_tree_lines(silver)] == ["(TOP (S (NN a)))", "(S (NN b))"]
    silver.write_text("(TOP (S (NN a)))\n\n(S (NN b))\n(S (NN c)) (S (NN d))\n")
    with pytest.raises(TreeError, match=r"silver.txt:4: 2 trees on one line"):
        list(read_tree_lines(silver))
    silver.write_text("(TOP (S (NN a)))\n(S (NP (NN b))\n")
    with pytest.raises(TreeError, match=r"silver.txt:2: the tree that starts here is never closed"):
        list(read_tree_lines(silver))


def test_tree_files_are_read_by_the_text_policy(tmp_path):
    """attn_kit.textio: a byte-order mark and CRLF or CR line ends read as plain lines (the line
    numbers too); a byte that is not UTF-8 is one error naming the file and line (it was read
    into a word as a lone surrogate)."""
    plain, mrg = tmp_path / "plain.mrg", tmp_path / "wsj_0201.mrg"
    plain.write_text(MRG, encoding="utf-8")
    mrg.write_bytes(b"\xef\xbb\xbf" + MRG.replace("\n", "\r\n").encode())
    assert read_mrg(mrg) == read_mrg(plain) and len(read_mrg(plain)) == 2
    silver = tmp_path / "silver.txt"
    silver.write_bytes("\ufeff(TOP (S (NN a)))\r\n\r(S (NN café))\r(S (NN c)) (S (NN d))\r".encode())
    with pytest.raises(TreeError, match=r"silver.txt:4: 2 trees on one line"):
        list(read_tree_lines(silver))
    silver.write_bytes(silver.read_bytes().replace(b" (S (NN d))", b""))
    assert [str(t) for t in read_tree_lines(silver)] == ["(TOP (S (NN a)))", "(S (NN café))", "(S (NN c))"]
    for path, trees in ((silver, b"(S (NN a))\n(S (NN caf\xe9))\n"), (mrg, MRG.encode() + b"(S (NN caf\xe9))\n")):
        path.write_bytes(trees)
        line = trees.count(b"\n")
        message = rf"^{path}: line {line} is not UTF-8 \(byte 0xe9 at byte 11 of the line\)"  # "(S (NN caf" + 1
        with pytest.raises(UserError, match=message):
            list(read_tree_lines(path)) if path == silver else read_mrg(path)


# --------------------------------------------------------------------------- preprocessing
@pytest.mark.parametrize("label,bare", [("NP-SBJ-1", "NP"), ("NP=2", "NP"), ("S-TPC-1", "S"), ("ADVP-TMP", "ADVP"),
                                        ("-NONE-", "-NONE-"), ("-LRB-", "-LRB-"), ("PRT|ADVP", "PRT|ADVP"),
                                        ("NP", "NP")])
def test_bare_label(label, bare):
    assert bare_label(label) == bare


def test_strip_removes_traces_empty_constituents_and_function_tags():
    """NP-SBJ over the trace *-1 is left with no word and goes; the S keeps its VP."""
    first, second = [t for t, _ in parse_trees(MRG)]
    assert str(strip_tree(first)) == \
        "(TOP (S (NP (NNP Anna)) (VP (VBZ wants) (S (VP (TO to) (VP (VB leave))))) (. .)))"
    assert str(strip_tree(second)) == "(TOP (S (NP (PRP It)) (VP (VBD rained)) (. .)))"
    # a tree without the wrapper gets TOP; one with nothing but traces is None
    assert str(strip_tree(tree("(S (NP (-NONE- *)) (VP (VB Go)))"))) == "(TOP (S (VP (VB Go))))"
    assert strip_tree(tree("( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *T*-1))))")) is None


def test_gold_tree_keeps_the_treebank_tree_under_top():
    first = tree(MRG)
    assert str(gold_tree(first)).startswith("(TOP (S (NP-SBJ-1 (NNP Anna)) (VP (VBZ wants) (S (NP-SBJ (-NONE- *-1))")
    assert str(gold_tree(tree("(S (NN a))"))) == "(TOP (S (NN a)))"


# --------------------------------------------------------------------------- linearization
def test_the_papers_example():
    """PAPER.md / Vinyals et al.: (S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"""
    t = strip_tree(tree("(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))"))
    assert " ".join(linearize(t, "keep")) == "(S (NP NNP )NP (VP VBZ (NP DT NN )NP )VP . )S"
    assert " ".join(linearize(t, "xx")) == "(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S"
    with pytest.raises(ValueError):
        linearize(t, "lower")


def test_round_trip_with_gold_tags_and_with_predicted_tags():
    t = strip_tree(tree(MRG))
    back, repairs = delinearize(linearize(t, "xx"), t.words(), t.tags())
    assert back == t and not repairs
    back, repairs = delinearize(linearize(t, "keep"), t.words())
    assert back == t and not repairs
    # without tags, XX leaves become XX-tagged words
    back, _ = delinearize(linearize(t, "xx"), t.words())
    assert str(back) == "(TOP (S (NP (XX Anna)) (VP (XX wants) (S (VP (XX to) (VP (XX leave))))) (XX .)))"


WORDS = ["John", "has", "a", "dog", "."]
TAGS = ["NNP", "VBZ", "DT", "NN", "."]


@pytest.mark.parametrize("sequence,expected,repairs", [
    # well formed: nothing to repair
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))", {}),
    # cut off after "(NP XX XX": NP, VP and S are closed at the end (3), the period's word
    # joins the innermost open bracket (NP)
    ("(S (NP XX )NP (VP XX (NP XX XX",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog) (. .)))))", {"unclosed": 3, "missing_leaves": 1}),
    # two stray closing brackets at the end are dropped
    ("(S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S )S )VP",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))", {"extra_close": 2}),
    # )VP closing the NP: the label of the open bracket wins (twice here, the next ) closes VP as )NP)
    ("(S (NP XX )NP (VP XX (NP XX XX )VP )NP XX )S",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))", {"label_mismatch": 2}),
    # seven leaves for five words: the last two are dropped
    ("(S (NP XX )NP (VP XX (NP XX XX XX XX )NP )VP XX )S",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog) (. .)))))", {"extra_leaves": 2}),
    # all brackets closed but two words short: they join the last top-level constituent, S
    ("(S (NP XX )NP (VP XX XX )VP )S",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (DT a)) (NN dog) (. .)))", {"missing_leaves": 2}),
    # a word after everything closed goes under TOP; the missing ones follow it there, in order
    ("(S (NP XX )NP (VP XX )VP )S XX",
     "(TOP (S (NP (NNP John)) (VP (VBZ has))) (DT a) (NN dog) (. .))", {"missing_leaves": 2}),
    # a bracket over no word is dropped
    ("(S (NP XX )NP (ADJP )ADJP (VP XX (NP XX XX )NP )VP XX )S",
     "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))", {"empty_brackets": 1}),
    # nothing at all: every word under TOP
    ("", "(TOP (NNP John) (VBZ has) (DT a) (NN dog) (. .))", {"missing_leaves": 5}),
    # <unk> and stray tokens count as leaves
    ("(S <unk> XX XX XX XX )S", "(TOP (S (NNP John) (VBZ has) (DT a) (NN dog) (. .)))", {}),
])
def test_delinearize_repairs(sequence, expected, repairs):
    t, counts = delinearize(sequence.split(), WORDS, TAGS)
    assert str(t) == expected
    assert dict(counts) == repairs
    assert set(counts) <= set(REPAIRS)
    assert t.words() == WORDS  # always the input words, in order: EVALB never sees a length mismatch


def test_any_sequence_gives_a_tree_over_the_input_words_in_order():
    """2,000 random sequences of brackets and leaves (a fixed seed): every repaired tree has
    exactly the input words, in order, and reads back as itself."""
    import random

    rng = random.Random(4)
    vocab = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "(PP", ")PP", "XX", "XX", "XX", ")", "<unk>"]
    for _ in range(2000):
        seq = [rng.choice(vocab) for _ in range(rng.randint(0, 30))]
        t, counts = delinearize(seq, WORDS, TAGS)
        assert t.words() == WORDS and t.tags() == TAGS, seq
        assert next(parse_trees(str(t)))[0] == t
        assert set(counts) <= set(REPAIRS)


def test_repaired_trees_score_with_evalb():
    """A truncated output scored against the gold tree (by hand):
    gold S(0,4) NP(0,1) VP(1,4) NP(2,4) ("." deleted, 4 words);
    repaired "(S (NP XX )NP (VP XX (NP XX XX" -> S(0,4) NP(0,1) VP(1,4) NP(2,4) [the period is deleted]:
    4 of 4, F = 100.00."""
    gold = "(TOP (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .)))"
    t, _ = delinearize("(S (NP XX )NP (VP XX (NP XX XX".split(), WORDS, TAGS)
    all_, _, _ = evalb.evaluate([gold], [str(t)])
    assert all_.summary()["f1"] == 100.0


# --------------------------------------------------------------------------- the real WSJ sample
def _sample_trees():
    if not PTB_SAMPLE.exists():
        pytest.skip("../shared/data/ptb-sample is not here")
    trees = []
    with zipfile.ZipFile(PTB_SAMPLE) as z:
        for name in sorted(n for n in z.namelist() if n.startswith("treebank/combined/wsj_") and n.endswith(".mrg")):
            trees += [t for t, _ in parse_trees(z.read(name).decode("utf-8"), name)]
    return trees


def test_every_sample_tree_survives_the_round_trip_and_scores_100():
    """NLTK's 3,914 WSJ trees: strip, linearize, delinearize gives the stripped tree back,
    and EVALB scores those trees against the treebank's own (traces, function tags and all)
    at 100.00 with no error sentence: the preprocessing removes exactly what EVALB ignores."""
    trees = _sample_trees()
    assert len(trees) == 3914
    gold, test = [], []
    for t in trees:
        s = strip_tree(t)
        for mode in ("xx", "keep"):
            back, repairs = delinearize(linearize(s, mode), s.words(), s.tags() if mode == "xx" else None)
            assert back == s and not repairs
        gold.append(str(gold_tree(t)))
        test.append(str(s))
    out = io.StringIO()
    all_, short, _ = evalb.evaluate(gold, test, out=out)
    summary = all_.summary()
    assert summary["error_sentences"] == 0 and summary["skip_sentences"] == 0
    assert summary["f1"] == 100.0 and summary["complete_match"] == 100.0 and summary["tagging_accuracy"] == 100.0
    assert 0 < short.summary()["sentences"] < 3914  # some sample sentences are longer than 40 words

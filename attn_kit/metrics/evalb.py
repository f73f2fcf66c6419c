"""EVALB (Sekine and Collins, 1997) in Python, with COLLINS.prm settings.

    python scripts/evalb.py GOLD TEST                  # one bracketed tree per line in each file
    python scripts/evalb.py --evalb ~/EVALB/evalb GOLD TEST   # run the official binary instead

Prints what ``evalb -p COLLINS.prm GOLD TEST`` prints, byte for byte, on valid UTF-8 input. Written
from EVALB's documented behaviour (its README), none of its code used; where EVALB's C code
overflows or loops, this does something defined. The semantics and the differences: docs/wsj.md.
"""
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from attn_kit import options
from attn_kit.cli import ArgumentParser, Number, UserError
from attn_kit.textio import add_errors_option, read_lines

# The settings of EVALB's COLLINS.prm, as a parameter file this script (and EVALB) reads.
COLLINS_PRM = """\
# EVALB parameters: the settings of COLLINS.prm (Collins 1997)
DEBUG 0
MAX_ERROR 10
CUTOFF_LEN 40
LABELED 1
DELETE_LABEL TOP
DELETE_LABEL -NONE-
DELETE_LABEL ,
DELETE_LABEL :
DELETE_LABEL ``
DELETE_LABEL ''
DELETE_LABEL .
DELETE_LABEL_FOR_LENGTH -NONE-
EQ_LABEL ADVP PRT
"""

_SPACE = " \t\n\v\f\r"  # C isspace() in the C locale
# "(" and its label, then maybe spaces, a word and what ends the word: ")" of a "(TAG word)" pair, "(" or nothing
_OPEN = re.compile(r"\(([^ \t\n\v\f\r()]*)(?:[ \t\n\v\f\r]+([^ \t\n\v\f\r()]*)([()]?))?")


class TooManyErrors(UserError):
    """EVALB's MAX_ERROR was exceeded: EVALB gives up, and so does the command line (exit status 1)."""


@dataclass
class Params:
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: List[str] = field(default_factory=list)
    delete_for_length: List[str] = field(default_factory=list)
    eq_labels: List[Tuple[str, str]] = field(default_factory=list)
    eq_words: List[Tuple[str, str]] = field(default_factory=list)

    def label_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_labels or (b, a) in self.eq_labels

    def word_eq(self, a: str, b: str) -> bool:
        return a == b or (a, b) in self.eq_words or (b, a) in self.eq_words


def parse_params(text: str, name: str = "parameter file") -> Params:
    """Read an EVALB .prm file: ``KEYWORD value`` lines, ``#`` comments."""
    params = Params()
    for n, line in enumerate(text.split("\n"), 1):
        line = line.rstrip(_SPACE)
        if line.startswith("#") or len(line) < 3:
            continue
        parts = line.split(None, 1)
        key, value = parts[0], (parts[1].strip(_SPACE) if len(parts) > 1 else "")
        if not value:
            raise UserError(f"{name}: line {n}: {key} has no value")
        if key in ("DEBUG",):
            continue  # per-sentence debugging output is not reproduced
        try:
            if key in ("MAX_ERROR", "CUTOFF_LEN"):
                setattr(params, key.lower(), int(value))
            elif key == "LABELED":
                params.labeled = int(value) != 0
            elif key in ("DELETE_LABEL", "DELETE_LABEL_FOR_LENGTH"):
                (params.delete_labels if key == "DELETE_LABEL" else params.delete_for_length).append(value)
            elif key in ("EQ_LABEL", "EQ_WORD"):
                pair = value.split()
                if len(pair) != 2:
                    raise UserError(f"{name}: line {n}: {key} needs two values")
                (params.eq_labels if key == "EQ_LABEL" else params.eq_words).append((pair[0], pair[1]))
            elif key == "QUOTE_LABEL":
                raise UserError(f"{name}: line {n}: QUOTE_LABEL is not supported by scripts/evalb.py; "
                                "use the official program (--evalb PATH)")
            else:
                raise UserError(f"{name}: line {n}: unknown keyword {key}")
        except ValueError:
            raise UserError(f"{name}: line {n}: {key} needs a number, not {value!r}") from None
    return params


COLLINS = parse_params(COLLINS_PRM)


# --------------------------------------------------------------------------- reading
@dataclass
class Sentence:
    words: List[Tuple[str, str]]          # (word, tag) of the words that remain
    brackets: List[List]                  # [start, end, label] in order of their opening
    length: int                           # words that count for the length cut-off
    errors: List[str]


def read_tree(line: str, params: Params) -> Sentence:
    """One line of a gold or test file, read the way EVALB reads it."""
    words, brackets, stack, errors = [], [], [], []
    length, i, n = 0, 0, len(line)
    while i < n:
        c = line[i]
        if c in _SPACE:
            i += 1
        elif c == "(":
            match = _OPEN.match(line, i)
            label, word, after = match.groups()
            i = match.end(1)
            if after == ")":
                if label not in params.delete_for_length:
                    length += 1
                if label not in params.delete_labels:
                    words.append((word, label))
                i = match.end()
                continue
            if word is not None and after != "(":
                errors.append("More than two elements in a bracket")
                break
            brackets.append([len(words), -1, label])  # a bracket left open keeps EVALB's initial end, -1
            stack.append(len(brackets) - 1)
        elif c == ")":
            if not stack:
                errors.append("Bracketing unbalance (too many close bracket)")
                break
            brackets[stack.pop()][1] = len(words)
            i += 1
        else:
            errors.append("Reading sentence")
            break
    if stack and not errors:
        errors.append("Bracketing is unbalanced (too many open bracket)")
    return Sentence(words, brackets, length, errors)


def _scored(sentence: Sentence, params: Params) -> List[Tuple[int, int, str]]:
    """Brackets that count: not empty, not deleted; labels without function tags."""
    out = []
    for start, end, label in sentence.brackets:
        if start == end:
            continue
        label = re.split("[-=]", label, maxsplit=1)[0]  # no function tags: cut at the first '-' or '=', even at 0
        if any(params.label_eq(label, d) for d in params.delete_labels):
            continue
        out.append((start, end, label))
    return out


# --------------------------------------------------------------------------- scoring
@dataclass
class SentenceResult:
    line: int
    length: int          # gold length for the cut-off
    status: int          # 0 ok, 1 error, 2 skip
    words: int = 0
    gold: int = 0
    test: int = 0
    match: int = 0
    crossing: int = 0
    correct_tags: int = 0

    def row(self) -> str:
        recall = 100.0 * self.match / self.gold if self.gold else 0.0
        precision = 100.0 * self.match / self.test if self.test else 0.0
        accuracy = 100.0 * self.correct_tags / self.words if self.words else 0.0
        return ("%4d  %3d    %d  " % (self.line, self.length, self.status)
                + "%6.2f %6.2f   %3d    %3d  %3d    %3d" % (recall, precision, self.match, self.gold, self.test,
                                                            self.crossing)
                + "   %4d  %4d   %6.2f" % (self.words, self.correct_tags, accuracy))


def score_sentence(gold: Sentence, test: Sentence, params: Params, line: int, report) -> SentenceResult:
    """Compare one pair of sentences; ``report(line, message)`` is EVALB's Error()."""
    for message in gold.errors + test.errors:
        report(line, message)
    result = SentenceResult(line, gold.length, 1 if gold.errors or test.errors else 0)
    if not test.words:
        result.status = 2
        return result
    unmatched = (f"Length unmatch ({len(gold.words)}|{len(test.words)})" if len(gold.words) != len(test.words)
                 else next((f"Words unmatch ({gw}|{tw})" for (gw, _), (tw, _) in zip(gold.words, test.words)
                            if not params.word_eq(gw, tw)), None))
    if unmatched:
        report(line, unmatched)
        result.status = 1
        return result
    gold_b, test_b = _scored(gold, params), _scored(test, params)
    # each gold bracket takes the first unused test bracket with its span and label
    used = [False] * len(test_b)
    match = 0
    for gs, ge, gl in gold_b:
        for j, (ts, te, tl) in enumerate(test_b):
            if not used[j] and gs == ts and ge == te and (not params.labeled or params.label_eq(gl, tl)):
                used[j] = True
                match += 1
                break
    crossing = sum(1 for ts, te, _ in test_b
                   if any((gs < ts < ge < te) or (ts < gs < te < ge) for gs, ge, _ in gold_b))
    tags = sum(1 for (_, gt), (_, tt) in zip(gold.words, test.words) if params.label_eq(gt, tt))
    result.words, result.gold, result.test = len(gold.words), len(gold_b), len(test_b)
    result.match, result.crossing, result.correct_tags = match, crossing, tags
    return result


@dataclass
class Totals:
    sentences: int = 0
    errors: int = 0
    skipped: int = 0
    gold: int = 0
    test: int = 0
    match: int = 0
    complete: int = 0
    words: int = 0
    crossing: int = 0
    no_crossing: int = 0
    two_or_less: int = 0
    correct_tags: int = 0

    def add(self, r: SentenceResult):
        self.sentences += 1
        if r.status == 1:
            self.errors += 1
        elif r.status == 2:
            self.skipped += 1
        else:
            for name in ("gold", "test", "match", "words", "crossing", "correct_tags"):
                setattr(self, name, getattr(self, name) + getattr(r, name))
            self.complete += r.gold == r.test == r.match
            self.no_crossing += r.crossing == 0
            self.two_or_less += r.crossing <= 2

    def summary(self) -> Dict[str, float]:
        valid = self.sentences - self.errors - self.skipped
        recall = 100.0 * self.match / self.gold if self.gold > 0 else 0.0
        precision = 100.0 * self.match / self.test if self.test > 0 else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else float("nan")
        return {
            "sentences": self.sentences, "error_sentences": self.errors, "skip_sentences": self.skipped,
            "valid_sentences": valid, "recall": recall, "precision": precision, "f1": f1,
            "complete_match": 100.0 * self.complete / valid if valid > 0 else 0.0,
            "average_crossing": 1.0 * self.crossing / valid if valid > 0 else 0.0,
            "no_crossing": 100.0 * self.no_crossing / valid if valid > 0 else 0.0,
            "two_or_less_crossing": 100.0 * self.two_or_less / valid if valid > 0 else 0.0,
            "tagging_accuracy": 100.0 * self.correct_tags / self.words if self.words > 0 else 0.0,
        }


# The summary's lines: (text before '=', key in Totals.summary(), integer?)
SUMMARY_LINES = [
    ("Number of sentence        ", "sentences", True),
    ("Number of Error sentence  ", "error_sentences", True),
    ("Number of Skip  sentence  ", "skip_sentences", True),
    ("Number of Valid sentence  ", "valid_sentences", True),
    ("Bracketing Recall         ", "recall", False),
    ("Bracketing Precision      ", "precision", False),
    ("Bracketing FMeasure       ", "f1", False),
    ("Complete match            ", "complete_match", False),
    ("Average crossing          ", "average_crossing", False),
    ("No crossing               ", "no_crossing", False),
    ("2 or less crossing        ", "two_or_less_crossing", False),
    ("Tagging accuracy          ", "tagging_accuracy", False),
]


def _num(value: float) -> str:
    if value != value:  # NaN: 0/0 F-measure, printed by C as -nan
        return "  -nan"
    return "%6.2f" % value


def format_summary(all_: Totals, short: Totals, cutoff: int) -> str:
    out = ["=== Summary ==="]
    for title, totals in (("-- All --", all_), (f"-- len<={cutoff} --", short)):
        values = totals.summary()
        out += ["", title]
        for text, key, integer in SUMMARY_LINES:
            out.append(f"{text}= " + ("%6d" % values[key] if integer else _num(values[key])))
    return "\n".join(out) + "\n"


HEADER = ("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
          " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
          + "=" * 76 + "\n")


def evaluate(gold_lines: List[str], test_lines: List[str], params: Params = COLLINS, out=None, err=None):
    """Score ``test_lines`` against ``gold_lines``; write EVALB's report to ``out`` and its error messages to
    ``err`` (text streams, or None); return ``(all_totals, short_totals, per_sentence_results)``. Raises
    TooManyErrors where EVALB gives up (after MAX_ERROR + 1 errors)."""
    count = [0]

    def report(line, message):
        if err is not None:
            err.write(f"{line} : {message}\n")
        count[0] += 1
        if count[0] - 1 > params.max_error:
            if out is not None:
                out.flush()
            raise TooManyErrors(f"gave up after {count[0]} errors, as EVALB does with MAX_ERROR "
                                f"{params.max_error} (-e N allows more)")

    all_, short, results = Totals(), Totals(), []
    if out is not None:
        out.write(HEADER)
    for i, gold_line in enumerate(gold_lines):
        line = i + 1
        gold = read_tree(gold_line, params)
        if i >= len(test_lines):
            for message in gold.errors:
                report(line, message)
            report(line, "Number of lines unmatch (too many lines in gold file)")
            break
        r = score_sentence(gold, read_tree(test_lines[i], params), params, line, report)
        results.append(r)
        all_.add(r)
        if r.length <= params.cutoff_len:
            short.add(r)
        if out is not None:
            out.write(r.row() + "\n")
    else:
        if len(test_lines) > len(gold_lines):
            report(len(gold_lines) + 1, "Number of lines unmatch (too many lines in test file)")
    if out is not None:
        out.write("=" * 76 + "\n")
        s = all_.summary()
        if all_.gold > 0 and all_.test > 0:
            out.write("                %6.2f %6.2f %6d %5d %5d  %5d" % (
                s["recall"], s["precision"], all_.match, all_.gold, all_.test, all_.crossing))
        out.write("  %5d %5d   %6.2f\n" % (all_.words, all_.correct_tags, s["tagging_accuracy"]))
        out.write(format_summary(all_, short, params.cutoff_len))
    return all_, short, results


# --------------------------------------------------------------------------- reading a report
_KEYS = {text.strip(): key for text, key, _ in SUMMARY_LINES}


def parse_summary(text: str) -> Dict[str, Dict[str, float]]:
    """The ``=== Summary ===`` block of an EVALB report (this script's or the
    official program's) as ``{"all": {...}, "len<=40": {...}}`` with the keys of
    :func:`Totals.summary` (``f1``, ``recall``, ...); NaN where EVALB prints nan."""
    if "=== Summary ===" not in text:
        raise ValueError("no '=== Summary ===' block in the EVALB output")
    sections, current = {}, None
    for line in text.split("=== Summary ===", 1)[1].splitlines():
        line = line.strip()
        if line.startswith("-- ") and line.endswith(" --"):
            name = line[3:-3].strip()
            current = sections.setdefault("all" if name == "All" else name, {})
        elif current is not None and "=" in line:
            name, value = (s.strip() for s in line.split("=", 1))
            if name in _KEYS:
                value = value.split()[0] if value.split() else "nan"
                try:
                    number = float(value)
                except ValueError:
                    number = float("nan")
                current[_KEYS[name]] = int(number) if number == number and name.startswith("Number") else number
    if "all" not in sections:
        raise ValueError("no '-- All --' section in the EVALB output")
    return sections


# --------------------------------------------------------------------------- command line
def _read_lines(path: str, what: str, errors: str) -> List[str]:
    """The lines of a file under attn_kit.textio's policy; a file that cannot be opened is one error."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise UserError(f"cannot read the {what} file {path}: {exc.strerror}") from None
    with f:
        return read_lines(f, path, errors)


def run_official(binary: str, params_text: str, args) -> int:
    """Run EVALB itself with the same parameters (main has read both files); its output is ours."""
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise UserError(f"--evalb {binary}: not an executable file (build EVALB with 'make' in its folder; "
                        "https://nlp.cs.nyu.edu/evalb/)")
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".prm", delete=False) as prm:
        prm.write(params_text)
    try:
        cmd = [binary, "-p", prm.name]
        for flag, value in (("-e", args.max_error), ("-c", args.cutoff)):
            if value is not None:
                cmd += [flag, str(value)]
        sys.stdout.flush()
        return subprocess.call(cmd + [args.gold, args.test])
    finally:
        os.unlink(prm.name)


def main(argv=None) -> int:
    p = ArgumentParser(
        prog="python scripts/evalb.py", description=__doc__.split("\n\n")[0],
        epilog="Output: EVALB's report (per-sentence lines, then '=== Summary ===').")
    p.add_argument("gold", help="gold trees, one per line")
    p.add_argument("test", help="parser output, one tree per line, in the same order")
    p.add_argument("-p", dest="prm", help="EVALB parameter file (default: COLLINS.prm's settings)")
    p.add_argument("-e", dest="max_error", type=Number(int, minimum=0),
                   help="number of errors to give up at (default: the parameter file's MAX_ERROR, 10 in COLLINS.prm)")
    p.add_argument("-c", dest="cutoff", type=Number(int, minimum=1),
                   help="length cut-off of the second section (default 40)")
    options.add(p, "evalb", "with the same parameters, instead of this module", type=str)
    add_errors_option(p)
    args = p.parse_args(argv)
    gold, test = _read_lines(args.gold, "gold", args.errors), _read_lines(args.test, "test", args.errors)
    if not gold:
        raise UserError(f"{args.gold}: no trees (an empty file scores nothing)")
    params_text = ("".join(line + "\n" for line in _read_lines(args.prm, "parameter", args.errors)) if args.prm
                   else COLLINS_PRM)
    params = parse_params(params_text, args.prm or "COLLINS.prm")
    if args.evalb:
        return run_official(args.evalb, params_text, args)
    if args.max_error is not None:
        params.max_error = args.max_error
    if args.cutoff is not None:
        params.cutoff_len = args.cutoff
    out = open(sys.stdout.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    err = open(sys.stderr.fileno(), "w", encoding="utf-8", newline="\n", closefd=False)
    try:
        try:
            evaluate(gold, test, params, out, err)  # TooManyErrors: one error line after EVALB's messages
        finally:
            out.flush()
            err.flush()
    except BrokenPipeError:
        return 1  # the reader went away (evalb.py ... | head): exit 1 without a message
    if all(read_tree(line, params).errors for line in gold):  # EVALB scores no sentence whose gold tree it
        # cannot read, and exits 0 having scored none: its report, then an error
        raise UserError(f"{args.gold}: no line is a tree EVALB reads (line 1: {read_tree(gold[0], params).errors[0]}), "
                        "so nothing was scored: the gold file holds one bracketed tree per line, e.g. "
                        "(TOP (S (NP (DT The) (NN cat)) (VP (VBZ sits))))")
    if len(gold) != len(test):  # EVALB scores the lines both files have and exits 0: its report, then an error
        raise UserError(f"{args.test} has {len(test)} lines, {args.gold} {len(gold)}: the report above scores the "
                        "first only; the parser's output must have one line per gold tree, in the same order")
    return 0


if __name__ == "__main__":  # python -m attn_kit.metrics.evalb: what the parsing recipe runs
    from ..cli import main_guard

    main_guard(main)

"""Tokenized BLEU as Moses' multi-bleu.perl computes and prints it, with the compound split
the paper, tensor2tensor and fairseq apply for EN-DE; --protocol t2t scores raw text as the
paper's EN-DE numbers were made (tensor2tensor's get_ende_bleu.sh of 2017). The n-gram
statistics come from sacreBLEU; inputs follow the one text policy (attn_kit.textio).

    python scripts/score_bleu.py --hyp gen.tok.de --ref newstest2014.tok.de --compound-split
    python scripts/score_bleu.py --protocol t2t --hyp out.detok.de --ref newstest2014.de

Where this differs from multi-bleu.perl (inputs a WMT test set never has): docs/wmt14.md.
"""
import argparse
import functools
import math
import re
import string
import sys
from dataclasses import dataclass
from typing import List, Sequence, Tuple, Union

from attn_kit.cli import ArgumentParser, UserError
from attn_kit.textio import add_errors_option, iter_lines

MAX_ORDER = 4

_PERL_SPACE = re.compile(r"[ \t\n\r\f\v]+")  # perl's \s on the bytes multi-bleu.perl reads: ASCII only
# On bytes, as perl -ple reads them: \S is any byte but [ \t\n\r\f\v]; "è" is two ("\xc3\xa8").
_COMPOUND = re.compile(rb"(\S)-(\S)")
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


class ScoreError(UserError, ValueError):
    """Input that cannot be scored; the message says why (the command line adds which file)."""


def compound_split(line: str) -> str:
    """Split hyphenated compounds the way the paper / t2t / fairseq do for EN-DE.

    On the UTF-8 bytes like the perl one-liner: "a-b-c" gives "a ##AT##-##AT## b-c" but "é-è-ê" gives
    "é ##AT##-##AT## è ##AT##-##AT## ê" (the first match consumes only the first byte of "è"). Spaces are only
    inserted next to the ASCII "-", never inside a character."""
    data = _COMPOUND.sub(rb"\1 ##AT##-##AT## \2", line.encode("utf-8", "surrogateescape"))
    return data.decode("utf-8", "surrogateescape")


def words(line: str, lowercase: bool = False) -> List[str]:
    """The words multi-bleu.perl sees in ``line``."""
    if lowercase:
        line = line.translate(_ASCII_LOWER)
    return [w for w in _PERL_SPACE.split(line) if w]


@dataclass(frozen=True)
class MultiBleuResult:
    """Corpus statistics and the numbers multi-bleu.perl derives from them, by its floating-point operations,
    not sacreBLEU's: perl computes 100 * (c / t), sacreBLEU 100 * c / t, and the last bit can change a printed
    digit (23/80: perl prints 28.7, 100 * 23 / 80 = 28.75 prints 28.8)."""

    counts: Tuple[int, ...]  # clipped n-gram matches, n = 1..4
    totals: Tuple[int, ...]  # hypothesis n-grams, n = 1..4
    hyp_len: int
    ref_len: int

    @property
    def fractions(self) -> List[float]:
        return [c / t if t else 0.0 for c, t in zip(self.counts, self.totals)]

    @property
    def precisions(self) -> List[float]:
        """n-gram precisions in percent (multi-bleu.perl computes 100 * (c / t))."""
        return [100 * p for p in self.fractions]

    @property
    def bp(self) -> float:
        if self.hyp_len >= self.ref_len:
            return 1.0
        return math.exp(1 - self.ref_len / self.hyp_len) if self.hyp_len else 0.0

    @property
    def ratio(self) -> float:
        return self.hyp_len / self.ref_len

    @property
    def score(self) -> float:
        """BLEU in percent, same floating-point operations as multi-bleu.perl."""
        p1, p2, p3, p4 = self.fractions
        if not (p1 and p2 and p3 and p4):
            return 0.0  # perl: exp(-9999999999 / 4 + ...) == 0.0
        return 100 * (self.bp * math.exp((math.log(p1) + math.log(p2) + math.log(p3) + math.log(p4)) / 4))

    def format(self) -> str:
        """The line multi-bleu.perl prints."""
        return ("BLEU = %.2f, %.1f/%.1f/%.1f/%.1f (BP=%.3f, ratio=%.3f, hyp_len=%d, ref_len=%d)"
                % (self.score, *self.precisions, self.bp, self.ratio, self.hyp_len, self.ref_len))

    __str__ = format


def _as_streams(refs) -> List[Sequence[str]]:
    if isinstance(refs, str):
        raise TypeError("refs must be a list of reference lines (or a list of such lists), not a str")
    if len(refs) and not isinstance(refs[0], str):
        return [list(stream) for stream in refs]
    return [refs]


def multi_bleu(hyps: Sequence[str], refs: Union[Sequence[str], Sequence[Sequence[str]]],
               lowercase: bool = False) -> MultiBleuResult:
    """Corpus BLEU of ``hyps`` against ``refs`` as multi-bleu.perl [-lc] computes it. ``refs``: one reference
    line per hypothesis, or a list of such streams for several references; lines may keep their newline."""
    from sacrebleu.metrics import BLEU

    streams = _as_streams(refs)
    for i, stream in enumerate(streams):
        if len(stream) != len(hyps):
            raise ScoreError(f"{len(hyps)} hypotheses but {len(stream)} lines in reference {i + 1}")
    hyp_words = [words(h, lowercase) for h in hyps]
    ref_words = [[words(r, lowercase) for r in stream] for stream in streams]
    # sacreBLEU's str.split() also breaks at non-ASCII spaces (no-break space, U+2009, ...), part of a word for
    # multi-bleu.perl: should a word hold one, sacreBLEU gets word ids instead (the same n-gram counts).
    odd = any(w.split() != [w] for line in hyp_words + [r for s in ref_words for r in s] for w in line)
    ids = {}

    def join(ws: List[str]) -> str:
        return " ".join(str(ids.setdefault(w, len(ids))) for w in ws) if odd else " ".join(ws)

    hyp_text = [join(w) for w in hyp_words]
    ref_text = [[join(w) for w in stream] for stream in ref_words]
    ref_len = 0
    if hyps:
        stats = BLEU(tokenize="none", smooth_method="none", force=True, max_ngram_order=MAX_ORDER
                     ).corpus_score(hyp_text, ref_text)
        counts, totals, hyp_len, ref_len = stats.counts, stats.totals, stats.sys_len, stats.ref_len
    if ref_len == 0:
        raise ScoreError("no reference words (ref_len=0); multi-bleu.perl gives no score for that either")
    return MultiBleuResult(tuple(int(c) for c in counts), tuple(int(t) for t in totals), int(hyp_len),
                           int(ref_len))


# ------------------------------------------------------------------- the paper's protocol: t2t's get_ende_bleu.sh
# get_ende_bleu.sh of the paper's time (2017: tokenizer.perl, compound split, multi-bleu.perl) and of 2018-04-05
# on (replace-unicode-punctuation.perl first). Its Moses scripts as of that day (Moses ae7aa6a9d); not followed:
# tokenizer.perl's "split final dots unconditionally" (2018-11-07, 9fc964da7; sacremoses has the older rule too)
# and replace-unicode-punctuation.perl's "１" -> "1" (2019-10-14, 5d3331b92; before it "１" became '"').
T2T_VERSIONS = ("2017", "2018")
T2T_PROTOCOLS = {"t2t": "2017", "t2t-2018": "2018"}  # score_bleu.py --protocol
T2T_LANGS = ("de", "fr")

# replace-unicode-punctuation.perl's substitutions, in its order. It reads bytes and ignores its arguments
# (get_ende_bleu.sh's "-l de"); each pattern is a whole UTF-8 sequence, so on text it is the same replacement.
# "。 *" and "． *" also swallow the ASCII spaces after the full stop.
_UNICODE_PUNCT = [
    ("，", ","), ("。 *", ". "), ("、", ","), ("”", '"'), ("“", '"'), ("∶", ":"), ("：", ":"), ("？", "?"),
    ("《", '"'), ("》", '"'), ("）", ")"), ("！", "!"), ("（", "("), ("；", ";"),
    ("１", '"'),  # sic: the 2018 script's typo (fixed to "1" in 2019, see above)
    ("」", '"'), ("「", '"'), ("０", "0"), ("３", "3"), ("２", "2"), ("５", "5"), ("６", "6"), ("９", "9"),
    ("７", "7"), ("８", "8"), ("４", "4"), ("． *", ". "), ("～", "~"), ("’", "'"), ("…", "..."), ("━", "-"),
    ("〈", "<"), ("〉", ">"), ("【", "["), ("】", "]"), ("％", "%"),
]
_UNICODE_PUNCT_RE = [(re.compile(pattern), repl) for pattern, repl in _UNICODE_PUNCT]

# tokenizer.perl reads UTF-8, so its \s is perl's Unicode \s; Python's \s (sacremoses') has four more, the
# ASCII separators \x1c-\x1f, which perl's "ASCII junk" rule deletes.
_PERL_USPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_PERL_BLANK_LINE = re.compile(f"[{_PERL_USPACE}]*")
_PY_ONLY_SPACE = re.compile("[\x1c-\x1f]")


def replace_unicode_punctuation(line: str) -> str:
    """Moses' replace-unicode-punctuation.perl on one line: full-width and CJK punctuation, the curly double quotes
    “ ” and ’ to ASCII; „ ‚ ‘ « » – — stay (the tokenizer then treats them as symbols of their own)."""
    for pattern, repl in _UNICODE_PUNCT_RE:
        line = pattern.sub(repl, line)
    return line


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang: str):
    """sacremoses' MosesTokenizer, patched where it differs from tokenizer.perl (one per language)."""
    from sacremoses import MosesTokenizer
    from sacremoses.corpus import Perluniprops
    from sacremoses.indic import NUKTAS, VIRAMAS

    class PerlMosesTokenizer(MosesTokenizer):
        # sacremoses 0.2 rewrote perl's multi-dot loop as one pass, which differs where the input itself holds
        # "DOTMULTI" ("DOTMULTI.x": perl ".. x", sacremoses "..x"). Perl's loop it is.
        def replace_multidots(self, text):
            text = re.sub(r"\.([\.]+)", r" DOTMULTI\1", text)
            while "DOTMULTI." in text:
                text = re.sub(r"DOTMULTI\.([^\.])", r"DOTDOTMULTI \1", text)
                text = text.replace("DOTMULTI.", "DOTDOTMULTI")
            return text

        def restore_multidots(self, text):
            while "DOTDOTMULTI" in text:
                text = text.replace("DOTDOTMULTI", "DOTMULTI.")
            return text.replace("DOTMULTI", ".")

    tok = PerlMosesTokenizer(lang=lang)
    # sacremoses counts Indic viramas and nuktas as alphanumeric ("क्ष" stays one word); perl's \p{IsAlnum} does
    # not and pads them as symbols ("क ् ष"): padding them beforehand gives perl's result.
    alnum = set(Perluniprops().chars("IsAlnum"))
    marks = "".join(sorted(set(VIRAMAS + NUKTAS) - alnum))
    tok.perl_pad_marks = re.compile(f"[{re.escape(marks)}]") if marks else None
    return tok


def t2t_tokenize(line: str, lang: str = "de", version: str = "2017") -> str:
    """(``version`` "2018": replace-unicode-punctuation.perl, then) tokenizer.perl -l ``lang`` with its defaults:
    escaping on (& < > ' " | [ ] become &amp; &lt; &gt; &apos; &quot; &#124; &#91; &#93;), no -a (a hyphen between
    letters stays inside the word), the final-dot rule of 2018 (a word ending in "." keeps it when it is a
    nonbreaking prefix, e.g. German "24." or "Mio.", even at the end of a line).

    sacremoses' port of tokenizer.perl, patched where it differs from the perl: a line empty or only (Unicode)
    whitespace comes back unchanged (/^\\s*$/: a no-break space alone stays a word for multi-bleu.perl);
    \\x1c-\\x1f are deleted, not spaces; Indic viramas/nuktas are split off; "DOTMULTI" follows perl's loop.
    Checked 1:1 against the perl scripts on newstest2013/2014 de and fr (tests/test_score_bleu.py); other
    languages are refused (tokenizer.perl has rules of its own for some, fi, sv, ga, ..., that sacremoses lacks)."""
    if lang not in T2T_LANGS:
        raise ScoreError(f"--protocol t2t supports -l {' or '.join(T2T_LANGS)}, not {lang!r}")
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        # perl (5.36) stops on malformed UTF-8 ("Malformed UTF-8 character (fatal)")
        raise ScoreError(f"not valid UTF-8: {line.encode('utf-8', 'surrogateescape')[:80]!r}") from None
    if version not in T2T_VERSIONS:
        raise ScoreError(f"get_ende_bleu.sh versions: {', '.join(T2T_VERSIONS)}, not {version!r}")
    text = replace_unicode_punctuation(line) if version == "2018" else line
    if _PERL_BLANK_LINE.fullmatch(text):
        return text  # tokenizer.perl: if (/^\s*$/) { print $_ } (no tokenizing, no trimming)
    tok = _moses_tokenizer(lang)
    text = _PY_ONLY_SPACE.sub("", text)
    if tok.perl_pad_marks is not None:
        text = tok.perl_pad_marks.sub(r" \g<0> ", text)
    return tok.tokenize(text, aggressive_dash_splits=False, escape=True, return_str=True)


# What the 2018 get_ende_bleu.sh normalizes, as results files state it (lab.readme_tables tells
# the scores filed before this was right, with the reference normalized too, by its absence).
T2T_2018_NORMALIZES = "replace-unicode-punctuation on the translations only (its reference is pre-tokenized)"


class SideError(ScoreError):
    """A ScoreError of one side of :func:`t2t_sides`: ``side`` 0 the hypotheses, i >= 1 the i-th reference."""

    def __init__(self, message: str, side: int):
        super().__init__(message)
        self.side = side


def t2t_sides(hyps: Sequence[str], refs: Union[Sequence[str], Sequence[Sequence[str]]], lang: str = "de",
              compound_split: Union[bool, None] = None, version: str = "2017") -> Tuple[List[str], List[List[str]]]:
    """Raw ``hyps`` and ``refs`` (as for :func:`multi_bleu`) as tensor2tensor's get_ende_bleu.sh hands them to
    multi-bleu.perl: :func:`t2t_tokenize`, then the compound split (``compound_split``: None = German only).
    ``version`` "2018" normalizes the hypotheses only: the script reads its reference already tokenized
    (newstest2013.tok.de, made without the step). The one rule for the recipes and score_bleu.py; a SideError
    names the side it is about."""
    if version not in T2T_VERSIONS:
        raise ScoreError(f"get_ende_bleu.sh versions: {', '.join(T2T_VERSIONS)}, not {version!r}")
    if compound_split is None:
        compound_split = lang == "de"
    sides = [(hyps, version)] + [(stream, "2017") for stream in _as_streams(refs)]  # 2017: no normalization
    out = []
    for i, (lines, steps) in enumerate(sides):
        try:
            tokens = [t2t_tokenize(line, lang, steps) for line in lines]
        except ScoreError as e:
            raise SideError(str(e), i) from None
        out.append([_split_compounds(line) for line in tokens] if compound_split else tokens)
    return out[0], out[1:]


def t2t_bleu(hyps: Sequence[str], refs: Union[Sequence[str], Sequence[Sequence[str]]], lang: str = "de",
             compound_split: Union[bool, None] = None, version: str = "2017") -> MultiBleuResult:
    """BLEU of raw ``hyps`` against raw ``refs`` as tensor2tensor's get_ende_bleu.sh computes it (``version``
    "2017": the paper's Table 2 for EN-DE; "2018": normalized hypotheses): :func:`t2t_sides`, then multi-bleu.perl.
    Returns multi_bleu's result: ``.score``, ``.format()`` = multi-bleu.perl's line."""
    return multi_bleu(*t2t_sides(hyps, refs, lang, compound_split, version))


_split_compounds = compound_split  # t2t_bleu's argument of that name hides the function


def read_lines(path: str, errors: str = "strict") -> List[str]:
    """The lines of ``path`` ("-": stdin) under attn_kit.textio's policy (``errors``: its --errors): ending at LF,
    CRLF or CR only; an OSError if the file cannot be opened."""
    if path == "-":
        return list(iter_lines(sys.stdin.buffer, "stdin", errors))
    with open(path, "rb") as f:
        return list(iter_lines(f, str(path), errors))


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def main(argv=None) -> int:
    parser = ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--protocol", choices=["tokenized", *T2T_PROTOCOLS], default="tokenized",
                        help="tokenized (default): the files are tokenized already; t2t: the files are raw text, "
                             "scored as tensor2tensor's get_ende_bleu.sh of 2017 (the paper's EN-DE protocol); "
                             "t2t-2018: the same script from 2018-04-05 on (replace-unicode-punctuation.perl on "
                             "the hypotheses first; the reference is tokenized without it, as the script's was)")
    parser.add_argument("-l", "--lang", default="de", choices=T2T_LANGS,
                        help="--protocol t2t: the Moses tokenizer's language (default de; fr for EN-FR)")
    parser.add_argument("--hyp", required=True, metavar="H", help="hypotheses, one a line ('-': stdin)")
    parser.add_argument("--ref", required=True, nargs="+", action="extend", metavar="R",
                        help="reference(s), one a line; several files = several references")
    parser.add_argument("--compound-split", action="store_true", default=None,
                        help="split hyphenated compounds (a-b -> a ##AT##-##AT## b) in hyp and ref, as for EN-DE "
                             "(with --protocol t2t: the default for -l de)")
    parser.add_argument("--no-compound-split", dest="compound_split", action="store_false",
                        help="no compound split (--protocol t2t: the default for -l fr)")
    parser.add_argument("--lowercase", "-lc", action="store_true", help="lowercase ASCII letters (multi-bleu.perl -lc)")
    add_errors_option(parser)
    args = parser.parse_args(argv)

    texts = {}
    for role, path in [("hypothesis", args.hyp)] + [("reference", r) for r in args.ref]:
        try:
            texts[path] = read_lines(path, args.errors)
        except OSError as e:
            raise UserError(f"cannot read {role} file {path}: {e.strerror or e}") from None
    hyps = texts[args.hyp]
    refs = [texts[r] for r in args.ref]
    for path, stream in zip(args.ref, refs):
        if len(stream) != len(hyps):
            hyp_name = "stdin" if args.hyp == "-" else args.hyp
            raise UserError(f"hypothesis file {hyp_name} has {_lines(len(hyps))} but reference file {path} has "
                            f"{_lines(len(stream))}")
    if args.protocol in T2T_PROTOCOLS:  # the recipes' function: the same rule for each side
        try:
            hyps, refs = t2t_sides(hyps, refs, args.lang, args.compound_split, T2T_PROTOCOLS[args.protocol])
        except SideError as e:
            path = args.hyp if e.side == 0 else args.ref[e.side - 1]
            raise UserError(f"{'hypothesis' if e.side == 0 else 'reference'} file "
                            f"{'stdin' if path == '-' else path}: {e}") from None
    elif args.compound_split:
        hyps = [compound_split(h) for h in hyps]
        refs = [[compound_split(r) for r in stream] for stream in refs]
    for path, stream in zip(args.ref, refs):
        empty = sum(1 for line in stream if not words(line))  # after tokenizing: what multi-bleu.perl reads
        if empty:
            print(f"warning: {empty} empty line(s) in reference file {path}, counted as length 0 "
                  f"(as multi-bleu.perl does)", file=sys.stderr)
    try:
        result = multi_bleu(hyps, refs, lowercase=args.lowercase)
    except ScoreError as e:
        raise UserError(f"reference file{'s' if len(args.ref) > 1 else ''} {', '.join(args.ref)}: {e}") from None
    print(result.format())
    return 0

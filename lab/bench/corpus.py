"""A synthetic parallel corpus whose word types grow like news text, for the data-preparation
benchmark (lab.bench.data_prep): real sentence shapes with words drawn from wordfreq's
Zipfian lists (:func:`generate`), and the type/token check that says how alike it is to real
text (:func:`type_growth`, :func:`heaps_fit`: Heaps' law, V = K * n^beta, in the results file);
a corpus of repeated sentences would make BPE learning cheap."""
import math
import re
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from attn_kit.cli import UserError
from attn_kit.planning.prep_cost import fit_power

# a chunk: leading punctuation, the word, trailing punctuation
_CHUNK = re.compile(r"^(\W*)(.*?)(\W*)$", re.S)
_LETTERS = re.compile(r"[^\W\d_]")
_KEEP = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # a wordfreq entry used as a word
_TOKEN = re.compile(r"\w+")  # a token for the type/token counts (the same for every corpus compared)
BATCH = 4096  # pairs drawn per batch of random numbers
DOCUMENT = 16  # sentences of a "document", within which a word may be used again (BURSTINESS)
# The probability that a word repeats an earlier word of its document, per language: set so that the
# corpus has as many types as newstest2013+2014 after as many tokens (~115K; the results file's check)
BURSTINESS = {"en": 0.6, "de": 0.45, "fr": 0.53}


@dataclass
class Vocabulary:
    """A language's unigram distribution: ``words`` with probabilities ``probs`` (summing to
    1 - ``tail``), and ``tail``, the probability that a word is a compound of two drawn words;
    ``burstiness``: the probability that a word repeats an earlier word of its document instead."""

    words: List[str]
    probs: np.ndarray
    tail: float
    burstiness: float = 0.0

    def __post_init__(self):
        self.probs = np.asarray(self.probs, dtype=np.float64)
        self._cdf = np.cumsum(self.probs / self.probs.sum())
        self._cdf[-1] = 1.0

    def draw(self, rng: np.random.Generator, n: int) -> List[str]:
        """``n`` words: list words by their frequency, a compound of two with probability ``tail``."""
        first = np.searchsorted(self._cdf, rng.random(n), side="right")
        novel = rng.random(n) < self.tail
        second = np.searchsorted(self._cdf, rng.random(n), side="right")
        words = self.words
        return [words[a] + words[b] if c else words[a] for a, b, c in zip(first.tolist(), second.tolist(),
                                                                          novel.tolist())]


def wordfreq_vocabulary(lang: str) -> Vocabulary:
    """``lang``'s distribution from wordfreq's ``large`` list (``pip install wordfreq``)."""
    try:
        import wordfreq
    except ImportError:
        raise UserError("the benchmark's corpus draws words from wordfreq's lists: .venv/bin/pip install wordfreq "
                        "(it is not needed for anything else)") from None
    freqs = wordfreq.get_frequency_dict(lang, "large")
    total = sum(freqs.values())
    kept = [(w, f) for w, f in freqs.items() if _KEEP.fullmatch(w)]
    return Vocabulary([w for w, _ in kept], np.array([f for _, f in kept]), tail=max(0.0, 1.0 - total),
                      burstiness=BURSTINESS.get(lang, 0.0))


def version_of(package: str) -> Optional[str]:
    """The installed version of ``package``, or None."""
    try:
        return version(package)
    except Exception:
        return None


# A shape: per chunk (kind, lead, word, trail): kind "w" (a word: replaced, case kept), "d" (digits
# replaced), "k" (kept as it is: punctuation only)
Shape = List[Tuple[str, str, str, str]]


def parse_shape(line: str) -> Shape:
    shape = []
    for chunk in line.split():
        lead, core, trail = _CHUNK.match(chunk).groups()
        if _LETTERS.search(core):
            shape.append(("w", lead, core, trail))
        elif any(c.isdigit() for c in core):
            shape.append(("d", lead, core, trail))
        else:
            shape.append(("k", chunk, "", ""))
    return shape


def _case(word: str, like: str) -> str:
    if len(like) > 1 and like.isupper():
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


_DIGIT = re.compile(r"\d")


def _fill(shape: Shape, words: Iterator[str], digits: Iterator[int]) -> str:
    out = []
    for kind, lead, core, trail in shape:
        if kind == "w":
            out.append(lead + _case(next(words), core) + trail)
        elif kind == "d":
            out.append(lead + _DIGIT.sub(lambda m: str(next(digits)), core) + trail)
        else:
            out.append(lead)
    return " ".join(out)


def read_shapes(src: Path, tgt: Path) -> List[Tuple[Shape, Shape]]:
    """The sentence pairs of two line-aligned text files, parsed; pairs with an empty side are left out."""
    with open(src, encoding="utf-8") as fs, open(tgt, encoding="utf-8") as ft:
        pairs = [(parse_shape(s), parse_shape(t)) for s, t in zip(fs, ft)]
    return [(s, t) for s, t in pairs if s and t]


def generate(shapes: Sequence[Tuple[Shape, Shape]], vocab: Tuple[Vocabulary, Vocabulary], n: int,
             seed: int, long_share: float = 0.0, noise: float = 0.0) -> Iterator[Tuple[str, str]]:
    """``n`` synthetic (source, target) sentences; deterministic in ``seed``. Each pair:

    1. **Shape.** A real sentence pair drawn (uniformly, with replacement) from the shape text (newstest2013+2014
       EN-DE, 6003 pairs; ``--shapes``) keeps its whitespace chunks: lengths, punctuation, capitals and numbers.
    2. **Words.** Each chunk's word (without its punctuation) is replaced by a word drawn from the language's
       Zipfian unigram distribution, wordfreq's ``large`` list (en 321K, de 635K words, frequencies >= 1e-8; only
       words of letters with inner ``'`` or ``-`` kept), in the original's case pattern (Title, UPPER, lower).
    3. **The tail below the list.** With the mass below the list's cut-off (1 - its total), where real text keeps
       making new types, a word is a compound of two drawn words (``haus`` + ``tür`` -> ``haustür``), so new
       types keep appearing at every size, at a rate the distribution sets.
    4. **Topics.** In "documents" of 16 consecutive pairs, with a language's probability (:data:`BURSTINESS`) a
       word repeats a word of an earlier sentence of its document (same side), chosen uniformly; the values give
       as many types as newstest2013+2014 after as many tokens (see the results file).
    5. **Numbers.** Every digit is replaced by a random digit (numbers make types too).
    6. **Crawled text** (``long_share``, ``noise``; 0 leaves the corpus as it was): with probability
       ``long_share`` a pair is two drawn pairs joined (a paragraph the sentence splitter left whole); in such a
       pair each word is, with probability ``noise``, a random string no list holds (:func:`noise_word`).

    Source and target are drawn independently (no data stage looks at meaning; clean-corpus-n reads only the
    real lengths). One ``numpy.random.default_rng(seed)`` stream, read in a fixed order, makes the same corpus
    byte for byte from the same seed, shapes and wordfreq version; the first N pairs of a longer corpus are the
    corpus of N pairs."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n:  # whole batches, the last one cut: a corpus of N pairs is the first N of a longer one
        picks = rng.integers(0, len(shapes), size=BATCH).tolist()
        pairs = [shapes[i] for i in picks]
        joined = [False] * BATCH
        if long_share:  # drawn only then: a corpus without crawled text is the one it always was
            seconds = rng.integers(0, len(shapes), size=BATCH).tolist()
            joined = (rng.random(BATCH) < long_share).tolist()
            pairs = [(a[0] + shapes[j][0], a[1] + shapes[j][1]) if long else a
                     for a, j, long in zip(pairs, seconds, joined)]
        sides = []
        for side in (0, 1):
            chosen = [pair[side] for pair in pairs]
            counts = [sum(1 for c in shape if c[0] == "w") for shape in chosen]
            n_digits = sum(sum(ch.isdigit() for ch in c[2]) for shape in chosen for c in shape if c[0] == "d")
            words = vocab[side].draw(rng, sum(counts))
            repeat = (rng.random(len(words)) < vocab[side].burstiness).tolist()
            which = rng.random(len(words)).tolist()
            words = _repeat_within_documents(words, counts, repeat, which)
            if noise and long_share:
                words = _add_noise(words, counts, joined, rng, noise)
            digits = iter(rng.integers(0, 10, size=n_digits).tolist())
            words = iter(words)
            sides.append([_fill(shape, words, digits) for shape in chosen])
        yield from list(zip(*sides))[:n - done]
        done += BATCH


def _repeat_within_documents(words: List[str], counts: List[int], repeat: List[bool], which: List[float]):
    """``words`` (``counts`` per sentence) where a ``repeat`` word is replaced by a word of an earlier
    sentence of its document (:data:`DOCUMENT` sentences), chosen uniformly by ``which``: a topic's
    words recur (a document's first sentence repeats nothing)."""
    out, j = [], 0
    for start in range(0, len(counts), DOCUMENT):
        earlier = []
        for count in counts[start:start + DOCUMENT]:
            sentence = []
            for _ in range(count):
                sentence.append(earlier[int(which[j] * len(earlier))] if repeat[j] and earlier else words[j])
                j += 1
            earlier += sentence
            out += sentence
    return out


_NOISE_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789"


def noise_word(rng: np.random.Generator) -> str:
    """A string of 4 to 12 letters and digits: a new type nearly every time, as crawled noise is."""
    return "".join(_NOISE_CHARS[i] for i in rng.integers(0, len(_NOISE_CHARS), size=int(rng.integers(4, 13))))


def _add_noise(words: List[str], counts: List[int], joined: List[bool], rng: np.random.Generator,
               share: float) -> List[str]:
    """``words`` (``counts`` per sentence) where each word of a ``joined`` (long) sentence is, with
    probability ``share``, a :func:`noise_word`."""
    flags = (rng.random(len(words)) < share).tolist()
    out, j = [], 0
    for count, long in zip(counts, joined):
        for _ in range(count):
            out.append(noise_word(rng) if long and flags[j] else words[j])
            j += 1
    return out


def write_corpus(pairs: Iterable[Tuple[str, str]], src: Path, tgt: Path):
    with open(src, "w", encoding="utf-8") as fs, open(tgt, "w", encoding="utf-8") as ft:
        for s, t in pairs:
            fs.write(s + "\n")
            ft.write(t + "\n")


# ---------------------------------------------------------------------------------------------- type growth
CHECKPOINTS = [round(1000 * 10 ** (k / 4)) for k in range(25)]  # 4 log-spaced token counts a decade, 1000 to 10^9


def type_growth(lines: Iterable[str]) -> List[Tuple[int, int]]:
    """(tokens, distinct types) after each of :data:`CHECKPOINTS` tokens (``\\w+`` runs, case kept) of
    ``lines``, and at the end of the text."""
    seen, n, out, i = set(), 0, [], 0
    for line in lines:
        for token in _TOKEN.findall(line):
            seen.add(token)
            n += 1
            if i < len(CHECKPOINTS) and n == CHECKPOINTS[i]:
                out.append((n, len(seen)))
                i += 1
    if not out or out[-1][0] != n:
        out.append((n, len(seen)))
    return out


def heaps_fit(growth: Sequence[Tuple[int, int]], min_tokens: int = 1000) -> Dict[str, float]:
    """Heaps' law V = K * n^beta fitted by least squares to log V against log n (points from ``min_tokens`` on):
    ``{"K", "beta"}``."""
    fit = fit_power([(n, v) for n, v in growth if n >= min_tokens])
    return {"K": fit["a"], "beta": fit["b"]}


def types_at(growth: Sequence[Tuple[int, int]], tokens: int) -> Optional[float]:
    """Types after ``tokens`` tokens, interpolated in log space between the counted points."""
    for (n0, v0), (n1, v1) in zip(growth, growth[1:]):
        if n0 <= tokens <= n1:
            if n1 == n0:
                return float(v1)
            t = (math.log(tokens) - math.log(n0)) / (math.log(n1) - math.log(n0))
            return math.exp(math.log(v0) + t * (math.log(v1) - math.log(v0)))
    return None

"""Text preparation shared by the recipes, streamed line by line (a WMT corpus is never held in memory):
sacremoses' punctuation normalization and tokenization with ``-a``, as fairseq's WMT14 scripts run Moses, and
Moses' clean-corpus-n.perl rule (``-ratio 1.5 ... 1 250``); subword-nmt and fairseq-preprocess do BPE and
binarization. A user's corpus and the text the recipes tokenize are read under :mod:`attn_kit.textio`'s
policy; the WMT14 downloads keep their one-line-per-``\\n`` reading (:func:`concatenate`).
"""
import gzip
import itertools
import multiprocessing
import re
import signal
import tarfile
from functools import partial
from pathlib import Path
from typing import Iterable, Iterator, List, Tuple

from ..cli import UserError, atomic_output
from ..textio import iter_lines

# The recipes' Moses steps: punctuation normalization, then tokenization with -a
# (aggressive dash splits), without tokenizer.perl's HTML escaping.
MOSES_NORMALIZE, MOSES_ESCAPE, MOSES_DASH_SPLITS = True, False, True
CLEAN_MAX_LEN = 250  # clean-corpus-n's longest kept sentence, in tokens (fairseq's WMT scripts)
_MOSES = {}


def _moses_line(lang: str, line: str) -> str:
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    if lang not in _MOSES:
        _MOSES[lang] = (MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang))
    norm, tok = _MOSES[lang]
    line = line.strip()
    if MOSES_NORMALIZE:
        line = norm.normalize(line)
    return tok.tokenize(line, escape=MOSES_ESCAPE, aggressive_dash_splits=MOSES_DASH_SPLITS, return_str=True)


def moses_tokenizer_args() -> dict:
    """The same steps as the plugin's tokenizer ``attn_moses`` takes them (run cards): raw text at translation
    time is tokenized as the training text was."""
    return {"tokenizer": "attn_moses", "moses_no_normalize": not MOSES_NORMALIZE, "moses_escape": MOSES_ESCAPE,
            "moses_no_dash_splits": not MOSES_DASH_SPLITS}


def moses_tokenize(inp: Path, out: Path, lang: str, workers: int, progress=None):
    """Moses punctuation normalization and tokenization of ``inp`` (read under :mod:`attn_kit.textio`'s policy)
    into ``out`` through ``workers`` processes, in order; ``progress`` (a :class:`Progress`) hears the lines."""
    fn = partial(_moses_line, lang)
    fin = iter_lines(inp)
    n = 0
    with open(out, "w", encoding="utf-8") as fout:
        lines = ordered_map(fn, fin, workers, f"tokenizing {Path(inp).name}") if workers > 1 else map(fn, fin)
        for n, line in enumerate(lines, 1):
            fout.write(line + "\n")
            if progress and n % 1000 == 0:
                progress.update(n)
    if progress:
        progress.done = n
        progress.finish()


CHUNK = 2000  # lines a worker takes at a time


def _apply(fn, chunk):
    return [fn(line) for line in chunk]


def ordered_map(fn, items: Iterable, workers: int, what: str, chunk: int = CHUNK) -> Iterator:
    """``fn`` over ``items`` in ``workers`` forked processes, streamed in order, at most 2 x ``workers`` chunks
    in flight. A worker killed from outside (the out-of-memory killer) is one UserError naming ``what`` and the
    signal at once (Pool's ``imap`` would wait forever); on any error or signal the workers are stopped first."""
    import concurrent.futures as cf
    from collections import deque

    pool = cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"),
                                  initializer=_pool_worker)
    processes = {}
    pending = deque()
    source = iter(items)
    try:
        while True:
            while len(pending) < 2 * workers:
                block = list(itertools.islice(source, chunk))
                if not block:
                    break
                pending.append(pool.submit(_apply, fn, block))
                processes.update(pool._processes or {})  # to tell later how one ended
            if not pending:
                break
            try:
                yield from pending.popleft().result()
            except cf.process.BrokenProcessPool:
                raise UserError(f"{what}: {_killed(processes)}; finished stages are kept, run the same command "
                                "again to resume") from None
        pool.shutdown(wait=True)  # the workers exit on the end-of-work sentinel: no signal is needed
    except BaseException:
        for process in processes.values():  # Ctrl-C, SIGTERM or an error: stop the workers (SIGTERM)
            if process.exitcode is None:
                process.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
        raise


def _killed(processes: dict) -> str:
    """How the pool's workers ended, in words: "a worker process was killed by SIGKILL (...)"."""
    for process in processes.values():
        process.join(timeout=5)
    codes = [p.exitcode for p in processes.values() if p.exitcode not in (None, 0)]
    # a broken pool's executor ends the workers left with SIGTERM itself: another ending is the cause
    codes.sort(key=lambda code: code == -signal.SIGTERM)
    if codes and codes[0] < 0:
        name = signal.Signals(-codes[0]).name
        why = " (the kernel's out-of-memory killer sends it: is the machine short of memory?)" \
            if name == "SIGKILL" else ""
        return f"a worker process was killed by {name}{why}"
    return f"a worker process ended abruptly{f' (exit {codes[0]})' if codes else ''}"


def _pool_worker():
    """A tokenization worker's signals: SIGTERM's default action (the recipe's inherited handler could miss
    it and hang the run: it hung a CI run) and Ctrl-C ignored (the terminal sends it to the whole group: the
    recipe stops the pool)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


_SEG = re.compile(r"<seg[^>]*>(.*)</seg>", re.I)


def read_sgm(path: Path) -> List[str]:
    """The segments of a WMT ``.sgm`` file (``<seg id="N">text</seg>``) in order, as they are (not escaped)."""
    segs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = _SEG.search(line)
            if m:
                segs.append(" ".join(m.group(1).split()))
    if not segs:
        raise UserError(f"{path}: no <seg> lines; is this a WMT .sgm file?")
    return segs


# What an archive's members may unpack to at most, as a multiple of the archive's size: text compresses
# about 3-5 times under gzip (WMT's tgz archives, a .gz inside one); a damaged or hostile archive (a
# 310 KB gzip member that unpacks to 300 MB) stops there.
MAX_EXPANSION = 20


def extract_members(archive: Path, wanted: dict):
    """Copy the members of a tar archive that ``wanted`` maps to destination paths, .gz ones decompressed, in
    one pass to its end (a member there twice: its last copy, as tar does). A missing member, one that is not a
    plain file, and more than :data:`MAX_EXPANSION` times the archive's size are each one error naming it."""
    todo = dict(wanted)
    budget = MAX_EXPANSION * archive.stat().st_size + (1 << 20)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                name = member.name if member.name in wanted else member.name.lstrip("./")
                dest = wanted.get(name)
                if dest is None:
                    continue
                todo.pop(name, None)
                if not member.isfile():
                    raise UserError(f"{archive}: member {member.name} is not a file (a link, a device or a "
                                    "folder); is it the right archive?")
                src = tar.extractfile(member)
                if member.name.endswith(".gz"):
                    src = gzip.GzipFile(fileobj=src)
                tmp = Path(str(dest) + ".partial")
                with open(tmp, "wb") as out:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        budget -= len(block)
                        if budget < 0:
                            break
                        out.write(block)
                if budget < 0:
                    tmp.unlink()
                    raise UserError(f"{archive}: its members unpack to more than {MAX_EXPANSION} times its size "
                                    f"({member.name} stopped there, nothing of it kept): a damaged or wrong archive; "
                                    "delete it and run again to re-download")
                tmp.replace(dest)
    except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as exc:
        raise UserError(f"cannot read {archive}: {exc}; delete it and run again to re-download") from None
    if todo:
        raise UserError(f"{archive} has no member {next(iter(todo))}; is it the right archive?")


def copy_corpus(inp: Path, out: Path, errors: str = "strict") -> int:
    """A user's raw text file into ``out`` under :mod:`attn_kit.textio`'s policy (``errors``), whitespace
    normalized; return the number of lines. A NUL counts as a space (the tokenizer would delete it, joining
    two words)."""
    n = 0
    with open(out, "w", encoding="utf-8") as fout:
        for n, line in enumerate(iter_lines(inp, errors=errors), 1):
            fout.write(" ".join(line.replace("\x00", " ").split()) + "\n")
    return n


def concatenate(parts: Iterable[Path], out: Path) -> int:
    """Concatenate the WMT14 downloads into ``out``; return the number of lines. A line ends at ``\\n`` only,
    and a byte that is not UTF-8 is read as U+FFFD."""
    n = 0
    with open(out, "w", encoding="utf-8") as fout:
        for part in parts:
            with open(part, encoding="utf-8", errors="replace", newline="\n") as f:
                for line in f:
                    # Some corpora hold stray \r or \u2028 inside lines: keep one line per pair.
                    fout.write(" ".join(line.split()) + "\n")
                    n += 1
    return n


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))


def keep_pair(src_words: int, tgt_words: int, min_len=1, max_len=CLEAN_MAX_LEN, ratio=1.5) -> bool:
    """Moses clean-corpus-n.perl's rule: both sides have min_len..max_len words, neither ``ratio`` times longer."""
    if not (min_len <= src_words <= max_len and min_len <= tgt_words <= max_len):
        return False
    return src_words / tgt_words <= ratio and tgt_words / src_words <= ratio


def clean_parallel(src_in: Path, tgt_in: Path, src_out: Path, tgt_out: Path,
                   min_len=1, max_len=CLEAN_MAX_LEN, ratio=1.5) -> Tuple[int, int]:
    """Drop pairs failing :func:`keep_pair`; return (kept, read)."""
    kept = read = 0
    with open(src_in, encoding="utf-8") as fs, open(tgt_in, encoding="utf-8") as ft, \
            open(src_out, "w", encoding="utf-8") as os_, open(tgt_out, "w", encoding="utf-8") as ot:
        for s, t in zip_strict(fs, ft, src_in, tgt_in):
            read += 1
            s, t = " ".join(s.split()), " ".join(t.split())
            if keep_pair(len(s.split()), len(t.split()), min_len, max_len, ratio):
                os_.write(s + "\n")
                ot.write(t + "\n")
                kept += 1
    return kept, read


def zip_strict(a: Iterator[str], b: Iterator[str], name_a, name_b):
    """zip() that fails with one line when the two sides differ in length."""
    for n, pair in enumerate(itertools.zip_longest(a, b), 1):
        if pair[0] is None or pair[1] is None:
            raise UserError(f"{name_a} and {name_b} differ in length (first difference at line {n}); "
                            "the parallel corpus is damaged: delete it and rerun")
        yield pair


def write_lines(path: Path, lines: Iterable[str]):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def sample_pairs(src_in: Path, tgt_in: Path, src_out: Path, tgt_out: Path, n: int, seed: int = 1) -> Tuple[int, int]:
    """``n`` line pairs of ``src_in``/``tgt_in`` drawn uniformly without replacement (``seed``), written in
    their order to ``src_out``/``tgt_out`` (all of them if no more): (pairs written, pairs read); streamed."""
    import random

    total = count_lines(src_in)
    chosen = sorted(random.Random(seed).sample(range(total), n)) if n < total else range(total)
    with atomic_output(src_out) as s_tmp, atomic_output(tgt_out) as t_tmp:
        with open(src_in, "rb") as fs, open(tgt_in, "rb") as ft, open(s_tmp, "wb") as os_, open(t_tmp, "wb") as ot:
            want, i = iter(chosen), 0
            nxt = next(want, None)
            for i, (s, t) in enumerate(zip(fs, ft)):
                if i == nxt:
                    os_.write(s)
                    ot.write(t)
                    nxt = next(want, None)
                    if nxt is None:
                        break
    return min(n, total), total

"""The WMT14 recipes' extract stage and the size of its text, measured on this machine: how fast an archive is
checked (sha256) and unpacked and its text joined, and how much Moses tokenization grows a pair's text. The recipes'
--dry-run projects extraction time and disk from these rates (attn_kit.planning.prep_cost reads the results file).

Archives are built here in WMT14's two layouts from real news text (newstest2013+2014 of EN-DE and EN-FR, one
sentence a line, repeated to --mb): a .tgz whose wanted pair is a third of its text, the rest other languages, as in
Europarl's, Common Crawl's, News Commentary's and the UN corpus's archives; and a plain .tar of two gzipped members,
as giga-fren's. Each is hashed as the extract stage checks it (attn_kit.pipeline.download.sha256_of) and unpacked by
the stage's own function (attn_kit.pipeline.text.extract_members), and the text joined as the stage joins it
(attn_kit.pipeline.text.concatenate), --repeats times. The rates are MB (2^20 bytes) per CPU second of this process
(other work on a shared machine changes them less than wall time; the wall seconds are recorded too), the medians of
the repeats. The archives are read from the page cache: a cold disk adds its read time. The tokenization is the
recipe's (attn_kit.pipeline.text.moses_tokenize) on the same news text, both sides of each pair.
"""
import argparse
import gzip
import io
import statistics
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Dict, List

from attn_kit.checkout import REPO
from attn_kit.cli import ArgumentParser, Number, UserError, add_force_option, add_output_option, check_output, log
from attn_kit.planning import prep_cost
from attn_kit.pipeline.download import sha256_of
from attn_kit.pipeline.text import concatenate, extract_members, moses_tokenize
from attn_kit.results import write_results_file
from ..calibration import RESULTS

DEFAULT_OUT = RESULTS / prep_cost.EXTRACT_RESULTS.name  # the file attn_kit.planning.prep_cost's table reads

NEWS = REPO.parent / "shared" / "data" / "wmt14" / "plain"  # newstest2013+2014, one sentence a line
PAIRS = {"en-de": "de", "en-fr": "fr"}
MB = 1 << 20


def parse_args(argv=None):
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--news", type=Path, default=NEWS,
                   help=f"a folder of newstest{{2013,2014}}.{{en-de,en-fr}}.{{en,de,fr}} (default {NEWS})")
    p.add_argument("--mb", type=Number(int, minimum=1, maximum=4096), default=192,
                   help="MB of text in each archive (default 192)")
    p.add_argument("--repeats", type=Number(int, minimum=1, maximum=20), default=3,
                   help="times each step is measured; the medians are kept (default 3)")
    p.add_argument("--scratch", type=Path, help="where the archives are built (default: a new temporary folder)")
    add_output_option(p, f"the results file (default {DEFAULT_OUT.relative_to(REPO)})")
    add_force_option(p, "an --output file")
    args = p.parse_args(argv)
    args.out = check_output(args.out or DEFAULT_OUT, "--output", args.force)
    for pair, other in PAIRS.items():
        for name in news_files(args.news, pair, other):
            if not name.is_file():
                raise UserError(f"{name}: no such file (the news text; give --news FOLDER)")
    return args


def news_files(folder: Path, pair: str, other: str) -> List[Path]:
    return [folder / f"newstest{year}.{pair}.{lang}" for lang in ("en", other) for year in (2013, 2014)]


def repeated(texts: List[bytes], size: int) -> bytes:
    """The texts, one after another and again, cut at the last line that fits ``size`` bytes."""
    joined = b"".join(texts)
    data = joined * (size // len(joined) + 1)
    return data[:data.rindex(b"\n", 0, size) + 1]


def build(scratch: Path, news: Path, mb: int) -> Dict[str, dict]:
    """The two archives under ``scratch``: {layout: {"path", "wanted" (member -> bytes), "text_bytes"}}."""
    read = {lang: [p.read_bytes() for p in news_files(news, pair, other) if p.name.endswith(lang)]
            for pair, other in PAIRS.items() for lang in ("en", other)}
    third = mb * MB // 6  # a side of the wanted pair: a sixth of the text, the pair a third
    wanted = {"train/corpus.de-en.en": repeated(read["en"], third),
              "train/corpus.de-en.de": repeated(read["de"], third),
              "train/corpus.fr-en.en": repeated(read["en"][::-1], 2 * third),
              "train/corpus.fr-en.fr": repeated(read["fr"], 2 * third)}
    tgz = scratch / "layout.tgz"
    with tarfile.open(tgz, "w:gz", compresslevel=6) as tar:  # gzip's default level, as `tar czf`
        for name, data in wanted.items():
            add(tar, name, data)
    tar_of_gz = scratch / "layout.tar"
    members = {"corpus.en.gz": wanted["train/corpus.de-en.en"], "corpus.de.gz": wanted["train/corpus.de-en.de"]}
    with tarfile.open(tar_of_gz, "w") as tar:
        for name, data in members.items():
            add(tar, name, gzip.compress(data, compresslevel=6, mtime=0))
    keep = ("train/corpus.de-en.en", "train/corpus.de-en.de")
    return {"tgz": {"path": tgz, "wanted": {m: len(wanted[m]) for m in keep},
                    "text_bytes": sum(map(len, wanted.values()))},
            "tar_of_gz": {"path": tar_of_gz, "wanted": {m: len(d) for m, d in members.items()},
                          "text_bytes": sum(map(len, members.values()))}}


def add(tar: tarfile.TarFile, name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def timed(fn, *args) -> Dict[str, float]:
    """CPU seconds of this process and wall seconds of ``fn(*args)``."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args)
    return {"cpu_s": round(time.process_time() - cpu, 3), "wall_s": round(time.perf_counter() - wall, 3)}


def measure(scratch: Path, archives: Dict[str, dict], repeats: int) -> Dict[str, dict]:
    """Each step ``repeats`` times: {step: {"bytes" (what its rate counts), "runs": [...], "mb_per_cpu_s"}}."""
    out = scratch / "out"
    out.mkdir(exist_ok=True)
    tgz, tar_of_gz = archives["tgz"], archives["tar_of_gz"]
    joined = [out / f"tgz.{i}" for i in range(len(tgz["wanted"]))]
    steps = {
        "sha256": (tgz["path"].stat().st_size, lambda: sha256_of(tgz["path"])),
        "extract_tgz": (tgz["path"].stat().st_size,
                        lambda: extract_members(tgz["path"], dict(zip(tgz["wanted"], joined)))),
        "extract_tar_of_gz": (tar_of_gz["path"].stat().st_size, lambda: extract_members(
            tar_of_gz["path"], {m: out / f"tar.{i}" for i, m in enumerate(tar_of_gz["wanted"])})),
        "concatenate": (sum(tgz["wanted"].values()), lambda: concatenate(joined, out / "joined")),
    }
    results = {}
    for name, (size, step) in steps.items():
        runs = [timed(step) for _ in range(repeats)]
        results[name] = {"bytes": size, "runs": runs,
                         "mb_per_cpu_s": round(size / MB / max(statistics.median(r["cpu_s"] for r in runs), 1e-6), 1)}
        log(f"{name}: {results[name]['mb_per_cpu_s']} MB per CPU second ({size / MB:.0f} MB)")
    return results


def tokenized(scratch: Path, news: Path) -> Dict[str, dict]:
    """Per pair, both sides of its newstest2013+2014: raw and tokenized bytes, tokens and lines."""
    result = {}
    for pair, other in PAIRS.items():
        raw = tok = tokens = lines = 0
        for path in news_files(news, pair, other):
            out = scratch / f"tok.{path.name}"
            moses_tokenize(path, out, path.suffix[1:], workers=1)
            text = out.read_bytes()
            raw, tok = raw + path.stat().st_size, tok + len(text)
            tokens, lines = tokens + len(text.split()), lines + text.count(b"\n")
        result[pair] = {"raw_bytes": raw, "tok_bytes": tok, "tokens": tokens, "lines": lines,
                        "growth": round(tok / raw, 4), "bytes_per_token": round(tok / tokens, 4)}
        log(f"{pair}: Moses tokenization makes {raw} bytes {tok} ({tok / raw:.3f}x), {tok / tokens:.2f} bytes a token")
    return result


def main(argv=None):
    args = parse_args(argv)
    if args.scratch:
        args.scratch.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="attn_data_extract_", dir=args.scratch) as scratch:
        scratch = Path(scratch)
        archives = build(scratch, args.news, args.mb)
        steps = measure(scratch, archives, args.repeats)
        tok = tokenized(scratch, args.news)
        layout = {name: {"archive_bytes": a["path"].stat().st_size, "text_bytes": a["text_bytes"],
                         "wanted_bytes": sum(a["wanted"].values())} for name, a in archives.items()}
    result = {"settings": {"news": str(args.news), "mb": args.mb, "repeats": args.repeats},
              "archives": layout, "steps": steps,
              "rates_mb_per_cpu_s": {k: v["mb_per_cpu_s"] for k, v in steps.items()},
              "tokenized": tok}
    write_results_file(args.out, None, result, benchmark="data_extract")
    print(f"wrote {args.out}")
    return 0

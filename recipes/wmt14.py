#!/usr/bin/env python
"""WMT14 translation recipe for attn_plugin (run it through recipes/wmt14_en_de.sh).

Modes:
  --bundled   the repo's bundled Tatoeba EN-DE corpus, a small configuration
              of the paper's model, on CPU in about 15 minutes (README's main job)
  --smoke     (not implemented yet) every full-WMT14 stage on tiny data
  (default)   (not implemented yet) full WMT14 as in the paper

Stages (bundled): extract, tokenize, bpe, binarize, train, average, generate, score.
Each stage skips work whose complete output exists; --dry-run prints the
commands; a killed run resumes where it stopped when run again.
"""
import argparse
import lzma
import multiprocessing
import os
import re
import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recipes.lib.stages import Pipeline, RecipeError, Stage, log, main_guard, write_json_atomic  # noqa: E402

USER_DIR = REPO / "attn_plugin"


_ARCH_RE = re.compile(r"register_model_architecture\(\s*[\"'][^\"']+[\"']\s*,\s*[\"']([^\"']+)[\"']")
_MODEL_RE = re.compile(r"@register_model\(\s*[\"']([^\"']+)[\"']\s*,\s*dataclass")


def plugin_archs(user_dir: Path = USER_DIR):
    """Architecture names the plugin registers: ``@register_model_architecture(model, NAME)``
    and the model names of ``@register_model(NAME, dataclass=...)`` (fairseq lists
    those as architectures too) in ``attn_plugin/models/*.py``. Read from the source
    so that checking --arch costs nothing (importing fairseq takes seconds); a test
    checks the result against fairseq's registry."""
    names = []
    for path in sorted((user_dir / "models").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        names += [n for n in _ARCH_RE.findall(text) + _MODEL_RE.findall(text) if n not in names]
    return names


# --bundled: a small configuration of the paper's model for a 2-core CPU.
BUNDLED_MODEL = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "256",
                 "--decoder-embed-dim", "256", "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim",
                 "1024", "--encoder-attention-heads", "4", "--decoder-attention-heads", "4", "--dropout", "0.1"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="recipes/wmt14_en_de.sh", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pair", default="en-de", choices=["en-de", "en-fr"], help="language pair (set by the .sh file)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--bundled", action="store_true", help="train and evaluate on the bundled Tatoeba EN-DE data")
    mode.add_argument("--smoke", action="store_true", help="tiny end-to-end run of the full recipe (not implemented yet)")
    p.add_argument("--workdir", type=Path, help="where everything goes (default runs/wmt14_<pair>_<mode>)")
    p.add_argument("--dry-run", action="store_true", help="print every command, run nothing")
    p.add_argument("--stage", default="1", help="first stage to run: a 1-based number or a stage name (default 1)")
    p.add_argument("--stop-stage", help="last stage to run: a number or a stage name (default: the last)")
    p.add_argument("--arch", default="attn_paper_base",
                   help=f"model architecture registered by attn_plugin: {', '.join(plugin_archs())} "
                        "(default attn_paper_base; --bundled shrinks it, see BUNDLED_MODEL)")
    p.add_argument("--train-minutes", type=float, default=12.0,
                   help="--bundled: wall-clock training budget in minutes (default 12)")
    p.add_argument("--max-update", type=int, default=100000, help="stop training after this many updates")
    p.add_argument("--bpe-merges", type=int, default=8000, help="--bundled: joint BPE merges (default 8000)")
    p.add_argument("--average", type=int, default=5, help="average the last N checkpoints (default 5, Sec. 6.1)")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes for tokenization and binarization (default: up to 2)")
    args = p.parse_args(argv)
    if args.smoke:
        raise RecipeError("--smoke (full WMT14 pipeline on tiny data) is not implemented yet; use --bundled")
    if not args.bundled:
        raise RecipeError(f"full WMT14 {args.pair} is not implemented yet; use --bundled")
    if args.pair != "en-de":
        raise RecipeError(f"--bundled data is English-German; WMT14 {args.pair} is not implemented yet")
    archs = plugin_archs()
    if args.arch not in archs:
        raise RecipeError(f"unknown --arch {args.arch!r}; attn_plugin registers: {', '.join(archs)}")
    args.workdir = (args.workdir or REPO / "runs" / "wmt14_en_de_bundled").resolve()
    return args


# ---------------------------------------------------------------------------
# Python steps (tokenization uses sacremoses; nothing here re-implements it)
# ---------------------------------------------------------------------------
def extract_bundled(src_dir: Path, out_dir: Path, src: str, tgt: str):
    """``{split}.{src}-{tgt}.tsv.xz`` (source<TAB>target) -> plain ``{split}.{src}`` and ``{split}.{tgt}``."""
    for split in ("train", "valid", "test"):
        path = src_dir / f"{split}.{src}-{tgt}.tsv.xz"
        if not path.exists():
            raise RecipeError(f"bundled data missing: {path} (is this a complete clone of the repo?)")
        try:
            with lzma.open(path, "rt", encoding="utf-8") as f, \
                    open(out_dir / f"{split}.{src}", "w", encoding="utf-8") as fs, \
                    open(out_dir / f"{split}.{tgt}", "w", encoding="utf-8") as ft:
                for n, line in enumerate(f, 1):
                    fields = line.rstrip("\n").split("\t")
                    if len(fields) != 2:
                        raise RecipeError(f"{path}: line {n} is not 'source<TAB>target'")
                    fs.write(fields[0] + "\n")
                    ft.write(fields[1] + "\n")
        except (lzma.LZMAError, EOFError, UnicodeDecodeError) as exc:
            raise RecipeError(f"bundled data damaged: {path} ({exc}); restore it with git checkout") from None


_MOSES = {}


def _moses_line(lang: str, line: str) -> str:
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    if lang not in _MOSES:
        _MOSES[lang] = (MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang))
    norm, tok = _MOSES[lang]
    return tok.tokenize(norm.normalize(line.strip()), escape=False, aggressive_dash_splits=True, return_str=True)


def moses_tokenize(inp: Path, out: Path, lang: str, workers: int):
    """Moses punctuation normalization and tokenization (sacremoses), streamed line
    by line through ``workers`` processes (output order = input order)."""
    fn = partial(_moses_line, lang)
    with open(inp, encoding="utf-8") as fin, open(out, "w", encoding="utf-8") as fout:
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                fout.writelines(t + "\n" for t in pool.imap(fn, fin, chunksize=2000))
        else:
            fout.writelines(fn(line) + "\n" for line in fin)


def read_hypotheses(gen_out: Path, expected: int):
    """Detokenization-ready hypotheses (D- lines) in source order."""
    hyps = {}
    with open(gen_out, encoding="utf-8") as f:
        for line in f:
            if line.startswith("D-"):
                idx, _score, text = line.rstrip("\n").split("\t", 2)
                hyps[int(idx[2:])] = text
    if len(hyps) != expected:
        raise RecipeError(f"{gen_out}: {len(hyps)} hypotheses for {expected} test sentences")
    return [hyps[i] for i in range(expected)]


# ---------------------------------------------------------------------------
# The bundled recipe
# ---------------------------------------------------------------------------
def bundled_stages(args):
    W, src, tgt = args.workdir, "en", "de"
    raw, tok, bpe, data_bin = W / "raw", W / "tok", W / "bpe", W / "data-bin"
    ckpt, avg, gen = W / "checkpoints", W / "checkpoint_avg.pt", W / "gen" / "test.out"

    def extract(ctx):
        with ctx.output(raw) as tmp:
            ctx.step(f"extract data/tatoeba-en-de/*.tsv.xz into {raw}", lambda: (
                tmp.mkdir(parents=True), extract_bundled(REPO / "data" / "tatoeba-en-de", tmp, src, tgt)))

    def tokenize(ctx):
        with ctx.output(tok) as tmp:
            if not ctx.dry_run:
                tmp.mkdir(parents=True)
            for split in ("train", "valid", "test"):
                for lang in (src, tgt):
                    ctx.step(f"sacremoses normalize + tokenize -l {lang}: {raw / f'{split}.{lang}'} -> "
                             f"{tok / f'{split}.{lang}'}", moses_tokenize, raw / f"{split}.{lang}",
                             tmp / f"{split}.{lang}", lang, args.workers)

    def learn_apply_bpe(ctx):
        with ctx.output(bpe) as tmp:
            if not ctx.dry_run:
                tmp.mkdir(parents=True)
            ctx.sh(["subword-nmt", "learn-joint-bpe-and-vocab", "--input", tok / f"train.{src}",
                    tok / f"train.{tgt}", "-s", args.bpe_merges, "-o", tmp / "codes",
                    "--write-vocabulary", tmp / f"vocab.{src}", tmp / f"vocab.{tgt}"])
            for split in ("train", "valid", "test"):
                for lang in (src, tgt):
                    ctx.sh(["subword-nmt", "apply-bpe", "-c", tmp / "codes", "--vocabulary", tmp / f"vocab.{lang}",
                            "--vocabulary-threshold", "50", "--num-workers", args.workers],
                           stdin=tok / f"{split}.{lang}", stdout=tmp / f"{split}.{lang}")

    def binarize(ctx):
        with ctx.output(data_bin) as tmp:
            ctx.sh(["fairseq-preprocess", "--source-lang", src, "--target-lang", tgt,
                    "--trainpref", bpe / "train", "--validpref", bpe / "valid", "--testpref", bpe / "test",
                    "--destdir", tmp, "--joined-dictionary", "--workers", args.workers])

    def train(ctx):
        ctx.sh(["fairseq-train", data_bin, "--user-dir", USER_DIR, "--arch", args.arch, *BUNDLED_MODEL,
                "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-9",
                "--lr-scheduler", "attn_inverse_sqrt", "--warmup-updates", "400", "--lr-scale", "0.8", "--lr", "1",
                "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                "--max-tokens", "2048", "--required-batch-size-multiple", "1", "--cpu", "--seed", "1",
                "--stop-time-hours", f"{args.train_minutes / 60:.4f}", "--max-update", args.max_update,
                "--save-dir", ckpt, "--save-interval-updates", "100", "--keep-interval-updates", args.average,
                "--no-epoch-checkpoints", "--validate-interval-updates", "1000", "--log-format", "simple",
                "--log-interval", "100", "--no-progress-bar"], tail=1)

    def average(ctx):
        with ctx.output(avg) as tmp:
            n = args.average
            if not ctx.dry_run:
                have = len([p for p in ckpt.glob("checkpoint_*_*.pt")])
                if have == 0:
                    raise RecipeError(f"no update checkpoints in {ckpt}; did training run long enough?")
                if have < n:
                    log(f"only {have} update checkpoints; averaging those")
                    n = have
            ctx.sh([sys.executable, REPO / "scripts" / "average_checkpoints.py", "--inputs", ckpt,
                    "--num-update-checkpoints", n, "--output", tmp])

    def generate(ctx):
        with ctx.output(gen) as tmp:
            ctx.sh(["fairseq-generate", data_bin, "--user-dir", USER_DIR, "--path", avg, "--gen-subset", "test",
                    "--beam", "4", "--max-len-a", "1", "--max-len-b", "50", "--batch-size", "128",
                    "--required-batch-size-multiple", "1", "--remove-bpe", "--cpu"], stdout=tmp, tail=1)

    def score(ctx):
        def compute():
            import sacrebleu
            from sacremoses import MosesDetokenizer

            refs = (raw / f"test.{tgt}").read_text(encoding="utf-8").splitlines()
            detok = MosesDetokenizer(lang=tgt)
            hyps = [detok.detokenize(h.split()) for h in read_hypotheses(gen, len(refs))]
            (W / "gen" / f"test.detok.{tgt}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
            bleu = sacrebleu.metrics.BLEU()
            result = bleu.corpus_score(hyps, [refs])
            train_log = (W / "logs" / "train.log").read_text(encoding="utf-8", errors="replace")
            # fairseq: "Saved checkpoint .../checkpoint_last.pt (epoch 1 @ 712 updates, ...)"
            last = re.findall(r"@ (\d+) updates", train_log) or re.findall(r"num_updates[ =](\d+)", train_log)
            avg_log = W / "logs" / "average.log"
            averaged = re.findall(r"^averaging \d+ checkpoints: (.*)$",
                                  avg_log.read_text(encoding="utf-8", errors="replace") if avg_log.exists() else "",
                                  re.M)
            write_json_atomic(W / "results.json", {
                "mode": "bundled", "pair": f"{src}-{tgt}", "arch": args.arch, "model_overrides": BUNDLED_MODEL,
                "sacrebleu": round(result.score, 2), "sacrebleu_signature": str(bleu.get_signature()),
                "test_sentences": len(refs), "updates": int(last[-1]) if last else None,
                "train_minutes": args.train_minutes, "checkpoint": str(avg),
                "averaged_checkpoints": averaged[-1].split(", ") if averaged else None,
                "beam": 4, "gpus": 0,
            })
        ctx.step(f"detokenize (sacremoses) and score with sacreBLEU against {raw / f'test.{tgt}'}", compute)

    bundled = REPO / "data" / "tatoeba-en-de"
    texts = [f"{split}.{lang}" for split in ("train", "valid", "test") for lang in (src, tgt)]
    return [
        Stage("extract", extract, "unpack the bundled Tatoeba EN-DE splits",
              inputs=[bundled / f"{split}.{src}-{tgt}.tsv.xz" for split in ("train", "valid", "test")],
              outputs=[raw / t for t in texts]),
        Stage("tokenize", tokenize, "Moses normalization and tokenization (sacremoses)",
              inputs=[raw / t for t in texts], outputs=[tok / t for t in texts]),
        Stage("bpe", learn_apply_bpe, f"joint BPE, {args.bpe_merges} merges (subword-nmt)",
              inputs=[tok / t for t in texts], outputs=[bpe / "codes", *(bpe / t for t in texts)]),
        Stage("binarize", binarize, "fairseq-preprocess --joined-dictionary",
              inputs=[bpe / t for t in texts], outputs=[data_bin / f"dict.{src}.txt", data_bin / f"dict.{tgt}.txt"]),
        Stage("train", train, f"fairseq-train --arch {args.arch} (small), {args.train_minutes:g} min budget",
              inputs=[data_bin / f"dict.{src}.txt"], outputs=[ckpt / "checkpoint_last.pt"]),
        Stage("average", average, f"average the last {args.average} checkpoints", inputs=[ckpt], outputs=[avg]),
        Stage("generate", generate, "fairseq-generate, beam 4, on the test split",
              inputs=[avg, data_bin / f"test.{src}-{tgt}.{src}.bin"], outputs=[gen]),
        Stage("score", score, "sacreBLEU on detokenized output",
              inputs=[gen, raw / f"test.{tgt}"], outputs=[W / "results.json"]),
    ]


def report(results_path: Path, seconds: dict):
    """Print the score; record each stage's wall time in results.json."""
    import json

    r = json.loads(results_path.read_text())
    if seconds and r.get("stage_seconds") != seconds:
        r["stage_seconds"] = seconds
        r["total_seconds"] = round(sum(seconds.values()), 1)
        write_json_atomic(results_path, r)
    print(f"\nsacreBLEU = {r['sacrebleu']:.2f}   ({r['sacrebleu_signature']})")
    print(f"{r['test_sentences']} test sentences, {r['arch']} (small), {r['updates']} updates")
    if seconds:
        print("stage times: " + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items())
              + f" (total {sum(seconds.values()) / 60:.1f} min)")
    print(f"results: {results_path}")


def main():
    args = parse_args()
    pipeline = Pipeline(args.workdir, bundled_stages(args), args.dry_run, args.stage, args.stop_stage)
    if not args.dry_run:
        args.workdir.mkdir(parents=True, exist_ok=True)
    pipeline.run()
    results = args.workdir / "results.json"
    if not args.dry_run and results.exists():
        report(results, pipeline.stage_seconds())


if __name__ == "__main__":
    main_guard(main)

"""Running the comparison: its data, each training (through the worker) and each
evaluation (fairseq-generate, BLEU), with their logs and numbers in the run's folder."""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from attn_kit.cli import UserError, log
from attn_kit.fairseq_layer.fairseq_log import read
from attn_kit.metrics.scores import tokenized_score
from attn_kit.pipeline.process import stream
from attn_kit.results import command_line
from .commands import generate_command
from .worker import read_stats


def prepare_bundled(workdir: Path) -> Path:
    """The bundled recipe's stages up to binarize (skipped where already done); its data-bin."""
    log(f"bundled data: recipes/wmt14_en_de.sh --bundled --stop-stage binarize in {workdir}")
    cmd = [sys.executable, "-m", "attn_kit.recipes.translation", "--pair", "en-de", "--bundled",
           "--workdir", workdir, "--stop-stage", "binarize"]

    def on_line(line):
        if "] stage" in line:  # the recipe's progress lines
            print("  " + line.rstrip(), flush=True)

    rc, last = stream(cmd, on_line, env=dict(os.environ, PYTHONWARNINGS="ignore", PYTHONUNBUFFERED="1"))
    if rc != 0:
        raise UserError(f"preparing the bundled data failed: {last}")
    return workdir / "data-bin"


def inspect_data(data: Path, gen_subset: str):
    """(source lang, target lang, joined dictionary?, split to translate) of a binarized directory."""
    if not data.is_dir():
        raise UserError(f"data directory not found: {data}")
    pairs = sorted({m.group(1, 2) for f in data.glob("train.*-*.*.idx")
                    if (m := re.match(r"train\.([^.-]+)-([^.-]+)\.[^.]+\.idx$", f.name))})
    if not pairs:
        raise UserError(f"{data} holds no binarized training data (train.SRC-TGT.SRC.idx from "
                        "fairseq-preprocess)")
    if len(pairs) > 1:
        raise UserError(f"{data} holds several language pairs ({', '.join('-'.join(p) for p in pairs)}); "
                        "give a directory with one")
    src, tgt = pairs[0]
    for lang in (src, tgt):
        if not (data / f"dict.{lang}.txt").exists():
            raise UserError(f"{data} has no dict.{lang}.txt")
    if not (data / f"valid.{src}-{tgt}.{src}.idx").exists():
        raise UserError(f"{data} has no valid split (valid.{src}-{tgt}.{src}.idx); validation needs one")
    joined = (data / f"dict.{src}.txt").read_bytes() == (data / f"dict.{tgt}.txt").read_bytes()
    if not (data / f"{gen_subset}.{src}-{tgt}.{src}.idx").exists():
        if gen_subset != "test":
            raise UserError(f"{data} has no {gen_subset} split to translate")
        gen_subset = "valid"
    return src, tgt, joined, gen_subset


def run_training(cmd, run_dir: Path, tag: str, env: dict) -> dict:
    """Run one training, its log streamed to run_dir/train.log; return its numbers."""
    if run_dir.exists():
        shutil.rmtree(run_dir)  # fairseq-train would resume from an old checkpoint_last.pt
    run_dir.mkdir(parents=True)
    (run_dir / "command.txt").write_text(command_line(cmd) + "\n")
    train_inner = []
    start = time.time()
    with open(run_dir / "train.log", "w", encoding="utf-8") as logf:
        def on_line(line):
            logf.write(line)
            entry = read(line)
            if entry.tag == "train_inner":
                train_inner.append(entry.stats)
            elif entry.tag == "valid":
                record = entry.stats
                ppl = float(record.get("ppl", "nan"))
                log(f"  {tag}: update {record.get('num_updates')}, valid nll_loss "
                    f"{float(record.get('nll_loss', 'nan')):.3f}, ppl {ppl:.2f} "
                    f"({(time.time() - start) / 60:.1f} min)")

        rc, last = stream(cmd, on_line, env=env)
    if rc != 0:
        raise UserError(f"{tag}: fairseq-train failed (exit {rc}): {last[:300]}; log: {run_dir / 'train.log'}")
    stats = read_stats(run_dir / "stats.json")
    if stats is None:
        raise UserError(f"{tag}: the training wrote no statistics ({run_dir / 'stats.json'})")
    stats["train_inner"] = train_inner
    stats["run_seconds"] = time.time() - start
    return stats


def run_generation(args, data: Path, run_dir: Path, subset: str, tag: str, env: dict) -> dict:
    """Translate ``subset`` with the run's last checkpoint; BLEU and fairseq's own speed."""
    checkpoint = run_dir / "checkpoints" / "checkpoint_last.pt"
    if not checkpoint.exists():
        raise UserError(f"{tag}: no {checkpoint} (did training stop before its first update?)")
    cmd = generate_command(args, data, checkpoint, subset)
    out = run_dir / f"generate-{subset}.txt"
    start = time.time()
    (run_dir / "generate-command.txt").write_text(command_line(cmd) + "\n")
    with open(out, "w", encoding="utf-8") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, text=True, env=env)
    seconds = time.time() - start
    (run_dir / "generate.log").write_text(proc.stderr)
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        raise UserError(f"{tag}: fairseq-generate failed (exit {proc.returncode}): "
                        f"{lines[-1][:300] if lines else ''}; log: {run_dir / 'generate.log'}")
    hyps, refs = {}, {}
    for line in out.read_text(encoding="utf-8").splitlines():
        if line.startswith("D-"):
            idx, _score, text = (line.split("\t", 2) + ["", ""])[:3]
            hyps[int(idx[2:])] = text
        elif line.startswith("T-"):
            idx, text = (line.split("\t", 1) + [""])[:2]
            refs[int(idx[2:])] = text
    ids = sorted(refs)
    if not ids or sorted(hyps) != ids:
        raise UserError(f"{tag}: {out} has {len(hyps)} hypotheses for {len(refs)} references")
    # tokenized BLEU: the output and references are tokenized text (force: sacreBLEU would warn about it)
    bleu = tokenized_score([hyps[i] for i in ids], [refs[i] for i in ids])
    # fairseq's own timing of the generation alone (its log goes to the output file)
    speed = re.findall(r"Translated [\d,]+ sentences .* in [\d.]+s \(([\d.]+) sentences/s, ([\d.]+) tokens/s",
                       out.read_text(encoding="utf-8") + proc.stderr)
    result = {"bleu": bleu, "sentences": len(ids), "generate_seconds": round(seconds, 1),
              "subset": subset, "output": str(out)}
    if speed:
        result["sentences_per_s"], result["gen_tokens_per_s"] = map(float, speed[-1])
    log(f"  {tag}: BLEU {bleu:.2f} on {len(ids)} {subset} sentences ({seconds:.0f} s)")
    return result

"""``python scripts/translate.py RUN_DIR``: raw sentences in, translations out,
exactly as the recipe of RUN_DIR made its test translations.

Each input line goes through the run's tokenizer and BPE, the checkpoint the recipe evaluated and its
decoding settings, all read from ``RUN_DIR/inference.json`` (:mod:`attn_plugin.hub`); one detokenized
translation per input line, in order. For a parsing run (WSJ) the output is a bracketed tree over the
sentence's words, repaired as the recipe's trees stage repairs it. The run directory is checked
before any work (:mod:`attn_plugin.run_cards`), the input is read under the one text policy
(:mod:`attn_kit.textio`), and ``--output`` is written whole or not at all.
"""
import json
import sys
from pathlib import Path
from typing import Iterable, List, Optional

from .. import options
from ..cli import (ArgumentParser, Number, UsageError, UserError, add_force_option, add_ignore_changed_option,
                   add_output_option, check_output, log, one_line, write_text_atomic)
from ..metrics.scores import sacrebleu_score
from ..metrics.trees import delinearize
from ..pipeline.progress import Progress
from ..fairseq_layer.plugin import load
from ..textio import add_errors_option, read_lines
from .ctranslate2 import CT2Translator, load_run, read_card

ENGINES = ("fairseq", "ctranslate2")


def parse_args(argv=None):
    p = ArgumentParser(
        prog="python scripts/translate.py", description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="The same from Python: AttnTransformerModel.from_pretrained(RUN_DIR).translate([...]); "
               "the same with fairseq-interactive: --print-interactive-command.")
    p.add_argument("run_dir", type=Path, help="a recipe's --workdir (holds inference.json), or with --engine "
                                              "ctranslate2 the folder scripts/export_ctranslate2.py wrote")
    p.add_argument("-i", "--input", type=Path, help="raw sentences, one per line, UTF-8 (default: stdin)")
    add_output_option(p, "where the translations go (default: stdout); an existing file only with --force, never "
                         "a folder", "-o", dest="output", out_too=False)
    add_force_option(p, "the --output file")
    add_ignore_changed_option(p)
    add_errors_option(p)
    here = dict(checked="here")
    options.add(p, "beam", "default: the run's", **here)
    options.add(p, "alpha", "default: the run's", **here)
    options.add(p, "lenpen", "instead of GNMT's", **here)
    options.add(p, "max_len_b", "default: the run's", **here)
    options.add(p, "checkpoint")
    p.add_argument("--batch-size", type=Number(int, minimum=1), default=64, help="sentences per batch (default 64)")
    options.add(p, "ngpus", "1: translate on the GPU; default 0", default=0, choices=(0, 1))
    options.add(p, "threads", "default: torch's", **here)
    p.add_argument("--tokenized", action="store_true",
                   help="the input is already tokenized as the training data was (Moses tokens, or treebank "
                        "words for a parsing run): only BPE is applied")
    p.add_argument("--engine", choices=ENGINES, default="fairseq",
                   help="fairseq (default) or ctranslate2 (RUN_DIR is then an exported model folder)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--print-interactive-command", action="store_true",
                   help="print the fairseq-interactive command that does the same, and exit")
    p.add_argument("--check-test-set", action="store_true",
                   help="translate the run's test source (results.json: test_source) and compare with the "
                        "recipe's own test output (test_output): identical lines and, for translation, sacreBLEU "
                        "of both; prints one JSON line")
    args = p.parse_args(argv)
    if args.alpha is not None and args.lenpen is not None:
        raise UsageError("give --gnmt-alpha or --lenpen, not both")
    if args.checkpoint and args.engine == "fairseq" and not args.checkpoint.is_file():
        raise UsageError(f"--checkpoint {args.checkpoint}: no such file")
    if args.output and not (args.print_interactive_command or args.check_test_set):  # before any work
        check_output(args.output, "--output", args.force, inputs=[args.input])
    return args


def read_input(path: Optional[Path], name: Optional[str] = None, errors: str = "strict") -> List[str]:
    """The input's lines under the one text policy (:mod:`attn_kit.textio`): ``path``, or stdin if None;
    ``name`` is what an error line calls it (default ``--input PATH`` or standard input)."""
    source, name = (sys.stdin.buffer, name or "standard input") if path is None else (path, name or f"--input {path}")
    try:
        return read_lines(source, name, errors)
    except OSError as exc:
        raise UserError(f"{name}: cannot read it ({exc.strerror or exc})") from None


def overrides(args) -> dict:
    """fairseq options the command line changes (the rest is the run's)."""
    out = {}
    for name, fairseq_name in (("beam", "beam"), ("alpha", "gnmt_alpha"), ("lenpen", "lenpen"),
                               ("max_len_b", "max_len_b")):
        if getattr(args, name) is not None:
            out[fairseq_name] = getattr(args, name)
    if args.checkpoint:
        out["checkpoint_file"] = str(args.checkpoint.resolve())
    if args.tokenized:
        out["tokenizer"] = None
    if args.ignore_changed_files:
        out["ignore_changed_files"] = True
    return out


class Translator:
    """A run's model with its pre- and post-processing (fairseq's hub interface)."""

    def __init__(self, run_dir: Path, options: dict, gpu: bool = False):
        self.card, _, self.hub = load_run(run_dir, options.pop("checkpoint_file", None),  # the card checked first
                                          bool(options.pop("ignore_changed_files", False)), **options)
        self.parsing = self.card["kind"] == "parsing"
        if gpu:
            self.hub.cuda()
        self.max_source = self.hub.max_positions[0] if isinstance(self.hub.max_positions, tuple) else None

    def encode(self, line: str):
        return self.hub.encode(line)

    def words(self, line: str) -> List[str]:
        """The sentence's words as the model reads them (before BPE): the parse tree's leaves."""
        return self.hub.tokenize(line).split()

    def decode(self, line: str, tokens) -> str:
        if not self.parsing:
            return self.hub.decode(tokens)
        sequence = self.hub.remove_bpe(self.hub.string(tokens))
        tree, _ = delinearize(sequence.split(), self.words(line))
        return str(tree)

    def translate(self, lines: List[str], batch_size: int, progress: Optional[Progress] = None) -> List[str]:
        out = [""] * len(lines)
        todo = [(i, self.encode(line)) for i, line in enumerate(lines) if line.strip()]
        for i, tokens in todo:
            if self.max_source and tokens.numel() > self.max_source:
                raise UserError(f"line {i + 1} is {tokens.numel()} tokens long after BPE; the model reads at most "
                                f"{self.max_source} (its max_source_positions): split it into shorter sentences")
        from omegaconf import open_dict

        with open_dict(self.hub.cfg):
            self.hub.cfg.dataset.batch_size, self.hub.cfg.dataset.max_tokens = batch_size, None
        chunk = batch_size * 8  # fairseq sorts each chunk by length into batches of batch_size
        for start in range(0, len(todo), chunk):
            part = todo[start:start + chunk]
            hypos = self.hub.generate([t for _, t in part], beam=self.hub.cfg.generation.beam)
            for (i, _), best in zip(part, hypos):
                out[i] = self.decode(lines[i], best[0]["tokens"].cpu())
            if progress:
                progress.update(start + len(part))
        return out


def main(argv=None):
    args = parse_args(argv)
    run_cards = load("attn_plugin.run_cards")
    if args.print_interactive_command:
        import shlex

        command = load("attn_plugin.hub").interactive_command(args.run_dir)
        print(shlex.join(one_line("a path of the run", arg, "a printed command line") for arg in command))
        return 0
    # everything the command reads is checked before any work: the run's cards, then the input
    if args.engine == "ctranslate2":
        read_card(args.run_dir)
    else:
        run_cards.read_run_card(args.run_dir, check_files=not args.ignore_changed_files)
    name = None
    if args.check_test_set:
        results = run_cards.read_results(args.run_dir, required=("test_source", "test_output"))
        args.input, args.tokenized = Path(results["test_source"]), results.get("test_source_tokenized", False)
        name = f"{args.input} (test_source of {args.run_dir / run_cards.RESULTS})"
    lines = read_input(args.input, name, args.errors)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.engine == "ctranslate2":
        translator = CT2Translator(args.run_dir, overrides(args), threads=args.threads, gpu=args.ngpus > 0)
    else:
        translator = Translator(args.run_dir, overrides(args), gpu=args.ngpus > 0)
    progress = None
    if args.input and not args.quiet:
        progress = Progress("translate", sum(1 for line in lines if line.strip()), "sentences",
                            out=lambda text: log(text, stream=sys.stderr))
    hyps = translator.translate(lines, args.batch_size, progress)
    if progress:
        progress.finish()
    if args.check_test_set:
        print(json.dumps(compare_with_test_output(results, hyps, translator.parsing, args.errors)), flush=True)
        return 0
    write_output(args.output, hyps)
    return 0


def compare_with_test_output(results: dict, hyps: List[str], parsing: bool, errors: str = "strict") -> dict:
    """Identical lines (and sacreBLEU of both, for translation) of ``hyps`` and the recipe's test output
    (``results``: results.json as :func:`attn_plugin.run_cards.read_results` checked it)."""
    recipe = read_input(Path(results["test_output"]), f"{results['test_output']} (test_output of results.json)",
                        errors)
    out = {"test_source": results["test_source"], "test_output": results["test_output"], "sentences": len(recipe),
           "identical_lines": sum(a == b for a, b in zip(hyps, recipe))}
    ref = results.get("test_reference")
    if not parsing and ref:
        refs = read_input(Path(ref), f"{ref} (test_reference of results.json)", errors)
        out.update(sacrebleu_translate=sacrebleu_score(hyps, refs), sacrebleu_recipe=sacrebleu_score(recipe, refs))
    return out


def write_output(path: Optional[Path], lines: Iterable[str]):
    text = "".join(line + "\n" for line in lines)
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_text_atomic(path, text)

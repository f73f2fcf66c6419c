"""Run cards: what a run directory says about itself, checked before anything uses it.

A run directory may come from anyone (a colleague's run, a downloaded model): it is data,
never code. Three JSON files describe one, and each is checked against its schema here
before any of it is used:

- ``RUN_DIR/inference.json`` (:data:`RUN_CARD`, written by the recipes): read by
  :mod:`attn_plugin.hub` (``from_pretrained``, the fairseq-interactive command) and by the
  library's translate, plot and export commands;
- the card of a CTranslate2 export (``OUT_DIR/ct2_card.json``: the library's export names,
  writes and reads it; :data:`CT2` is its schema);
- ``RUN_DIR/results.json`` (:data:`RESULTS`, the run's whole record: only the keys read from
  it are checked, :data:`RESULTS_KEYS`).

The rules: a card is a JSON object of known keys with values of known types; an option that
makes fairseq import Python code (:data:`IMPORT_HOOKS`: ``user_dir``) is refused wherever it
appears, before anything is imported; every path a card names is relative to the card's own
folder (an absolute one, from cards written before, is read as it is) and must lie in that
folder (symbolic links resolved) or in the prepared data folder the card names as
``data_workdir`` (a run of the WMT recipes with ``--data-workdir``: ``../wmt14_en_de_data``,
which must exist and hold a recipe's ``.stages/``), exist, and be the kind of file its key expects (a PyTorch
checkpoint, the binarized data folder, subword-nmt BPE codes or vocabulary), checked here so
that no third-party reader reports it in its own words. Every failure is one
:class:`~attn_plugin.errors.ConfigError` line naming the file and the key.

The plugin holds the schema because ``from_pretrained`` needs it and the plugin imports
nothing from the library; the library imports it from here.
"""
import json
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, Optional, Sequence

from .errors import ConfigError

RUN_CARD = "inference.json"
RESULTS = "results.json"

IMPORT_HOOKS = ("user_dir",)  # fairseq imports the folder this option names (its --user-dir)

KINDS = ("translation", "parsing")


@dataclass(frozen=True)
class Key:
    """One key of a card: the JSON types its value may have, what it is (for messages), its rules."""
    types: tuple
    what: str
    required: bool = False
    choices: tuple = ()
    minimum: Optional[float] = None
    file: Optional[str] = None  # the value is a path in the card's folder, of this kind (_FILE_KINDS)
    keys: Optional[dict] = None  # the value is an object with this schema
    items: Optional[tuple] = None  # the value is a list of these strings


STR, INT, NUM, BOOL, NONE = (str,), (int,), (int, float), (bool,), (type(None),)

# the run's task, tokenizer and BPE options, in fairseq's names (what the recipes write)
ARGS = {
    "task": Key(STR, "the fairseq task", choices=("attn_translation", "translation")),
    "source_lang": Key(STR, "the source language", required=True),
    "target_lang": Key(STR, "the target language", required=True),
    "gnmt_alpha": Key(NUM + NONE, "GNMT's length penalty alpha"),
    "beam_stop": Key(STR + NONE, "when beam search stops", choices=("t2t", "fairseq", None)),
    "bf16_inference": Key(BOOL, "decode under bf16 autocast (the recipes decode in fp32: false)"),
    "tokenizer": Key(STR + NONE, "the tokenizer", choices=("attn_moses", "attn_treebank", None)),
    "moses_no_normalize": Key(BOOL, "attn_moses: no punctuation normalization"),
    "moses_escape": Key(BOOL, "attn_moses: escape special characters"),
    "moses_no_dash_splits": Key(BOOL, "attn_moses: no dash splits"),
    "bpe": Key(STR + NONE, "the BPE", choices=("attn_subword_nmt", None)),
    "bpe_codes": Key(STR, "the BPE codes", file="bpe_codes"),
    "bpe_vocabulary": Key(STR + NONE, "the vocabulary of the BPE's filter", file="bpe_vocabulary"),
    "bpe_vocabulary_threshold": Key(INT + NONE, "the threshold of the BPE's vocabulary filter", minimum=0),
    "bpe_separator": Key(STR, "the BPE continuation marker"),
}
PATH_ARGS = tuple(name for name, key in ARGS.items() if key.file)  # always relative to the card's folder
GENERATION = {
    "beam": Key(INT, "the beam size", minimum=1),
    "max_len_a": Key(NUM, "the output length limit's factor", minimum=0),
    "max_len_b": Key(INT, "the output length limit's constant", minimum=0),
    "lenpen": Key(NUM, "fairseq's length penalty"),
}
INFERENCE = {
    "kind": Key(STR, "what the model does", choices=KINDS),
    "checkpoint": Key(STR, "the checkpoint the recipe evaluated", required=True, file="checkpoint"),
    "data": Key(STR, "the binarized data folder with the dictionaries", required=True, file="data"),
    "data_workdir": Key(STR, "the prepared data folder the run shares (--data-workdir), relative to the run"),
    "args": Key((dict,), "the task and pre-processing options", required=True, keys=ARGS),
    "paths": Key((list,), "the options that name files", items=PATH_ARGS),
    "generation": Key((dict,), "the decoding options", keys=GENERATION),
    "batch_size": Key(INT + NONE, "sentences a batch", minimum=1),
    "checksums": Key((dict,), "the sha256 of each file the model's token ids depend on (the dictionaries, the BPE "
                              "codes and vocabulary) as the run made them"),
}
_CT2_ARGS = {**{k: v for k, v in ARGS.items() if k not in ("task", "bf16_inference")},
             "source_lang": replace(ARGS["source_lang"], required=False),
             "target_lang": replace(ARGS["target_lang"], required=False),
             "tokenizer": replace(ARGS["tokenizer"], required=True),  # null when there is none, never left out
             "bpe": replace(ARGS["bpe"], required=True)}
CT2 = {
    "engine": Key(STR, "the engine", required=True, choices=("ctranslate2",)),
    "ctranslate2": Key(STR, "the CTranslate2 version that exported it"),
    "kind": Key(STR, "what the model does", required=True, choices=KINDS),
    "exported_from": Key(STR, "the run it was exported from (a record; never read)"),
    "checkpoint": Key(STR, "the checkpoint it was exported from (a record; never read)"),
    "quantization": Key(STR, "the weight type"),
    "args": Key((dict,), "the pre-processing options", required=True, keys=_CT2_ARGS),
    "paths": Key((list,), "the options that name files", required=True, items=PATH_ARGS),
    "generation": Key((dict,), "the decoding options", required=True, keys=GENERATION),
    "batch_size": Key(INT + NONE, "sentences a batch", minimum=1),
    "max_source_positions": Key(INT, "the longest source the model reads", minimum=1),
    "max_target_positions": Key(INT, "the longest output the model writes", minimum=1),
    "model": Key((dict,), "the model's sizes (a record; never read)"),
}
RESULTS_KEYS = {  # the keys of results.json that commands read; the rest is the run's record
    "data_workdir": INFERENCE["data_workdir"],
    "test_source": Key(STR, "the raw test source", file="text"),
    "test_source_tokenized": Key(BOOL, "whether test_source is already tokenized"),
    "test_output": Key(STR, "the recipe's translations of test_source", file="text"),
    "test_reference": Key(STR + NONE, "the test set's reference", file="text"),
    "test_sentences": Key(INT, "the test set's sentences", minimum=0),
    "sacrebleu": Key(NUM, "the run's sacreBLEU"),
}

_REWRITE = "rerun the recipe (the same command) to write it again"
_REEXPORT = "export the run again (scripts/export_ctranslate2.py RUN_DIR OUT_DIR --force)"
_RESCORE = "rerun the recipe (the same command) to score the run again"


# ------------------------------------------------------------------------------------------- reading
def read_run_card(run_dir, check_files: bool = True) -> dict:
    """``RUN_DIR/inference.json`` checked against :data:`INFERENCE` (and every file it names),
    with the optional keys filled in; a one-line :class:`ConfigError` otherwise. ``check_files``:
    the dictionaries and BPE files must still hold what the run made (its ``checksums``): an edited
    dictionary translates every sentence into wrong tokens without an error."""
    run_dir = Path(run_dir)
    path = run_dir / RUN_CARD
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: no such run directory (give the --workdir of a recipe run)")
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no {RUN_CARD}: it is written when a recipe run has averaged its "
                          "checkpoints (the average stage); finish the run first")
    card = _checked(_load(path, _REWRITE), INFERENCE, path, _REWRITE)
    card = {"kind": "translation", "paths": [], "generation": {}, "batch_size": None, **card}
    _check_bpe(card["args"], path, _REWRITE)
    roots = _roots(run_dir, card, path)
    checkpoint = _inside(run_dir, card["checkpoint"], path, "checkpoint", _REWRITE, roots)
    if not checkpoint.is_file():
        raise ConfigError(f"{checkpoint} is missing ('checkpoint' of {path}): the run has not averaged its "
                          "checkpoints yet (or it was deleted); run the recipe's average stage")
    _check_file(run_dir, card["checkpoint"], "checkpoint", "checkpoint", path, _REWRITE, roots=roots)
    _check_file(run_dir, card["data"], "data", "data", path, _REWRITE,
                langs=(card["args"]["source_lang"], card["args"]["target_lang"]), roots=roots)
    _check_path_args(run_dir, card["args"], path, _REWRITE, roots)
    if check_files:
        _check_checksums(run_dir, card.get("checksums") or {}, path, roots)
    return card


IGNORE_CHANGED = "--ignore-changed-files"  # the commands' option; from_pretrained's ignore_changed_files=True


def _sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_checksums(run_dir: Path, recorded: dict, path: Path, roots: Sequence[Path]):
    """Each file ``recorded`` names holds what the run made; one ConfigError naming the first that does not."""
    for name, want in recorded.items():
        if not (isinstance(want, str) and re.fullmatch(r"[0-9a-f]{64}", want)):
            raise ConfigError(f"{path}: 'checksums.{name}' is {json.dumps(want)[:60]}, not a sha256: it is damaged "
                              f"or was edited; {_REWRITE}")
        target = _inside(run_dir, name, path, f"checksums.{name}", _REWRITE, roots)
        if not target.is_file():
            raise ConfigError(f"{target} is missing ('checksums' of {path}): the run's model needs it; {_REWRITE}")
        got = _sha256(target)
        if got != want:
            raise ConfigError(f"{target} changed since the run made it (sha256 {got[:12]}..., the run's {want[:12]}...): "
                              "the model's token ids would stand for other words; put the run's own file back, or "
                              f"go on anyway with {IGNORE_CHANGED} (from_pretrained: ignore_changed_files=True)")


def read_ct2_card(path) -> dict:
    """The card ``path`` of a CTranslate2 export (it must exist) checked against :data:`CT2` and
    the files it names (in the card's folder)."""
    path = Path(path)
    card = _checked(_load(path, _REEXPORT), CT2, path, _REEXPORT)
    _check_bpe(card["args"], path, _REEXPORT)
    _check_path_args(path.parent, card["args"], path, _REEXPORT)
    return card


def read_results(run_dir, required: Sequence[str] = ()) -> dict:
    """``RUN_DIR/results.json``: the keys of :data:`RESULTS_KEYS` it holds checked (``required``
    ones must be there), the files they name made absolute paths (in RUN_DIR or its ``data_workdir``)."""
    run_dir = Path(run_dir)
    path = run_dir / RESULTS
    if not path.is_file():
        raise ConfigError(f"{run_dir} has no {RESULTS}: the run has not been scored yet; finish the run first")
    results = _load(path, _RESCORE)
    if not isinstance(results, dict):
        raise ConfigError(f"{path} holds a JSON {_json_type(results)}, not an object: it is damaged; {_RESCORE}")
    for name in required:
        if name not in results:
            raise ConfigError(f"{path} has no '{name}' ({RESULTS_KEYS[name].what}): it was written by an older "
                              f"version or damaged; {_RESCORE}")
    known = {k: v for k, v in results.items() if k in RESULTS_KEYS}
    _checked(known, RESULTS_KEYS, path, _RESCORE)
    roots = _roots(run_dir, known, path)
    for name, key in RESULTS_KEYS.items():
        if key.file and known.get(name) is not None:
            results[name] = str(_check_file(run_dir, known[name], name, key.file, path, _RESCORE, roots=roots))
    if "data_workdir" in known:
        results["data_workdir"] = str(roots[-1])
    return results


def resolved_args(folder, card: dict) -> dict:
    """The card's ``args`` with the files they name (:data:`PATH_ARGS`) as absolute paths in ``folder``."""
    args = dict(card["args"])
    for name in PATH_ARGS:
        if args.get(name) is not None:
            args[name] = str(_resolve(Path(folder), args[name]))
    return args


# ------------------------------------------------------------------------------------------- the schema
def _load(path: Path, remedy: str):
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"cannot read {path}: {' '.join(str(exc).split())}; {remedy}") from None


def _json_type(value) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "an object",
               list: "a list", type(None): "null"}


def _expected(types: tuple) -> str:
    return " or ".join(_TYPE_NAMES[t] for t in types if not (t is int and float in types))


def _hooks(value, where: str = ""):
    """The first import hook anywhere in ``value``: (dotted key, its value), or None."""
    if isinstance(value, dict):
        for name, item in value.items():
            key = f"{where}.{name}" if where else str(name)
            if name in IMPORT_HOOKS:
                return key, item
            found = _hooks(item, key)
            if found:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _hooks(item, where)
            if found:
                return found
    return None


def _checked(card, schema: Dict[str, Key], path: Path, remedy: str, where: str = ""):
    """``card`` if it fits ``schema``; else a ConfigError naming ``path`` and the key."""
    hook = None if where else _hooks(card)
    if hook:
        raise ConfigError(f"{path}: '{hook[0]}' ({hook[1]!r}) would make fairseq import Python code when the model "
                          "loads; a run directory is data, never code: refused, nothing was imported (remove the key)")
    if not isinstance(card, dict):
        raise ConfigError(f"{path} holds a JSON {_json_type(card)}, not an object: it is damaged; {remedy}")
    for name, key in schema.items():
        if key.required and name not in card:
            raise ConfigError(f"{path} has no '{where}{name}' ({key.what}): it is damaged or was edited; {remedy}")
    for name, value in card.items():
        full = f"{where}{name}"
        if name not in schema:
            raise ConfigError(f"{path}: unknown key '{full}' (known: {', '.join(schema)}): it is damaged or was "
                              f"edited; {remedy}")
        key = schema[name]
        shown = json.dumps(value)[:60]
        if not isinstance(value, key.types) or (isinstance(value, bool) and bool not in key.types):
            raise ConfigError(f"{path}: '{full}' is {shown}, not {_expected(key.types)} ({key.what}); {remedy}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{path}: '{full}' is {shown}, not a finite number ({key.what}); {remedy}")
        if key.choices and value not in key.choices:
            choices = ", ".join(json.dumps(c) for c in key.choices)
            raise ConfigError(f"{path}: '{full}' is {shown}; it must be one of {choices} ({key.what})")
        if key.minimum is not None and isinstance(value, (int, float)) and value < key.minimum:
            raise ConfigError(f"{path}: '{full}' is {shown}; it must be at least {key.minimum:g} ({key.what})")
        if key.keys is not None:
            _checked(value, key.keys, path, remedy, where=f"{full}.")
        if key.items is not None:
            bad = [item for item in value if item not in key.items]
            if bad:
                raise ConfigError(f"{path}: '{full}' holds {json.dumps(bad[0])[:60]}; it may name only "
                                  f"{', '.join(key.items)} ({key.what})")
    return card


def _check_bpe(args: dict, path: Path, remedy: str):
    if args.get("bpe") and not args.get("bpe_codes"):
        raise ConfigError(f"{path}: 'args.bpe' is {args['bpe']} but there is no 'args.bpe_codes' (the BPE codes); "
                          f"{remedy}")


def _check_path_args(folder: Path, args: dict, path: Path, remedy: str, roots: Sequence[Path] = ()):
    for name in PATH_ARGS:
        if args.get(name) is not None:
            _check_file(folder, args[name], f"args.{name}", ARGS[name].file, path, remedy, roots=roots)


# ------------------------------------------------------------------------------------------- the files
def _resolve(folder: Path, value: str) -> Path:
    return Path(os.path.realpath(folder / value))


def _roots(folder: Path, card: dict, path: Path) -> list:
    """The real folders the card ``path`` (in ``folder``) may name files in: its own, and the prepared
    data folder of its ``data_workdir`` (relative to ``folder``), which must be there: a run copied
    without it is one error naming it, never a read of where the run was made."""
    roots = [Path(os.path.realpath(folder))]
    value = card.get("data_workdir")
    if value is None:
        return roots
    target = _resolve(folder, value)
    if not target.is_dir():
        raise ConfigError(f"{path}: 'data_workdir' names {target}, which does not exist (the prepared data folder "
                          f"the run reads, {value} relative to it): copy that folder along with the run, to there")
    if not (target / ".stages").is_dir():
        raise ConfigError(f"{path}: 'data_workdir' names {target}, which is not a folder a recipe prepared data in "
                          "(it has no .stages/): refused")
    return [*roots, target]


def _inside(folder: Path, value: str, path: Path, name: str, remedy: str, roots: Sequence[Path] = ()) -> Path:
    """``value`` (a card's path, relative to ``folder``) as a real absolute path, if it lies in
    ``folder`` or in one of ``roots`` (:func:`_roots`)."""
    target = _resolve(folder, value)
    roots = roots or [Path(os.path.realpath(folder))]
    if not any(target == root or root in target.parents for root in roots):
        where = f"{folder}" + (f" and its data_workdir {roots[-1]}" if len(roots) > 1 else "")
        raise ConfigError(f"{path}: '{name}' points outside {where} (to {target}); a card names files in its own "
                          f"folder (or the data folder it names) only: refused; was the folder moved or copied? "
                          f"{remedy}")
    return target


def _check_file(folder: Path, value: str, name: str, kind: str, path: Path, remedy: str,
                langs: Sequence[str] = (), roots: Sequence[Path] = ()) -> Path:
    """The real path of the file ``value`` that key ``name`` of card ``path`` names, if it lies in
    ``folder`` (or ``roots``) and is a file of ``kind`` (:data:`_FILE_KINDS`); else a ConfigError naming the key."""
    target = _inside(folder, value, path, name, remedy, roots)
    expected = _FILE_KINDS[kind]
    if not target.exists():
        raise ConfigError(f"{path}: '{name}' names {target}, which does not exist ({expected} expected); "
                          f"{remedy}")
    if kind == "data":
        if not target.is_dir():
            raise ConfigError(f"{path}: '{name}' names {target}, which is not a folder ({expected} expected)")
        missing = [f"dict.{lang}.txt" for lang in langs if not (target / f"dict.{lang}.txt").is_file()]
        if missing:
            raise ConfigError(f"{path}: '{name}' names {target}, which has no {missing[0]} ({expected} expected)")
        for lang in dict.fromkeys(langs):
            problem = _dictionary_problem(target / f"dict.{lang}.txt")
            if problem:
                raise ConfigError(f"{target / f'dict.{lang}.txt'} {problem} (a fairseq dictionary: one '<token> <count>' "
                                  f"a line): it is damaged or was edited; {remedy}")
        return target
    if not target.is_file():
        raise ConfigError(f"{path}: '{name}' names {target}, which is a folder ({expected} expected)")
    if kind == "checkpoint" and os.pathsep in value:  # fairseq splits it there into an ensemble
        raise ConfigError(f"{path}: '{name}' holds {value!r}; fairseq would read it as several files")
    problem = _PROBLEMS.get(kind, lambda _: None)(target)
    if problem:
        raise ConfigError(f"{path}: '{name}' names {target}, which {problem} ({expected} expected)")
    return target


def _dictionary_problem(target: Path) -> Optional[str]:
    """Why fairseq's Dictionary.add_from_file would refuse ``target`` (a traceback there), or None."""
    lines, problem = _text_lines(target)
    if problem:
        return problem
    seen = set()
    for n, line in enumerate(lines[:-1] if lines and lines[-1] == "" else lines, 1):
        text, overwrite = line.rstrip(), line.rstrip().endswith(" #fairseq:overwrite")
        fields = (text[:-len(" #fairseq:overwrite")] if overwrite else text).rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            return f"has a line without a count (line {n}: {line[:40]!r})"
        if fields[0] in seen and not overwrite:
            return f"holds {fields[0][:40]!r} twice (line {n})"
        seen.add(fields[0])
    return None


def _checkpoint_problem(target: Path) -> Optional[str]:
    from .checkpoint import not_a_checkpoint  # torch: only when a card names a checkpoint

    return not_a_checkpoint(target)


def _text_lines(target: Path):
    """(the lines of the UTF-8 text file ``target`` as Python's text mode reads them (\\r\\n and \\r
    end lines too), None), or (None, why not) if it is not UTF-8."""
    try:
        text = target.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"is not UTF-8 text (byte {exc.start + 1})"
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), None


def _bpe_codes_problem(target: Path) -> Optional[str]:
    """Why subword-nmt's BPE (``apply_bpe.BPE``) would refuse ``target`` as codes, read its way:
    an optional ``#version: X.Y`` line, then one merge a line (two symbols and a space)."""
    lines, problem = _text_lines(target)
    if problem or lines == [""]:
        return problem or "is empty"
    offset = 1
    if lines[0].startswith("#version:"):
        version = re.sub(r"(\.0+)*$", "", lines[0].split()[-1]).split(".")
        if not all(part.isdigit() for part in version):
            return "has a '#version:' line without a version number"
        lines, offset = lines[1:], 2
    while lines and lines[-1] == "":  # subword-nmt drops the final newlines
        lines.pop()
    merges = [line.strip("\r\n ").split(" ") for line in lines or [""]]
    for n, merge in enumerate(merges, offset):
        if len(merge) != 2:
            return f"is not subword-nmt BPE codes: line {n} is not two symbols separated by a space"
    if offset == 1 and all(re.fullmatch(r"\d+", count) for _, count in merges):  # subword-nmt would take it
        return "is a vocabulary (a word and its count on every line), not BPE codes"
    return None


def _bpe_vocabulary_problem(target: Path) -> Optional[str]:
    """Why subword-nmt's ``read_vocabulary`` would fail on ``target`` (one ``word count`` a line)."""
    lines, problem = _text_lines(target)
    if problem:
        return problem
    if lines[-1] == "":
        lines.pop()
    for n, line in enumerate(lines, 1):
        parts = line.strip("\r\n ").split(" ")
        if len(parts) != 2 or not re.fullmatch(r"\s*[+-]?\d+\s*", parts[1]):
            return f"is not a subword-nmt vocabulary: line {n} is not a word and its count separated by a space"
    return None


_FILE_KINDS = {
    "checkpoint": "a PyTorch checkpoint",
    "data": "the binarized data folder with the run's dictionaries",
    "bpe_codes": "subword-nmt BPE codes",
    "bpe_vocabulary": "a subword-nmt vocabulary",
    "text": "a text file",
}
_PROBLEMS = {"checkpoint": _checkpoint_problem, "bpe_codes": _bpe_codes_problem,
             "bpe_vocabulary": _bpe_vocabulary_problem}

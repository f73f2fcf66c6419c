"""recipes/parallel.sh --preset: settings for a kind of corpus and machine, from ``presets:`` in
recipes/configs/wmt14.yaml. The small preset's settings reach the fairseq-train command, options
given on the command line win over it, and the bundled mode is that preset (one fact in one place);
--dry-run's notes on the schedule: tests/test_schedule_notes.py. Dry runs and parsing only: the
8-minute runs that chose the preset's values are in recipes/results/parallel_multi30k_*.json."""
from test_slurm import parallel

from attn_kit.recipes import config, parallel as parallel_recipe, translation
from attn_kit.planning.sizes import SIZES

SMALL = config.presets("wmt14")["small"]
FILES = ["--src", "en", "--tgt", "de", "--train", "c/train", "--valid", "c/valid", "--test", "c/test"]


def dry_run(*argv, cwd):
    proc = parallel(["--dry-run", *FILES, *argv], cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def train_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("  $ ") and " --warmup-updates " in line)


def test_the_small_presets_settings_reach_the_commands(tmp_path):
    out = dry_run("--preset", "small", cwd=tmp_path)
    train = train_line(out)
    flags = " ".join(SIZES[SMALL["size"]].flags())
    assert f"--arch attn_paper_base {flags} " in train
    for flag in (f"--warmup-updates {SMALL['warmup_updates']} ", f"--lr-scale {SMALL['lr_scale']:g} ",
                 f"--max-tokens {SMALL['max_tokens_per_gpu']} --update-freq 1 ",
                 f"--max-update {SMALL['max_update']} ", f"--save-interval-updates {SMALL['save_interval_updates']} ",
                 f"--keep-interval-updates {SMALL['average']} ",
                 f"--validate-interval-updates {SMALL['validate_interval_updates']} ",
                 " ".join(map(str, SMALL["train_flags"])), " --cpu "):
        assert flag in train, flag
    assert SMALL["ngpus"] == 0 and SMALL["tokens_per_update"] == SMALL["max_tokens_per_gpu"]  # one CPU step
    assert train.startswith(f"  $ OMP_NUM_THREADS={SMALL['threads']} MKL_NUM_THREADS={SMALL['threads']} ")
    assert f"-s {SMALL['bpe_merges']} " in out and f"--num-update-checkpoints {SMALL['average']} " in out
    assert f"{tmp_path}/runs" not in out and "/runs/parallel_en_de_small/" in out  # its own default workdir


def strip_times(out: str) -> str:
    return "\n".join(line.split("] ", 1)[-1] for line in out.splitlines())


def test_the_paper_preset_is_the_default_and_unchanged(tmp_path):
    default, paper = dry_run(cwd=tmp_path), dry_run("--preset", "paper", cwd=tmp_path)
    assert strip_times(default) == strip_times(paper)  # the same commands
    train = train_line(default)
    assert "--warmup-updates 4000 " in train and "--max-tokens auto --update-freq auto " in train  # no GPU here: sized at its start
    assert "-s 32000 " in default and "/runs/parallel_en_de_base/" in default


def test_command_line_options_win_over_the_preset(tmp_path):
    out = dry_run("--preset", "small", "--tokens-per-update", "4096", "--warmup-updates", "800", "--lr-scale",
                  "1.5", "--p-drop", "0.1", "--layers", "3", "--bpe-merges", "8000", "--save-interval-updates", "50",
                  "--average", "3", "--max-update", "2000", "--threads", "4", "--workdir", "w", cwd=tmp_path)
    train = train_line(out)
    assert train.startswith("  $ OMP_NUM_THREADS=4 ")
    for flag in ("--encoder-layers 3 --encoder-embed-dim 256 ", "--dropout 0.1 ", "--warmup-updates 800 ",
                 "--lr-scale 1.5 ", "--max-tokens 2048 --update-freq 2 ", "--max-update 2000 ",
                 "--save-interval-updates 50 ", "--keep-interval-updates 3 "):
        assert flag in train, flag
    assert "-s 8000 " in out and f"{tmp_path}/w/data-bin" in out


def test_the_bundled_mode_is_the_small_preset():
    raw = config.load("wmt14")["bundled"]
    assert raw["preset"] == "small"
    # the bundled section holds only what differs from the preset (no number said twice)
    assert not {k for k, v in raw.items() if k in SMALL and SMALL[k] == v}
    bundled = config.settings("wmt14", "paper", "bundled")
    assert {k: bundled[k] for k in SMALL if k not in raw} == {k: v for k, v in SMALL.items() if k not in raw}
    # and the two recipes parse to the same model, batch, schedule, vocabulary and checkpoints
    b = translation.parse_args(["--bundled", "--workdir", "/nonexistent/b"])
    s = parallel_recipe.parse_args(["--preset", "small", *FILES, "--workdir", "/nonexistent/s"])
    for key in ("model", "tokens_per_update", "max_tokens_per_gpu", "warmup_updates", "lr_scale", "bpe_merges",
                "save_interval_updates", "average", "ngpus", "validate_interval_updates", "train_flags"):
        assert getattr(b, key) == getattr(s, key), key


def test_help_says_what_the_preset_sets():
    text = " ".join(parallel_recipe.preset_help().split())
    assert "paper (default)" in text and SIZES[SMALL["size"]].describe() in text
    for key in ("tokens_per_update", "warmup_updates", "lr_scale", "bpe_merges", "save_interval_updates", "average"):
        assert f"--{key.replace('_', '-')} {SMALL[key]:g}" in text, key


def test_an_unknown_preset_is_one_line(tmp_path):
    proc = parallel(["--dry-run", *FILES, "--preset", "tiny"], cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'tiny'" in proc.stderr

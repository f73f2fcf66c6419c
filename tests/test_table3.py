"""recipes/table3.sh: Table 3's rows at the paper's scale (the commands of --dry-run) and
scaled down (the sizes worked out by hand from Table 3 and recipes/configs/table3.yaml), and a
--smoke run of three rows on the smoke data: the table, its JSON and figure, resuming."""
import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import assert_one_error_line, run_main

from attn_kit.fairseq_layer.build import build_model, count_parameters, plugin_flags
from attn_kit.cli import UsageError
from attn_kit.planning.paper import TABLE3
from attn_kit.recipes import config
from attn_kit.recipes.table3 import main as table3_main
from attn_kit.recipes.table3 import model_flags, scaled_settings, select_rows, spearman

RECIPE = [sys.executable, "-m", "attn_kit.recipes.table3"]
ROW = {r.name: r for r in TABLE3}
BUNDLED_BASE = config.settings("table3", "bundled")["base"]


def recipe(*args, timeout=600):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run([*RECIPE, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.parametrize("name,expected", [
    # the paper's base at half depth and a quarter width: N 3, d_model 128, d_ff 512, h 4, d_k = d_v = 32
    ("base", dict(N=3, d_model=128, d_ff=512, h=4, d_k=32, d_v=32, P_drop=0.1, eps_ls=0.1)),
    ("A1", dict(h=1, d_k=128, d_v=128)),     # h = 1 (4 x 1/8 rounds to 0: at least 1): one head as wide as d_model
    ("A2", dict(h=2, d_k=64, d_v=64)),       # h halved, h * d_k = d_model
    ("A4", dict(h=16, d_k=8, d_v=8)),        # h x4
    ("B1", dict(h=4, d_k=8, d_v=32)),        # d_k alone, a quarter of base's
    ("C1", dict(N=1)), ("C2", dict(N=2)), ("C3", dict(N=4)),
    ("C4", dict(d_model=64, d_k=16, d_v=16)), ("C5", dict(d_model=256, d_k=64, d_v=64)),
    ("C7", dict(d_ff=1024)),
    ("D1", dict(P_drop=0.0)), ("D4", dict(eps_ls=0.2)),
    ("big", dict(N=3, d_model=256, d_ff=1024, h=8, d_k=32, d_v=32, P_drop=0.3, steps=300000)),
])
def test_bundled_rows_change_the_small_base_as_table3_changes_base(name, expected):
    s = scaled_settings(ROW[name], BUNDLED_BASE)
    assert {k: s[k] for k in expected} == expected


@pytest.mark.parametrize("name", ["base", "A1", "B1", "C4", "E", "big"])
def test_paper_scale_flags_build_the_model_of_the_readme_flags(name):
    """At the paper's scale the recipe's explicit flags and Table3Row.flags() (docs/table3.md,
    "Table 3 as flags") build models with the same parameters, as fairseq-train would."""
    row = ROW[name]
    ours = plugin_flags(*model_flags(scaled_settings(row, None)))
    readme = plugin_flags(*[f for f in row.flags() if f != "--arch" and f != row.arch], arch=row.arch)
    with torch.device("meta"):  # the shapes without the weights: the same count, without filling ~2x 200M floats
        sizes = [count_parameters(build_model(flags, vocab_size=1000)) for flags in (ours, readme)]
    assert sizes[0] == sizes[1]


def test_rows_and_groups():
    assert [r.name for r in select_rows("base,A,C5")] == ["base", "A1", "A2", "A3", "A4", "C5"]
    assert len(select_rows("all")) == 20
    with pytest.raises(UsageError, match="unknown A9"):
        select_rows("base,A9")


def test_spearman_against_hand_computed_values():
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == 0.8  # 1 - 6 * (1 + 1) / (4 * 15)
    assert spearman([3, 2, 1], [1, 2, 3]) == -1.0
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def in_process(*args):
    """The recipe's main() in this process (conftest.run_main): a process of its own costs ~1 s CPU more;
    the recipe's process is what test_bad_options_are_one_line and
    test_minutes_per_row_is_a_hidden_alias_of_train_minutes run (its data stages still run in theirs)."""
    return run_main(table3_main, *args)


def test_dry_run_prints_the_paper_scale_commands_of_every_row(tmp_path):
    proc = in_process("--ngpus", "8", "--dry-run", "--workdir", tmp_path / "t3", "--data-workdir",
                      tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    trains = [shlex.split(line.strip()[2:]) for line in proc.stdout.splitlines()
              if line.startswith("  $ ") and "fairseq_cli.train" in line]
    assert len(trains) == 20
    flag = lambda cmd, name: cmd[len(cmd) - 1 - cmd[::-1].index(name) + 1]  # noqa: E731  (the last one wins)
    for cmd in trains:
        assert cmd[cmd.index("--nproc-per-node") + 1] == "8"
    by_row = dict(zip([r.name for r in TABLE3], trains))
    assert flag(by_row["big"], "--max-update") == "300000" and flag(by_row["base"], "--max-update") == "100000"
    assert flag(by_row["D3"], "--label-smoothing") == "0" and flag(by_row["D4"], "--label-smoothing") == "0.2"
    assert flag(by_row["A1"], "--encoder-attention-heads") == "1" and "--attention-key-dim" not in by_row["A1"]
    assert flag(by_row["B1"], "--attention-key-dim") == "16"
    assert flag(by_row["E"], "--positional-encoding") == "learned"
    assert proc.stdout.count("--gen-subset valid --beam 4 --gnmt-alpha 0.6") == 20
    assert "--stop-stage binarize --dry-run" in proc.stdout  # the EN-DE recipe's data stages
    assert not (tmp_path / "t3").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize("argv,message", [
    (["--rows", "Z"], "--rows 'Z': unknown Z"),
    (["--train-minutes", "0"], "--train-minutes must be > 0"),
    (["--minutes-per-row", "2"], "--minutes-per-row is now --train-minutes"),
])
def test_bad_options_are_one_line(argv, message, tmp_path):
    assert_one_error_line(recipe("--smoke", "--dry-run", "--workdir", tmp_path, *argv), message)


def test_train_minutes_is_a_budget_per_row(tmp_path):
    """--train-minutes is a budget per row (the big row 3x); --minutes-per-row, its name before the one
    vocabulary of options, is refused (test_bad_options_are_one_line) and is not in --help."""
    def commands(*argv):
        proc = recipe("--smoke", "--dry-run", "--rows", "base,big", "--workdir", tmp_path / "t3",
                      "--data-workdir", tmp_path / "data", *argv)
        assert proc.returncode == 0, proc.stderr
        return [line.split("] ", 1)[-1] for line in proc.stdout.splitlines()]  # without the time stamps

    new = commands("--train-minutes", "2")
    out = "\n".join(new)
    assert "--stop-time-hours 0.0333" in out and "--stop-time-hours 0.1000" in out  # base 2 minutes, big 6
    help_text = recipe("--help").stdout
    assert "--train-minutes" in help_text and "per row" in help_text and "--minutes-per-row" not in help_text


def test_smoke_rows_make_the_table_and_resume(smoke_run, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(smoke_run, data)
    work = tmp_path / "t3"
    proc = recipe("--smoke", "--rows", "base,A2,C4", "--data-workdir", data, "--workdir", work)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # data prepared once, not twice: its recipe does not even run (runs starting together would meet at its lock)
    assert f"the EN-DE data in {data} is prepared already" in proc.stdout + proc.stderr
    assert "stage 5/9 binarize" not in proc.stdout
    info = json.loads((work / "table3.json").read_text())
    assert [r["row"] for r in info["rows"]] == ["base", "A2", "C4"]
    for key in ("command", "commit", "machine", "date", "spearman"):
        assert key in info
    vocab = sum(1 for _ in open(data / "data-bin" / "dict.en.txt")) + 4
    for r in info["rows"]:
        assert r["updates"] == 20 and r["dev_sentences"] == 200 and 1 < r["dev_ppl"] < vocab
        assert r["dev_ppl"] == round(2 ** r["dev_nll_loss_bits"], 2)
        # parameters: the model fairseq-train builds from the row's flags, shared embedding counted once
        assert r["params"] == count_parameters(build_model(plugin_flags(*r["flags"]), vocab_size=vocab))
    assert info["rows"][1]["settings"]["h"] == 2 and info["rows"][2]["settings"]["d_model"] == 32
    md = (work / "table3.md").read_text()
    assert sum(line.startswith("| ") for line in md.splitlines()) == 4 and "Spearman rank correlation" in md
    assert (work / "table3.png").read_bytes()[:4] == b"\x89PNG"
    again = in_process("--smoke", "--rows", "base,A2,C4", "--data-workdir", data, "--workdir", work)
    assert again.returncode == 0
    for i, name in enumerate(["base", "A2", "C4", "table"], 1):
        assert f"stage {i}/4 {name}: done already, skipping" in again.stdout
    assert "fairseq_cli.train" not in again.stdout
    # --merge: the run's rows as two group runs would have left them (each its own table3.json), tabled
    # together: the same rows as the one run, in Table 3's order (no second training: CI's time)
    parts = {"first": ["C4", "base"], "second": ["A2"]}
    for name, names in parts.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "table3.json").write_text(json.dumps(
            {**info, "rows": [r for n in names for r in info["rows"] if r["row"] == n]}))
    merged = tmp_path / "t3_all"
    proc = in_process("--smoke", "--merge", tmp_path / "first", tmp_path / "second", "--workdir", merged)
    assert proc.returncode == 0, proc.stderr
    table = json.loads((merged / "table3.json").read_text())
    assert table["rows"] == info["rows"] and table["spearman"] == info["spearman"]
    assert table["merged_from"] == [str(tmp_path / "first"), str(tmp_path / "second")]
    assert (merged / "table3.md").read_text() == md and "rows not in the merged runs: A1, A3, A4" in proc.stdout
    assert_one_error_line(in_process("--smoke", "--merge", work, tmp_path / "first", "--workdir", tmp_path / "x"),
                          f"row C4 is in {work} and in {tmp_path / 'first'}: give each row once")
    (tmp_path / "second" / "table3.json").write_text(json.dumps(
        {**info, "max_update": 99, "rows": [r for r in info["rows"] if r["row"] == "A2"]}))
    assert_one_error_line(in_process("--smoke", "--merge", tmp_path / "first", tmp_path / "second", "--workdir",
                                     tmp_path / "x"), "differ in max_update (99 vs 20)")
    # merging into one of the merged runs would replace its own table3.json: refused, the file as it was
    first = (tmp_path / "first" / "table3.json").read_bytes()
    assert_one_error_line(in_process("--smoke", "--merge", tmp_path / "first", merged, "--workdir", tmp_path / "first"),
                          f"--workdir {tmp_path / 'first'} is one of the --merge runs")
    assert (tmp_path / "first" / "table3.json").read_bytes() == first
    # a damaged table3.json (rows that are not Table 3's, a list for the table): one line, no traceback
    for damaged in ({**info, "rows": [{"row": "Z9"}]}, [1, 2], {**info, "rows": "none"}):
        (tmp_path / "second" / "table3.json").write_text(json.dumps(damaged))
        assert_one_error_line(in_process("--smoke", "--merge", tmp_path / "first", tmp_path / "second", "--workdir",
                                         tmp_path / "x"), "table3.json is not a Table 3 run's table")


def table2_run(folder, arch="attn_paper_base", updates=100000, **result):
    """A finished EN-DE recipe run as --reuse reads it: results.json and its final checkpoint."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    (folder / "results.json").write_text(json.dumps({"arch": arch, "updates": updates, "mode": arch[11:],
                                                     "pair": "en-de", **result}))
    return folder


def test_at_paper_scale_the_dry_run_prints_the_total_and_reuses_the_table_2_runs(tmp_path):
    """20 rows in one job, one after the other, with no total, and the base and big rows retraining
    what the Table 2 runs trained (300K big updates twice): the dry run sums the rows' training
    time, and --reuse evaluates a finished Table 2 run's final model instead of training the row."""
    base = table2_run(tmp_path / "base_run")
    argv = ["--ngpus", "8", "--dry-run", "--workdir", tmp_path / "t3", "--data-workdir", tmp_path / "data"]
    alone = in_process(*argv)
    reusing = in_process(*argv, "--reuse", f"base={base}")
    assert alone.returncode == 0 and reusing.returncode == 0, reusing.stderr
    total = [line for line in alone.stdout.splitlines() if "# Table 3 in all: 20 rows trained" in line]
    assert len(total) == 1 and "H100 " in total[0] and "on the paper's 8 P100s (fp32)" in total[0]
    assert "# Table 3 in all: 19 rows trained" in reusing.stdout and "base from finished runs" in reusing.stdout
    assert f"# train: none, the row is the final model of {base}" in reusing.stdout
    trains = [line for line in reusing.stdout.splitlines() if line.startswith("  $ ") and "fairseq_cli.train" in line]
    assert len(trains) == 19
    assert f"--path {base}/checkpoints/checkpoint_last.pt --gen-subset valid" in reusing.stdout


@pytest.mark.parametrize("run,message", [
    (dict(updates=99000), "it trained 99000 updates, the row 100000"),
    (dict(arch="attn_paper_big", updates=300000), "its arch is attn_paper_big, the row's attn_paper_base"),
    (dict(model_size={"layers": 2, "d_model": 256, "d_ff": 1024, "h": 4, "p_drop": 0.0}),
     "not the paper's model on WMT14 en-de"),
])
def test_reuse_takes_only_a_run_that_trained_the_rows_model(tmp_path, run, message):
    folder = table2_run(tmp_path / "run", **run)
    proc = in_process("--ngpus", "8", "--dry-run", "--workdir", tmp_path / "t3", "--reuse", f"base={folder}")
    assert_one_error_line(proc, message)
    proc = in_process("--smoke", "--dry-run", "--workdir", tmp_path / "t3", "--reuse", f"base={folder}")
    assert_one_error_line(proc, "the Table 2 runs are paper-scale; this is --smoke")

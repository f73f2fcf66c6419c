"""The WMT14 recipes (full and --smoke): batch sizing per GPU count, the exact
commands of the paper setup (--dry-run), and real --smoke runs through every
stage: a local HTTP mirror, a kill during training and a resume, a real
2-process data-parallel run on CPU, an idempotent rerun, and EN-FR's extra
corpora (UN, gzipped giga-fren members)."""
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, assert_one_error_line, copy_prepared, run_main
from attn_kit.fairseq_layer.fairseq_commands import batch_plan
from attn_kit.recipes import translation

RECIPE = [sys.executable, "-m", "attn_kit.recipes.translation"]


def recipe(*args, timeout=600):
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    return subprocess.run(RECIPE + [str(a) for a in args], capture_output=True, text=True, env=env, timeout=timeout)


def dry_run(*args):
    """The recipe's main() in this process (conftest.run_main), for what a dry run prints: its process
    imports torch (~2 s of CPU each); the recipe's process and its one error line are what
    test_bad_options_are_one_line, test_a_pair_other_than_the_scripts_is_one_error_line and the --smoke
    runs check."""
    return run_main(translation.main, *args)


def train_line(out: str) -> list:
    """The fairseq-train command a --dry-run printed, as a list."""
    line = next(line for line in out.splitlines()
                if line.startswith("  $ ") and ("fairseq_cli.train" in line or "fairseq-train " in line))
    return shlex.split(line.strip()[2:])


def flag(cmd, name):
    return cmd[cmd.index(name) + 1]


@pytest.mark.parametrize("devices", [1, 2, 3, 8, 16, 64])
def test_batch_plan_keeps_25000_tokens_per_update(devices):
    plan = batch_plan(25000, devices, 4096)
    assert plan.max_tokens <= 4096
    # ceil rounding adds at most one token per device and accumulation step
    assert 25000 <= plan.tokens_per_update < 25000 + devices * plan.update_freq
    # the fewest accumulation steps that fit: one fewer would need > 4096 tokens per device
    assert plan.update_freq == 1 or 25000 / (devices * (plan.update_freq - 1)) > 4096


def test_8_and_2_gpus_give_the_same_tokens_per_update():
    cmds = {}
    for n in (8, 2):
        proc = dry_run("--pair", "en-de", "--dry-run", "--ngpus", n, "--max-tokens-per-gpu", "4096", "--workdir",
                       "/tmp/never-created")
        assert proc.returncode == 0, proc.stderr
        cmds[n] = train_line(proc.stdout)
    tokens = {n: int(flag(c, "--nproc-per-node")) * int(flag(c, "--max-tokens")) * int(flag(c, "--update-freq"))
              for n, c in cmds.items()}
    assert tokens[8] == tokens[2] == 28000  # padded tokens: ~25000 real source and target (Sec. 5.1)
    assert (flag(cmds[8], "--update-freq"), flag(cmds[2], "--update-freq")) == ("1", "4")
    assert not Path("/tmp/never-created").exists()  # a dry run creates nothing


def test_dry_run_prints_the_paper_setup():
    proc = dry_run("--pair", "en-de", "--dry-run", "--ngpus", "8", "--arch", "attn_paper_big", "--workdir", "/tmp/x")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for url in ("/wmt13/training-parallel-europarl-v7.tgz", "/wmt13/training-parallel-commoncrawl.tgz",
                "/wmt14/training-parallel-nc-v9.tgz", "/wmt13/test.tgz", "/wmt14/test-full.tgz"):
        assert "http://www.statmt.org" + url in out
    assert "sha256 0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7" in out
    assert "learn-joint-bpe-and-vocab" in out and "-s 35000" in out
    assert "--joined-dictionary" in out
    cmd = train_line(out)
    assert Path(cmd[0]).name == "torchrun" and flag(cmd, "--nproc-per-node") == "8"
    for name, value in [("--arch", "attn_paper_big"), ("--max-update", "300000"), ("--warmup-updates", "4000"),
                        ("--adam-betas", "(0.9, 0.98)"), ("--adam-eps", "1e-9"), ("--label-smoothing", "0.1"),
                        ("--lr-scheduler", "attn_inverse_sqrt"), ("--keep-interval-updates", "20")]:
        assert flag(cmd, name) == value, name
    assert ("--fp16" in cmd) != ("--bf16-autocast" in cmd) and "--bf16" not in cmd  # fairseq's --bf16 means TPU
    gen = next(line for line in out.splitlines() if line.startswith("  $ fairseq-generate"))
    assert "--beam 4" in gen and "--gnmt-alpha 0.6" in gen and "--max-len-a 1 --max-len-b 50" in gen
    assert "--num-update-checkpoints 20" in out  # Sec. 6.1: big averages the last 20


def test_en_fr_big_is_the_en_fr_variant_and_multi_node_uses_torchrun():
    proc = dry_run("--pair", "en-fr", "--dry-run", "--arch", "attn_paper_big", "--ngpus", "8", "--gpu", "H100",
                   "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--workdir", "/tmp/x")
    assert proc.returncode == 0, proc.stderr
    cmd = train_line(proc.stdout)
    assert flag(cmd, "--arch") == "attn_paper_big_en_fr"
    assert (flag(cmd, "--nnodes"), flag(cmd, "--node-rank"), flag(cmd, "--master-addr")) == ("2", "1", "10.0.0.1")
    assert 16 * int(flag(cmd, "--max-tokens")) * int(flag(cmd, "--update-freq")) == 28000  # 1750 per GPU
    assert "training-giga-fren.tar" in proc.stdout and "training-parallel-un.tgz" in proc.stdout


def test_one_gpu_on_each_of_two_nodes_is_one_job():
    proc = dry_run("--dry-run", "--ngpus", "1", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                   "--workdir", "/tmp/x")
    assert proc.returncode == 0, proc.stderr
    cmd = train_line(proc.stdout)
    assert Path(cmd[0]).name == "torchrun" and flag(cmd, "--nproc-per-node") == "1"
    # fairseq's default world size would be this node's one GPU: each node would train alone
    assert flag(cmd, "--distributed-world-size") == "2"


@pytest.mark.parametrize("args,message", [
    (["--arch", "transformer_big"], "unknown --arch 'transformer_big'"),
    (["--nnodes", "2"], "--master-addr"),
    (["--pair", "en-fr", "--bundled"], "English-German"),
])
def test_bad_options_are_one_line(args, message):
    proc = recipe("--dry-run", *args)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert message in proc.stderr.strip().splitlines()[-1]


def test_a_pair_other_than_the_scripts_is_one_error_line():
    """recipes/wmt14_en_fr.sh passes --pair en-fr itself: a user's --pair en-de contradicts it."""
    proc = subprocess.run(["bash", str(REPO / "recipes" / "wmt14_en_fr.sh"), "--pair", "en-de", "--dry-run"],
                          capture_output=True, text=True, timeout=300)
    assert_one_error_line(proc, "--pair en-de: this recipe trains en-fr", "recipes/wmt14_en_de.sh")
    assert proc.stdout == ""


def test_gnmt_alpha_is_the_options_one_name(tmp_path):
    """--gnmt-alpha is the option's name in every command; --alpha, its name before, is refused saying so."""
    proc = dry_run("--bundled", "--dry-run", "--length-penalty", "gnmt", "--workdir", tmp_path / "w", "--gnmt-alpha",
                   "0.8")
    assert proc.returncode == 0, proc.stderr
    assert "--gnmt-alpha 0.8" in proc.stdout and "GNMT alpha 0.8" in proc.stdout
    old = recipe("--bundled", "--dry-run", "--length-penalty", "gnmt", "--workdir", tmp_path / "w", "--alpha", "0.8")
    assert_one_error_line(old, "--alpha is now --gnmt-alpha")
    help_text = recipe("--help").stdout
    assert "--gnmt-alpha" in help_text and "--alpha" not in help_text.replace("--gnmt-alpha", "")


def _wait_for(pattern, log: Path, proc, timeout=300):
    """Until ``log`` has a line matching ``pattern`` (False if ``proc`` ends first)."""
    start = time.time()
    while time.time() - start < timeout:
        if log.exists() and re.search(pattern, log.read_text(errors="replace")):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


@pytest.mark.slow
def test_smoke_en_de_kill_resume_two_cpu_processes_and_idempotent_rerun(tmp_path, smoke_run):
    # the smoke run's finished data stages (same data options), which the kill chain of tests/test_faults.py
    # interrupts and resumes: here training with two processes is
    work = copy_prepared(smoke_run, tmp_path / "w")
    args = ["--pair", "en-de", "--smoke", "--workdir", work, "--cpu-procs", "2"]
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    # 1. start, and kill the whole process tree once a mid-training checkpoint is saved: fairseq logs
    # "Saved checkpoint" after checkpoint_last.pt is written too (the file alone may precede that copy)
    proc = subprocess.Popen(RECIPE + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    try:
        saved = _wait_for(r"Saved checkpoint \S*checkpoint_1_20\.pt", work / "logs" / "train.log", proc)
        assert saved, proc.stdout.read().decode()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not (work / "results.json").exists()
    assert (work / ".stages" / "download.done").exists() and not (work / ".stages" / "train.done").exists()

    # 2. the same command again: earlier stages are skipped, training resumes from its checkpoint
    first = recipe(*args)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "stage 1/9 download: done already" in first.stdout
    train_log = (work / "logs" / "train.log").read_text()
    resumed = re.findall(r"Loaded checkpoint \S+checkpoint_last.pt \(epoch \d+ @ (\d+) updates\)", train_log)
    assert resumed and int(resumed[-1]) >= 20
    # both CPU workers trained together (gloo, world size 2)
    assert "distributed init (rank 0)" in train_log and (work / "logs" / "worker1.log").exists()
    assert "distributed init (rank 1)" in (work / "logs" / "worker1.log").read_text()

    results = json.loads((work / "results.json").read_text())
    for key in ("bleu_t2t", "bleu_compound_split", "bleu_tokenized", "sacrebleu", "sacrebleu_signature", "arch",
                "updates", "gpus", "averaged_updates", "tokens_per_update", "train_command"):
        assert key in results, key
    assert "compound split" in results["bleu_t2t_protocol"] and results["averaged_updates"][-1] == results["updates"]
    rows = [line.strip() for line in first.stdout.splitlines() if line.startswith("  BLEU, ")]
    assert rows[0].startswith("BLEU, the paper's protocol (t2t")  # printed first in the final table
    # and the summary leads with it (docs/wmt14.md: the paper's tokenized, compound-split BLEU), sacreBLEU after
    lead = [line for line in first.stdout.splitlines() if line.startswith(("BLEU = ", "sacreBLEU = "))]
    assert lead == [f"BLEU = {results['bleu_t2t']:.2f}   (the paper's protocol: tokenized, compound split)",
                    f"sacreBLEU = {results['sacrebleu']:.2f}   ({results['sacrebleu_signature']})"]
    assert results["updates"] == 60 and results["arch"] == "attn_paper_base" and results["gpus"] == 0
    assert results["cpu_processes"] == 2 and results["test_sentences"] == 200
    assert results["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert len(results["averaged_checkpoints"]) == 5
    # 3. a third run does nothing but report
    start = time.time()
    again = recipe(*args)
    assert again.returncode == 0
    assert again.stdout.count("done already, skipping") == 9
    assert time.time() - start < 30
    assert json.loads((work / "results.json").read_text())["sacrebleu"] == results["sacrebleu"]


@pytest.mark.slow
def test_smoke_en_fr_reads_un_and_gzipped_giga_fren(tmp_path):
    work = tmp_path / "w"
    proc = recipe("--pair", "en-fr", "--smoke", "--workdir", work, "--max-update", "20", "--save-interval-updates",
                  "5", "--warmup-updates", "5")  # the average takes no checkpoint from before the warm-up's end
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    results = json.loads((work / "results.json").read_text())
    assert results["pair"] == "en-fr" and "bleu_compound_split" not in results
    assert results["updates"] == 20 and results["averaged_updates"] == [5, 10, 15, 20]  # 20 % 5 == 0
    assert "bleu_t2t" in results and "without the compound split" in results["bleu_t2t_protocol"]
    # five corpora, each a fifth of the 2400 sample pairs, concatenated before cleaning
    for key in ("europarl", "commoncrawl", "news_commentary", "un", "giga_fren"):
        assert sum(1 for _ in open(work / "orig" / f"{key}.fr", encoding="utf-8")) == 480
    assert results["train_pairs"]["read"] == 2400


def test_tampered_mirror_file_is_refused(tmp_path):
    from attn_kit.recipes.wmt14_smoke import build_mirror

    mirror = tmp_path / "mirror"
    build_mirror(mirror, "en-de")
    bad = mirror / "wmt14" / "training-parallel-nc-v9.tgz"
    data = bytearray(bad.read_bytes())
    data[100] ^= 0xFF
    bad.write_bytes(bytes(data))
    work = tmp_path / "w"
    proc = recipe("--pair", "en-de", "--smoke", "--workdir", work, "--mirror", mirror, "--stop-stage", "download")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "training-parallel-nc-v9.tgz" in last and "sha256" in last
    assert not (work / "downloads" / "training-parallel-nc-v9.tgz").exists()
    assert not (work / ".stages" / "download.done").exists()


def test_an_archive_changed_after_its_download_is_refused_when_the_extract_stage_reads_it(tmp_path):
    """Issue 50: the extract stage hashes each archive again before reading it and compares the sha256 recorded
    at its download. An archive changed in place with its size and mtime kept (the stamps' stat sees nothing)
    is one error line naming the file, both hashes and what to do; nothing is extracted from it."""
    import hashlib

    work = tmp_path / "w"
    proc = recipe("--pair", "en-de", "--smoke", "--workdir", work, "--stop-stage", "download")
    assert proc.returncode == 0, proc.stderr[-2000:]
    path = work / "downloads" / "training-parallel-nc-v9.tgz"
    recorded = json.loads((work / "downloads" / ".verified" / f"{path.name}.json").read_text())["sha256"]
    assert recorded == hashlib.sha256(path.read_bytes()).hexdigest()
    st, data = path.stat(), bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    proc = recipe("--pair", "en-de", "--smoke", "--workdir", work, "--stage", "extract", "--stop-stage", "extract")
    assert_one_error_line(proc, f"{path}: its sha256 is {hashlib.sha256(bytes(data)).hexdigest()}, not {recorded}",
                          "delete it and run again to download it afresh")
    assert not (work / "orig" / "news_commentary.en").exists() and not (work / ".stages" / "extract.done").exists()


def test_smoke_average_ends_at_the_final_update(smoke_run):
    """25 updates with a checkpoint every 10: fairseq writes checkpoint_1_10.pt and checkpoint_1_20.pt,
    and the average of "the last 2" must be 20 and the final 25. (The same command giving the same numbers
    and averaged model bit for bit: tests/test_data_workdir.py's two fresh runs and tests/test_faults.py's
    killed-and-resumed run, each compared with this one.)"""
    import torch

    a = smoke_run
    ra = json.loads((a / "results.json").read_text())
    ma = torch.load(a / "checkpoint_avg.pt", weights_only=True)["model"]
    # Sec. 6.1's average ends at the final update: checkpoint_last.pt (25) joins checkpoint_1_20.pt
    assert ra["updates"] == 25 and ra["averaged_updates"] == [20, 25]
    assert [Path(p).name for p in ra["averaged_checkpoints"]] == ["checkpoint_1_20.pt", "checkpoint_last.pt"]
    c20, c25 = (torch.load(a / "checkpoints" / n, weights_only=True)["model"]
                for n in ("checkpoint_1_20.pt", "checkpoint_last.pt"))
    name = next(k for k in ma if ma[k].is_floating_point())
    assert torch.allclose(ma[name], (c20[name] + c25[name]) / 2, atol=1e-6)
    # what a reader needs to repeat it
    assert ra["seed"] == 1 and ra["threads"] == 1
    assert ra["train_command"].startswith("OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ")
    assert "fairseq-train" in ra["train_command"] and "--max-update 25 --seed 1" in ra["train_command"]
    tpu = ra["tokens_per_update"]
    assert 0 < tpu["source"] <= 1000 and 0 < tpu["target"] <= 1000  # real tokens under a 1000-token cap
    assert ra["max_tokens_per_update"] == 1000


@pytest.mark.parametrize("mode,size,label,table2", [
    ("files", {"layers": 2, "d_model": 256, "d_ff": 1024, "h": 4, "p_drop": 0.0},
     "attn_paper_base as 2+2 layers, d_model 256, d_ff 1024, h 4, P_drop 0", False),
    ("paper", {"layers": 6, "d_model": 512, "d_ff": 2048, "h": 8, "p_drop": 0.1}, "attn_paper_base", True),
    ("paper", {"layers": 4, "d_model": 512, "d_ff": 2048, "h": 8, "p_drop": 0.1},
     "attn_paper_base as 4+4 layers", False),
])
def test_the_report_names_the_model_by_its_shape_and_compares_with_table_2_only_on_wmt14(
        mode, size, label, table2, capsys):
    """A Multi30k run of a 2-layer d_model 256 model was reported as "attn_paper_base" and told to
    "compare with Table 2": the label comes from the shape trained, and Table 2 only for the paper's
    model on WMT14 data."""
    from attn_kit.recipes.translation import report

    r = {"sacrebleu": 3.48, "sacrebleu_signature": "sig", "pair": "en-de", "arch": "attn_paper_base", "mode": mode,
         "model_size": size, "updates": 135, "seed": 1, "averaged_updates": [100, 135], "test_sentences": 1000,
         "bleu_t2t": 3.48}
    report(r)
    out = capsys.readouterr().out
    assert f"en-de, {label}" in out
    assert ("compare with Table 2" in out) == table2 and ("the paper, Table 2" in out) == table2


@pytest.mark.parametrize("pair,table2,said", [
    ("en-de", True, "BLEU = 27.31   (the paper's protocol: tokenized, compound split; compare with Table 2)"),
    ("en-fr", False, "BLEU = 27.31   (the paper's protocol: tokenized)"),
])
def test_the_summary_leads_with_the_papers_bleu(pair, table2, said, capsys):
    """docs/wmt14.md: the paper's BLEU (t2t's tokenized BLEU, compound-split for German, the number of
    Table 2) is printed first; the summary led with sacreBLEU. A target without the paper's protocol
    (not de or fr) leads with sacreBLEU, its only score."""
    from attn_kit.recipes.translation import report

    r = {"sacrebleu": 26.05, "sacrebleu_signature": "sig", "pair": pair, "arch": "attn_paper_base",
         "mode": "paper" if table2 else "files", "updates": 100000, "seed": 1, "averaged_updates": [100000],
         "test_sentences": 3003, "bleu_t2t": 27.31}
    report(r)
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:3] == [said, "sacreBLEU = 26.05   (sig)"]
    report({**{k: v for k, v in r.items() if k != "bleu_t2t"}, "pair": "en-cs", "mode": "files"})
    assert capsys.readouterr().out.splitlines()[1] == "sacreBLEU = 26.05   (sig)"


@pytest.mark.parametrize("averaged,start,said", [
    ([331], 400, "the model of update 331 alone: no checkpoint after the 400-update warm-up to average"),
    ([1000], None, "the model of update 1000 alone,"),
    ([600, 700, 800], 400, "average of 3 checkpoints (updates 600, 700, 800)"),
])
def test_the_report_says_when_the_model_is_one_checkpoint_and_why(averaged, start, said, capsys):
    """A 4-minute Multi30k run ended at update 331 of a 400-update warm-up; averaging rightly took the
    final model alone, and the summary said "average of 1 checkpoints": it names the single model
    and, where the warm-up is the reason, says so."""
    from attn_kit.recipes.translation import report

    r = {"sacrebleu": 19.35, "sacrebleu_signature": "sig", "pair": "en-de", "arch": "attn_paper_base",
         "mode": "files", "model_size": {"layers": 2, "d_model": 256, "d_ff": 1024, "h": 4, "p_drop": 0.0},
         "updates": averaged[-1], "seed": 1, "averaged_updates": averaged, "averaged_from_update": start,
         "test_sentences": 1000}
    report(r)
    out = capsys.readouterr().out
    assert said in out and "average of 1 " not in out


@pytest.mark.parametrize("recipe,argv", [
    ("translation", []), ("translation", ["--arch", "attn_paper_big"]),
    ("parallel", ["--src", "en", "--tgt", "de", "--train", "t", "--valid", "v", "--test", "s"]),
])
def test_p_drop_and_the_size_options_mean_the_same_on_every_recipe_at_every_size(recipe, argv):
    """wmt14_en_de.sh --p-drop 0.2 at the paper's size was refused ("--p-drop resizes the --bundled
    and --smoke models") where parallel.sh took it: both now train the paper's model with fairseq's
    --dropout 0.2 and its own sizes otherwise; --h changes h alone."""
    import importlib

    from attn_kit.planning.sizes import ARCH_SIZES

    build = importlib.import_module(f"attn_kit.recipes.{recipe}").build
    s = build([*argv, "--p-drop", "0.2", "--h", "4", "--dry-run"])
    own = ARCH_SIZES[s.arch]
    assert s.size == own.replace(p_drop=0.2, h=4)
    flags = dict(zip(s.model[::2], s.model[1::2]))
    assert flags["--dropout"] == "0.2" and flags["--encoder-attention-heads"] == "4"
    assert flags["--encoder-embed-dim"] == str(own.d_model)


@pytest.mark.parametrize("pair,threshold", [("en-de", 11), ("en-fr", 1)])
def test_the_dry_run_prints_the_vocabulary_threshold_that_runs(pair, threshold, tmp_path, capsys):
    """The dry run printed apply-bpe's --vocabulary-threshold 50 where the run, learning BPE on a 1M-pair
    sample, applies 50 x the sample's share: EN-DE 50 x 1M / 4.5M = 11, EN-FR 50 x 1M / 36M = 1.4 -> 1."""
    from attn_kit.recipes import translation

    translation.main(["--pair", pair, "--dry-run", "--workdir", str(tmp_path / "w"), "--data-workdir", str(tmp_path / "d")])
    applies = [line for line in capsys.readouterr().out.splitlines() if "subword_nmt.apply_bpe" in line]
    assert len(applies) == 6 and all(f"--vocabulary-threshold {threshold} " in line for line in applies)


def test_the_dry_run_counts_the_bundled_and_the_users_pairs_for_the_threshold(tmp_path, capsys):
    """The bundled run and recipes/parallel.sh learning BPE on a sample: the dry run printed 50 (their
    pairs were not counted before the copy stage); it prints 50 x the sample's share of the pairs
    their data source counts: bundled 50 x 37070 / 166813 = 11.1 -> 11, 1000 user pairs 50 x 100 / 1000 = 5."""
    from attn_kit.recipes import parallel, translation

    translation.main(["--bundled", "--bpe-learn-pairs", "37070", "--dry-run", "--workdir", str(tmp_path / "b")])
    applies = [line for line in capsys.readouterr().out.splitlines() if "subword_nmt.apply_bpe" in line]
    assert len(applies) == 6 and all("--vocabulary-threshold 11 " in line for line in applies)
    for split, n in (("train", 1000), ("valid", 10), ("test", 10)):
        for lang in ("en", "de"):
            (tmp_path / f"{split}.{lang}").write_text("".join(f"{split} {lang} {i}\n" for i in range(n)))
    parallel.main(["--src", "en", "--tgt", "de", *(f"--{x}={tmp_path / x}" for x in ("train", "valid", "test")),
                   "--preset", "small", "--bpe-learn-pairs", "100", "--dry-run", "--workdir", str(tmp_path / "p")])
    applies = [line for line in capsys.readouterr().out.splitlines() if "subword_nmt.apply_bpe" in line]
    assert len(applies) == 6 and all("--vocabulary-threshold 5 " in line for line in applies)

"""Training curves (attn_kit.fairseq_layer.curves) from fairseq-train's JSON log format, read by attn_kit.fairseq_layer.fairseq_log,
and the progress lines with an ETA of the long stages (attn_kit.pipeline.progress)."""
import contextlib
import csv
import io
import json
import time

import pytest

from attn_kit.fairseq_layer import curves
from attn_kit.cli import Terminated, UserError
from attn_kit.fairseq_layer.fairseq_log import TrainProgress, echo_text, stats_lines, train_log_summary
from attn_kit.pipeline import progress

# Two runs of one training, as the train stage's log holds them: the first killed after update 30
# (its last checkpoint at 20), the second resumed from that checkpoint. Lines as fairseq 0.12 prints them.
LOG = """$ fairseq-train data-bin --log-format json
2026-01-01 10:00:00 | INFO | fairseq_cli.train | task: AttnTranslationTask
2026-01-01 10:00:10 | INFO | train_inner | {"epoch": 1, "update": 0.172, "loss": "9.5", "nll_loss": "9.3", "ppl": "630.4", "wps": "1000.5", "ups": "1", "wpb": "760.8", "src_wpb": "684.7", "bsz": "40", "num_updates": "10", "lr": "0.001", "gnorm": "0.8", "train_wall": "1", "wall": "10"}
2026-01-01 10:00:20 | INFO | train_inner | {"epoch": 1, "update": 0.345, "loss": "8.5", "nll_loss": "8.3", "ppl": "315.2", "wps": "2000", "ups": "1", "wpb": "760.8", "src_wpb": "684.7", "bsz": "40", "num_updates": "20", "lr": "0.002", "gnorm": "0.8", "train_wall": "1", "wall": "20"}
2026-01-01 10:00:22 | INFO | valid | {"epoch": 1, "valid_loss": "8.1", "valid_nll_loss": "7.9", "valid_ppl": "238.9", "valid_wps": "22449.6", "valid_wpb": "508.9", "valid_src_wpb": "451.2", "valid_bsz": "25", "valid_num_updates": "20"}
2026-01-01 10:00:30 | INFO | train_inner | {"epoch": 1, "update": 0.517, "loss": "7.9", "nll_loss": "7.7", "ppl": "207.9", "wps": "3000", "ups": "1", "wpb": "760.8", "src_wpb": "684.7", "bsz": "40", "num_updates": "30", "lr": "0.003", "gnorm": "0.8", "train_wall": "1", "wall": "30"}
$ fairseq-train data-bin --log-format json
2026-01-01 11:00:00 | INFO | fairseq.checkpoint_utils | Loaded checkpoint /w/checkpoints/checkpoint_last.pt (epoch 1 @ 20 updates)
2026-01-01 11:00:15 | INFO | train_inner | {"epoch": 1, "update": 0.517, "loss": "7.8", "nll_loss": "7.6", "ppl": "194.0", "wps": "4000", "ups": "1", "wpb": "760.8", "src_wpb": "684.7", "bsz": "40", "num_updates": "30", "lr": "0.003", "gnorm": "0.8", "train_wall": "1", "wall": "15"}
2026-01-01 11:00:20 | INFO | valid | {"epoch": 1, "valid_loss": "7.5", "valid_nll_loss": "7.2", "valid_ppl": "147.3", "valid_wps": "2102.6", "valid_wpb": "508.9", "valid_src_wpb": "451.2", "valid_bsz": "25", "valid_num_updates": "30", "valid_best_loss": "7.5", "valid_bleu": "12.5"}
"""

# The same first run in fairseq's simple format, as train.log held it before the recipes logged JSON.
SIMPLE_LOG = """$ fairseq-train data-bin --log-format simple
2026-01-01 10:00:10 | INFO | train_inner | epoch 001:     10 / 58 loss=9.5, nll_loss=9.3, ppl=630.4, wps=1000.5, ups=1, wpb=760.8, src_wpb=684.7, bsz=40, num_updates=10, lr=0.001, gnorm=0.8, train_wall=1, wall=10
2026-01-01 10:00:22 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.1 | nll_loss 7.9 | ppl 238.9 | wps 22449.6 | wpb 508.9 | src_wpb 451.2 | bsz 25 | num_updates 20
2026-01-01 10:00:23 | INFO | fairseq.checkpoint_utils | Saved checkpoint /w/checkpoints/checkpoint_1_20.pt (epoch 1 @ 20 updates, score 8.1) (writing took 0.1 seconds)
"""


def test_parse_keeps_each_update_once_and_adds_up_training_time():
    points = curves.parse(LOG.splitlines(keepends=True))
    assert [(p["split"], p["update"]) for p in points] == [
        ("train", 10), ("train", 20), ("valid", 20), ("train", 30), ("valid", 30)]
    first, resumed = points[3], points[4]
    # the killed run's update 30 is dropped (it resumed from 20); the resumed one's numbers stay
    assert first["loss"] == 7.8 and first["tokens_per_s"] == 4000
    # hours: run 1 lasted 30 s (10:00:00 to 10:00:30); run 2 adds 15 s and 20 s of its own; the hour
    # between the runs does not count
    assert points[0]["hours"] == pytest.approx(10 / 3600, abs=1e-5)
    assert first["hours"] == pytest.approx(45 / 3600, abs=1e-5)
    assert resumed["hours"] == pytest.approx(50 / 3600, abs=1e-5)
    assert points[2] == {"split": "valid", "update": 20, "hours": pytest.approx(22 / 3600, abs=1e-5),
                         "loss": 8.1, "nll_loss": 7.9, "ppl": 238.9}  # validation's own speed left out
    assert resumed["bleu"] == 12.5 and points[1]["lr"] == 0.002


def test_the_loss_curve_results_json_keeps_is_the_logs_own(tmp_path, smoke_run):
    """The log above: train losses of updates 10, 20 and the resumed 30; valid losses (and their nll)
    of 20 and 30, as fairseq logged them. And the --smoke run's results.json: every train_inner line
    of its training log, in order."""
    (tmp_path / "train.log").write_text(LOG)
    assert curves.loss_curve(tmp_path / "train.log") == {"train": [[10, 9.5], [20, 8.5], [30, 7.8]],
                                                         "valid": [[20, 8.1, 7.9], [30, 7.5, 7.2]]}
    assert curves.loss_curve(tmp_path / "missing.log") == {"train": [], "valid": []}
    logged = list(stats_lines((smoke_run / "logs" / "train.log").read_text().splitlines(), "train_inner"))
    recorded = json.loads((smoke_run / "results.json").read_text())["loss_curve"]["train"]
    assert recorded == [[int(f["num_updates"]), float(f["loss"])] for f in logged] and len(recorded) >= 2


def test_a_training_killed_before_its_first_checkpoint_starts_its_curves_over():
    """Killed after logging updates 10 and 20 but before any checkpoint: the rerun trains from
    update 0 (fairseq: "No existing checkpoint found"), so the killed run's points are dropped."""
    lines = LOG.splitlines(keepends=True)
    killed = lines[:4]
    rerun = [lines[0], "2026-01-01 10:05:00 | INFO | fairseq.trainer | No existing checkpoint found "
                       "/w/checkpoints/checkpoint_last.pt\n",
             lines[2].replace("10:00:10", "10:05:10").replace('"loss": "9.5"', '"loss": "9.4"'),
             lines[3].replace("10:00:20", "10:05:20")]
    points = curves.parse(killed + rerun)
    assert [(p["split"], p["update"], p["loss"]) for p in points] == [("train", 10, 9.4), ("train", 20, 8.5)]


def test_write_makes_csv_and_png_and_the_writer_refreshes_at_validation(tmp_path):
    log = tmp_path / "train.log"
    lines = LOG.splitlines(keepends=True)
    log.write_text("".join(lines[:4]))
    echoed = []
    writer = curves.CurveWriter(log, tmp_path, lambda line: echoed.append(line) or True)
    assert writer(lines[3]) == echo_text(lines[3]) and not (tmp_path / "curves.csv").exists()  # no validation yet
    log.write_text("".join(lines[:5]))
    writer(lines[4])  # a validation line: the curves are written
    rows = list(csv.DictReader(io.StringIO((tmp_path / "curves.csv").read_text())))
    assert [r["update"] for r in rows] == ["10", "20", "20"] and rows[2]["split"] == "valid"
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log.write_text(LOG)
    writer.finish()  # training ended
    rows = list(csv.DictReader(io.StringIO((tmp_path / "curves.csv").read_text())))
    assert list(rows[0]) == list(curves.COLUMNS) and len(rows) == 5 and echoed == lines[3:5]


def test_the_recipes_echo_validation_lines_in_fairseqs_simple_wording():
    """The JSON stats lines echoed while training read as fairseq's simple format words them."""
    lines = LOG.splitlines()
    assert echo_text(lines[4]) == ("2026-01-01 10:00:22 | INFO | valid | epoch 001 | valid on 'valid' subset | "
                                   "loss 8.1 | nll_loss 7.9 | ppl 238.9 | wps 22449.6 | wpb 508.9 | src_wpb 451.2 | "
                                   "bsz 25 | num_updates 20")
    assert echo_text(lines[1]) == lines[1]
    writer = curves.CurveWriter("/nonexistent/train.log", "/nonexistent", lambda line: True, final=False)
    assert writer(lines[2]).startswith("2026-01-01 10:00:10 | INFO | train_inner | epoch 001: loss=9.5, ")


def test_train_progress_prints_updates_rate_and_eta(capsys):
    now = [0.0]
    show = TrainProgress(100, clock=lambda: now[0])
    lines = LOG.splitlines()
    assert show(lines[2]) is False
    now[0] = 20.0
    assert show(lines[3]) is False and show(lines[1]) is False
    assert show(lines[4]).endswith("| valid | epoch 001 | valid on 'valid' subset | loss 8.1 | nll_loss 7.9 | ppl "
                                   "238.9 | wps 22449.6 | wpb 508.9 | src_wpb 451.2 | bsz 25 | num_updates 20")
    assert show(lines[7]) is True  # "Loaded checkpoint"
    assert capsys.readouterr().out == "    10/100 updates\n    20/100 updates, 2.00 s/update, ETA 2m40s\n"


def test_with_a_time_budget_the_eta_counts_to_the_budget_and_warns_inside_the_warmup(capsys):
    """parallel.sh --preset small --train-minutes 4 on Multi30k stopped at update 213 of its
    400-update warm-up while the progress line said "ETA 70m49s" (to --max-update 4000): the ETA
    counts to whichever ends first, and one warning says the budget ends inside the warm-up."""
    now = [0.0]
    show = TrainProgress(4000, clock=lambda: now[0], minutes=4, warmup=400)
    lines = LOG.splitlines()  # train_inner at updates 10 and 20
    show(lines[2])
    now[0] = 11.0  # 10 updates in 11 s: 1.1 s/update; this run's first 10 updates took ~11 s too
    show(lines[3])
    out = capsys.readouterr().out.splitlines()
    # 240 s - (11 + 10 x 1.1) = 218 s left: about 198 more updates, to update ~218
    assert out[1] == ("    warning: at 1.10 s/update the 4-minute budget ends near update 218, inside the 400-update "
                      "warm-up (the learning rate still rising; the average will hold the final model alone): the "
                      "warm-up alone takes about 7 minutes here; give more --train-minutes, or fewer --warmup-updates")
    assert out[2] == "    20/4000 updates, 1.10 s/update, ETA 3m38s (the 4-minute budget ends first, near update 218)"
    now[0] = 22.0
    show(lines[3])  # another line: no second warning
    assert "warning" not in capsys.readouterr().out


def test_a_budget_that_ends_after_max_update_changes_nothing(capsys):
    now = [0.0]
    show = TrainProgress(100, clock=lambda: now[0], minutes=60, warmup=40)
    lines = LOG.splitlines()
    show(lines[2])
    now[0] = 20.0
    show(lines[3])
    assert capsys.readouterr().out == "    10/100 updates\n    20/100 updates, 2.00 s/update, ETA 2m40s\n"


def test_the_summary_weights_tokens_per_update_by_the_updates_each_line_covers(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    assert train_log_summary(log) == {"updates": 20, "tokens_per_update": {
        "target": 760.8, "source": 684.7, "updates_measured": 31}}  # 10 + 10 + 10, then 1 for the repeated 30
    assert train_log_summary(tmp_path / "missing.log") == {"updates": None}


def test_a_log_from_before_the_json_format_gives_no_curves_and_no_tokens_but_no_error(tmp_path):
    """train.log of a run from before the recipes logged JSON: nothing fails; its curves and its
    tokens per update are missing (its updates come from the checkpoint lines)."""
    log = tmp_path / "train.log"
    log.write_text(SIMPLE_LOG)
    assert curves.parse(SIMPLE_LOG.splitlines()) == [] and curves.write(log, tmp_path) is None
    assert train_log_summary(log) == {"updates": 20}
    show = TrainProgress(100)
    assert [show(line) for line in SIMPLE_LOG.splitlines()] == [False, False, False, False]


@pytest.mark.parametrize("ending,written", [(None, True), (UserError, True), (KeyboardInterrupt, False),
                                            (Terminated, False)], ids=["ended", "failed", "ctrl-c", "sigterm"])
def test_the_writer_writes_the_curves_when_training_ends_or_fails_but_not_after_a_signal(tmp_path, ending, written):
    """Training's block ends: the curves are written once more (a failed training's too: they show
    how it went); not after Ctrl-C or SIGTERM (Terminated), which must stop at once: a signal that
    cut a refresh's import of matplotlib short would have it imported again half-loaded."""
    log = tmp_path / "train.log"
    log.write_text(LOG)
    with pytest.raises(ending) if ending else contextlib.nullcontext():
        with curves.CurveWriter(log, tmp_path, None) as writer:
            if ending:
                raise ending("stopped")
    assert (tmp_path / "curves.csv").exists() == (tmp_path / "curves.png").exists() == writer.written == written
    with curves.CurveWriter(log, tmp_path / "dry", None, final=False):  # --dry-run: nothing trained, nothing written
        pass
    assert not (tmp_path / "dry").exists()


def test_progress_line_has_the_rate_and_an_eta():
    now = [100.0]
    lines = []
    p = progress.Progress("tokenize train.en", 1000, every=10, clock=lambda: now[0], out=lines.append)
    now[0] = 105.0
    p.update(100)  # within 10 s of the start: quiet
    now[0] = 120.0
    p.update(400)  # 400 lines in 20 s: 20 lines/s, 600 left: 30 s
    assert lines == ["tokenize train.en: 400/1000 lines (40%), 20 lines/s, ETA 30s"]
    assert progress.clock_text(3725) == "1h02m" and progress.clock_text(65) == "1m05s"


def test_watch_lines_counts_what_a_command_writes(tmp_path):
    out = tmp_path / "gen.out"
    out.write_text("S-0\tx\nD-0\t-1\ty\nS-1\tz\nD-1\t-1\tw\nD-2\t-1")  # the last line is not complete yet
    assert progress.count_complete_lines(out, 0, b"D-") == (2, len("S-0\tx\nD-0\t-1\ty\nS-1\tz\nD-1\t-1\tw\n"))
    reported = []
    with progress.watch_lines(out, 3, "translate", "sentences", b"D-", every=0.05) as p:
        p.out = reported.append
        time.sleep(0.3)
        with open(out, "a") as f:
            f.write("\tv\n")
        time.sleep(0.3)
    assert reported[-1].startswith("translate: 3/3 sentences (100%)")


def test_the_png_is_redrawn_at_most_every_minute_and_when_training_ends(tmp_path, monkeypatch):
    """The CSV at every validation line; the PNG at the first, then only once PNG_SECONDS have passed,
    and always when training's block ends (a small run validates every few seconds, and each drawing
    costs a CPU-second)."""
    log, drawn, now = tmp_path / "train.log", [], [1000.0]
    log.write_text(LOG)
    valid = next(line for line in LOG.splitlines() if "| valid |" in line)
    monkeypatch.setattr(curves, "plot", lambda points, path, title="": drawn.append(len(points)))
    monkeypatch.setattr(curves.time, "monotonic", lambda: now[0])
    with curves.CurveWriter(log, tmp_path, None) as writer:
        for seconds in (0, 10, curves.PNG_SECONDS - 11, 1):  # at 0, 10, 59 and 60 s after the first
            now[0] += seconds
            (tmp_path / "curves.csv").unlink(missing_ok=True)
            writer(valid)
            assert (tmp_path / "curves.csv").exists()
        assert len(drawn) == 2
    assert len(drawn) == 3 and writer.written

"""What happens when things go wrong: each case the fault-injection suite
(tests/test_faults.py) runs, what must come out of it, and the test that checks
it. README's table "What happens when things go wrong" is made from this list
(``python scripts/readme_tables.py``), and a test checks that every case names
a test of the suite, so the table says only what is tested.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    fault: str
    outcome: str
    test: str  # a test in tests/test_faults.py, or tests/FILE.py::test_name


SAME = "the same BLEU, translations and averaged model (bit for bit) as an uninterrupted run"

CASES = [
    Case("SIGTERM (a scheduler, `kill`) in the middle of any stage",
         "one line `error: terminated (SIGTERM); finished stages are kept, ...`, exit 143; the running command is "
         "stopped and temporary files removed; the same command resumes that stage and ends with " + SAME,
         "test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("SIGKILL of the recipe in the middle of any stage",
         "the commands it started get SIGTERM from the kernel and hold the work directory's lock until they exit; "
         "the same command then takes the lock over (one line says so), resumes the stage (training from its last "
         "checkpoint) and ends with " + SAME,
         "test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("a second run on the same `--workdir`",
         "exits at once with `error: WORKDIR is in use by another run (pid N, started ...: COMMAND)`; the first run "
         "goes on undisturbed",
         "test_damaged_outputs_are_made_again_and_a_second_run_is_refused"),
    Case("the lock of a run that was killed",
         "taken over at once (the kernel drops a dead process's lock), with one line naming the dead run",
         "test_a_lock_left_by_a_killed_run_is_taken_over"),
    Case("an output of any stage truncated or deleted after the run (half of `prep/train.de`, of a `.bin` file, "
         "of `checkpoint_last.pt`, ...)",
         "that stage names the output, moves it to `WORKDIR/stale/STAGE/` and runs again; what it makes is identical, "
         "so later stages stay done; the run ends with " + SAME,
         "test_damaged_outputs_are_made_again_and_a_second_run_is_refused"),
    Case("an option changed on a finished run (`--average 1`)",
         "that stage starts over (its old outputs moved to `stale/`), then each stage whose inputs changed, each "
         "saying which; the others are skipped",
         "test_a_changed_option_reruns_its_stage_and_everything_after_it"),
    Case("the score stage alone (`--stage score`) on a reference with fewer lines than the translations",
         "the stage notices its changed input and runs again; one line naming the translations file, both counts "
         "and what to do", "test_scoring_against_a_reference_with_fewer_lines_is_one_line"),
    Case("`checkpoint_last.pt` truncated (a kill or a full disk while fairseq copies it)",
         "moved to `checkpoint_last.pt.bad`; training resumes from the newest intact `checkpoint_E_U.pt` (damaged "
         "ones skipped), saying so",
         "test_a_truncated_checkpoint_last_resumes_from_the_newest_intact_checkpoint"),
    Case("a full disk (ENOSPC) while a stage writes",
         "one line `error: no space left on the device to write FILE ...`; no temporary file left; after freeing "
         "space the same command completes",
         "test_a_full_disk_in_a_stage_is_one_line_and_the_rerun_completes"),
    Case("a `--workdir` that cannot be created", "one line naming `--workdir` and why",
         "test_an_uncreatable_workdir_is_one_line_naming_the_option"),
    Case("`fairseq-generate --user-dir attn_plugin --path missing.pt`",
         "`error: checkpoint not found: missing.pt (--path)`", "test_generate_with_a_missing_checkpoint"),
    Case("a checkpoint trained with another dictionary, at generate time",
         "one line: the tensor, its shape in the checkpoint and in the model, \"trained with another dictionary\"",
         "test_generate_with_a_checkpoint_for_another_dictionary"),
    Case("a `.pt` that is empty, random bytes or a truncated zip",
         "one line saying which (never \"loading it could run code\", which is kept for pickles that name code)",
         "test_a_file_that_is_not_a_checkpoint_says_what_it_is"),
    Case("averaging checkpoints of different shapes or parameters, or whose `model` holds a non-tensor",
         "one line naming the files and the tensor; every input is checked before anything is written",
         "test_averaging_checks_every_input_before_writing"),
    Case("averaging with `--num-update-checkpoints 0` or `-1`, or an `--output` that is a folder or under a file",
         "a usage error (exit 2) in one line, before any checkpoint is read; nothing written",
         "test_averaging_refuses_a_bad_command_line_before_reading"),
    Case("averaging into a folder the user may not write", "one line before any checkpoint is read; nothing written "
         "(skipped when the tests run as root, who may write anywhere)",
         "test_averaging_into_an_unwritable_folder_is_refused_before_reading"),
    Case("averaging onto a full disk",
         "one line, no temporary file, nothing else on stderr (no \"Please install tensorboardX\")",
         "test_averaging_on_a_full_disk_is_one_line_and_leaves_nothing"),
]

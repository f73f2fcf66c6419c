"""What happens when things go wrong: each case the fault-injection suite (tests/test_faults.py) runs, what must
come out of it, and the test that checks it. docs/faults.md's table "The fault cases, each with its test" is made
from this list (``python scripts/readme_tables.py``), and a test checks that every case names a test of the suite,
so the table says only what is tested.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    fault: str
    outcome: str
    test: str  # a test in tests/test_faults.py, or tests/FILE.py::test_name


SAME = "the same BLEU, translations and averaged model (bit for bit) as an uninterrupted run"

CASES = [
    Case("SIGTERM (a scheduler, `kill`) at any moment of any stage: mid-command, between steps, halfway through "
         "an import (`import matplotlib` in the first curves refresh), after fairseq-train ended, in the final report",
         "one line `error: terminated (SIGTERM); finished stages are kept, ...`, exit 143; the running command is "
         "stopped and temporary files removed; the same command resumes that stage and ends with " + SAME
         + ", and the same training curves",
         "test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("Ctrl-C (SIGINT to the recipe's process group, fairseq-train included) at any moment, the first curves "
         "refresh and the final report included",
         "one line `error: interrupted; finished stages are kept, run the same command again to resume`, exit 130; "
         "the rerun as after SIGTERM",
         "test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("a signal after fairseq-train ended, before the train stage finished",
         "the rerun does not start fairseq-train again (it would train one more update); it writes the curves and "
         "finishes the stage; the run ends with " + SAME,
         "test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("a signal whose exception is lost or replaced (raised in a finalizer, inside C code that reports its own "
         "error, in cleanup that imports a half-loaded module again) or that comes while Python exits",
         "still one line and exit 143 or 130, no traceback; a command then running is stopped at its next output line",
         "test_a_signal_at_any_moment_is_one_line_and_its_exit_status"),
    Case("a training killed before its first checkpoint",
         "the rerun trains from update 0 and `curves.csv` drops the killed run's points (each update once)",
         "tests/test_curves.py::test_a_training_killed_before_its_first_checkpoint_starts_its_curves_over"),
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
    Case("averaging a directory whose last checkpoints are not every --save-interval-updates (one removed, or "
         "an interval that ended an epoch, which fairseq alone does not keep)",
         "one line naming the missing updates, before anything is averaged (the plugin keeps every interval "
         "checkpoint: patch 7)",
         "tests/test_interval_checkpoints.py::test_averaging_refuses_checkpoints_that_are_not_evenly_spaced"),
    # -- what you load and what you write (issue 25)
    Case("a run's `inference.json` (or an export's `ct2_card.json`) with `user_dir` or another key the schema does "
         "not know",
         "refused in one line naming the file and the key before anything is imported or loaded (translate, "
         "plot_attention, export, `--print-interactive-command`, `from_pretrained`); the code it names never runs",
         "tests/test_run_cards.py::test_a_user_dir_in_the_run_card_is_refused_and_never_imported"),
    Case("a damaged run card: `checkpoint`, `args` or `data` missing, a list instead of an object, a value of the "
         "wrong type", "one line naming the file and the key, exit 1",
         "tests/test_run_cards.py::test_a_damaged_or_foreign_run_card_is_one_error_naming_file_and_key"),
    Case("a path in a run card that is missing, outside the run directory, or not the file its key expects (BPE "
         "codes, vocabulary, checkpoint)",
         "one line naming the key and the file (never subword-nmt's message echoing the file); the export copies "
         "nothing from outside",
         "tests/test_run_cards.py::test_a_file_that_is_not_bpe_codes_is_named_not_echoed"),
    Case("`results.json` without `test_output`, holding a list, or naming a test file that is gone or outside the "
         "run (`--check-test-set`)",
         "one line naming `results.json` and the key, before anything is translated",
         "tests/test_run_cards.py::test_check_test_set_checks_results_json_before_translating"),
    Case("an export's `ct2_card.json` without `args`, `paths` or `args.bpe`",
         "one line naming the key (it used to translate, exit 0, with BPE left in the output)",
         "tests/test_ctranslate2.py::test_a_damaged_card_is_one_line_naming_the_key"),
    Case("a checkpoint that is a raw pickle, not torch.save's archive",
         "refused on its first bytes in one line, before torch reads it (no torch warning); nothing in it runs",
         "tests/test_run_cards.py::test_a_raw_pickle_checkpoint_is_the_projects_one_line_only"),
    Case("an existing folder given as `translate.py --output` or `plot_attention.py --out/--dump`",
         "one line before any work; the folder and all it holds untouched (an existing file is replaced only with "
         "`--force`)", "tests/test_translate.py::test_an_existing_folder_given_as_output_is_left_alone"),
    Case("an output that cannot be written (`--output /proc/x`)",
         "one line naming `--output` before the input is read or anything translated",
         "tests/test_translate.py::test_an_output_that_cannot_be_written_fails_before_any_translation"),
    Case("bytes that are not UTF-8 in text a command reads (`translate.py`'s stdin or `--input`, score_bleu, "
         "evalb, `recipes/parallel.sh`'s corpus)",
         "one line naming the input, the line and the byte, whatever the locale; `--errors replace` reads them as "
         "U+FFFD", "tests/test_text_policy.py::test_score_bleu_refuses_bytes_that_are_not_utf8_in_one_line"),
    Case("a UTF-8 byte-order mark, CRLF or lone-CR line ends (translate's input, a `parallel.sh` corpus, score_bleu's "
         "and evalb's files)",
         "read as plain lines: the BOM removed (never a token, the same translation), every line end ends a line",
         "tests/test_text_policy.py::test_parallel_reads_a_bom_and_every_line_end_as_plain_lines"),
    Case("source and target files of a split with the same content, `--train` = `--valid` = `--test`, or sentence "
         "pairs shared between splits (`recipes/parallel.sh`)",
         "one `warning:` line each (with how many pairs are shared); the run goes on",
         "tests/test_recipe_parallel.py::test_sentence_pairs_shared_between_splits_are_counted"),
    Case("the temporary folders a stage's tools leave (the pymp-* folder of each fairseq data-loading worker)",
         "removed with the command's own TMPDIR when it ends; nothing is left in /tmp",
         "tests/test_pipeline.py::test_a_stage_command_leaves_no_multiprocessing_folder_in_tmp"),
    Case("a run killed with SIGKILL while a command runs: the command's TMPDIR (`attn-PID-*`), which the run "
         "could not remove",
         "the next command any run starts removes every such folder whose process has ended",
         "tests/test_faults.py::test_sigterm_then_sigkill_in_every_stage_then_rerun"),
    Case("a folder of the user's named like a scratch folder in TMPDIR (`attn-2017-notes/`), a live command's "
         "scratch folder seen from another PID namespace sharing TMPDIR, one made on another host or boot, a link",
         "left alone (the clean-up deleted the first two): a scratch folder holds a marker naming the host, boot, "
         "PID namespace, process and its start time that made it, and only those of ended processes of this "
         "machine and namespace are removed",
         "tests/test_scratch.py::test_only_the_kits_folders_of_ended_processes_go"),
    Case("a reader that goes away (`translate.py RUN < in | head -1`, a recipe's dry run into `head`)",
         "the command ends quietly with exit 141, as the shell's own tools do (it printed `error: [Errno 32] Broken "
         "pipe`, exit 1)",
         "tests/test_streams.py::test_a_reader_that_goes_away_ends_the_command_quietly"),
    Case("standard output full (`> /dev/full`) or closed (`>&-`), standard input closed (`<&-`)",
         "one line naming the stream (`writing standard output: No space left on device`; `standard input is "
         "closed: ...`), exit 1 (a full one named no file; a closed one was an AttributeError traceback)",
         "tests/test_streams.py::test_a_full_or_closed_standard_stream_is_one_line_naming_it"),
    Case("SIGHUP (a closed terminal or ssh connection) or SIGQUIT (Ctrl-\\) during a command",
         "as SIGTERM: one line `terminated (SIGHUP)`, exit 129 (SIGQUIT: 131), the running tool stopped and its "
         "scratch folder removed (it ended with no line, the folder left); a file-size limit (`ulimit -f`) is one "
         "line as a full disk is",
         "tests/test_streams.py::test_sighup_and_sigquit_end_a_command_as_sigterm_does"),
    Case("a user's own file where a new run's stage would write (a results.json in the folder given as --workdir)",
         "one line before anything runs, the file as it was (it was replaced without --force); a stage's outputs "
         "that its own stamped run made are its to replace",
         "tests/test_pipeline.py::test_a_file_no_run_made_where_a_stage_would_write_is_refused_before_anything_runs"),
    Case("two copies of the plugin in one process: --user-dir naming another folder called attn_plugin than the "
         "one loaded, or a copy under another name imported beside it",
         "one line naming both copies (fairseq's ImportError or \"Cannot register duplicate model\" traceback)",
         "tests/test_registration.py::test_a_second_copy_of_the_plugin_is_one_line"),
    Case("a read-only shared --data-workdir whose stages are done",
         "read as it is, one line saying so (it was refused: its lock cannot be written); one whose stage would run "
         "takes the lock as before",
         "tests/test_pipeline.py::test_a_read_only_shared_folder_whose_stages_are_done_is_read_without_its_lock"),
    Case("an archive holding a wanted member twice",
         "its last copy is taken, as tar extracts it (it took the first)",
         "tests/test_download.py::test_a_member_in_an_archive_twice_is_taken_from_its_last_copy_as_tar_does"),
    Case("a mirror URL with a password (`--mirror http://me:secret@host/`), a local mirror's link to a 0600 file",
         "the password is shown as *** in every line (it was echoed in the error); the .bad copy of a file that "
         "failed its checksum keeps the mirror file's 0600 (it was 0644)",
         "tests/test_download.py::test_a_mirrors_password_is_never_printed_and_a_private_file_stays_private"),
    Case("a run's dictionary with a line without a count, or a word twice (`translate.py`, `from_pretrained`, even "
         "with --ignore-changed-files)",
         "one line naming the file and the line (fairseq's ValueError or RuntimeError traceback)",
         "tests/test_translate.py::test_a_dictionary_line_without_a_count_is_one_line_even_going_on_anyway"),
    Case("a deleted current folder, a ':' in --workdir or --data-workdir",
         "one line before any work (the first failed late with oneMKL's fatal error, the second at the train stage "
         "after the data stages: fairseq reads a data path with ':' as a list of folders)",
         "tests/test_streams.py::test_a_deleted_current_folder_and_a_colon_in_the_work_directory_are_one_line_before_any_work"),
    Case("a test or valid line of only control or zero-width characters (`recipes/parallel.sh`)",
         "one `warning:` line per file, where and how many (it passed the empty-line check and became an empty "
         "sentence, decoded and scored silently)",
         "tests/test_text_policy.py::test_a_line_of_only_invisible_characters_is_said_with_its_count"),
    Case("a mirror that never stops sending (a 7,604-byte archive: 3.7 GB of .partial in 15 s, the progress line "
         "\"3020.0 / 0.0 MB, ETA 0s\")",
         "the download stops as soon as it passes the published size, the Content-Length, or (neither known) "
         "8 GB; one line, the partial download removed",
         "tests/test_download.py::test_a_server_that_never_stops_sending_is_cut_off_at_the_files_size"),
    Case("an archive whose member unpacks to far more than the archive (a 310 KB gzip member to 300 MB), or whose "
         "wanted member is a link, a device or a folder",
         "extraction stops at 20 times the archive's size, nothing of the member kept; the link is one line (it was "
         "a traceback)",
         "tests/test_download.py::test_an_archive_that_unpacks_to_far_more_than_its_size_or_holds_a_link_is_one_line"),
    Case("a TMPDIR too long for the sockets of fairseq's data-loader workers (87 characters)",
         "the commands' scratch folders go in /tmp (one line saying so), where fairseq-train waited forever at 0% "
         "CPU; one line naming the limit where /tmp cannot be written",
         "tests/test_scratch.py::test_a_long_tmpdir_is_replaced_by_a_short_one_saying_so"),
    Case("an output that is, or holds, what the command reads: `export_ctranslate2.py RUN OUT --force` with RUN "
         "inside OUT, `average_checkpoints.py --output` one of its `--inputs`, `translate.py --output` its `--input`",
         "one line before any work, --force or not, nothing touched (the export deleted the run it exported); "
         "`--inputs X X Y` says X is weighed twice (it was silent)",
         "tests/test_outputs.py::test_an_export_never_replaces_the_run_it_reads"),
    Case("a run's dictionary edited after the run (two lines swapped), or another run's BPE codes in its place",
         "translate.py, plot_attention.py, the CTranslate2 export and from_pretrained refuse it in one line naming "
         "the file (the run card holds the sha256 of every file the model's token ids depend on, as the run made "
         "it); `--ignore-changed-files` (from_pretrained: `ignore_changed_files=True`) goes on. translate.py "
         "printed a wrong token for every line, exit 0",
         "tests/test_translate.py::test_a_dictionary_or_bpe_file_changed_after_the_run_is_refused_unless_asked"),
    Case("a run an older commit trained with fairseq's adam, its train stamp without the optimizer, then a raised "
         "--max-update",
         "the run's own train_command.json says which Adam trained it: training starts over (its outputs set aside), "
         "where it counted as done and resuming failed in fairseq's AssertionError; a run attn_adam trained stays done",
         "test_a_run_trained_with_another_optimizer_before_it_was_recorded_is_trained_again"),
    Case("a training option changed on a finished run (`--lr-scale 1.5`): the train stage's outputs set aside, "
         "checkpoint_last.pt inside the checkpoints/ folder also set aside",
         "the folder goes to stale/train/ whole, the old model in it bit for bit (checkpoint_last.pt went alone, "
         "moving checkpoints/ onto it failed, and the rerun deleted that half set-aside); a move that fails puts "
         "back what was moved (one line); another file system: copied, then removed; an earlier set-aside is kept beside "
         "it (stale/train.2/: it was deleted, a user's file in checkpoints/ with it)",
         "test_a_changed_training_option_sets_the_old_model_aside_whole"),
    Case("`recipes/table3.sh --merge A B --workdir A`, or a merged run's table3.json damaged",
         "one line each, A's table3.json as it was (it was replaced; the damaged file was a traceback)",
         "tests/test_table3.py::test_smoke_rows_make_the_table_and_resume"),
    # -- devices (issue 25)
    Case("a --ngpus the machine cannot provide (the default 8 where no GPU is visible, or fewer GPUs than asked)",
         "one line before the first stage naming what is visible and what to pass (--ngpus 0 or N, --cpu-procs N), "
         "exit 2, nothing written; --dry-run prints the plan with the line as a note; --launcher slurm submits from "
         "a host without GPUs and the job checks on its node",
         "tests/test_devices.py::test_the_default_8_gpus_on_a_machine_without_gpus_is_one_line_before_the_first_stage"),
    Case("torchrun or srun starting fairseq-train processes that would each train alone (no GPU, --cpu, more "
         "processes than GPUs, world size 1)",
         "each process: one error line before training, exit 1; nothing written to --save-dir",
         "tests/test_devices.py::test_a_torchrun_process_without_gpus_refuses_to_train_alone"),
    Case("eight trainings started on one checkpoint directory",
         "the first trains to the end undisturbed; each of the others is refused in one line naming the first "
         "(pid, host, start, command), exit 1",
         "tests/test_devices.py::test_eight_trainings_on_one_checkpoint_directory_one_trains_the_others_are_refused"),
    Case("two runs preparing one `--data-workdir` at once (base and big started together)",
         "the second waits, naming the first, then finds the data stages done (`done already, skipping (in DIR)`): "
         "the data is prepared once, and both runs score as a run with its own data does",
         "tests/test_data_workdir.py::test_two_smoke_runs_share_one_data_folder_and_a_copied_run_translates"),
    Case("a `--data-workdir` prepared with other data options (`--bpe-merges`, the pair, the mode)",
         "one line naming the folder, the stage and the option that differs, before anything in it changes; the "
         "data other runs use is never redone under them",
         "tests/test_data_workdir.py::test_a_shared_stage_runs_once_keeps_its_stamp_there_and_refuses_other_options"),
    Case("a run directory copied elsewhere, the original moved away; then its data folder removed",
         "`translate.py RUN --check-test-set` reads the copy's files only (results.json and inference.json name "
         "them relative to the run) and matches the recipe's output; without the data folder, one line naming "
         "inference.json, `data_workdir` and the missing path",
         "tests/test_data_workdir.py::test_two_smoke_runs_share_one_data_folder_and_a_copied_run_translates"),
    # -- the work directory is a boundary (issue 36)
    Case("a symbolic link at one of the kit's own paths in a work directory or a `--data-workdir`: the lock, "
         "`logs/` or a log, a stage stamp in `.stages/`, `stale/`, `checkpoints/`, `canary/`",
         "one line naming the link and where it points, before anything is written; the file or folder it points "
         "to is untouched (a linked `.lock` was truncated, a linked log appended to, a linked `stale/` deleted "
         "through); the work directory itself a link, and links to inputs, keep working",
         "tests/test_boundary.py::test_a_link_at_the_kits_own_paths_stops_the_run_and_touches_nothing"),
    Case("`stale/` made a link while a run goes on (after its start-up check)",
         "setting a changed stage's outputs aside refuses in one line to delete or move through it; nothing outside "
         "changes and the damaged output stays where it was",
         "tests/test_boundary.py::test_setting_outputs_aside_never_deletes_through_a_link_made_during_the_run"),
    Case("a tokenization worker killed from outside (SIGKILL, what the out-of-memory killer sends), or all of "
         "them",
         "one line naming the file and the signal at once (the recipe waited forever in multiprocessing's "
         "`imap`, and with every worker killed ignored SIGTERM too); the other workers stopped; the rerun makes "
         "the whole output",
         "tests/test_pipeline.py::test_a_tokenization_worker_killed_from_outside_is_one_line_not_a_hang"),
    Case("`recipes/parallel.sh` given a `--data-workdir` that another recipe (`wmt14_en_de.sh --smoke`) or corpus "
         "prepared",
         "one line naming the folder and both runs' data stages, before anything runs or is written there; it found "
         "every stage done and would have trained and scored on the other text, exit 0",
         "tests/test_data_workdir.py::test_another_recipes_data_folder_is_refused_in_one_line"),
    Case("a line break in a value a Slurm script holds (`--partition`, `--account`, `--time`, the work "
         "directory's path, an option after `--`)",
         "one line before either script is written (it became a shell line of the script, and sbatch stopped "
         "reading its #SBATCH directives there, losing --requeue, --signal and --output); spaces, quotes and "
         "shell syntax are written quoted",
         "tests/test_slurm.py::test_a_value_that_would_add_a_line_to_a_script_is_refused_in_one_line"),
    Case("a text input with a line of more than 1 MiB, or none at all (`score_bleu.py --ref /dev/zero`)",
         "one line naming the file and the line, reading at most about 1 MiB (it grew to 23 GB before the kernel "
         "killed it)",
         "tests/test_text_policy.py::test_a_line_without_end_is_refused_in_bounded_memory"),
    Case("`evalb.py` on files of different line counts, on empty files, with `-c -5`",
         "EVALB's own report and messages, then one error line and exit 1 (it exited 0 with an F1 of the lines "
         "both files have); empty files and negative options: one line",
         "tests/test_evalb.py::test_line_count_mismatches_are_reported_and_an_error"),
    Case("`evalb.py` given plain sentences as the gold file (no line a tree)",
         "EVALB's own report and messages, then one error line saying what the gold file holds, exit 1 (it "
         "exited 0 having scored no sentence, F-measure nan)",
         "tests/test_evalb.py::test_a_gold_file_of_no_trees_is_an_error_not_a_score_of_nothing"),
    Case("a NUL character inside a line of a user's corpus (`recipes/parallel.sh`)",
         "one warning per file naming the first line and the count; the copy reads it as a space, so the words "
         "around it stay two (the tokenizer deleted it and joined them, silently)",
         "tests/test_text_policy.py::test_a_nul_character_in_a_corpus_is_a_space_and_said_once"),
    Case("`translate.py --print-interactive-command` for a run whose path holds a line break",
         "one line naming the path, nothing printed (the command came out in two lines)",
         "tests/test_translate.py::test_the_printed_interactive_command_refuses_a_path_with_a_line_break"),
    Case("a valid or test sentence longer than the 1023 word pieces fairseq decodes with (a 5,000-token line)",
         "one line naming the file and the line when the train stage (or the canary) starts, before fairseq-train; "
         "the data stages are kept (it failed at the generate stage, after the training)",
         "tests/test_values.py::test_a_test_sentence_too_long_to_decode_is_refused_before_training"),
    Case("a worker of an external tool's own pool killed from outside (subword-nmt's learn and apply, "
         "fairseq-preprocess's binarize: the pool replaces it and waits forever for the work it held)",
         "the stage's watch sees a worker replaced and the tool idle: one line naming the stage within about 15 s, "
         "the tool and its workers killed, all stopped first so that none is replaced meanwhile (a replacement left "
         "running held the output open: the stage hung on a loaded machine); the rerun resumes. Pools run one after "
         "the other are not taken for one",
         "tests/test_pipeline.py::test_a_pool_worker_killed_inside_an_external_tool_ends_its_stage_in_one_line"),
    # -- every number checked once (issue 36)
    Case("NaN, infinity, a negative or a wrong-typed value for any numeric option of any recipe "
         "(`--canary-minutes nan` trained the whole run as its canary; `--train-minutes nan` dropped the budget)",
         "one line naming the option, exit 2, before any work: the checks live where the settings are built",
         "tests/test_values.py::test_a_bad_number_is_one_line_before_any_work"),
    Case("a value of the wrong type in a recipe's YAML (`beam: four`)",
         "one line naming the file and the key (was a traceback)",
         "tests/test_values.py::test_a_wrong_type_in_a_yaml_config_names_the_key_and_the_file"),
    Case("settings that failed only after the data stages: a dropout out of [0, 1), heads that do not divide "
         "d_model, a batch smaller than the longest cleaned sentence, no BPE merges, no workers",
         "one line before the first stage, nothing prepared",
         "tests/test_values.py::test_what_fails_after_the_data_stages_is_refused_before_them"),
    Case("an option after `--` that the recipe's own fairseq-train command sets (`-- --lr 5`, `--label-smoothing`, "
         "`--optimizer`, `--dropout` where the recipe sets P_drop), or `--lenpen` beside the GNMT penalty",
         "one line naming the recipe's option for it (fairseq took the last value silently; its --lr is not read "
         "by eq. 3's schedule; --lenpen was ignored)",
         "tests/test_values.py::test_what_would_be_ignored_or_overridden_silently_is_one_line"),
    Case("NaN or infinity for any option of type float of any kit command (`plot_attention.py --min-weight nan`, "
         "`compare_baselines.py --train-minutes inf`, ...)",
         "one line naming the option, from the kit's one parser (attn_kit.cli.ArgumentParser), before the command's "
         "own checks",
         "tests/test_values.py::test_every_kit_command_refuses_a_float_option_that_is_not_finite"),
    Case("a number out of range, NaN, infinity or a wrong type for any numeric option of any script or benchmark "
         "(`average_checkpoints.py --num-update-checkpoints 0`, `plot_attention.py --min-weight 2`, "
         "`benchmarks/generate_throughput.py --beam 0`, `evalb.py -c -5`, ...)",
         "one line naming the option and the bound, exit 2, nothing written: each option states its range beside "
         "it (attn_kit.cli.Number), and a test walks every script's parser for options that do not",
         "tests/test_option_ranges.py::test_a_number_out_of_range_is_one_line_naming_the_option"),
    Case("`plot_attention.py` on a run whose checkpoint is stock fairseq's transformer",
         "one line naming the model and saying to convert it with attn_plugin.convert (was a traceback); nothing "
         "drawn",
         "tests/test_translate.py::test_plot_attention_on_a_stock_fairseq_checkpoint_is_one_line"),
    Case("`translate.py --gnmt-alpha nan`, `--max-len-b -100`, `--threads -2`",
         "one line before any work (it printed 55 dots for \"A man.\", or a traceback)",
         "tests/test_values.py::test_translate_checks_its_numbers_before_any_work"),
    Case("`scripts/training_cost.py` with a negative GPU count, a utilization of 0 or 7, a typo'd option, an "
         "unknown arch",
         "one line each (a typo is no longer swallowed as a model flag; an unknown arch is not fairseq's whole "
         "usage), nothing printed before it",
         "tests/test_values.py::test_training_costs_options_are_checked"),
    Case("a run into a language the paper's BLEU protocol was not checked for (recipes/parallel.sh DE->EN, a "
         "`--corpus` of your own)",
         "sacreBLEU and tokenized BLEU, the t2t protocol's keys left out (the score stage failed after training)",
         "tests/test_score_bleu.py::test_a_target_language_the_papers_protocol_was_not_checked_for_gets_the_other_scores"),
    Case("averaging onto a full disk",
         "one line, no temporary file, nothing else on stderr (no \"Please install tensorboardX\")",
         "test_averaging_on_a_full_disk_is_one_line_and_leaves_nothing"),
]

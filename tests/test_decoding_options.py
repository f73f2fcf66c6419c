"""fairseq's own decoding options on the plugin's model, under both stopping rules (the paper's,
the default with --gnmt-alpha, and fairseq's): each option does what fairseq documents it does,
checked on a trained model's outputs; fairseq-validate and fairseq-interactive run on it."""
import pytest
import torch
from conftest import USER_DIR, cli, run
from fairseq import checkpoint_utils, options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

from attn_plugin.beam_search import PaperBeamSearch

RULES = {"paper": ["--gnmt-alpha", "0.6"], "fairseq": []}


def setup(data_bin, checkpoint, *flags):
    args = options.parse_args_and_arch(options.get_generation_parser(), [
        str(data_bin), "--user-dir", USER_DIR, "--task", "attn_translation", "--path", str(checkpoint), "--cpu",
        "--gen-subset", "test", "--beam", "4", "--max-len-a", "1", "--max-len-b", "20", *flags])
    task = tasks.setup_task(args)
    models, _ = checkpoint_utils.load_model_ensemble([str(checkpoint)], task=task)
    model = models[0].eval()
    model.prepare_for_inference_(convert_namespace_to_omegaconf(args))  # as fairseq-generate does (--retain-dropout)
    task.load_dataset("test")
    dataset = task.dataset("test")
    sample = dataset.collater([dataset[i] for i in range(len(dataset))])  # ids 0..20 in one batch
    return args, task, model, sample


def decode(data_bin, checkpoint, *flags, seed=1):
    args, task, model, sample = setup(data_bin, checkpoint, *flags)
    generator = task.build_generator([model], args)
    prefix = sample["target"][:, :args.prefix_size] if args.prefix_size > 0 else None
    torch.manual_seed(seed)
    with torch.no_grad():
        hypos = task.inference_step(generator, [model], sample, prefix_tokens=prefix)
    return generator, sample, hypos, task


def real(tokens, d):
    return [t for t in tokens.tolist() if t not in (d.eos(), d.pad())]


@pytest.mark.parametrize("rule", RULES)
def test_every_fairseq_decoding_option_runs_on_the_plugins_model(plugin_run, data_bin, rule):
    checkpoint = plugin_run[0] / "checkpoint_last.pt"
    flags = RULES[rule]

    generator, sample, hypos, task = decode(data_bin, checkpoint, *flags, "--nbest", "3")
    assert isinstance(generator, PaperBeamSearch) == (rule == "paper")
    d = task.target_dictionary
    for h in hypos:  # the beam's hypotheses, best first (fairseq-generate prints --nbest of them)
        assert len(h) == 4 and [float(x["score"]) for x in h] == sorted((float(x["score"]) for x in h), reverse=True)

    _, sample, hypos, _ = decode(data_bin, checkpoint, *flags, "--prefix-size", "2")
    for i, h in enumerate(hypos):
        assert h[0]["tokens"][:2].tolist() == sample["target"][i, :2].tolist()

    _, sample, hypos, _ = decode(data_bin, checkpoint, *flags, "--no-repeat-ngram-size", "2")
    for h in hypos:
        words = real(h[0]["tokens"], d)
        assert len(set(zip(words, words[1:]))) == len(words) - 1

    # --match-source-len, as fairseq implements it: each output has src_lengths tokens before its EOS
    # (src_lengths counts the source's EOS, so one more than the source's words)
    _, sample, hypos, _ = decode(data_bin, checkpoint, *flags, "--match-source-len")
    assert [len(real(h[0]["tokens"], d)) for h in hypos] == sample["net_input"]["src_lengths"].tolist()

    _, _, hypos, _ = decode(data_bin, checkpoint, *flags, "--print-alignment")
    assert all(h[0]["alignment"] is not None and len(h[0]["alignment"]) > 0 for h in hypos)

    # --diverse-beam-groups: ids 0..20 in a batch of 21 went past the per-sentence state fairseq kept
    # (attn_plugin patch 9); the groups' best hypotheses are not all the same
    _, _, hypos, _ = decode(data_bin, checkpoint, *flags, "--diverse-beam-groups", "2", "--diverse-beam-strength", "5")
    assert any(h[0]["tokens"].tolist() != h[1]["tokens"].tolist() for h in hypos)

    first = decode(data_bin, checkpoint, *flags, "--sampling", "--beam", "1", "--sampling-topk", "5", seed=1)[2]
    again = decode(data_bin, checkpoint, *flags, "--sampling", "--beam", "1", "--sampling-topk", "5", seed=2)[2]
    assert [h[0]["tokens"].tolist() for h in first] != [h[0]["tokens"].tolist() for h in again]

    # --retain-dropout: dropout stays on at inference, so two decodes with other seeds differ
    plain = [h[0]["tokens"].tolist() for h in decode(data_bin, checkpoint, *flags, seed=1)[2]]
    assert plain == [h[0]["tokens"].tolist() for h in decode(data_bin, checkpoint, *flags, seed=2)[2]]
    kept = [[h[0]["tokens"].tolist() for h in decode(data_bin, checkpoint, *flags, "--retain-dropout", seed=s)[2]]
            for s in (1, 2)]
    assert kept[0] != kept[1]


def test_score_reference_is_the_models_log_probability_of_the_reference(plugin_run, data_bin):
    checkpoint = plugin_run[0] / "checkpoint_last.pt"
    _, sample, hypos, task = decode(data_bin, checkpoint, "--score-reference")
    args, _, model, sample = setup(data_bin, checkpoint)
    with torch.no_grad():  # teacher forcing by hand: mean log P of the reference tokens (EOS included)
        lprobs = model.get_normalized_probs(model(**sample["net_input"]), log_probs=True)
        target = sample["target"]
        token = lprobs.gather(2, target.unsqueeze(2)).squeeze(2).masked_fill(target.eq(task.target_dictionary.pad()), 0)
        mean = token.sum(1) / target.ne(task.target_dictionary.pad()).sum(1)
    for i, h in enumerate(hypos):
        assert float(h[0]["score"]) == pytest.approx(float(mean[i]), abs=1e-4)


def test_fairseq_validate_and_interactive_run_on_it(plugin_run, data_bin):
    checkpoint = plugin_run[0] / "checkpoint_last.pt"
    out = run([cli("fairseq-validate"), data_bin, "--user-dir", USER_DIR, "--task", "attn_translation",
               "--path", checkpoint, "--cpu", "--valid-subset", "valid", "--max-tokens", "4000"])
    assert "valid on 'valid' subset" in out.stdout + out.stderr
    source = (data_bin.parent / "test.src").read_text().splitlines()[0]
    proc = run([cli("fairseq-interactive"), data_bin, "--user-dir", USER_DIR, "--task", "attn_translation",
                "--path", checkpoint, "--cpu", "--beam", "4", "--gnmt-alpha", "0.6", "--source-lang", "src",
                "--target-lang", "tgt"], check=False, input_text=source + "\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "stops as the paper's code did" in proc.stdout + proc.stderr
    assert [line for line in proc.stdout.splitlines() if line.startswith("H-0\t")]

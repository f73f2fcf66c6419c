"""A training step waits for the GPU only where fairseq's trainer does (issue 35): the plugin's model and
criterion read nothing back from the batch's tensors. On a GPU each such read (``mask.any()``,
``int(lengths.sum())``, ``.item()``) is a synchronization: the host waits for every kernel queued so far
and cannot queue the next ones meanwhile; the profile of the GPU check counted 8 per update. A CPU has
no GPU to wait for, but the same reads go through one aten operator, ``_local_scalar_dense``, which
these tests count. The batches say instead, as plain values made with the batch (attn_translation's
HostFacts), whether any source is padded and how many source tokens there are; the numbers do not
change (the loss and every gradient bit for bit)."""
import pytest
import torch
from conftest import TINY_MODEL, USER_DIR
from fairseq import options, tasks
from torch.utils._python_dispatch import TorchDispatchMode

from attn_plugin.tasks.attn_translation import NSRC_TOKENS, SRC_PADDED


class CountScalarReads(TorchDispatchMode):
    """Counts the operator behind every tensor -> Python number read (.item(), bool(), int())."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))


def setup(data_bin, *extra):
    argv = [data_bin, "--cpu", "--user-dir", USER_DIR, "--task", "attn_translation", "--arch", "attn_paper_base",
            *TINY_MODEL, "--criterion", "attn_label_smoothed_cross_entropy", "--label-smoothing", "0.1",
            "--optimizer", "attn_adam", "--lr", "1", "--max-tokens", "400", "--dropout", "0", *extra]
    args = options.parse_args_and_arch(options.get_training_parser(), [str(a) for a in argv])
    task = tasks.setup_task(args)
    task.load_dataset("train")
    torch.manual_seed(0)
    model = task.build_model(args)
    return task, model, task.build_criterion(args)


def batches(task, n=6):
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=400, required_batch_size_multiple=1, seed=1)
    out = []
    for sample in itr.next_epoch_itr(shuffle=True):
        out.append(sample)
        if len(out) == n:
            return out
    return out


@pytest.mark.parametrize("multiple", [1, 8])  # --required-seq-len-multiple pads every batch
def test_the_batch_says_what_its_tensors_say(data_bin, multiple):
    task, _, _ = setup(data_bin, "--required-seq-len-multiple", multiple)
    seen = set()
    for sample in batches(task, 20):
        net_input = sample["net_input"]
        pad = task.source_dictionary.pad()
        assert sample[SRC_PADDED] is bool(net_input["src_tokens"].eq(pad).any())
        assert sample[NSRC_TOKENS] == int(net_input["src_tokens"].ne(pad).sum()) == int(net_input["src_lengths"].sum())
        seen.add(sample[SRC_PADDED])
    assert seen == {True, False}  # both kinds of batch were checked


def test_a_train_step_reads_no_tensor_back_and_computes_the_same(data_bin):
    task, model, criterion = setup(data_bin)
    for sample in batches(task, 4):
        plain = {k: v for k, v in sample.items() if k not in (SRC_PADDED, NSRC_TOKENS)}  # what fairseq's batch says
        plain["net_input"] = dict(sample["net_input"])
        results = []
        for batch in (sample, plain):
            model.zero_grad()
            counter = CountScalarReads()
            with counter:
                loss, sample_size, logging = task.train_step(batch, model, criterion, _NoStep(), update_num=1)
            grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
            results.append((counter.reads, loss.detach().clone(), grads, logging["nsrc_tokens"]))
        (reads, loss, grads, nsrc), (plain_reads, plain_loss, plain_grads, plain_nsrc) = results
        assert reads == 0, "the plugin's model or criterion read a tensor back"
        assert plain_reads >= 2  # without the batch's facts: the encoder's and the decoder's mask, the criterion's count
        assert torch.equal(loss, plain_loss) and nsrc == plain_nsrc
        assert len(grads) == len(plain_grads) and all(torch.equal(a, b) for a, b in zip(grads, plain_grads))


class _NoStep:
    """fairseq's task.train_step calls optimizer.backward(loss) only."""

    def backward(self, loss):
        loss.backward()

"""Eq. 3 and Szegedy label smoothing against hand computation and stock fairseq."""
import math
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.optim import FairseqOptimizer

import attn_plugin  # noqa: F401  (registers)
from attn_plugin.criterions.attn_label_smoothed_cross_entropy import AttnLabelSmoothedCrossEntropy
from attn_plugin.lr_scheduler.attn_inverse_sqrt import AttnInverseSqrtConfig, AttnInverseSqrtSchedule


class FakeOptimizer(FairseqOptimizer):
    def __init__(self):
        self.lr = None

    def set_lr(self, lr):
        self.lr = lr

    def get_lr(self):
        return self.lr


def eq3(step, d_model, warmup):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("d_model,warmup", [(512, 4000), (1024, 4000), (64, 50)])
def test_schedule_equals_eq3(d_model, warmup):
    opt = FakeOptimizer()
    sched = AttnInverseSqrtSchedule(AttnInverseSqrtConfig(warmup_updates=warmup, d_model=d_model), opt)
    assert opt.lr == pytest.approx(eq3(1, d_model, warmup), rel=1e-12)  # the first update uses step 1
    for done in [1, 9, warmup - 1, warmup, warmup + 1, 10 * warmup, 100000]:
        assert sched.step_update(done) == pytest.approx(eq3(done + 1, d_model, warmup), rel=1e-12)
        assert opt.lr == sched.step_update(done)


def test_schedule_peak_values_quoted_by_the_paper_notes():
    """Peak of eq. 3 is d_model^-0.5 * warmup^-0.5: 6.99e-4 (base), 4.94e-4 (big)."""
    for d_model, peak in [(512, 6.99e-4), (1024, 4.94e-4)]:
        sched = AttnInverseSqrtSchedule(AttnInverseSqrtConfig(d_model=d_model), FakeOptimizer())
        assert sched.step_update(3999) == pytest.approx(peak, abs=5e-7)


def test_schedule_scale_multiplies():
    opt = FakeOptimizer()
    sched = AttnInverseSqrtSchedule(AttnInverseSqrtConfig(d_model=512, lr_scale=2.0), opt)
    assert sched.step_update(99) == pytest.approx(2 * eq3(100, 512, 4000))


def test_training_log_follows_eq3_with_d_model_from_the_model(plugin_run):
    """fairseq-train logged lr at num_updates N is eq. 3 at step N+1 (scale 2, d_model 32, warmup 20)."""
    _, log = plugin_run
    seen = re.findall(r"num_updates[= ](\d+).*?lr[= ]([0-9.e-]+)", log)
    assert len(seen) >= 3
    for n, lr in seen:
        assert float(lr) == pytest.approx(2 * eq3(int(n) + 1, 32, 20), rel=1e-4)


def make_criterion(eps, pad=0):
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: pad))
    return AttnLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=eps)


class FixedModel:
    """Stands in for a model: returns given log-probabilities for the sample."""

    decoder = None

    def __init__(self, lprobs):
        self.lprobs = lprobs

    def get_normalized_probs(self, net_output, log_probs):
        return self.lprobs

    def get_targets(self, sample, net_output):
        return sample["target"]


def test_criterion_equals_hand_computed_szegedy_loss():
    # Two target positions over K = 4 classes; class 0 is padding, third position is padding.
    probs = torch.tensor([[[0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]])
    target = torch.tensor([[1, 3, 0]])
    eps = 0.1
    # q'(k) = 0.9*[k==y] + 0.1/4: target 0.925, others 0.025 (Szegedy et al., K = 4).
    by_hand = -(0.925 * math.log(0.6) + 0.025 * (math.log(0.1) + math.log(0.2) + math.log(0.1)))
    by_hand += -(0.925 * math.log(0.25) + 0.025 * 3 * math.log(0.25))
    crit = make_criterion(eps)
    # From log-probabilities (a model's get_normalized_probs) and from unnormalized
    # logits (the decoder's output; any per-row shift leaves the softmax unchanged).
    logits = probs.log() + torch.tensor([3.0, -2.0, 0.5])[None, :, None]
    for net_output in (None, (logits, {})):
        loss, nll = crit.compute_loss(FixedModel(probs.log()), net_output, {"target": target})
        assert loss.item() == pytest.approx(by_hand, rel=1e-6)
        assert nll.item() == pytest.approx(-(math.log(0.6) + math.log(0.25)), rel=1e-6)


def reference_smoothed_loss(logits, target, eps, pad):
    """Sec. 5.4 written out with plain autograd ops: sum over kept rows of
    -sum_k q'(k) log p(k), q' = (1-eps) onehot(y) + eps/K."""
    lprobs = logits.float().log_softmax(-1)
    K = lprobs.size(-1)
    q = torch.full_like(lprobs, eps / K)
    q.scatter_(-1, target.clamp(min=0).unsqueeze(-1), 1 - eps + eps / K)
    keep = target.ne(pad).unsqueeze(-1)
    return -(q * lprobs * keep).sum(), -(lprobs.gather(-1, target.unsqueeze(-1)) * keep).sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_loss_and_gradient_equal_autograd_of_the_formula(dtype):
    torch.manual_seed(0)
    logits = (3 * torch.randn(2, 6, 13)).to(dtype).requires_grad_()
    target = torch.randint(1, 13, (2, 6))
    target[0, 4:] = 0  # padding
    crit = make_criterion(0.1)
    loss, nll = crit.compute_loss(FixedModel(None), (logits, {}), {"target": target})
    (loss + 0.5 * nll).backward()
    ref_logits = logits.detach().clone().requires_grad_()
    ref_loss, ref_nll = reference_smoothed_loss(ref_logits, target.view(2, 6), 0.1, pad=0)
    (ref_loss + 0.5 * ref_nll).backward()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-5)
    assert logits.grad.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-2
    assert torch.allclose(logits.grad.float(), ref_logits.grad.float(), atol=tol, rtol=tol)
    assert logits.grad[0, 4:].abs().max() == 0  # padding gets no gradient


def test_criterion_without_smoothing_equals_stock_fairseq_nll():
    torch.manual_seed(0)
    lprobs = torch.randn(2, 5, 11).log_softmax(-1)
    target = torch.randint(1, 11, (2, 5))
    target[1, 3:] = 0
    ours, ours_nll = make_criterion(0.0).compute_loss(FixedModel(lprobs), None, {"target": target})
    stock, stock_nll = label_smoothed_nll_loss(lprobs.view(-1, 11), target.view(-1), 0.0, ignore_index=0)
    assert ours.item() == pytest.approx(stock.item(), rel=1e-6)
    assert ours_nll.item() == pytest.approx(stock_nll.item(), rel=1e-6)


def test_criterion_differs_from_fairseq_smoothing_as_documented():
    """fairseq gives non-targets eps/(K-1) and the target 1-eps; the paper's form
    gives eps/K and 1-eps+eps/K. With K = 2 both are checkable by hand."""
    lprobs = torch.tensor([[0.8, 0.2]]).log()
    target = torch.tensor([0])
    ours, _ = make_criterion(0.2, pad=5).compute_loss(FixedModel(lprobs[None]), None, {"target": target[None]})
    stock, _ = label_smoothed_nll_loss(lprobs, target, 0.2, ignore_index=None)
    assert ours.item() == pytest.approx(-(0.9 * math.log(0.8) + 0.1 * math.log(0.2)), rel=1e-6)
    assert stock.sum().item() == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)), rel=1e-6)


def test_logged_losses_are_base_2_like_stock_fairseq(plugin_run):
    _, log = plugin_run
    m = re.search(r"valid on 'valid' subset \| loss ([0-9.]+) \| nll_loss ([0-9.]+) \| ppl ([0-9.]+)", log)
    assert m, log[-2000:]
    loss, nll, ppl = map(float, m.groups())
    assert ppl == pytest.approx(2 ** nll, rel=0.01)
    assert loss > nll  # smoothing adds the uniform term

"""attn_adam (attn_plugin/optim): fairseq's Adam arithmetic in multi-tensor calls. On a CPU it must
give fairseq's parameters bit for bit (the recipes switched to it, and the bundled run's committed
BLEU must not move), and both must be Kingma & Ba's Algorithm 1 with the paper's settings."""
import math

import pytest
import torch
from fairseq import utils as fairseq_utils
from fairseq.optim import FairseqOptimizer
from fairseq.optim.adam import Adam as FairseqAdamUpdate
from torch.utils._python_dispatch import TorchDispatchMode

import attn_plugin  # noqa: F401  (registers)
from attn_plugin.optim.attn_adam import AttnAdam, AttnAdamConfig, MultiTensorAdam

SHAPES = [(16, 8), (8,), (5, 16), (5,), (1,)]
PAPER = dict(lr=7e-4, betas=(0.9, 0.98), eps=1e-9)  # Sec. 5.3; lr: eq. 3's peak for the base model


def params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_() for s in SHAPES]


def algorithm1(theta, grads, lr, betas, eps):
    """Kingma & Ba's Algorithm 1 in float64, written out: returns theta after len(grads) steps."""
    b1, b2 = betas
    theta = theta.double().clone()
    m = torch.zeros_like(theta)
    v = torch.zeros_like(theta)
    for t, g in enumerate(grads, 1):
        g = g.double()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        alpha_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)  # the order of their Sec. 2 (fairseq's)
        theta = theta - alpha_t * m / (v.sqrt() + eps)
    return theta


@pytest.mark.parametrize("finite", [None, True], ids=["plain", "with_a_finite_flag"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_same_parameters_as_fairseqs_adam_bit_for_bit(weight_decay, finite):
    """Also with the device-side flag of fairseq-train's deferred check (a True flag: every update applied)."""
    ours, theirs = params(), params()
    opt_ours = MultiTensorAdam(ours, weight_decay=weight_decay, **PAPER)
    opt_ours.finite = None if finite is None else torch.tensor(finite)
    opt_theirs = FairseqAdamUpdate(theirs, weight_decay=weight_decay, **PAPER)
    g = torch.Generator().manual_seed(1)
    for step in range(30):
        grads = [torch.randn(s, generator=g) for s in SHAPES]
        for i, (a, b, grad) in enumerate(zip(ours, theirs, grads)):
            skip = i == 3 and step % 7 == 3  # a parameter with no gradient on some updates: its own step count
            a.grad = None if skip else grad.clone()
            b.grad = None if skip else grad.clone()
        opt_ours.step()
        opt_theirs.step()
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    for a, b in zip(ours, theirs):
        sa, sb = opt_ours.state[a], opt_theirs.state[b]
        assert sa["step"] == sb["step"] and torch.equal(sa["exp_avg"], sb["exp_avg"])
        assert torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    assert opt_ours.state[ours[3]]["step"] < opt_ours.state[ours[0]]["step"]  # the skipped updates counted


def test_it_is_kingma_and_bas_algorithm_1():
    ours = params()
    start = [p.detach().clone() for p in ours]
    opt = MultiTensorAdam(ours, **PAPER)
    g = torch.Generator().manual_seed(2)
    history = [[torch.randn(s, generator=g) for s in SHAPES] for _ in range(25)]
    for grads in history:
        for p, grad in zip(ours, grads):
            p.grad = grad.clone()
        opt.step()
    for i, p in enumerate(ours):
        want = algorithm1(start[i], [h[i] for h in history], **PAPER)
        assert torch.allclose(p.double(), want, rtol=0, atol=1e-6)
        assert not torch.equal(p, start[i])  # it moved


def test_gradient_norm_and_clipping_as_fairseqs():
    ours, theirs = params(), params()
    g = torch.Generator().manual_seed(3)
    for a, b in zip(ours, theirs):
        grad = 10 * torch.randn(a.shape, generator=g)
        a.grad, b.grad = grad.clone(), grad.clone()
    opt = AttnAdam(AttnAdamConfig(lr=[1.0]), ours)
    norm = opt.clip_grad_norm(0)
    assert torch.equal(norm, fairseq_utils.clip_grad_norm_(theirs, 0))
    by_hand = math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in ours))
    assert float(norm) == pytest.approx(by_hand, rel=1e-6)
    clipped = opt.clip_grad_norm(1.0)  # returns the norm before clipping, as fairseq's does
    assert torch.equal(clipped, norm)
    assert math.sqrt(sum(float((p.grad.double() ** 2).sum()) for p in ours)) == pytest.approx(1.0, rel=1e-5)


def test_paper_settings_are_the_defaults_and_the_command_lines_settings_win():
    cfg = AttnAdamConfig(lr=[1.0])
    opt = AttnAdam(cfg, params())
    assert opt.optimizer_config == {"lr": 1.0, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.0}
    cfg = AttnAdamConfig(lr=[0.5], adam_betas="(0.8, 0.9)", adam_eps=1e-6)
    assert AttnAdam(cfg, params()).optimizer_config["betas"] == (0.8, 0.9)


def test_refuses_low_precision_parameters_in_one_line():
    p = torch.zeros(3, dtype=torch.bfloat16, requires_grad=True)
    p.grad = torch.ones(3, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="fp32 parameters"):
        MultiTensorAdam([p]).step()


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_a_false_flag_leaves_parameters_and_moments_as_they_were(weight_decay):
    """fairseq-train's deferred check (AttnAdam.check_deferred): with the device-side flag False, a step
    with NaN and Inf gradients changes no parameter and no moment, bit for bit."""
    ps = params()
    opt = MultiTensorAdam(ps, weight_decay=weight_decay, **PAPER)
    g = torch.Generator().manual_seed(4)
    for _ in range(3):  # some state first
        for p in ps:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()
    before = [(p.detach().clone(), opt.state[p]["exp_avg"].clone(), opt.state[p]["exp_avg_sq"].clone()) for p in ps]
    for p in ps:
        p.grad = torch.randn(p.shape, generator=g)
    ps[0].grad[1, 2], ps[2].grad[0, 0] = float("nan"), float("inf")
    opt.finite = torch.tensor(False)
    opt.step()
    for p, (value, exp_avg, exp_avg_sq) in zip(ps, before):
        assert torch.equal(p, value) and torch.equal(opt.state[p]["exp_avg"], exp_avg)
        assert torch.equal(opt.state[p]["exp_avg_sq"], exp_avg_sq)
        assert opt.state[p]["step"] == 4  # the host counted it (see MultiTensorAdam.step)


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("c", [0.37, torch.tensor(1 / 3)], ids=["number", "tensor"])
def test_multiply_grads_is_one_call_and_fairseqs_arithmetic(c):
    ours, theirs, one_by_one = params(), params(), params()
    g = torch.Generator().manual_seed(5)
    for a, b, d in zip(ours, theirs, one_by_one):
        a.grad = torch.randn(a.shape, generator=g)
        b.grad, d.grad = a.grad.clone(), a.grad.clone()
    ours[3].grad = theirs[3].grad = one_by_one[3].grad = None  # a parameter without a gradient
    ops = _Ops()
    with ops:
        AttnAdam(AttnAdamConfig(lr=[1.0]), ours).multiply_grads(c)
    assert ops.names.count("_foreach_mul_") == 1 and "mul_" not in ops.names
    FairseqOptimizer.multiply_grads(AttnAdam(AttnAdamConfig(lr=[1.0]), theirs), c)  # fairseq-fixed 0.12.3's
    for d in one_by_one:  # fairseq 0.12.2's (the Python < 3.11 install): one parameter at a time
        if d.grad is not None:
            d.grad.mul_(c)
    for a, b, d in zip(ours, theirs, one_by_one):
        assert (a.grad is None and b.grad is None) or (torch.equal(a.grad, b.grad) and torch.equal(a.grad, d.grad))

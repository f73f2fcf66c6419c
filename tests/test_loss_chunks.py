"""The label-smoothed loss taken in row chunks (--loss-chunk-tokens, --compile-loss): against hand
computation and a float64 reference written here, chunked against unchunked, bf16 logits against the
same values in fp32, and no fp32 temporary of all target tokens x the vocabulary."""
import math
from types import SimpleNamespace

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import attn_plugin  # noqa: F401  (registers)
from attn_plugin.criterions import attn_label_smoothed_cross_entropy as ls
from attn_plugin.criterions.attn_label_smoothed_cross_entropy import (
    AttnLabelSmoothedCrossEntropy,
    szegedy_smoothed_nll_loss,
)
from attn_plugin.errors import AttnPluginError, ConfigError, error_line

from conftest import USER_DIR

EPS = 0.1


def loss_and_grad(logits, target, ignore_index, chunk, a=0.7, b=1.3, compile=False):
    """(loss, nll, d(a loss + b nll)/d logits) of the function under test: both incoming gradients used."""
    x = logits.detach().clone().requires_grad_()
    loss, nll = szegedy_smoothed_nll_loss(x, target, EPS, ignore_index, chunk=chunk, compile=compile)
    grad, = torch.autograd.grad(a * loss + b * nll, x)
    return loss.detach(), nll.detach(), grad


def reference(logits, target, ignore_index, a=0.7, b=1.3):
    """Sec. 5.4 in float64 with plain autograd: (loss, nll, d(a loss + b nll)/d logits)."""
    x = logits.detach().double().requires_grad_()
    lprobs = torch.log_softmax(x, dim=-1)
    keep = target.ne(ignore_index) if ignore_index is not None else torch.ones_like(target, dtype=torch.bool)
    nll = -(lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1) * keep).sum()
    loss = (1 - EPS) * nll + EPS / x.size(-1) * (-(lprobs.sum(-1) * keep).sum())
    grad, = torch.autograd.grad(a * loss + b * nll, x)
    return loss.detach(), nll.detach(), grad


def random_batch(seed, n=37, k=29, pad=1, n_pad=4, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, k, generator=g)).to(dtype)
    target = torch.randint(0, k, (n,), generator=g)
    target[target == pad] = pad + 1  # padding only where put below
    target[torch.randperm(n, generator=g)[:n_pad]] = pad
    return logits, target


# --------------------------------------------------------------------------- against independent truth
@pytest.mark.parametrize("chunk", [0, 1, 2, 5])
def test_hand_computed_loss_nll_and_gradient(chunk):
    """K = 3, three rows, the last one padding: softmax, q' = (1-eps) onehot + eps/K and the
    gradient a (p - q') + b (p - onehot) written out with math.exp."""
    rows, target, pad, K, a, b = [[1.0, 2.0, 0.0], [0.0, -1.0, 3.0], [2.0, -1.0, 1.0]], [1, 0, 2], 2, 3, 0.7, 1.3
    want_loss = want_nll = 0.0
    want_grad = [[0.0] * K for _ in rows]
    for i, (z, y) in enumerate(zip(rows, target)):
        if y == pad:
            continue
        total = sum(math.exp(v) for v in z)
        p = [math.exp(v) / total for v in z]
        q = [(1 - EPS) * (k == y) + EPS / K for k in range(K)]
        want_nll += -math.log(p[y])
        want_loss += -sum(q[k] * math.log(p[k]) for k in range(K))
        want_grad[i] = [a * (p[k] - q[k]) + b * (p[k] - (k == y)) for k in range(K)]
    loss, nll, grad = loss_and_grad(torch.tensor(rows), torch.tensor(target), pad, chunk, a, b)
    assert loss.item() == pytest.approx(want_loss, rel=1e-6)
    assert nll.item() == pytest.approx(want_nll, rel=1e-6)
    assert grad.tolist() == [pytest.approx(row, abs=1e-6) for row in want_grad]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk", [0, 1, 7, 37, 50])  # 37 rows: one chunk of all, and one larger than all
@pytest.mark.parametrize("ignore_index", [1, None])
def test_random_batches_equal_a_float64_reference(seed, chunk, ignore_index):
    logits, target = random_batch(seed)
    loss, nll, grad = loss_and_grad(logits, target, ignore_index, chunk)
    ref_loss, ref_nll, ref_grad = reference(logits, target, ignore_index)
    assert loss.dtype == nll.dtype == torch.float32
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-6)
    assert nll.item() == pytest.approx(ref_nll.item(), rel=1e-6)
    torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-5, atol=1e-6)
    if ignore_index is not None:
        assert grad[target == ignore_index].abs().max() == 0  # padding gets no gradient


def test_bf16_logits_are_computed_in_fp32():
    """bf16 logits give what the same values upcast to fp32 give (to fp32 rounding, far below bf16's
    2^-8), and a bf16 gradient equal to that fp32 gradient rounded to bf16."""
    logits, target = random_batch(3, n=45, k=101, dtype=torch.bfloat16)
    for chunk in (0, 8):
        loss, nll, grad = loss_and_grad(logits, target, 1, chunk)
        loss32, nll32, grad32 = loss_and_grad(logits.float(), target, 1, chunk)
        assert grad.dtype == torch.bfloat16
        assert loss.item() == pytest.approx(loss32.item(), rel=1e-6)
        assert nll.item() == pytest.approx(nll32.item(), rel=1e-6)
        torch.testing.assert_close(grad.float(), grad32, rtol=2 ** -8, atol=1e-12)
        assert (grad.float() != grad32.to(torch.bfloat16).float()).float().mean() < 0.01  # ties of rounding only


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_equals_unchunked_and_the_gradient_bit_for_bit(dtype):
    """Each row is computed as the whole batch computes it, so the gradient (what training uses) is the
    same bit for bit whatever the chunk: the bundled run's committed BLEU cannot move. The summed loss
    adds the chunks' sums: the same but for rounding."""
    logits, target = random_batch(4, n=53, k=40)
    logits = logits.to(dtype)
    loss0, nll0, grad0 = loss_and_grad(logits, target, 1, chunk=0)
    for chunk in (1, 5, 16, 52, 53, 1000):
        loss, nll, grad = loss_and_grad(logits, target, 1, chunk)
        assert loss.item() == pytest.approx(loss0.item(), rel=1e-6)
        assert nll.item() == pytest.approx(nll0.item(), rel=1e-6)
        assert grad.dtype == dtype and torch.equal(grad, grad0)


@pytest.mark.parametrize("chunk", [0, 3])
def test_no_rows_and_all_rows_ignored(chunk):
    for logits, target in ((torch.randn(0, 9), torch.zeros(0, dtype=torch.long)),
                           (torch.randn(7, 9), torch.full((7,), 1))):
        loss, nll, grad = loss_and_grad(logits, target, 1, chunk)
        assert loss.item() == 0 and nll.item() == 0
        assert grad.shape == logits.shape and not grad.any()


@pytest.mark.parametrize("chunk", [0, 4])
def test_non_contiguous_logits(chunk):
    logits, target = random_batch(5, n=21, k=13)
    loss0, nll0, grad0 = loss_and_grad(logits, target, 1, chunk)
    transposed = logits.t().contiguous().t()  # strides (1, N)
    strided = torch.zeros(21, 26).index_copy_(1, torch.arange(0, 26, 2), logits)[:, ::2]  # not dense
    for view in (transposed, strided):
        assert not view.is_contiguous() and torch.equal(view, logits)
        loss, nll, grad = loss_and_grad(view, target, 1, chunk)
        assert loss.item() == pytest.approx(loss0.item(), rel=1e-6)
        assert nll.item() == pytest.approx(nll0.item(), rel=1e-6)
        torch.testing.assert_close(grad, grad0, rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- memory: no tokens x vocabulary fp32
class TensorSizes(TorchDispatchMode):
    """Records (numel, dtype, op) of every tensor an op returns while active."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.made += [(t.numel(), t.dtype, str(func)) for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        return out


class FixedLogits:
    """Stands in for a model whose decoder returned given logits."""

    decoder = None

    def get_targets(self, sample, net_output):
        return sample["target"]


def fp32_sizes_of_forward_and_backward(chunk, n=64, k=50):
    """Sizes of the fp32 tensors made by the criterion's forward and backward on bf16 logits (the
    gradient itself is bf16, as the logits: any fp32 tensor there is a temporary)."""
    task = SimpleNamespace(target_dictionary=SimpleNamespace(pad=lambda: 1))
    criterion = AttnLabelSmoothedCrossEntropy(task, sentence_avg=False, label_smoothing=EPS, loss_chunk_tokens=chunk)
    logits, target = random_batch(6, n=n, k=k, dtype=torch.bfloat16)
    logits = logits.view(4, n // 4, k).requires_grad_()  # batch x length x vocabulary, as a decoder's
    with TensorSizes() as seen:
        loss, nll = criterion.compute_loss(FixedLogits(), (logits, {}), {"target": target.view(4, n // 4)})
        grad, = torch.autograd.grad(loss + nll, logits)
    assert grad.dtype == torch.bfloat16
    assert (n * k, torch.bfloat16) in [(numel, dtype) for numel, dtype, _ in seen.made]  # the mode saw the backward
    return [numel for numel, dtype, _ in seen.made if dtype == torch.float32]


def test_largest_fp32_tensor_is_one_chunk_of_rows():
    """64 target positions, K = 50, chunks of 8: no fp32 tensor of more than 8 x 50 elements in the
    forward or the backward (N-length vectors, 64 here, are below that); unchunked, 64 x 50."""
    chunked = fp32_sizes_of_forward_and_backward(chunk=8)
    assert max(chunked) <= 8 * 50, sorted(chunked)[-5:]
    assert max(fp32_sizes_of_forward_and_backward(chunk=0)) == 64 * 50  # the probe does see N x K


# --------------------------------------------------------------------------- options
def built_criterion(data_bin, *flags):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = options.parse_args_and_arch(options.get_training_parser(), [
        str(data_bin), "--user-dir", USER_DIR, "--task", "attn_translation", "--arch", "attn_paper_base",
        "--criterion", "attn_label_smoothed_cross_entropy", *flags])
    cfg = convert_namespace_to_omegaconf(args)  # as fairseq-train does
    return tasks.setup_task(cfg.task).build_criterion(cfg.criterion)


def test_fairseq_train_options_reach_the_criterion(data_bin):
    default = built_criterion(data_bin)
    assert (default.loss_chunk_tokens, default.compile_loss) == (8192, False)
    chosen = built_criterion(data_bin, "--loss-chunk-tokens", "16", "--compile-loss")
    assert isinstance(chosen, AttnLabelSmoothedCrossEntropy)
    assert (chosen.loss_chunk_tokens, chosen.compile_loss) == (16, True)
    assert built_criterion(data_bin, "--loss-chunk-tokens", "0").loss_chunk_tokens == 0
    with pytest.raises(ConfigError) as refused:
        built_criterion(data_bin, "--loss-chunk-tokens", "-1")
    assert isinstance(refused.value, AttnPluginError)  # printed by the plugin as one line, no traceback
    line = error_line(refused.value)
    assert "\n" not in line and "--loss-chunk-tokens" in line and ">= 0" in line and "-1" in line


def test_compile_loss_without_torch_compile_is_one_clear_error(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("torch.compile is not supported on this Python")

    monkeypatch.setattr(ls, "_COMPILED", None)
    monkeypatch.setattr(torch, "compile", broken)
    logits, target = random_batch(7, n=5, k=4)
    with pytest.raises(ConfigError) as refused:
        szegedy_smoothed_nll_loss(logits, target, EPS, 1, chunk=2, compile=True)
    line = error_line(refused.value)
    assert "\n" not in line and "--compile-loss" in line and "not supported on this Python" in line


@pytest.mark.slow
def test_compiled_loss_equals_eager(monkeypatch):
    """--compile-loss on CPU (inductor, gcc): the same loss and gradient as the eager steps, for fp32 and
    bf16 logits, chunks with a shorter last one, and no padding; then a compiler that fails is one clear error."""
    try:
        import torch._dynamo
        import torch._inductor.config as inductor_config
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"torch.compile is not available here: {exc}")
    monkeypatch.setattr(ls, "_COMPILED", None)
    torch._dynamo.reset()
    for dtype in (torch.float32, torch.bfloat16):
        logits, target = random_batch(8, n=41, k=57, dtype=dtype)
        for chunk, ignore_index in ((0, 1), (16, 1), (16, None)):
            try:
                compiled = loss_and_grad(logits, target, ignore_index, chunk, compile=True)
            except ConfigError as exc:  # pragma: no cover - depends on the machine
                pytest.skip(f"torch.compile cannot compile on this machine: {exc}")
            eager = loss_and_grad(logits, target, ignore_index, chunk)
            assert compiled[2].dtype == dtype
            for got, want in zip(compiled, eager):
                torch.testing.assert_close(got.float(), want.float(), rtol=1e-5 if dtype == torch.float32 else 2 ** -8,
                                           atol=1e-6)
    # A C++ compiler that does not work: inductor fails on the first call, which names the option.
    monkeypatch.setattr(ls, "_COMPILED", None)
    monkeypatch.setattr(inductor_config.cpp, "cxx", ("/nonexistent/c++",))
    torch._dynamo.reset()
    with pytest.raises(ConfigError) as refused:
        loss_and_grad(*random_batch(9, n=6, k=5), 1, chunk=4, compile=True)
    assert "--compile-loss" in error_line(refused.value) and "\n" not in error_line(refused.value)
    torch._dynamo.reset()

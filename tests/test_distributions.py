"""common/distributions.py: `Categorical` and `Normal` are torch's distributions' arithmetic op for
op, so a file that used torch's classes learns the same numbers bit for bit with them: the same
draws from the same generator state, the same log-probabilities, entropies and gradients."""

import pytest
import torch

from common.distributions import Categorical, Categoricals, Normal


@pytest.mark.parametrize("shape", [(7, 3), (2, 5, 4), (1, 2)])
def test_categorical_is_torchs_bit_for_bit(shape):
    torch.manual_seed(0)
    logits = (torch.randn(shape) * 3).requires_grad_()
    logits_ref = logits.detach().clone().requires_grad_()
    ref = torch.distributions.Categorical(logits=logits_ref, validate_args=False)
    ours = Categorical(logits)
    torch.manual_seed(1)
    a_ref = ref.sample()
    torch.manual_seed(1)
    a = ours.sample()
    assert torch.equal(a, a_ref) and a.shape == shape[:-1]
    assert torch.equal(ours.probs, ref.probs) and torch.equal(ours.logits, ref.logits)
    lp, lp_ref = ours.log_prob(a), ref.log_prob(a_ref)
    ent, ent_ref = ours.entropy(), ref.entropy()
    assert torch.equal(lp, lp_ref) and torch.equal(ent, ent_ref)
    (lp.sum() + ent.sum()).backward()
    (lp_ref.sum() + ent_ref.sum()).backward()
    assert torch.equal(logits.grad, logits_ref.grad)


def test_a_masked_action_has_no_mass_and_the_entropy_stays_finite():
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    mask = torch.tensor([[True, False, True]])
    d = Categoricals(logits, (3,), mask)
    assert d.dims[0].probs[0, 1] == 0
    assert torch.isfinite(d.entropy()).all()
    torch.manual_seed(0)
    assert not (torch.stack([d.sample() for _ in range(200)]) == 1).any()


def test_normal_is_torchs_bit_for_bit():
    torch.manual_seed(0)
    loc = torch.randn(6, 3).requires_grad_()
    log_std = (torch.randn(3) * 0.5).requires_grad_()
    scale = log_std.exp().expand_as(loc)
    ref = torch.distributions.Normal(loc, scale, validate_args=False)
    ours = Normal(loc, scale)
    torch.manual_seed(1)
    x_ref = ref.rsample()
    torch.manual_seed(1)
    x = ours.rsample()
    assert torch.equal(x, x_ref)
    lp, lp_ref = ours.log_prob(x.detach()), ref.log_prob(x_ref.detach())
    assert torch.equal(lp, lp_ref) and torch.equal(ours.entropy(), ref.entropy())
    g = torch.autograd.grad((x.sum() + lp.sum()), [loc, log_std], retain_graph=True)
    g_ref = torch.autograd.grad((x_ref.sum() + lp_ref.sum()), [loc, log_std])
    assert all(torch.equal(a, b) for a, b in zip(g, g_ref))

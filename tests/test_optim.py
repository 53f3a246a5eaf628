"""common.optim.Adam: torch.optim.Adam with a lean CPU step. Its numbers and state_dict must be torch's bit for
bit (the algorithm files' resume is bit-exact, and a checkpoint from before the lean step must resume the same)."""

import copy

import pytest
import torch

from common.optim import Adam


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2), torch.nn.Linear(2, 1))


def _train(cls, steps=30, reload_at=None, frozen_from=None, **kw):
    """`steps` Adam steps on a small net; at `reload_at` the optimizer is rebuilt from its state_dict (a resume);
    from `frozen_from` on, the last layer gets no gradient (torch's step skips such parameters)."""
    net = _net()
    kw = {"lr": 1e-3, "fused": True, **kw}
    make = lambda: cls(net.parameters(), **{k: (v.clone() if torch.is_tensor(v) else v) for k, v in kw.items()})  # noqa: E731
    opt, gen = make(), torch.Generator().manual_seed(1)
    for i in range(steps):
        if i == reload_at:
            sd = copy.deepcopy(opt.state_dict())
            opt = make()
            opt.load_state_dict(sd)
        opt.zero_grad()
        head = net[:3] if frozen_from is not None and i >= frozen_from else net
        head(torch.randn(32, 5, generator=gen)).square().mean().backward()
        opt.step()
    return [p.detach().clone() for p in net.parameters()], opt.state_dict()


@pytest.mark.parametrize("kw", [dict(), dict(lr=torch.tensor(3e-3)), dict(weight_decay=0.01), dict(betas=(0.8, 0.99), eps=1e-6),
                                dict(fused=None), dict(amsgrad=True)], ids=["plain", "tensor-lr", "weight-decay", "betas-eps",
                                                                           "not-fused", "amsgrad"])
@pytest.mark.parametrize("case", [dict(), dict(reload_at=12), dict(frozen_from=10)], ids=["run", "resumed", "no-grad"])
def test_lean_adam_is_torch_adam_bit_for_bit(kw, case):
    ours, ours_sd = _train(Adam, **case, **kw)
    torch_params, torch_sd = _train(torch.optim.Adam, **case, **kw)
    assert all(torch.equal(a, b) for a, b in zip(ours, torch_params))
    assert ours_sd["state"].keys() == torch_sd["state"].keys()
    for k, s in torch_sd["state"].items():
        assert s.keys() == ours_sd["state"][k].keys()
        assert all(torch.equal(v, ours_sd["state"][k][n]) for n, v in s.items())


def test_lean_adam_takes_the_lean_path_and_keeps_hooks():
    net = _net()
    opt = Adam(net.parameters(), lr=1e-3, fused=True)
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(4, 5)).sum().backward()
        opt.step()
    assert opt._lean is not None  # fused on CPU: the lean step after the first
    assert all(p.grad is not None for p in net.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    calls = []
    opt.register_step_pre_hook(lambda *a: calls.append("pre"))
    opt.register_step_post_hook(lambda *a: calls.append("post"))
    net(torch.randn(4, 5)).sum().backward()
    opt.step()
    assert calls == ["pre", "post"]  # a registered hook: torch's step, hooks called once each


def test_lean_adam_under_torch_compile():
    """`--compile` compiles the optimizer steps: torch's step is traced (the lean one's in-place kernel call fails
    functionalization); aot_eager runs that functionalization without inductor's code generation."""
    net, ref = _net(), _net()
    opt, ref_opt = Adam(net.parameters(), lr=1e-3, fused=True), torch.optim.Adam(ref.parameters(), lr=1e-3, fused=True)
    step = torch.compile(opt.step, backend="aot_eager")
    for _ in range(3):
        x = torch.randn(8, 5)
        for n, o, s in ((net, opt, step), (ref, ref_opt, ref_opt.step)):
            o.zero_grad()
            n(x).square().mean().backward()
            s()
    assert all(torch.allclose(a, b) for a, b in zip(net.parameters(), ref.parameters()))


@pytest.mark.parametrize("max_norm", [0.05, 0.5, 1e6], ids=["clips", "clips-less", "no-clip"])
@pytest.mark.parametrize("case", ["generator", "frozen-layer", "float64-layer", "empty"])
def test_clip_grad_norm_is_torch_bit_for_bit(max_norm, case):
    """common.optim.clip_grad_norm_ against torch.nn.utils.clip_grad_norm_: the returned norm and every gradient
    `torch.equal`, also where it takes torch's path (mixed dtypes) or finds no gradient."""
    from common.optim import clip_grad_norm_

    grads = []
    for fn in (torch.nn.utils.clip_grad_norm_, clip_grad_norm_):
        net = _net()
        if case == "float64-layer":
            net[3].double()
            net[3].weight.grad, net[3].bias.grad = torch.ones(1, 2, dtype=torch.float64), torch.ones(1, dtype=torch.float64)
        if case != "empty":
            net[:3](torch.randn(64, 5, generator=torch.Generator().manual_seed(2))).square().sum().backward()
        if case == "frozen-layer":
            net[0].weight.grad = None
        total = fn(net.parameters(), max_norm)
        grads.append((total, [p.grad for p in net.parameters()]))
    (t0, g0), (t1, g1) = grads
    assert torch.equal(t0, t1)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(g0, g1))

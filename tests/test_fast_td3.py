"""algos/fast_td3.py's two additions to TD3, checked by hand: the n-step transitions its window
stores (against a per-sub-env loop over the same steps) and the per-sub-env exploration noise drawn
at each episode start. Its learning test is in test_learning_offpolicy.py, its exact resume in
test_faults.py."""

import torch

from algos import fast_td3
from algos.fast_td3 import NStepWindow


def _by_hand(steps, n, gamma, t, e):
    """Sub-env e's n-step transition starting at step t, one step at a time."""
    ret, k = 0.0, 0
    for j in range(n):
        _, _, r, nxt, term, done = steps[t + j]
        ret += gamma**j * float(r[e])
        k = j + 1
        if done[e]:
            return ret, nxt["policy"][e], 0.0 if term[e] else gamma**k
    return ret, steps[t + n - 1][3]["policy"][e], gamma**k


def test_n_step_window_matches_a_loop_by_hand():
    gen = torch.Generator().manual_seed(0)
    N, n, gamma, T = 5, 3, 0.9, 40
    steps = []
    for t in range(T):
        done = torch.rand(N, generator=gen) < 0.25
        # the rest of the done flags are truncations
        term = done & (torch.rand(N, generator=gen) < 0.5)
        steps.append(
            (
                {"policy": torch.randn(N, 4, generator=gen)},  # named groups, as the env gives
                torch.randn(N, 2, generator=gen),
                torch.randn(N, generator=gen),
                {"policy": torch.randn(N, 4, generator=gen)},
                term,
                done,
            )
        )
    window = NStepWindow(n, gamma)
    out = [window.push(*s) for s in steps]
    assert all(o is None for o in out[: n - 1]) and len(window.steps) == n - 1
    for t, o in enumerate(out[n - 1 :]):
        obs, act, ret, boot, discount = o
        assert torch.equal(obs["policy"], steps[t][0]["policy"]) and torch.equal(act, steps[t][1])
        for e in range(N):
            r, b, d = _by_hand(steps, n, gamma, t, e)
            assert (
                abs(float(ret[e]) - r) < 1e-5
                and torch.equal(boot["policy"][e], b)
                and abs(float(discount[e]) - d) < 1e-6
            )


def test_one_step_window_is_td3s_transition():
    window = NStepWindow(1, 0.99)
    obs, act, rew = {"policy": torch.randn(3, 4)}, torch.randn(3, 2), torch.randn(3)
    nxt = {"policy": torch.randn(3, 4)}
    term, done = torch.tensor([True, False, False]), torch.tensor([True, True, False])
    o, a, r, b, d = window.push(obs, act, rew, nxt, term, done)
    assert (
        torch.equal(r, rew)
        and torch.equal(b["policy"], nxt["policy"])
        and torch.allclose(d, torch.tensor([0.0, 0.99, 0.99]))
    )


def _final_state(tmp_path, vector_steps):
    # one update per vector step (the defaults' 4): what is checked, the noise and the stored
    # discounts, does not depend on the updates, which run as in training all the same
    res = fast_td3.main(
        fast_td3.Args(
            env="Pendulum-v1",
            num_envs=8,
            total_steps=8 * vector_steps,
            learning_starts=8 * 5,
            batch_size=32,
            gradient_steps=1,
            hidden=(16, 16),
            eval_every=0,
            save_every=0,
            quiet=True,
            out_dir=str(tmp_path / str(vector_steps)),
        )
    )
    return torch.load(res["checkpoint"], weights_only=False)


def test_noise_std_is_per_sub_env_and_redrawn_at_episode_starts(tmp_path):
    """Pendulum's episodes all end at step 200: the stds of steps 100 and 190 are the first draws,
    those of step 210 new ones."""
    early, late, after = (_final_state(tmp_path, t) for t in (100, 190, 210))
    std = early["noise_std"].squeeze(1)
    assert std.shape == (8,) and ((std >= 0.001) & (std <= 0.4)).all() and std.unique().numel() == 8
    assert torch.equal(late["noise_std"], early["noise_std"])
    assert (after["noise_std"] != early["noise_std"]).all()
    assert after["discounts"].shape == (8 * (210 - 2),)  # every stored row has its n-step discount
    assert (after["discounts"] > 0).all()  # Pendulum never terminates: every row bootstraps

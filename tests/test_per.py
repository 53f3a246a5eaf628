"""Proportional prioritized replay (common.buffers.PrioritizedReplayBuffer): sampling frequencies
against p^alpha / sum (chi-square and per-bin binomial bounds), importance weights against an
independent numpy computation, sum-tree invariants, max-priority for new rows, the `size` guard,
exact state_dict round trip and the bad-input errors. All sampling uses seeded torch.Generators."""

import io
import math

import numpy as np
import pytest
import torch

from common.buffers import PrioritizedReplayBuffer, ReplayBuffer

OBS = (torch.zeros(1, 2), torch.zeros(1))  # examples of one step: an observation [2], an action


class Ref:
    """Independent numpy model of what the buffer should hold: p_i per row and the running max."""

    def __init__(self, capacity, alpha, eps):
        self.capacity, self.alpha, self.eps = capacity, alpha, eps
        self.p = np.zeros(capacity)
        self.max_p = 1.0
        self.pos = self.size = 0
        self.written = np.full(capacity, -1)  # global counter of the transition held by each row

    def add(self, n, counter):
        idx = (self.pos + np.arange(n)) % self.capacity
        self.p[idx] = self.max_p
        self.written[idx] = counter + np.arange(n)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def update(self, idx, td):
        p = np.abs(td) + self.eps
        self.p[idx] = p
        self.max_p = max(self.max_p, p.max())

    def probs(self):
        q = self.p[: self.size] ** self.alpha
        return q / q.sum()


def add_rows(buf, ref, n, counter):
    """Add n transitions whose obs[:, 0] is a global counter (identifies what each row holds)."""
    obs = torch.stack([torch.arange(counter, counter + n, dtype=torch.float32), torch.zeros(n)], 1)
    idx = buf.add(obs, torch.zeros(n), torch.zeros(n), obs + 1, torch.zeros(n))
    if ref is not None:
        ref.add(n, counter)
    return idx, counter + n


def make(capacity, n_rows, alpha=0.6, eps=1e-6, chunk=None):
    buf = PrioritizedReplayBuffer(capacity, *OBS, alpha=alpha, eps=eps)
    ref = Ref(capacity, alpha, eps)
    counter = 0
    chunk = chunk or n_rows
    while counter < n_rows:
        _, counter = add_rows(buf, ref, min(chunk, n_rows - counter), counter)
    return buf, ref


def set_priorities(buf, ref, idx, td):
    buf.update_priorities(torch.as_tensor(idx), torch.as_tensor(td, dtype=torch.float32))
    ref.update(np.asarray(idx), np.asarray(td, dtype=np.float32).astype(np.float64))


def draw_counts(buf, draws, batch, seed):
    g = torch.Generator().manual_seed(seed)
    counts = torch.zeros(buf.capacity, dtype=torch.long)
    for _ in range(draws // batch):
        b = buf.sample(batch, beta=0.4, generator=g)
        counts += torch.bincount(b["indices"], minlength=buf.capacity)
    return counts.numpy()


def check_frequencies(counts, probs, size):
    """Chi-square (critical value at z = 5 by Wilson-Hilferty) and every bin within 5 binomial
    sigmas.

    Stratified sampling has at most multinomial variance, so both bounds are conservative."""
    assert counts[size:].sum() == 0, "sampled a row beyond size"
    counts = counts[:size]
    n = counts.sum()
    expected = n * probs
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - expected) <= 5 * sigma + 1), np.max(
        np.abs(counts - expected) / sigma
    )
    k = size - 1
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    critical = k * (1 - 2 / (9 * k) + 5 * math.sqrt(2 / (9 * k))) ** 3
    assert chi2 < critical, (chi2, critical)


@pytest.mark.parametrize("alpha", [0.6, 0.0, 1.0])
def test_sampling_frequencies_match_priorities(alpha):
    buf, ref = make(64, 64, alpha=alpha)
    td = np.linspace(0.05, 3.0, 64)[np.random.default_rng(0).permutation(64)]  # distinct, shuffled
    set_priorities(buf, ref, np.arange(64), td)
    probs = ref.probs()
    if alpha == 0.0:
        np.testing.assert_allclose(probs, 1 / 64)
    check_frequencies(draw_counts(buf, 200_000, 1000, seed=1), probs, 64)


def test_sampling_frequencies_non_power_of_two_partly_filled():
    buf, ref = make(50, 37, chunk=5)  # 64 leaves, 37 filled, 27 empty leaves
    assert buf.num_leaves == 64 and buf.size == 37
    rng = np.random.default_rng(1)
    set_priorities(buf, ref, np.arange(37), rng.uniform(0.1, 4.0, 37))
    check_frequencies(draw_counts(buf, 200_000, 1000, seed=2), ref.probs(), 37)


def test_sampling_frequencies_after_wraparound():
    buf, ref = make(50, 10)
    set_priorities(buf, ref, np.arange(10), np.linspace(0.5, 6.0, 10))  # max_p -> 6 + eps
    counter = 10
    for n in (13, 13, 13, 13, 13):  # 75 rows total: rows 0..24 overwritten once, with max_p
        _, counter = add_rows(buf, ref, n, counter)
    assert buf.size == 50 and buf.pos == 25
    np.testing.assert_array_equal(buf.data["obs"][:, 0].numpy(), ref.written)
    # overwritten rows got a fresh max priority leaf, not their old one
    np.testing.assert_allclose(buf.leaf_priorities()[:10].numpy(), (6.0 + 1e-6) ** 0.6, rtol=1e-6)
    rng = np.random.default_rng(2)
    half = rng.permutation(50)[:25]
    set_priorities(buf, ref, half, rng.uniform(0.01, 2.0, 25))
    np.testing.assert_allclose(buf.leaf_priorities().numpy(), ref.p**0.6, rtol=1e-6)
    check_frequencies(draw_counts(buf, 200_000, 1000, seed=3), ref.probs(), 50)


def test_sampling_is_stratified():
    """Draw j of a batch of B falls in the j-th of B equal slices of the total mass."""
    buf, ref = make(50, 37)
    rng = np.random.default_rng(8)
    set_priorities(buf, ref, np.arange(37), rng.uniform(0.01, 5.0, 37))
    q = ref.p[:37] ** 0.6
    cum_after = np.cumsum(q) / q.sum()
    cum_before = cum_after - q / q.sum()
    g = torch.Generator().manual_seed(9)
    for B in (1, 7, 64, 300):
        idx = buf.sample(B, generator=g)["indices"].numpy()
        j = np.arange(B)
        assert np.all(cum_before[idx] <= (j + 1) / B + 1e-9) and np.all(
            cum_after[idx] >= j / B - 1e-9
        )
        assert np.all(np.diff(idx) >= 0)


@pytest.mark.parametrize("beta", [0.4, 1.0])
@pytest.mark.parametrize("capacity,size", [(40, 40), (100, 73)])
def test_weights_match_formula(beta, capacity, size):
    buf, ref = make(capacity, size)
    rng = np.random.default_rng(3)
    set_priorities(buf, ref, np.arange(size), rng.uniform(0.001, 5.0, size))
    g = torch.Generator().manual_seed(4)
    for _ in range(5):
        b = buf.sample(256, beta=beta, generator=g)
        idx = b["indices"].numpy()
        w = (size * ref.probs()[idx]) ** (-beta)
        w /= w.max()
        assert b["weights"].dtype == torch.float32 and b["weights"].shape == (256,)
        np.testing.assert_allclose(b["weights"].numpy(), w, rtol=1e-5)
        assert b["weights"].max().item() == 1.0
        np.testing.assert_array_equal(
            b["obs"][:, 0].numpy(), ref.written[idx]
        )  # rows match indices


def check_tree(buf):
    t = buf.tree
    L = buf.num_leaves
    internal = torch.arange(1, L)
    # every parent is exactly (bitwise) the sum of its children: they are recomputed, never patched
    assert torch.equal(t[internal], t[2 * internal] + t[2 * internal + 1])
    leaves = t[L:]
    assert torch.all(leaves[buf.size :] == 0)
    assert torch.all(leaves[: buf.size] > 0)
    assert math.isclose(t[1].item(), leaves.sum().item(), rel_tol=1e-12)


def test_tree_invariant_random_adds_and_updates_with_duplicates():
    rng = np.random.default_rng(5)
    buf, ref = make(100, 1)  # 128 leaves
    counter = 1
    for step in range(300):
        if rng.random() < 0.4:
            _, counter = add_rows(buf, ref, int(rng.integers(1, 31)), counter)
        else:
            k = int(rng.integers(1, 64))
            idx = rng.integers(0, buf.size, k)
            idx[: k // 3] = idx[0]  # plenty of duplicates in one call
            td = rng.normal(0, 3, k).astype(np.float32)
            buf.update_priorities(torch.as_tensor(idx), torch.as_tensor(td))
            # duplicates: the leaf keeps one of its candidate values; others are exact
            p_alpha = (np.abs(td.astype(np.float64)) + 1e-6) ** 0.6
            leaves = buf.leaf_priorities().numpy()
            for i in np.unique(idx):
                assert np.any(np.isclose(leaves[i], p_alpha[idx == i], rtol=1e-12))
                ref.p[i] = leaves[i] ** (1 / 0.6)
            ref.max_p = max(ref.max_p, np.abs(td.astype(np.float64)).max() + 1e-6)
        check_tree(buf)
        np.testing.assert_allclose(buf.max_priority.item(), ref.max_p, rtol=1e-12)
        np.testing.assert_allclose(
            buf.leaf_priorities().numpy(), ref.p[: buf.size] ** 0.6, rtol=1e-9
        )
    assert counter > 100  # wrapped around several times


def test_new_rows_get_max_priority():
    buf, ref = make(16, 4, alpha=0.5)
    assert torch.all(buf.leaf_priorities() == 1.0)  # initial max_p = 1
    buf.update_priorities(torch.tensor([2]), torch.tensor([-5.0]))  # |td| counts
    buf.update_priorities(torch.tensor([1]), torch.tensor([0.3]))
    idx, _ = add_rows(buf, None, 3, 4)
    expected = (5.0 + 1e-6) ** 0.5
    np.testing.assert_allclose(buf.tree[buf.num_leaves + idx].numpy(), expected, rtol=1e-12)
    # lowering a row keeps the running max
    buf.update_priorities(torch.tensor([2]), torch.tensor([0.1]))
    idx, _ = add_rows(buf, None, 2, 7)
    np.testing.assert_allclose(buf.tree[buf.num_leaves + idx].numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(buf.leaf_priorities()[1].item(), (0.3 + 1e-6) ** 0.5, rtol=1e-6)


def test_never_samples_beyond_size():
    buf, _ = make(1000, 7)  # 1024 leaves, 7 filled
    g = torch.Generator().manual_seed(6)
    idx = torch.cat([buf.sample(512, generator=g)["indices"] for _ in range(20)])
    assert idx.min() >= 0 and idx.max() < 7
    # Simulate floating-point overshoot: a root larger than its leaves' sum sends draws right,
    # onto empty leaves; the guard must still return filled rows.
    buf.tree[1] *= 3.0
    idx = torch.cat([buf.sample(512, generator=g)["indices"] for _ in range(20)])
    assert idx.max() == 6 and idx.min() >= 0
    # a single-row buffer (capacity 1: the root is the only leaf)
    one, _ = make(1, 1)
    assert torch.all(one.sample(8, generator=g)["indices"] == 0)


def test_state_dict_roundtrip_reproduces_samples():
    buf, ref = make(50, 70, chunk=9)
    rng = np.random.default_rng(7)
    set_priorities(buf, ref, rng.integers(0, 50, 30), rng.uniform(0.0, 3.0, 30))
    blob = io.BytesIO()
    torch.save(buf.state_dict(), blob)
    blob.seek(0)
    other = PrioritizedReplayBuffer(50, *OBS)
    other.load_state_dict(torch.load(blob))
    assert torch.equal(other.tree, buf.tree) and torch.equal(other.max_priority, buf.max_priority)
    assert (other.pos, other.size) == (buf.pos, buf.size)
    for trial in range(3):
        a = buf.sample(64, beta=0.5, generator=torch.Generator().manual_seed(trial))
        b = other.sample(64, beta=0.5, generator=torch.Generator().manual_seed(trial))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        td = torch.randn(64, generator=torch.Generator().manual_seed(100 + trial))
        buf.update_priorities(a["indices"], td)
        other.update_priorities(b["indices"], td)
        add_rows(buf, None, 5, 1000 + 5 * trial)
        add_rows(other, None, 5, 1000 + 5 * trial)
        assert torch.equal(other.tree, buf.tree)


def test_state_dict_mismatches_raise():
    buf, _ = make(20, 5)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplayBuffer(20, *OBS, alpha=0.7).load_state_dict(buf.state_dict())
    uniform = ReplayBuffer(20, *OBS)
    uniform.add(
        torch.zeros(3, 2), torch.zeros(3), torch.zeros(3), torch.zeros(3, 2), torch.zeros(3)
    )
    with pytest.raises(ValueError, match="prioritized"):
        PrioritizedReplayBuffer(20, *OBS).load_state_dict(uniform.state_dict())


def test_errors():
    buf = PrioritizedReplayBuffer(8, *OBS)
    with pytest.raises(RuntimeError, match="empty"):
        buf.sample(4)
    add_rows(buf, None, 3, 0)
    with pytest.raises(ValueError, match="beta"):
        buf.sample(4, beta=None)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplayBuffer(8, *OBS, alpha=-0.1)
    with pytest.raises(ValueError, match="eps"):
        PrioritizedReplayBuffer(8, *OBS, eps=0.0)


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (pytest -m cuda on a GPU machine)"
)
def test_no_host_sync_on_cuda():
    buf = PrioritizedReplayBuffer(1000, *(x.cuda() for x in OBS))
    x = torch.zeros(64, 2, device="cuda")
    z = torch.zeros(64, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            buf.add(x, z, z, x, z)
            b = buf.sample(32, beta=0.4, generator=g)
            buf.update_priorities(b["indices"], torch.randn(32, device="cuda"))
    finally:
        torch.cuda.set_sync_debug_mode(0)

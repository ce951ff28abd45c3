"""Tests of tasks.py: every task's labels against an independent reference written here (Python
integers, plain loops, a recursive evaluator), the layout and END filling, edge cases, determinism,
fixed evaluation sets, refused lengths and knobs, the curriculum."""

import pytest
import torch

from tasks import (
    IGNORE,
    PAD,
    TASKS,
    curriculum_n_max,
    eval_set,
    get_task,
    make_batch,
    task_kwargs,
    train_batch,
)

LENGTHS = [1, 2, 3, 5, 10, 19] + list(range(20, 61, 5))  # in-distribution and the OOD test grid


# --- independent references: from the prompt's content, the expected x and y as symbols -----------
# (None marks an unscored position)

def ref_dyck(s):
    y, h, ok = [], 0, True
    for c in s:
        h += 1 if c == "(" else -1
        if h < 0:
            ok = False
        y.append("1" if ok and h == 0 else "0")
    return s, y


def ref_parity_prefix(bits):
    return ["^"] + bits, [None] + [str(sum(int(b) for b in bits[:i + 1]) % 2) for i in range(len(bits))]


def ref_copy(bits):
    n = len(bits)
    return bits + [">"] + ["_"] * n, [None] * (n + 1) + bits


def ref_parity(bits):
    n = len(bits)
    return bits + [">", "_"], [None] * (n + 1) + [str(bits.count("1") % 2)]


def ref_addition(a, b):
    n = len(a)
    s = bin(int("".join(a), 2) + int("".join(b), 2))[2:].zfill(n + 1)
    return a + ["+"] + b + ["="] + ["_"] * (n + 1), [None] * (2 * n + 2) + list(s)


def ref_unique_set(vals):
    seen, out = set(), []
    for v in vals:
        if v not in seen:
            seen.add(v)
            out.append(v)
    n = len(vals)
    return vals + [">"] + ["_"] * n, [None] * (n + 1) + out + ["$"] * (n - len(out))


def ref_binary_sum(bits):
    n, c = len(bits), bits.count("1")
    slots = len(bin(n)) - 2
    digits = [str((c >> i) & 1) for i in range(max(1, len(bin(c)) - 2))]  # LSB first
    return bits + [">"] + ["_"] * slots, [None] * (n + 1) + digits + ["$"] * (slots - len(digits))


def ref_multiplication(a, b):
    k = len(a) + len(b)
    prod = int("".join(a), 2) * int("".join(b), 2)
    return a + ["*"] + b + ["="] + ["_"] * k, [None] * (k + 2) + [str((prod >> i) & 1) for i in range(k)]


def eval_prefix(tokens, p):
    """Recursive-descent evaluator of a prefix expression over Z_p."""
    def rec(i):
        t = tokens[i]
        if t in "+-*":
            a, i = rec(i + 1)
            b, i = rec(i)
            return {"+": a + b, "-": a - b, "*": a * b}[t] % p, i
        return int(t), i + 1
    v, end = rec(0)
    assert end == len(tokens), "trailing tokens after a full expression"
    return v


def ref_mano(expr, p=23):
    return expr + ["=", "_"], [None] * (len(expr) + 1) + [str(eval_prefix(expr, p))]


def ref_mano_of(x, n):
    expr = x[:x.index("=")]
    assert sum(t in "+-*" for t in expr) == n, "mano: n must be the number of operators"
    return ref_mano(expr)


# Every task in tasks.TASKS has an independent reference here: (n, the sampled prompt as symbols) -> the expected
# x and y, rebuilt from the prompt's content. A new task adds its line; the tests below find tasks through TASKS.
REFERENCES = {
    "dyck": lambda n, x: ref_dyck(x[:n]),
    "parity_prefix": lambda n, x: ref_parity_prefix(x[1:n + 1]),
    "copy": lambda n, x: ref_copy(x[:n]),
    "parity": lambda n, x: ref_parity(x[:n]),
    "addition": lambda n, x: ref_addition(x[:n], x[n + 1:2 * n + 1]),
    "unique_set": lambda n, x: ref_unique_set(x[:n]),
    "binary_sum": lambda n, x: ref_binary_sum(x[:n]),
    "multiplication": lambda n, x: ref_multiplication(x[:n], x[n + 1:x.index("=")]),
    "mano": lambda n, x: ref_mano_of(x, n),
}


def reference(name, n, x):
    """Split a sampled prompt into its content (as the task defines it for length n) and rebuild the
    expected x and y independently."""
    assert name in REFERENCES, f"task {name}: add its independent reference to REFERENCES in tests/test_tasks.py"
    return REFERENCES[name](n, x)


def symbols(task, x, y):
    return [task.vocab[t] for t in x], [None if t == IGNORE else task.vocab[t] for t in y]


# --- labels against the references ------------------------------------------------------------------

@pytest.mark.smoke
@pytest.mark.parametrize("name", list(TASKS))
@pytest.mark.parametrize("test", [False, True])
def test_labels_match_reference(name, test):
    task, gen = get_task(name), torch.Generator().manual_seed(7)
    for n in LENGTHS:
        for _ in range(3):
            xs, ys = symbols(task, *task.sample(n, gen, test))
            assert (xs, ys) == reference(name, n, xs), f"{name} n={n}"


@pytest.mark.parametrize("name", ["unique_set", "mano", "multiplication"])
def test_labels_with_other_knobs(name):
    kw = {"unique_set": dict(V=3), "mano": dict(p=7), "multiplication": dict(m_train="3", m_test=4)}[name]
    task, gen = get_task(name, **kw), torch.Generator().manual_seed(1)
    for n in (1, 4, 19, 40):
        for test in (False, True):
            xs, ys = symbols(task, *task.sample(n, gen, test))
            if name == "mano":
                assert (xs, ys) == ref_mano(xs[:xs.index("=")], p=7)
                assert all(int(t) < 7 for t in xs if t.isdigit())
            else:
                assert (xs, ys) == reference(name, n, xs)
            if name == "multiplication":
                assert xs.index("=") - n - 1 == (4 if test else 3)
            if name == "unique_set":
                assert set(xs[:n]) <= {"0", "1", "2"}


@pytest.mark.smoke
def test_docstring_examples():
    """The worked examples of the docstrings, hand-computed, through the builders."""
    def slots(task, built):
        return [task.vocab[t] for t in built[1] if t != IGNORE]
    u, b, m, p = (get_task(k) for k in ("unique_set", "binary_sum", "multiplication", "mano"))
    assert slots(u, u.encode([3, 1, 3, 0, 1])) == ["3", "1", "0", "$", "$"]
    assert slots(u, u.encode([7])) == ["7"]
    assert slots(b, b.encode([1, 1, 0, 1, 1, 0])) == ["0", "0", "1"]
    assert slots(b, b.encode([1, 0, 1, 0, 0])) == ["0", "1", "$"]
    assert slots(b, b.encode([0, 0, 0])) == ["0", "$"]
    assert slots(m, m.encode([1, 0, 1], [1, 1])) == ["1", "1", "1", "1", "0"]
    assert slots(m, m.encode([1, 1], [1])) == ["1", "1", "0"]
    assert slots(p, p.encode(["+", 3, "*", 4, 5])) == ["0"]
    assert slots(p, p.encode(["-", 2, 7])) == ["18"]
    assert u.decode(u.encode([3, 1, 3, 0, 1])[0]) == "3 1 3 0 1 > _ _ _ _ _"
    assert m.decode(m.encode([1, 0, 1], [1, 1])[0]) == "1 0 1 * 1 1 = _ _ _ _ _"
    assert p.decode(p.encode(["+", 3, "*", 4, 5])[0]) == "+ 3 * 4 5 = _"


# --- edge cases, built with chosen inputs -----------------------------------------------------------

def check_built(task, built, expected_x, expected_y):
    assert symbols(task, *built) == (expected_x, expected_y)


def test_unique_set_edges():
    u = get_task("unique_set")
    for vals in ([5], [5, 5, 5, 5], [0] * 20, list(range(16)), [2, 9, 2, 9, 2, 4, 15, 4]):
        check_built(u, u.encode(vals), *ref_unique_set([str(v) for v in vals]))
    check_built(u, u.encode([4, 4, 4]), ["4", "4", "4", ">", "_", "_", "_"], [None] * 4 + ["4", "$", "$"])


def test_binary_sum_edges():
    b = get_task("binary_sum")
    cases = {(0,): ["0"], (1,): ["1"], (0,) * 7: ["0", "$", "$"], (1,) * 7: ["1", "1", "1"],
             (1,) * 8: ["0", "0", "0", "1"], (0,) * 8: ["0", "$", "$", "$"], (1, 0, 0, 0): ["1", "$", "$"]}
    for bits, slots in cases.items():
        n = len(bits)
        check_built(b, b.encode(list(bits)), [str(t) for t in bits] + [">"] + ["_"] * len(slots),
                    [None] * (n + 1) + slots)
    for n in (15, 16, 31, 32, 60):  # counts around powers of two: exactly bitlen(n) slots
        for c in (0, 1, n // 2, n):
            bits = [1] * c + [0] * (n - c)
            check_built(b, b.encode(bits), *ref_binary_sum([str(t) for t in bits]))


def test_multiplication_edges():
    m = get_task("multiplication")
    for a, b in [([0], [0]), ([1], [1]), ([0] * 5, [1, 1]), ([1] * 19, [1, 1]), ([1] * 60, [1, 1]),
                 ([1] * 8, [1]), ([0, 0, 1], [1, 0])]:
        check_built(m, m.encode(a, b), *ref_multiplication([str(t) for t in a], [str(t) for t in b]))
    check_built(m, m.encode([1, 1], [1, 1]), "1 1 * 1 1 = _ _ _ _".split(), [None] * 6 + ["1", "0", "0", "1"])


def test_addition_edges():
    a = get_task("addition")
    for n in (1, 19, 60):
        for u, v in ([0] * n, [0] * n), ([1] * n, [1] * n), ([1] * n, [0] * (n - 1) + [1]):
            check_built(a, a.encode(u, v), *ref_addition([str(t) for t in u], [str(t) for t in v]))
    check_built(a, a.encode([1, 1], [0, 1]), "1 1 + 0 1 = _ _ _".split(), [None] * 6 + ["1", "0", "0"])


def test_mano_edges():
    t = get_task("mano")
    cases = [["+", 0, 0], ["-", 0, 22], ["*", 22, 22], ["-", "-", "-", 1, 2, 3, 4], ["*", 5, "*", 6, "*", 7, 8],
             ["+", "*", 2, 3, "-", 4, 5]]
    for expr in cases:
        check_built(t, t.encode(expr), *ref_mano([str(e) for e in expr]))
    assert symbols(t, *t.encode(["-", "-", "-", 1, 2, 3, 4]))[1][-1] == str((1 - 2 - 3 - 4) % 23)


def test_mano_tree_shapes_vary():
    """The sampler must produce different tree shapes (not only left- or right-deep chains)."""
    t, gen = get_task("mano"), torch.Generator().manual_seed(0)
    shapes = {tuple(s in "+-*" for s in symbols(t, *t.sample(4, gen))[0]) for _ in range(200)}
    assert len(shapes) == 14  # Catalan(4): every binary tree with 4 operators occurs


@pytest.mark.smoke
def test_dyck_edges():
    d, gen = get_task("dyck"), torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(50):
        xs, ys = symbols(d, *d.sample(1, gen))
        seen.add(xs[0])
        assert ys == ["0"]  # one bracket is never balanced
    assert seen == {"(", ")"}  # n = 1 with and without the flip


def test_n1_every_task():
    gen = torch.Generator().manual_seed(3)
    for name in TASKS:
        task = get_task(name)
        xs, ys = symbols(task, *task.sample(1, gen))
        assert (xs, ys) == reference(name, 1, xs)


# --- batches: invariants, depths, determinism, fixed evaluation sets ---------------------------------

@pytest.mark.parametrize("name", list(TASKS))
def test_batch_invariants(name):
    task = get_task(name)
    ns = LENGTHS * 2
    x, y, n, Tn = make_batch(task, ns, torch.Generator().manual_seed(5))
    assert x.shape == y.shape and n.tolist() == ns
    for i, k in enumerate(ns):
        xi, yi = x[i], y[i]
        L = int((xi != PAD).sum())
        assert (xi[:L] != PAD).all() and (xi[L:] == PAD).all()  # PAD only after the sample
        assert (yi[L:] == IGNORE).all()
        scored = yi[:L] != IGNORE
        # a task with answer slots scores exactly them; one without scores every position but a start token ^
        slot = xi[:L] == task.stoi["_"] if "_" in task.stoi else xi[:L] != task.stoi.get("^", -1)
        assert torch.equal(scored, slot), f"{name} n={k}: IGNORE exactly at the unscored positions"
        assert ((yi[:L][scored] >= 1) & (yi[:L][scored] < len(task.vocab))).all()  # valid, never PAD
        xs = [task.vocab[t] for t in xi[:L]]
        m = xs.index("=") - k - 1 if name == "multiplication" else 1
        assert Tn[i] == k * m


def test_multiplication_depth_per_sample():
    task = get_task("multiplication")
    x, _, n, Tn = train_batch(task, 64, 1, 19, torch.Generator().manual_seed(0))
    eq, star = task.stoi["="], task.stoi["*"]
    m = torch.tensor([row.tolist().index(eq) - row.tolist().index(star) - 1 for row in x])
    assert set(m.tolist()) == {1, 2}  # m_train = {1, 2}, drawn per sample
    assert torch.equal(Tn, n * m)
    for k, (_, _, nk, Tk) in eval_set(task, [5, 20], 16).items():
        assert (Tk == 2 * k).all() and task.T(k) == 2 * k  # test: m = m_test = 2


@pytest.mark.parametrize("name", list(TASKS))
def test_determinism_and_eval_sets(name):
    task = get_task(name)
    a = train_batch(task, 16, 1, 19, torch.Generator().manual_seed(11))
    b = train_batch(task, 16, 1, 19, torch.Generator().manual_seed(11))
    c = train_batch(task, 16, 1, 19, torch.Generator().manual_seed(12))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[0], c[0])
    e1, e2 = eval_set(task, [19, 20, 60], 8), eval_set(get_task(name), [19, 20, 60], 8)
    assert all(torch.equal(u, v) for k in e1 for u, v in zip(e1[k], e2[k]))
    assert not torch.equal(e1[20][0], eval_set(task, [20], 8, seed=99)[20][0])
    for seed in (0, 1, 2):  # train.py's data generator is seeded 2 * seed
        tr = make_batch(task, [20] * 8, torch.Generator().manual_seed(2 * seed))
        assert not torch.equal(tr[0], e1[20][0])


# --- refused lengths and knobs ----------------------------------------------------------------------

@pytest.mark.parametrize("name", list(TASKS))
def test_refused_lengths(name):
    task = get_task(name)
    for n in (0, -3, 10_001):
        with pytest.raises(ValueError, match=rf"task {name} .*n={n}.*allowed 1\.\.10000"):
            task.sample(n, torch.Generator())
    with pytest.raises(ValueError):
        eval_set(task, [20, 0], 4)


@pytest.mark.smoke
def test_knobs_and_registry():
    cfg = {"task": "x", "V": 7, "p": 11, "m_train": "1,3", "m_test": 3, "lr": 3e-4, "d_model": 64}
    assert task_kwargs("dyck", cfg) == {}
    assert task_kwargs("unique_set", cfg) == {"V": 7}
    assert task_kwargs("mano", cfg) == {"p": 11}
    assert task_kwargs("multiplication", cfg) == {"m_train": "1,3", "m_test": 3}
    assert task_kwargs("unique_set", {}) == {}
    for name in TASKS:
        get_task(name, **task_kwargs(name, cfg)).sample(20, torch.Generator())
    assert get_task("unique_set", V=7).V == 7 and len(get_task("mano", p=11).vocab) == 1 + 11 + 5
    assert get_task("multiplication", m_train="1,3").m_train == [1, 3]
    assert get_task("multiplication", m_train=[2]).m_train == [2]
    assert get_task("multiplication", m_train=3).m_train == [3]
    bad = [("nope", {}), ("dyck", {"V": 3}), ("unique_set", {"p": 3}), ("unique_set", {"V": 0}),
           ("mano", {"p": 1}), ("multiplication", {"m_train": "1,x"}), ("multiplication", {"m_train": "0,1"}),
           ("multiplication", {"m_train": ""}), ("multiplication", {"m_test": 0})]
    for name, kw in bad:
        with pytest.raises(ValueError):
            get_task(name, **kw)
    with pytest.raises(ValueError):
        task_kwargs("nope", cfg)


# --- the length curriculum --------------------------------------------------------------------------

@pytest.mark.smoke
def test_curriculum():
    assert [curriculum_n_max(s, 2, 19, 100) for s in (0, 99, 100, 250, 1699, 1700, 10**6)] == [2, 2, 3, 4, 18, 19, 19]
    assert curriculum_n_max(0, 25, 19, 10) == 19  # capped at n_max
    assert curriculum_n_max(7, 1, 19, 1) == 8
    seq = [curriculum_n_max(s, 3, 12, 7) for s in range(200)]
    assert all(0 <= b - a <= 1 for a, b in zip(seq, seq[1:])) and seq[0] == 3 and seq[-1] == 12
    for every, start in ((0, 2), (5, 0)):
        with pytest.raises(ValueError):
            curriculum_n_max(0, start, 19, every)

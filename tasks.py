"""
Algorithmic tasks for length generalisation (SPEC section 2), generated on the fly.

Every task defines a vocabulary (token 0 is PAD), `sample(n, gen) -> (x, y)` as token lists of equal
length where y holds the target token at *scored* positions and IGNORE (-100) elsewhere, and the
length-matched depth T(n). Output is one shot: the answer is predicted in parallel at answer slots
(the ANS placeholder after a separator), never generated token by token.

All randomness comes from an explicit torch.Generator (never the global RNG). Evaluation sets are
drawn from generators seeded independently of the training seed, so every schedule and every seed
is scored on the same examples.

This file imports only torch, so it can be copied alone. `python tasks.py` prints samples.
"""

import torch

IGNORE = -100  # target value of an unscored position (F.cross_entropy's ignore_index)
PAD = 0        # token id of padding in every vocabulary


def randbits(n: int, gen: torch.Generator) -> list[int]:
    return torch.randint(0, 2, (n,), generator=gen).tolist()


class Task:
    """Base class: a vocabulary, a sampler and T(n). Subclasses set `name`, `symbols`, `min_n`."""

    name = "task"
    symbols: list[str] = []   # vocabulary after PAD
    min_n, max_n = 1, 10_000  # lengths this task can produce

    def __init__(self):
        self.vocab = ["<pad>"] + self.symbols
        self.stoi = {s: i for i, s in enumerate(self.vocab)}

    def tok(self, symbols) -> list[int]:
        return [self.stoi[str(s)] for s in symbols]

    def T(self, n: int) -> int:
        """Length-matched depth T(n)."""
        return n

    def check_length(self, n: int) -> None:
        if not self.min_n <= n <= self.max_n:
            raise ValueError(f"task {self.name} cannot produce length n={n}: allowed {self.min_n}..{self.max_n}")

    def sample(self, n: int, gen: torch.Generator) -> tuple[list[int], list[int]]:
        self.check_length(n)
        return self._sample(n, gen)

    def _sample(self, n, gen):
        raise NotImplementedError

    def decode(self, ids) -> str:
        return " ".join(self.vocab[i] for i in ids)


class Dyck(Task):
    """Dyck-1 prefix recognition. n = string length; T(n) = n.

    Prompt: a walk of n brackets that never goes below 0, then with probability 1/2 one position is
    flipped. Answer at every bracket position: 1 if that prefix is balanced and no earlier prefix
    went negative, else 0.
        x: ( ( ) )   ->  y: 0 0 0 1
        x: ( ) ) (   ->  y: 0 1 0 0      (the prefix went negative at position 3)
    """

    name, symbols = "dyck", ["(", ")", "0", "1"]

    def _sample(self, n, gen):
        coins = torch.rand(n + 1, generator=gen).tolist()
        s, h = [], 0
        for c in coins[:n]:  # a walk that never goes below 0
            step = 1 if h == 0 or c < 0.5 else -1
            s.append(step)
            h += step
        if coins[n] < 0.5:  # flip one position
            i = int(torch.randint(0, n, (1,), generator=gen))
            s[i] = -s[i]
        y, h, ok = [], 0, True
        for step in s:
            h += step
            ok = ok and h >= 0
            y.append(int(ok and h == 0))
        return self.tok("(" if st == 1 else ")" for st in s), self.tok(y)


class ParityPrefix(Task):
    """Prefix parity (a CPU-friendly extra). n = string length; T(n) = n.

    Answer at every bit position: the XOR of the bits so far.
        x: 1 0 1 1  ->  y: 1 1 0 1
    """

    name, symbols = "parity_prefix", ["0", "1"]

    def _sample(self, n, gen):
        bits, y, p = randbits(n, gen), [], 0
        for b in bits:
            p ^= b
            y.append(p)
        return self.tok(bits), self.tok(y)


class Copy(Task):
    """Copy. n = string length; T(n) = n.

    Prompt: n bits, '>', then n answer slots '_'. Answer (scored at the slots): the same n bits.
        x: 1 0 1 > _ _ _   ->  y (slots): 1 0 1
    """

    name, symbols = "copy", ["0", "1", ">", "_"]

    def _sample(self, n, gen):
        bits = randbits(n, gen)
        x = self.tok(bits + [">"] + ["_"] * n)
        y = [IGNORE] * (n + 1) + self.tok(bits)
        return x, y


class Parity(Task):
    """Parity. n = string length; T(n) = n.

    Prompt: n bits, '>', one answer slot '_'. Answer: the XOR of all bits.
        x: 1 1 0 1 > _   ->  y (slot): 1
    """

    name, symbols = "parity", ["0", "1", ">", "_"]

    def _sample(self, n, gen):
        bits = randbits(n, gen)
        return self.tok(bits + [">", "_"]), [IGNORE] * (n + 1) + self.tok([sum(bits) % 2])


class Addition(Task):
    """Binary addition. n = bits per operand (exactly n, MSB first, leading zeros allowed); T(n) = n.

    Prompt: a + b = then n+1 answer slots. Answer: the n+1 bits of a+b, MSB first.
        x: 0 1 1 + 1 1 0 = _ _ _ _   ->  y (slots): 1 0 0 1      (3 + 6 = 9)
    """

    name, symbols = "addition", ["0", "1", "+", "=", "_"]

    def _sample(self, n, gen):
        a, b = randbits(n, gen), randbits(n, gen)
        s = int("".join(map(str, a)), 2) + int("".join(map(str, b)), 2)
        out = [int(c) for c in format(s, f"0{n + 1}b")]
        x = self.tok(a + ["+"] + b + ["="] + ["_"] * (n + 1))
        return x, [IGNORE] * (2 * n + 2) + self.tok(out)


TASKS = {t.name: t for t in [Dyck, ParityPrefix, Copy, Parity, Addition]}


def get_task(name: str, **kwargs) -> Task:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose from {', '.join(TASKS)}")
    return TASKS[name](**kwargs)


# --- batches ----------------------------------------------------------------------------------------

def make_batch(task: Task, ns: list[int], gen: torch.Generator):
    """Right-padded batch of samples with lengths ns.

    Returns x (B, T) tokens (PAD after each sample), y (B, T) targets (IGNORE at unscored positions
    and pads), n (B,) task lengths, Tn (B,) length-matched depths T(n).
    """
    pairs = [task.sample(n, gen) for n in ns]
    T = max(len(x) for x, _ in pairs)
    x = torch.full((len(ns), T), PAD, dtype=torch.long)
    y = torch.full((len(ns), T), IGNORE, dtype=torch.long)
    for i, (xi, yi) in enumerate(pairs):
        x[i, : len(xi)] = torch.tensor(xi)
        y[i, : len(yi)] = torch.tensor(yi)
    n = torch.tensor(ns)
    return x, y, n, torch.tensor([task.T(k) for k in ns])


def train_batch(task: Task, batch_size: int, n_min: int, n_max: int, gen: torch.Generator):
    """A training batch: each sample's length n ~ Unif{n_min..n_max} (SPEC: n < 20)."""
    ns = torch.randint(n_min, n_max + 1, (batch_size,), generator=gen).tolist()
    return make_batch(task, ns, gen)


def eval_set(task: Task, lengths: list[int], n_samples: int, seed: int = 1234) -> dict:
    """Fixed evaluation set {n: batch}. Length n uses its own generator seeded (seed, n), which does not
    depend on the training seed, so every run is scored on the same examples."""
    for n in lengths:
        task.check_length(n)
    out = {}
    for n in lengths:
        gen = torch.Generator().manual_seed(seed * 100_003 + n)
        out[n] = make_batch(task, [n] * n_samples, gen)
    return out


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    for name in TASKS:
        task = get_task(name)
        print(f"== {name}  (vocab {task.vocab}, T(n) = n)")
        for n in (3, 6):
            x, y = task.sample(n, gen)
            print(f"  n={n}  x: {task.decode(x)}")
            print(f"  {'':5} y: {' '.join('.' if t == IGNORE else task.vocab[t] for t in y)}")

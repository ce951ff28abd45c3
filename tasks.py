"""
Algorithmic tasks for length generalisation (Fan et al., the primary paper), generated on the fly.

A task is a subclass of Task with five hooks: its `symbols` (the vocabulary after PAD, token 0), `_sample(n, gen)
-> (x, y)` (token lists of equal length, y the target token at *scored* positions and IGNORE (-100) elsewhere;
Task.sample checks n first), the length-matched depth `T(n)` (n unless overridden), and optionally its `knobs`
(constructor kwargs = train.py flags), `shortcuts(x)` (trivial predictors) and `hard(x)` (its hard subset). Output is one shot: the answer is predicted in parallel at answer slots
(the placeholder '_' after a separator), never generated token by token. Where the answer length
varies with the content, the slots (a number fixed by n) are filled with the END token '$', which is
scored too.

    task            n means               T(n)    knobs (constructor kwargs = train.py flags)
    dyck            string length         n
    parity_prefix   string length         n
    copy            string length         n
    parity          string length         n
    addition        bits per operand      n
    unique_set      list length           n       V  value range {0..V-1}
    binary_sum      string length         n
    multiplication  bits of a             n*m     m_train (widths of b in training), m_test
    mano            number of operators   n       p  modulus

`sample(n, gen, test=True)` draws from the test distribution, which differs from training only for
multiplication (b has m_test bits). Evaluation sets use it; training batches do not.

All randomness comes from an explicit torch.Generator (never the global RNG). Evaluation sets are
drawn from generators seeded independently of the training seed, so every schedule and every seed
is scored on the same examples.

This file imports only torch, so it can be copied alone. `python tasks.py` prints samples.
"""

import torch

IGNORE = -100  # target value of an unscored position (F.cross_entropy's ignore_index)
PAD = 0        # token id of padding in every vocabulary
END = "$"      # symbol that fills answer slots beyond a variable-length answer (scored)


def randbits(n: int, gen: torch.Generator) -> list[int]:
    return torch.randint(0, 2, (n,), generator=gen).tolist()


def bits_to_int(bits: list[int]) -> int:
    """MSB-first bits -> integer."""
    return int("".join(map(str, bits)), 2)


def check_knob(ok: bool, name: str, value, allowed: str) -> None:
    if not ok:
        raise ValueError(f"task knob {name}={value!r}: {allowed}")


class Task:
    """Base class: a vocabulary, a sampler and T(n). A subclass sets `name` and `symbols` and defines `_sample`;
    optionally `min_n` / `max_n` (the lengths it can produce), `knobs` (the names of its constructor kwargs, see
    task_kwargs), `T`, `shortcuts` and `hard`. Then add it to TASKS."""

    name = "task"
    symbols: list[str] = []   # vocabulary after PAD
    min_n, max_n = 1, 10_000  # lengths this task can produce
    knobs: tuple[str, ...] = ()

    def __init__(self):
        self.vocab = ["<pad>"] + self.symbols
        self.stoi = {s: i for i, s in enumerate(self.vocab)}

    def tok(self, symbols) -> list[int]:
        return [self.stoi[str(s)] for s in symbols]

    def T(self, n: int) -> int:
        """Length-matched depth T(n) (of the test distribution)."""
        return n

    def T_of(self, n: int, x: list[int]) -> int:
        """Length-matched depth of one sample x of length n (differs from T(n) only for multiplication,
        whose training samples mix widths m)."""
        return self.T(n)

    def check_length(self, n: int) -> None:
        if not self.min_n <= n <= self.max_n:
            raise ValueError(f"task {self.name} cannot produce length n={n}: allowed {self.min_n}..{self.max_n}")

    def sample(self, n: int, gen: torch.Generator, test: bool = False) -> tuple[list[int], list[int]]:
        """(x, y) of length n; test=True draws from the test distribution (only multiplication differs)."""
        self.check_length(n)
        return self._sample(n, gen)

    def _sample(self, n, gen):
        raise NotImplementedError

    def decode(self, ids) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def shortcuts(self, x: list[int]) -> dict[str, list[int]]:
        """Trivial rule-based predictors a referee would try, applied to one prompt x (no padding):
        {name: the predicted tokens at the scored positions, in order}. The evaluation adds the generic
        ones (the most frequent answer, the best constant per position) itself."""
        return {}

    def hard(self, x: list[int]) -> bool | None:
        """Whether sample x belongs to the task's hard subset (the samples that test the rule rather than a
        shortcut); None for tasks without one."""
        return None


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

    def heights(self, x):
        """Running #open - #close after each bracket."""
        h, out = 0, []
        for t in x:
            h += 1 if t == self.stoi["("] else -1
            out.append(h)
        return out

    def shortcuts(self, x):
        # counting: 1 where #open = #close so far, ignoring whether the prefix went negative (~85% OOD)
        return {"counting": self.tok(int(h == 0) for h in self.heights(x)), "all zeros": self.tok([0] * len(x))}

    def hard(self, x):
        # only a prefix that goes below zero tells the rule from counting (~17% of samples)
        return min(self.heights(x)) < 0


class ParityPrefix(Task):
    """Prefix parity (a CPU-friendly extra). n = string length; T(n) = n.

    Prompt: a start token '^', then n bits. Answer at every bit position: the XOR of the bits so far.
        x: ^ 1 0 1 1  ->  y: . 1 1 0 1
    Why the start token: without positional encoding, causal attention sees a prefix only as a bag of
    tokens, so all positions of a constant run ('1 1 1 1') get identical states and the same answer,
    while the right answers alternate (1 0 1 0): every string starting '1 1' would be wrong, a 75%
    ceiling. Attention to '^' carries 1/(i+1) at position i, which tells the positions apart.
    """

    name, symbols = "parity_prefix", ["0", "1", "^"]

    def _sample(self, n, gen):
        bits, y, p = randbits(n, gen), [], 0
        for b in bits:
            p ^= b
            y.append(p)
        return self.tok(["^"] + bits), [IGNORE] + self.tok(y)


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
        return self.encode(randbits(n, gen), randbits(n, gen))

    def encode(self, a: list[int], b: list[int]):
        n, s = len(a), bits_to_int(a) + bits_to_int(b)
        out = [int(c) for c in format(s, f"0{n + 1}b")]
        x = self.tok(a + ["+"] + b + ["="] + ["_"] * (n + 1))
        return x, [IGNORE] * (2 * n + 2) + self.tok(out)


class UniqueSet(Task):
    """Unique set. n = list length; T(n) = n. Knob V: values lie in {0..V-1} (paper scale V=50; the
    default 16 is a CPU-friendly choice that makes repeats common at short lengths).

    Prompt: n values, '>', then n answer slots '_'. Answer: the distinct values in order of first
    occurrence, END-filled ('$') to n slots.
        x: 3 1 3 0 1 > _ _ _ _ _   ->  y (slots): 3 1 0 $ $
        x: 7 > _                   ->  y (slot):  7
    """

    name, knobs = "unique_set", ("V",)

    def __init__(self, V: int = 16):
        check_knob(isinstance(V, int) and V >= 1, "V", V, "the value range must be an integer >= 1")
        self.V, self.symbols = V, [str(v) for v in range(V)] + [">", "_", END]
        super().__init__()

    def _sample(self, n, gen):
        return self.encode(torch.randint(0, self.V, (n,), generator=gen).tolist())

    def encode(self, values: list[int]):
        n, distinct = len(values), list(dict.fromkeys(values))  # dict keeps first-occurrence order
        x = self.tok(values + [">"] + ["_"] * n)
        return x, [IGNORE] * (n + 1) + self.tok(distinct + [END] * (n - len(distinct)))


class BinarySum(Task):
    """Binary sum (Fan et al.). n = string length; T(n) = n.

    Prompt: n bits, '>', then bitlen(n) answer slots (bitlen(n) = n.bit_length(), enough for any count
    0..n). Answer: the number of ones in binary, LSB first, without trailing zeros (a count of 0 is the
    single digit 0), END-filled ('$') to bitlen(n) slots.
        x: 1 1 0 1 1 0 > _ _ _   ->  y (slots): 0 0 1      (four ones: 4 = 100b, LSB first 001)
        x: 1 0 1 0 0 > _ _ _     ->  y (slots): 0 1 $      (two ones: 2 = 10b)
        x: 0 0 0 > _ _           ->  y (slots): 0 $        (no ones)
    """

    name, symbols = "binary_sum", ["0", "1", ">", "_", END]

    def _sample(self, n, gen):
        return self.encode(randbits(n, gen))

    def encode(self, bits: list[int]):
        n, c = len(bits), sum(bits)
        digits = [int(d) for d in reversed(format(c, "b"))]  # LSB first; 0 -> [0]
        slots = n.bit_length()
        x = self.tok(bits + [">"] + ["_"] * slots)
        return x, [IGNORE] * (n + 1) + self.tok(digits + [END] * (slots - len(digits)))


class Multiplication(Task):
    """Binary multiplication (Fan et al.). n = bits of a; T(n) = n*m, m = bits of b.

    Knobs: m_train, the widths m of b drawn uniformly per training sample (default 1,2), and m_test, the
    width of b at test time (default 2). T(n) = n * m_test; a training batch's per-sample depth is
    n * m of that sample (make_batch reads it with T_of).

    Prompt: a * b = then n+m answer slots; a has exactly n bits and b exactly m bits, MSB first,
    leading zeros allowed. Answer: the n+m bits of a*b, LSB first (a*b < 2^(n+m), so no END is needed).
        x: 1 0 1 * 1 1 = _ _ _ _ _   ->  y (slots): 1 1 1 1 0      (5 * 3 = 15 = 01111b)
        x: 1 1 * 1 = _ _ _           ->  y (slots): 1 1 0          (3 * 1 = 3)
    """

    name, symbols, knobs = "multiplication", ["0", "1", "*", "=", "_"], ("m_train", "m_test")

    def __init__(self, m_train="1,2", m_test: int = 2):
        """m_train: comma-separated string ("1,2"), an int, or a sequence of ints."""
        try:
            ms = [int(m) for m in (m_train.split(",") if isinstance(m_train, str) else
                                   [m_train] if isinstance(m_train, int) else m_train)]
        except (TypeError, ValueError):
            ms = []
        check_knob(bool(ms) and min(ms) >= 1, "m_train", m_train, "a comma-separated list of widths >= 1")
        check_knob(isinstance(m_test, int) and m_test >= 1, "m_test", m_test, "the width must be an integer >= 1")
        self.m_train, self.m_test = sorted(set(ms)), m_test
        super().__init__()

    def T(self, n):
        return n * self.m_test

    def T_of(self, n, x):
        m = x.index(self.stoi["="]) - x.index(self.stoi["*"]) - 1  # bits of b
        return n * m

    def sample(self, n, gen, test=False):
        self.check_length(n)
        m = self.m_test if test else self.m_train[int(torch.randint(0, len(self.m_train), (1,), generator=gen))]
        return self.encode(randbits(n, gen), randbits(m, gen))

    def encode(self, a: list[int], b: list[int]):
        k = len(a) + len(b)
        x = self.tok(a + ["*"] + b + ["="] + ["_"] * k)
        return x, [IGNORE] * (k + 2) + self.tok(self.product(bits_to_int(a) * bits_to_int(b), k))

    @staticmethod
    def product(v: int, k: int) -> list[int]:
        return [int(c) for c in reversed(format(v, f"0{k}b"))]  # k bits, LSB first

    def operands(self, x):
        """(a, b, n + m) from a prompt: the operands as integers and the number of answer bits."""
        star, eq = x.index(self.stoi["*"]), x.index(self.stoi["="])
        bits = lambda ts: bits_to_int([int(self.vocab[t]) for t in ts])
        return bits(x[:star]), bits(x[star + 1:eq]), eq - 1

    def shortcuts(self, x):
        # b in {0, 1, 2} gives a zero / copy / shift answer: together ~75% of test samples at m = 2
        a, b, k = self.operands(x)
        rules = {"zero": 0, "copy a": a, "shift a": 2 * a}
        out = {name: self.tok(self.product(v, k)) for name, v in rules.items()}
        out["b<=2 rule"] = self.tok(self.product(a * b if b <= 2 else 0, k))
        return out

    def hard(self, x):
        return self.operands(x)[1] >= 3  # the samples that need a real product


class Mano(Task):
    """Modular arithmetic in prefix notation (MANO, Popescu et al.). n = number of operators; T(n) = n.
    Knob p: the modulus (default 23).

    Prompt: a prefix expression with n binary operators from {+, -, *} and n+1 operands in 0..p-1,
    then '=' and one answer slot. Answer: the value of the expression mod p. The tree shape is drawn
    recursively: an operator's left subtree gets k ~ Unif{0..size-1} of the remaining operators.
        x: + 3 * 4 5 = _       ->  y (slot): 0      (3 + 4*5 = 23 = 0 mod 23)
        x: - 2 7 = _           ->  y (slot): 18     (2 - 7 = -5 = 18 mod 23)
    """

    name, knobs = "mano", ("p",)
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

    def __init__(self, p: int = 23):
        check_knob(isinstance(p, int) and p >= 2, "p", p, "the modulus must be an integer >= 2")
        self.p, self.symbols = p, [str(v) for v in range(p)] + list(self.ops) + ["=", "_"]
        super().__init__()

    def _sample(self, n, gen):
        expr, todo = [], [n]  # todo: operator counts of the subtrees still to write, leftmost last
        while todo:
            size = todo.pop()
            if size == 0:
                expr.append(int(torch.randint(0, self.p, (1,), generator=gen)))
                continue
            expr.append(list(self.ops)[int(torch.randint(0, 3, (1,), generator=gen))])
            k = int(torch.randint(0, size, (1,), generator=gen))
            todo += [size - 1 - k, k]  # right subtree written after the left one
        return self.encode(expr)

    def encode(self, expr: list):
        """expr: a well-formed prefix expression, operators as '+', '-', '*' and operands as ints."""
        stack = []  # evaluate right to left: an operator pops its two operands (left one on top)
        for t in reversed(expr):
            stack.append(self.ops[t](stack.pop(), stack.pop()) % self.p if t in self.ops else t)
        return self.tok(expr + ["=", "_"]), [IGNORE] * (len(expr) + 1) + self.tok([stack[0]])


TASKS = {t.name: t for t in [Dyck, ParityPrefix, Copy, Parity, Addition,
                             UniqueSet, BinarySum, Multiplication, Mano]}


def task_class(name: str) -> type:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose from {', '.join(TASKS)}")
    return TASKS[name]


def get_task(name: str, **kwargs) -> Task:
    """The task `name` with its knobs, e.g. get_task("unique_set", V=50); unknown knobs are refused."""
    cls = task_class(name)
    bad = set(kwargs) - set(cls.knobs)
    if bad:
        raise ValueError(f"task {name} has no knob {', '.join(sorted(bad))}: "
                         f"its knobs are {', '.join(cls.knobs) or 'none'}")
    return cls(**kwargs)


def task_kwargs(name: str, cfg: dict) -> dict:
    """The knobs task `name` uses, picked from a config dict holding any settings:
    get_task(name, **task_kwargs(name, cfg))."""
    return {k: cfg[k] for k in task_class(name).knobs if k in cfg}


def curriculum_n_max(step: int, n_start: int, n_max: int, every: int) -> int:
    """Length curriculum (Fan et al.): the longest training length at `step` (0-based) starts at
    n_start and grows by 1 every `every` steps, capped at n_max:
        n_max(step) = min(n_max, n_start + floor(step / every))"""
    if every < 1 or n_start < 1:
        raise ValueError(f"curriculum: every={every}, n_start={n_start}: both must be >= 1")
    return min(n_max, n_start + step // every)


# --- batches ----------------------------------------------------------------------------------------

def make_batch(task: Task, ns: list[int], gen: torch.Generator, test: bool = False):
    """Right-padded batch of samples with lengths ns (test=True: the test distribution).

    Returns x (B, P) tokens (PAD after each sample), y (B, P) targets (IGNORE at unscored positions
    and pads), n (B,) task lengths, Tn (B,) each sample's length-matched depth T(n).
    """
    pairs = [task.sample(n, gen, test) for n in ns]
    P = max(len(x) for x, _ in pairs)  # positions of the longest sample
    x = torch.full((len(ns), P), PAD, dtype=torch.long)
    y = torch.full((len(ns), P), IGNORE, dtype=torch.long)
    for i, (xi, yi) in enumerate(pairs):
        x[i, : len(xi)] = torch.tensor(xi)
        y[i, : len(yi)] = torch.tensor(yi)
    n = torch.tensor(ns)
    return x, y, n, torch.tensor([task.T_of(k, xi) for k, (xi, _) in zip(ns, pairs)])


def train_batch(task: Task, batch_size: int, n_min: int, n_max: int, gen: torch.Generator):
    """A training batch: each sample's length n ~ Unif{n_min..n_max} (the papers: n < 20)."""
    ns = torch.randint(n_min, n_max + 1, (batch_size,), generator=gen).tolist()
    return make_batch(task, ns, gen)


def eval_set(task: Task, lengths: list[int], n_samples: int, seed: int = 1234) -> dict:
    """Fixed evaluation set {n: batch} from the test distribution. Length n uses its own generator
    seeded (seed, n), which does not depend on the training seed, so every run is scored on the same
    examples."""
    for n in lengths:
        task.check_length(n)
    out = {}
    for n in lengths:
        gen = torch.Generator().manual_seed(seed * 100_003 + n)
        out[n] = make_batch(task, [n] * n_samples, gen, test=True)
    return out


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    for name in TASKS:
        task = get_task(name)
        more = " ..." if len(task.vocab) > 12 else ""
        print(f"== {name}  (vocab of {len(task.vocab)}: {' '.join(task.vocab[:12])}{more})")
        for n, test in ((3, False), (6, False), (4, True)):
            x, y = task.sample(n, gen, test)
            print(f"  n={n} {'test ' if test else 'train'} T={task.T_of(n, x):<3} x: {task.decode(x)}")
            print(f"  {'':17} y: {' '.join('.' if t == IGNORE else task.vocab[t] for t in y)}")

"""
The lab: the run machinery around the textbook at the repository's root. Nothing here is needed to learn the
method; all of it is needed to run it safely, at scale and reproducibly, and to read many runs at once.

    cli.py        the dataclass -> argparse pattern of every command, one-line errors, Ctrl-C
    files.py      atomic writes, the bounded JSON reader, a run directory's lock and its own file names
    checks.py     every setting and this machine's limits, checked before a file is touched; output flags' files
    rundir.py     the run directory while it trains (Run: restore, log, save), plans and claims
    checkpoint.py ckpt.pt: built in one place, checked, restored, saved
    records.py    eval.json on disk: its schema, loading it checked, finding runs below a folder
    sweep.py      --seeds over one process or torchrun's ranks, --stack's chunks: loaded only for those
    stack.py      S seeds as one batched program (train.py --stack S): the model's weights with a seed axis
    chunks.py     the stacked chunk's training loop, each seed with its own run directory
    tables.py     tables over seeds (one row per experiment)
    stats.py      tests over seeds: Welch, sign-flip, Std intervals, two sets of runs by seed, the ICC
    compare.py    two sets of runs as distributions, the seed as the unit; evaluate.py --against's verdict
    plots.py      optional PNG plots (matplotlib)
    explorer.py   evaluate.py --html: one self-contained page of acc[n][K] for every run (explorer.html: the page)

Every import of the lab says so (`from lab import rundir`); the root's concept files never import it.
"""

"""
The lab: the run machinery around the textbook at the repository's root. Nothing here is needed to learn the
method; all of it is needed to run it safely, at scale and reproducibly, and to read many runs at once.

    cli.py       the dataclass -> argparse pattern of every command, one-line errors, atomic writes, Ctrl-C
    rundir.py    run-directory safety: validation, plans, locks, resume checks, environment, checkpoints
    runs.py      --seeds over one process or torchrun's ranks: plan, lock, claim, train or skip, summary
    records.py   eval.json on disk: its schema, loading it checked, finding runs below a folder
    stack.py     S seeds as one batched program (train.py --stack S): the model's weights with a seed axis
    chunks.py    the stacked chunk's training loop, each seed with its own run directory
    tables.py    tables over seeds (one row per experiment)
    stats.py     tests over seeds: paired and unpaired, spreads, Holm, the ICC of replicates
    compare.py   two sets of runs as distributions, the seed as the unit; evaluate.py --against's verdict
    plots.py     optional PNG plots (matplotlib)
    explorer.py  evaluate.py --html: one self-contained page of acc[n][K] for every run

Every import of the lab says so (`from lab import rundir`); the root's concept files never import it.
"""

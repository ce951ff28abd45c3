"""The layout is the lesson: the root holds the concept files and the commands, the machinery lives in lab/,
imports run one way (no circle), and the copy-alone files import nothing from the project."""

import ast
import os

import pytest

pytestmark = pytest.mark.smoke  # every test here is quick: all in the smoke tier

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY_ALONE = {"model", "halting", "tasks", "readouts", "ntp"}
CONCEPT = COPY_ALONE | {"metrics", "config"}
COMMANDS = {"train", "evaluate", "theory_checks", "bench"}
# the floors, bottom first: a module may import only from its own floor's predecessors; config (and its field
# helper opt) sits below the whole of lab/, which reads the settings it defines
FLOORS = [COPY_ALONE, {"metrics"}, {"config"}, {"lab.cli"}, {"lab.files"},
          {"lab.stats", "lab.plots", "lab.stack", "lab.checkpoint", "lab.checks"}, {"lab.compare", "lab.rundir"},
          {"lab.tables", "lab.records"}, {"lab.chunks", "lab.explorer"},
          {"lab.sweep"}, COMMANDS - {"bench"}, {"bench"}]


def modules() -> dict:
    """{module: path} of every project module outside tests/ and results/."""
    out = {f[:-3]: os.path.join(ROOT, f) for f in os.listdir(ROOT) if f.endswith(".py")}
    out.update({f"lab.{f[:-3]}": os.path.join(ROOT, "lab", f) for f in os.listdir(os.path.join(ROOT, "lab"))
                if f.endswith(".py") and f != "__init__.py"})
    return out


def imports(path: str, top_level: bool = True) -> set:
    """The project modules a file imports (at the top of the file, or anywhere)."""
    tree = ast.parse(open(path).read())
    nodes = tree.body if top_level else list(ast.walk(tree))
    mods = modules()
    out = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in mods}
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "lab":
                out |= {f"lab.{a.name}" for a in node.names}
            elif node.module in mods:
                out.add(node.module)
    return out


def test_the_root_holds_concepts_and_commands_only():
    root = {m for m in modules() if "." not in m}
    assert root == CONCEPT | COMMANDS, f"unexpected root files: {sorted(root - CONCEPT - COMMANDS)}"


def test_imports_run_one_way():
    floor = {m: i for i, ms in enumerate(FLOORS) for m in ms}
    assert set(floor) == set(modules()), sorted(set(modules()) ^ set(floor))
    for m, path in modules().items():
        for dep in imports(path):
            assert floor[dep] < floor[m], f"{m} (floor {floor[m]}) imports {dep} (floor {floor[dep]}): it runs back up"


def test_the_concept_files_import_nothing_from_the_lab():
    for m in CONCEPT:
        assert not {d for d in imports(modules()[m], top_level=False) if d.startswith("lab.")}, m


def test_the_copy_alone_files_import_no_project_file_at_their_top():
    for m in COPY_ALONE:
        assert imports(modules()[m]) == set(), m
    # the imports inside a function: ntp.build's model.py and its demo's tasks.py, so that ntp's schedules copy alone;
    # and train.py's sweep, imported only for --seeds, --stack or torchrun, so that a single run does not load it
    inner = {m: imports(p, top_level=False) - imports(p) for m, p in modules().items()}
    # and ntp.py itself, imported by config.build and checks.validate only for a run of an NTP baseline
    assert {m: d for m, d in inner.items() if d} == {"ntp": {"model", "tasks"}, "train": {"lab.sweep"},
                                                    "config": {"ntp"}, "lab.checks": {"ntp"}}



# the budgets of the layout (issue 69): a single run loads at most SINGLE_RUN_LINES (the textbook files it uses and the
# run directory, never the sweep's, the tables' or the statistics' code) and no lab file passes LAB_FILE_LINES.
# LAB_LINES is a ratchet: issue 69 asked for 3,000; this round reached 3,589 (3,347 of Python and the explorer's page,
# lab/explorer.html, 242). Lower it as the lab shrinks; never raise it without saying why.
LAB_LINES, LAB_FILE_LINES, SINGLE_RUN_LINES = 3600, 450, 3800


def lines(path: str) -> int:
    with open(path) as f:
        return len(f.read().splitlines())


def test_the_lab_keeps_its_budget():
    lab = {f: lines(os.path.join(ROOT, "lab", f)) for f in os.listdir(os.path.join(ROOT, "lab"))
           if os.path.isfile(os.path.join(ROOT, "lab", f))}  # the Python and the explorer's page
    assert sum(lab.values()) <= LAB_LINES, f"lab/ is {sum(lab.values())} lines (budget {LAB_LINES})"
    assert {f: n for f, n in lab.items() if n > LAB_FILE_LINES} == {}, f"lab files over {LAB_FILE_LINES} lines"


def closure(module: str) -> set:
    """The project modules `module` loads at import: its top-level imports, theirs, and so on (the only imports
    inside functions are the ones test_the_copy_alone_files_import_no_project_file_at_their_top allows)."""
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += imports(modules()[m])
    return seen


def test_a_single_run_loads_the_textbook_and_the_run_directory_only():
    mods = closure("train")
    assert not mods & {"lab.stats", "lab.compare", "lab.tables", "lab.chunks", "lab.stack", "lab.sweep",
                       "lab.records", "lab.explorer", "lab.plots"}, sorted(mods)
    paths = [modules()[m] for m in mods] + [os.path.join(ROOT, "lab", "__init__.py")]  # a package loads its __init__
    total = sum(lines(p) for p in paths)
    assert total <= SINGLE_RUN_LINES, f"python train.py loads {len(paths)} files, {total} lines (budget {SINGLE_RUN_LINES})"

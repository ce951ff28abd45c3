"""
The plumbing every script shares. parse(Config, argv, prog, doc) makes a @dataclass of config.opt fields the
argparse parser: `--lr 1` or `--lr=1`, `--compile/--no-compile` for a boolean, the valid names when a choice fails,
no abbreviated flags (a preset must see every flag it overrides), a field's `section` opens a --help group,
`positional=True` takes a list of arguments; a preset returns new *defaults*, so an explicit flag always wins.
run(main, prog) turns the errors a user can cause into one line and an exit code.
"""

import argparse
import contextlib
import dataclasses
import os
import signal
import sys
import threading
import time

_start_prog = ""  # the command whose start ctrl_c_at_start guards


def log_line(rec: dict) -> str:
    """One log record as the training loops print it: `key value | key value`, floats to 4 digits."""
    return " | ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rec.items())


def given(argv=None) -> set:
    """The fields named on the command line (argv; None: sys.argv[1:]): `--x v`, `--x=v`, `--no-x` give x."""
    out = set()
    for a in sys.argv[1:] if argv is None else argv:
        if a == "--":
            break
        if a.startswith("--"):
            name = a[2:].split("=", 1)[0]
            out.add(name[3:] if name.startswith("no-") else name)
    return out


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        self.exit(2, f"{self.prog}: error: {message}\n")


class HelpFormat(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """--help shows every default and keeps the docstring's line breaks."""


def parse(cls, argv=None, prog: str = "", doc: str = "", presets=None, epilog: str = ""):
    """cls(**flags). presets: optional function (namespace of a first parse) -> {field: default}."""
    p = Parser(prog=prog, description=doc, epilog=epilog, formatter_class=HelpFormat, allow_abbrev=False)
    group = p
    for f in dataclasses.fields(cls):
        if "section" in f.metadata:
            group = p.add_argument_group(f.metadata["section"])
        kw = dict(help=f.metadata["help"], default=f.default)
        if f.metadata.get("positional"):
            group.add_argument(f.name, nargs="*", help=kw["help"], default=list(f.default))
        elif isinstance(f.default, bool):
            group.add_argument(f"--{f.name}", action=argparse.BooleanOptionalAction, **kw)
        elif isinstance(f.default, tuple):  # a list of values: --flag A B C
            group.add_argument(f"--{f.name}", nargs="+", help=kw["help"], default=list(f.default))
        else:
            group.add_argument(f"--{f.name}", type=type(f.default), choices=f.metadata.get("choices"), **kw)
    if presets is not None:
        first, _ = p.parse_known_args(argv)
        p.set_defaults(**presets(first))
    return cls(**vars(p.parse_args(argv)))


def main_thread() -> bool:
    """Whether this is the main thread: the only one that can set a signal handler."""
    return threading.current_thread() is threading.main_thread()


def ctrl_c_at_start(name: str, prog: str) -> None:
    """Before `import torch` (seconds, before run() catches anything): a Ctrl-C prints one line and exits 130, only
    when the file runs as the command (name: its __name__) and Ctrl-C is not ignored; run() hands Ctrl-C back."""
    global _start_prog
    if name == "__main__" and main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _start_prog = prog
        signal.signal(signal.SIGINT, _interrupted_at_start)


def _interrupted_at_start(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the line
    print(f"{_start_prog}: interrupted", file=sys.stderr, flush=True)
    os._exit(130)  # mid-import, nothing to clean up; an exception could be swallowed by the code it lands in


def printable_streams() -> None:
    """Text stdout / stderr cannot encode (a non-ASCII path under a C locale) is printed escaped, not raised."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            with contextlib.suppress(ValueError, OSError):  # a closed or detached stream: leave it as it is
                stream.reconfigure(errors="backslashreplace")


def run(main, prog: str, argv=None) -> int:
    """main(argv) as a command, never a traceback for a user's error: ValueError -> one line, exit 2;
    FloatingPointError or OSError (e.g. a full disk) -> one line, exit 1; Ctrl-C -> one line, exit 130.
    Otherwise the exit status main returns (an int; 0 for anything else)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start and main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)  # from here on Ctrl-C is a KeyboardInterrupt
    printable_streams()
    try:
        status = main(argv)
    except ValueError as err:
        if int(os.environ.get("RANK", "0")) == 0:  # under torchrun every rank checks the same input: one line
            print(f"{prog}: error: {err}", file=sys.stderr)
        else:  # torchrun stops every rank once one has ended: let rank 0, which prints, end first
            time.sleep(1)
        return 2
    except (FloatingPointError, OSError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:
        # a second Ctrl-C while the first is reported, or while the interpreter exits, is ignored (a caller that
        # passed argv, e.g. a test, gets its handler back)
        with sigint_ignored(restore=argv is not None):
            print(f"{prog}: {str(err) or 'interrupted'}", file=sys.stderr)
        return 130
    return status if isinstance(status, int) and not isinstance(status, bool) else 0


def no_arguments(prog: str) -> None:
    """For a script that takes no arguments (results/*.py): any argument is a typo, one line and exit 2."""
    if len(sys.argv) > 1:
        print(f"{prog}: takes no arguments, got: {' '.join(sys.argv[1:])}", file=sys.stderr)
        sys.exit(2)


def interrupted(done: int, where) -> KeyboardInterrupt:
    """A training loop's Ctrl-C as one line (cli.run prints it, exit 130); where() names the last checkpoint in
    words, with Ctrl-C ignored so that a second one does not cut the message."""
    with sigint_ignored():
        return KeyboardInterrupt(f"interrupted after step {done}; {where()}; continue with --resume")


@contextlib.contextmanager
def sigint_ignored(restore: bool = True):
    """Ignore Ctrl-C inside the block (and after it, unless restore), in the main thread."""
    if not main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if restore:
            signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def ctrl_c_after():
    """Hold a Ctrl-C that arrives inside the block and raise it when the block is done (a Ctrl-C inside torch.save
    raises a RuntimeError from its zip writer instead)."""
    if not main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield  # another thread, or SIGINT ignored / handled by the caller: leave it as it is
        return
    held = []
    signal.signal(signal.SIGINT, lambda *_: held.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if held:
        raise KeyboardInterrupt

"""
The plumbing shared by every script: a @dataclass of settings becomes the argparse parser, user errors
become one line and an exit code, files are written atomically (atomic_write) and JSON read safely
(load_json).

    from config import opt   # a dataclass field with its --help text

    @dataclass
    class Config:
        task: str = opt("dyck", "task name", choices=["dyck", "copy"], section="what to train")
        lr: float = opt(3e-4, "peak learning rate", section="optimisation")
        compile: bool = opt(False, "torch.compile the block")

    cfg = parse(Config, argv, prog="train.py", doc=__doc__)

`--lr 1` and `--lr=1` both work (1 becomes 1.0), booleans get `--compile/--no-compile`, choices fail with
the list of valid names, abbreviated flags are refused (a preset must see every flag it overrides), a
field's `section` opens an argparse group in --help, and `positional=True` makes a list of arguments. A preset is a function of the flags parsed so far
that returns new *defaults* (argparse `set_defaults`), so a flag given explicitly always wins.
`run(main, prog)` turns the errors a user can cause into one line and an exit code.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import stat
import sys
import threading
import time


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


def parser(cls, prog: str, doc: str = "", epilog: str = "") -> Parser:
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
    return p


def parse(cls, argv=None, prog: str = "", doc: str = "", presets=None, epilog: str = ""):
    """cls(**flags). presets: optional function (namespace of a first parse) -> {field: default}."""
    p = parser(cls, prog, doc, epilog)
    if presets is not None:
        first, _ = p.parse_known_args(argv)
        p.set_defaults(**presets(first))
    return cls(**vars(p.parse_args(argv)))


def ctrl_c_at_start(name: str, prog: str) -> None:
    """The first line of a command, before `import torch`: a Ctrl-C while it starts (the imports take seconds,
    before run() could catch anything) prints one line and exits 130. Only when the file runs as the command
    (name: its __name__) and Ctrl-C is not ignored (a background job); run() hands Ctrl-C back to Python."""
    global _start_prog
    if name == "__main__" and threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        _start_prog = prog
        signal.signal(signal.SIGINT, _interrupted_at_start)


_start_prog = ""


def _interrupted_at_start(signum, frame):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C does not cut the line
    print(f"{_start_prog}: interrupted", file=sys.stderr, flush=True)
    os._exit(130)  # mid-import, nothing to clean up; an exception could be swallowed by the code it lands in


def printable_streams() -> None:
    """Text that stdout / stderr cannot encode (a non-ASCII run path under PYTHONIOENCODING=ascii or a C locale,
    a file name that is not UTF-8) is printed escaped (backslashreplace), not raised as an error."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a closed or detached stream: leave it as it is
                pass


def run(main, prog: str, argv=None) -> int:
    """main(argv) as a command. A user error (ValueError) -> one line, exit 2; a numerical fault
    (FloatingPointError) or an I/O failure (OSError, e.g. a full disk) -> one line, exit 1; Ctrl-C -> one
    line, exit 130. Never a traceback for any of them. Otherwise the exit status main returns (an int; 0 for
    anything else)."""
    if signal.getsignal(signal.SIGINT) is _interrupted_at_start and threading.current_thread() is threading.main_thread():
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
        # a second Ctrl-C while the first is reported, or while the interpreter exits, is ignored: the command
        # ends anyway (a caller that passed argv, e.g. a test, gets its handler back)
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
    """A training loop's Ctrl-C, as one line (cli.run prints it and exits 130): where() names the last
    checkpoint in words, and runs with Ctrl-C ignored, so a second one does not cut the message."""
    with sigint_ignored():
        return KeyboardInterrupt(f"interrupted after step {done}; {where()}; continue with --resume")


@contextlib.contextmanager
def sigint_ignored(restore: bool = True):
    """Ignore Ctrl-C inside the block (and after it, unless restore), in the main thread: elsewhere signals
    cannot be set."""
    if threading.current_thread() is not threading.main_thread():
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
    """Hold a Ctrl-C that arrives inside the block and raise it when the block is done (torch.save cut by
    one raises a RuntimeError from its zip writer instead of the KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
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


def temp_file(path: str) -> tuple:
    """(an open binary file, its name) for the temp file of an atomic write of `path`: NAME.tmpPID in path's own
    folder (os.replace is atomic only within one file system), or NAME.tmpPID.N if that name is taken. Created
    with O_EXCL | O_NOFOLLOW: it is always a new file of ours, never a symlink or a file someone planted there
    (writing through one would write outside the folder)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for i in range(100):
        tmp = f"{path}.tmp{os.getpid()}" + (f".{i}" if i else "")
        try:
            return os.fdopen(os.open(tmp, flags, 0o666), "wb"), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: no free temp file name ({path}.tmp{os.getpid()}.N taken up to N = 99)")


def atomic_write(path: str, write) -> None:
    """The one way the project writes a file (checkpoints, config.json, eval.json, tables, README blocks, plots):
    a new temp file in the same folder (temp_file), fsync, os.replace. A crash or a full disk leaves the old file
    or the new one, never half, and no temp file; a Ctrl-C during the write takes effect once it is done. A
    symlink at `path` is replaced by the file (what it pointed to is not written). A failure is an OSError naming
    the file (cli.run: one line, exit 1)."""
    with ctrl_c_after():
        tmp = None
        try:
            f, tmp = temp_file(path)
            with f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:  # one line naming the file (and its errno kept for a caller that tests it)
            failed = OSError(f"cannot write {path} ({err.strerror or err}); the file there, if any, is unchanged")
            failed.errno = err.errno
            raise failed from None
        finally:
            if tmp is not None and os.path.lexists(tmp):  # a failed write (full disk) leaves no temp file behind
                os.remove(tmp)


def write_json(path: str, obj) -> None:
    atomic_write(path, lambda f: f.write((json.dumps(obj, indent=1) + "\n").encode()))


# the largest JSON file the project reads (eval.json of a long grid is ~1 MB; a metrics line far less)
MAX_JSON = 64 * 2 ** 20


def parse_json(text):
    """json.loads, with a structure nested deeper than the interpreter's recursion allows (a RecursionError
    traceback from json) turned into a ValueError like any other malformed text."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a file the project wrote") from None


def load_json(path: str):
    """The one way the project reads a JSON file (eval.json, config.json, choice.json, readouts.json, chaos.json,
    the results' records): a regular file only (opened without blocking, so a FIFO is refused instead of hanging
    the reader), at most MAX_JSON bytes, UTF-8, parsed by parse_json. Raises OSError or ValueError (the reason
    alone: the caller names the file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file (a folder, a FIFO, a device or a socket): nothing to read")
        if st.st_size > MAX_JSON:
            raise ValueError(f"{st.st_size} bytes, more than the {MAX_JSON} a file of the project can hold")
        data = f.read(MAX_JSON + 1)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    return parse_json(text)


def read_json(path: str):
    """load_json, with any failure as one line naming the file (ValueError)."""
    try:
        return load_json(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable ({err})") from None

"""Files the lab writes and reads, safely: every write atomic (atomic_write, write_set: a crash leaves the old file
or the new one, never half), every JSON read bounded (load_json), every run directory locked (Lock), a run's own
files guarded by name (guarded)."""

import fcntl
import json
import os
import re
import socket
import stat

from lab.cli import ctrl_c_after

RUN_FILES = ("config.json", "ckpt.pt", "metrics.jsonl", "eval.json", "readouts.json")
OWN_FILES = RUN_FILES + ("summary.json",)  # every file the project writes into a run or sweep folder
# the temp file of an interrupted atomic write of one of them (temp_file: NAME.tmpPID or NAME.tmpPID.N)
OWN_TEMP = re.compile(r"^(" + "|".join(re.escape(f) for f in OWN_FILES) + r")\.tmp(\d+)(\.\d+)?$")
LOCK = ".lock"  # the lock file of a run or sweep folder (Lock): held open by the process that trains there
TEMP = re.compile(r"^.+\.tmp\d+(\.\d+)?$")  # the temp file of any atomic write in progress (temp_file)


def guarded(path: str) -> str:
    """Why no output flag may name `path`, '' where one may: by name, so that a run not yet made is guarded too (its
    own files, its .lock, a write's temp file)."""
    name = os.path.basename(path)
    if name in OWN_FILES:
        return f"{name} is the name of a run's own file ({', '.join(OWN_FILES)}), which it would replace"
    if name == LOCK:
        return (f"{name} is the name of a run's own file, its lock (another process may hold it: replacing it would "
                f"let a second process train the run)")
    if TEMP.match(name):
        return (f"{name} is the name of a run's own file, the temp file of a write in progress (NAME.tmpPID), which "
                f"it would replace")
    return ""


def temp_file(path: str) -> tuple:
    """(an open binary file, its name): a new file NAME.tmpPID (or NAME.tmpPID.N) in path's own folder, created
    with O_EXCL | O_NOFOLLOW, so never a symlink or a file planted there."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for i in range(100):
        tmp = f"{path}.tmp{os.getpid()}" + (f".{i}" if i else "")
        try:
            return os.fdopen(os.open(tmp, flags, 0o666), "wb"), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{path}: no free temp file name ({path}.tmp{os.getpid()}.N taken up to N = 99)")


def atomic_write(path: str, write) -> None:
    """Write `path` by write(f) on a temp file, fsynced and renamed over it; a Ctrl-C takes effect once it is done.
    A failure is an OSError naming the file; a lock or a temp file name is refused (ValueError)."""
    commit({path: write})


def commit(writers: dict) -> None:
    """{path: write}: every temp file written (staged) before the first rename (publish), none left behind; a failed
    rename names the files already replaced. A Ctrl-C takes effect once all are written."""
    with ctrl_c_after():
        temps = {}
        try:
            for path, write in writers.items():
                temps[path] = staged(path, write)
            done = []
            for path, tmp in temps.items():
                try:
                    publish(path, tmp)
                except OSError as err:
                    if done:
                        err = OSError(f"{err}; already replaced: {', '.join(done)} (write the set again)")
                    raise err from None
                done.append(path)
        finally:
            for tmp in temps.values():
                if os.path.lexists(tmp):
                    os.remove(tmp)


def cannot_write(path: str, err: OSError) -> OSError:
    """One line naming the file (its errno kept for a caller that tests it)."""
    failed = OSError(f"cannot write {path} ({err.strerror or err}); the file there, if any, is unchanged")
    failed.errno = err.errno
    return failed


def never_written(path: str) -> str:
    """Why no writer of the lab writes path (a lock or a temp file: guarded), '' where it may."""
    name = os.path.basename(path)
    return guarded(path) if name == LOCK or TEMP.match(name) else ""


def staged(path: str, write) -> str:
    """The name of a temp file for `path`, written by write(f) and fsynced; a failure leaves none (an OSError
    naming path). A lock or a temp file name is refused (ValueError)."""
    if why := never_written(path):
        raise ValueError(f"{path}: {why}; nothing written")
    tmp = None
    try:
        f, tmp = temp_file(path)
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        return tmp
    except BaseException as err:
        if tmp is not None and os.path.lexists(tmp):  # a failed write (full disk) leaves no temp file behind
            os.remove(tmp)
        if isinstance(err, OSError):
            raise cannot_write(path, err) from None
        raise


def publish(path: str, tmp: str) -> None:
    """os.replace(tmp, path), a failure as one line naming path."""
    try:
        os.replace(tmp, path)
    except OSError as err:
        raise cannot_write(path, err) from None


def json_bytes(obj) -> bytes:
    """A JSON document as the project writes it (write_json)."""
    return (json.dumps(obj, indent=1) + "\n").encode()


def write_json(path: str, obj) -> None:
    atomic_write(path, lambda f: f.write(json_bytes(obj)))


def rendered(content) -> bytes:
    """A file's bytes for write_set: bytes as they are, str as UTF-8, anything else as a JSON document."""
    if isinstance(content, (bytes, bytearray)):
        return bytes(content)
    if isinstance(content, str):
        return content.encode("utf-8")
    return json_bytes(content)


def names_folder(path: str) -> bool:
    """Whether a path's form names a folder, whatever is on disk (empty, a trailing separator, '.' or '..')."""
    return (not path or path.endswith(os.sep) or bool(os.altsep and path.endswith(os.altsep))
            or os.path.basename(path) in ("", ".", ".."))


def creatable(folder: str) -> bool:
    """Whether a file can really be created in folder: a test file created and removed (os.access answers yes
    to root on a read-only file system)."""
    try:
        f, tmp = temp_file(os.path.join(folder, ".write-test"))
        f.close()
        os.remove(tmp)
        return True
    except OSError:
        return False


def check_target(path: str) -> None:
    """Before the first write of a set: path can be written; one line naming it otherwise (ValueError)."""
    folder = os.path.dirname(path) or os.curdir
    why = ("names a folder, not a file" if names_folder(path) else "") or (
        never_written(path)) or (
        "is a folder" if os.path.isdir(path) else "") or (
        f"its folder {folder} is missing" if not os.path.isdir(folder) else "") or (
        f"its folder {folder} is not writable" if not creatable(folder) else "")
    if why:
        raise ValueError(f"cannot write {path}: {why}; nothing written")


def write_set(files: dict) -> None:
    """Write {path: bytes, str or a JSON object} so that its files never disagree: every file rendered and every
    target checked before the first write, then commit."""
    data = {path: rendered(content) for path, content in files.items()}
    for path in data:
        check_target(path)
    commit({path: lambda f, b=b: f.write(b) for path, b in data.items()})


MAX_JSON = 64 * 2 ** 20  # the largest JSON file the project reads (eval.json of a long grid is ~1 MB)


def parse_json(text):
    """json.loads, a structure nested too deeply (RecursionError) a ValueError like any other malformed text."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a file the project wrote") from None


def read_text(path: str) -> str:
    """A file the project wrote: a regular file only (opened without blocking: a FIFO is refused, not waited on), at
    most MAX_JSON bytes, UTF-8. Raises OSError or ValueError (the reason alone: the caller names the file)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file (a folder, a FIFO, a device or a socket): nothing to read")
        if st.st_size > MAX_JSON:
            raise ValueError(f"{st.st_size} bytes, more than the {MAX_JSON} a file of the project can hold")
        data = f.read(MAX_JSON + 1)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None


def load_json(path: str):
    """read_text, parsed by parse_json (OSError or ValueError: the caller names the file)."""
    return parse_json(read_text(path))


def read_json(path: str):
    """load_json, with any failure as one line naming the file (ValueError)."""
    try:
        return load_json(path)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: unreadable ({err})") from None


class Lock:
    """An exclusive lock (fcntl.flock) on a run directory's .lock, which names its holder. The OS releases it when
    its process ends (SIGKILL too); on entry, temp files of the project's killed writers are removed."""

    def __init__(self, d: str):
        self.d, self.path, self.fd = d, os.path.join(d, LOCK), None

    def __enter__(self):
        try:
            os.makedirs(self.d, exist_ok=True)
            while self.fd is None:
                fd = self.open()
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
                    os.close(fd)
                    raise ValueError(f"--out_dir {self.d} is in use by {holder} (lock {self.path}); wait for it "
                                     f"to finish") from None
                if same_file(self.path, fd):
                    self.fd = fd
                else:  # its last holder removed .lock between our open and our lock: lock the new one
                    os.close(fd)
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
        except OSError as err:
            raise ValueError(f"--out_dir {self.d!r}: cannot write there ({err.strerror})") from None
        for f in os.listdir(self.d):  # temp files of the project's writers killed mid-write
            m = OWN_TEMP.match(f)
            if m and not (int(m.group(2)) != os.getpid() and alive(int(m.group(2)))):
                os.remove(os.path.join(self.d, f))
        return self

    def open(self) -> int:
        """.lock, opened (created if missing) without following a symlink: a link or a hard-linked file could be
        anyone's, and writing our name into it would destroy it."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError:
            if os.path.islink(self.path):
                raise ValueError(f"--out_dir {self.d}: its lock {self.path} is a symlink (to "
                                 f"{os.readlink(self.path)}); a run's lock is its own file: remove the link") from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            raise ValueError(f"--out_dir {self.d}: its lock {self.path} is not a file of its own (a hard link, or not "
                             f"a regular file); remove it")
        return fd

    def __exit__(self, *exc):
        try:
            if same_file(self.path, self.fd):  # still ours: remove it while holding the lock
                os.remove(self.path)
        finally:
            os.close(self.fd)
            self.fd = None


def same_file(path: str, fd: int) -> bool:
    """Whether path names the file open as fd."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

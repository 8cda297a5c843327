"""An exclusive lock on a run folder, held for the life of a training session.

Two processes training into the same folder interleave their metrics lines and overwrite each
other's checkpoints, so ``textgym train`` takes this lock before it loads anything, and a
second writer is refused with one line naming the process that holds it.

The lock is ``fcntl.flock`` on ``<run>/.textgym.lock``, a file holding the holder's PID. The
kernel drops a flock when its process dies, however it dies, so a lock file left behind by a
killed process (its PID dead) is stale and simply taken over; the PID is only there to name
the holder. The file is removed when the lock is released.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with RunLock(folder):
    ...     lock_holder(folder) == os.getpid()
    True
    >>> lock_holder(folder) is None
    True
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from textgym.cli.errors import CLIError, os_error_reason

from textgym import run_folder

LOCK_FILE = run_folder.LOCK


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode("ascii", "replace").strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def lock_holder(run_dir: str | Path) -> int | None:
    """The PID of the process holding the lock on ``run_dir`` (``-1`` if unknown), or None when
    the folder is not locked (no lock file, or a stale one). Changes nothing on disk."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _read_pid(fd)
        return -1 if pid is None else pid
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def in_use_message(run_dir: str | Path, pid: int | None) -> str:
    """The one line a second writer gets."""
    if pid is None or pid < 0:
        who = "another process"
    elif _alive(pid):
        who = f"another textgym process (PID {pid})"
    else:  # the PID died but the lock is held: a child it forked still has the file open
        who = f"a child of process {pid}, which has exited"
    return (f"run folder {run_dir} is in use by {who}: wait for it to finish or stop it "
            f"before training into this folder")


class RunLock:
    """Exclusive, process-wide lock on a run folder (the folder must exist).

    Args:
        run_dir: the run folder.
    """

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        """Take the lock, or raise CLIError naming the PID that holds it."""
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise CLIError(f"cannot write to run folder {self.run_dir}: "
                               f"{os_error_reason(exc)}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _read_pid(fd)
                os.close(fd)
                raise CLIError(in_use_message(self.run_dir, pid)) from None
            # The previous holder removes the file as it releases the lock: make sure the file
            # we locked is still the one at the path, or two processes could both "hold" it.
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is not None and os.path.samestat(os.fstat(fd), current):
                break
            os.close(fd)
        os.ftruncate(fd, 0)  # a stale PID left by a killed process is overwritten
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Remove the lock file and drop the lock (removing first: see :meth:`acquire`)."""
        if self._fd is None:
            return
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

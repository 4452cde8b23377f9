"""The `.lock` file that gives one broker at a time a log dir, as Kafka's `FileLock` does.

Theory of operation: before a broker reads or writes anything in a log dir it opens `<dir>/.lock`
(created if missing, never truncated before it is held) and takes an exclusive, non-blocking `flock` on
it. The lock lives as long as the open file description: `release()` closes it, and so does the death
of the process, however it dies, so a crashed broker never leaves a stale lock behind. `flock` locks
belong to the open file, not the process, so a second LogManager in the same process is refused too.

The holder writes its pid into the file once it holds the lock; a broker that finds the lock taken reads
that pid back and names it, with the directory, in `LogDirLockedError`. The file is left in place on
release (Kafka leaves it too); its content is only ever a hint for that message.
"""

from __future__ import annotations

import fcntl
import os

__all__ = ["LOCK_FILE", "LogDirLock", "LogDirLockedError"]

LOCK_FILE = ".lock"


class LogDirLockedError(RuntimeError):
    """Another process (or another LogManager in this one) holds the lock of a log dir."""

    def __init__(self, log_dir: str, holder_pid: int | None) -> None:
        who = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(
            f"log dir {log_dir} is in use by {who} (it holds {os.path.join(log_dir, LOCK_FILE)}); "
            "stop that broker first or use another log.dirs"
        )
        self.log_dir = log_dir
        self.holder_pid = holder_pid


class LogDirLock:
    """Owns the open, flock-ed `.lock` file of one log dir from `acquire()` until `release()`."""

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.path = os.path.join(log_dir, LOCK_FILE)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise LogDirLockedError at once (never waits). The dir must exist."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise LogDirLockedError(self.log_dir, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # drops the flock


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None

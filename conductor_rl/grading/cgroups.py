"""A per-run cgroup of the ``pids`` controller: caps and kills a process tree.

As root, ``RLIMIT_NPROC`` is not enforced, so it cannot stop a fork bomb; the
``pids`` controller can, and it also lists every process of a tree however it
forked, double-forked or changed session, so that the tree can be killed as a
whole. The sandbox puts each untrusted program into its own cgroup (one
directory under `PIDS_ROOT_V1`), caps it with ``pids.max``, and kills what is left
when the program ends. Directories are reused (`PidsCgroup.acquire` /
`PidsCgroup.release`): the first process to enter a fresh cgroup pays for its
setup in the kernel, a large share of a short sandboxed run. They are removed at
interpreter exit, and leftovers of dead processes when the next process starts.

Only the cgroup v1 layout is supported (a ``pids`` hierarchy mounted writable
at ``/sys/fs/cgroup/pids``). Without it `PidsCgroup.available()` is False and
the sandbox relies on the process group and, under bubblewrap, on the pid
namespace (whose processes the kernel kills when its first process exits).
"""

from __future__ import annotations

import atexit
import errno
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["PIDS_ROOT_V1", "PidsCgroup"]

PIDS_ROOT_V1 = Path("/sys/fs/cgroup/pids")
_PARENT_NAME = "conductor_rl_sandbox"

_probe_lock = threading.Lock()
_probe_result: bool | None = None
_counter = 0
_free: list[PidsCgroup] = []
_draining: list[PidsCgroup] = []
_all: set[Path] = set()


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class PidsCgroup:
    """One cgroup directory holding one sandboxed program's processes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    def parent_dir() -> Path:
        return PIDS_ROOT_V1 / _PARENT_NAME

    @classmethod
    def available(cls) -> bool:
        """Whether cgroups can be created here (checked once per process)."""
        global _probe_result
        with _probe_lock:
            if _probe_result is None:
                _probe_result = cls._probe()
            return _probe_result

    @classmethod
    def _probe(cls) -> bool:
        if not (PIDS_ROOT_V1 / "cgroup.procs").exists():
            return False
        try:
            cls.parent_dir().mkdir(exist_ok=True)
            _remove_leftovers(cls.parent_dir())
            probe = cls.parent_dir() / f"probe-{os.getpid()}"
            probe.mkdir(exist_ok=True)
            _write(probe / "pids.max", "1")
            probe.rmdir()
            return True
        except OSError:
            return False

    @classmethod
    def acquire(cls, max_processes: int) -> PidsCgroup:
        """An empty cgroup allowing at most `max_processes` tasks (threads count)."""
        global _counter
        with _probe_lock:
            # Dying tasks stay charged to pids.current until reaped; reuse a cgroup only once it is back at 0.
            for waiting in [c for c in _draining if c.current() == 0]:
                _draining.remove(waiting)
                _free.append(waiting)
            cgroup = _free.pop() if _free else None
            if cgroup is None:
                _counter += 1
                path = cls.parent_dir() / f"{os.getpid()}-{_counter}"
                _all.add(path)
        if cgroup is None:
            path.mkdir(exist_ok=True)
            cgroup = cls(path)
        _write(cgroup.path / "pids.max", str(max_processes))
        return cgroup

    def release(self) -> None:
        """Kill what is left; keep the directory for the next run if it is empty."""
        if self.kill_all():
            with _probe_lock:
                (_free if self.current() == 0 else _draining).append(self)
        elif not self.remove():
            raise OSError(f"cgroup {self.path} still has processes after SIGKILL")

    @property
    def procs_file(self) -> Path:
        """Writing a pid here moves that process into the cgroup."""
        return self.path / "cgroup.procs"

    def current(self) -> int:
        """Tasks charged to the cgroup (exited ones count until they are reaped)."""
        try:
            return int((self.path / "pids.current").read_text())
        except (OSError, ValueError):
            return -1

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty. True when empty.

        ``pids.max`` is lowered to 0 first, so a fork bomb cannot replace the
        processes being killed (v1 has no ``cgroup.kill``)."""
        try:
            _write(self.path / "pids.max", "0")
        except OSError:
            pass
        deadline = time.monotonic() + timeout_s
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def remove(self) -> bool:
        """Kill what is left and remove the directory. True when it is gone."""
        self.kill_all()
        with _probe_lock:
            _all.discard(self.path)
        for _ in range(200):
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    return False
                time.sleep(0.005)  # exiting tasks leave the cgroup a moment after SIGKILL
        return False


def _remove_leftovers(parent: Path) -> None:
    """Remove the empty cgroups of processes that no longer exist."""
    for child in parent.iterdir():
        owner = child.name.split("-", 1)[0]
        if child.is_dir() and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            try:
                child.rmdir()
            except OSError:
                pass


@atexit.register
def _remove_all() -> None:
    with _probe_lock:
        paths = list(_all)
        _free.clear()
        _draining.clear()
    for path in paths:
        PidsCgroup(path).remove()

"""Supervising one child process: a wall clock, capped output read as it comes, a kill.

`supervise` starts a command in its own session, feeds its stdin, reads its
stdout and stderr incrementally (never more than `max_output_bytes` of each
is kept; more kills it), watches a status pipe, and kills it when the wall
clock runs out. The clock starts when the child writes its status byte (the
program itself begins): starting it (bubblewrap, an interpreter) has its own
allowance, `startup_s`, so a loaded machine does not spend the program's time.
It returns what happened (`Supervised`); deciding what that means is the
caller's business (`conductor_rl.grading.sandbox`). It never waits on a child
beyond its deadline, whatever the child does with its descriptors.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["STARTUP_S", "Supervised", "kill_session", "supervise"]

STARTUP_S = 10.0
_READ_CHUNK = 65536
_EXIT_GRACE_S = 0.5


@dataclass(frozen=True)
class Supervised:
    """What the child did. `killed_by`: ``"timeout"``, ``"output_limit"`` or None;
    `signalled`: the status pipe received a byte (the child got far enough to write it)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    killed_by: str | None
    truncated: bool
    signalled: bool
    wall_s: float


def supervise(
    cmd: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    pass_fds: tuple[int, ...],
    status_fd: int,
    stdin: bytes,
    timeout_s: float,
    max_output_bytes: int,
    kill_rest: Callable[[], object] | None = None,
    startup_s: float = STARTUP_S,
) -> Supervised:
    """Run `cmd` to its end or its deadline (see the module docstring).

    `pass_fds` are closed here once the child holds them (also when it cannot
    start). `kill_rest` is called after the child's session is killed, to kill
    whatever else it started (a cgroup). `timeout_s` counts from the status byte;
    a child that has not written it within `startup_s` is killed as timed out
    (`signalled` False). Raises OSError if the command cannot start.
    """
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            pass_fds=pass_fds,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        for fd in pass_fds:  # the child holds them now; our copies would keep the pipe open
            os.close(fd)
    try:
        return _pump(proc, status_fd, stdin, start, startup_s, timeout_s, max_output_bytes)
    finally:
        _kill_tree(proc, kill_rest)


def _feed(poller: select.poll, proc: subprocess.Popen[bytes], pending: memoryview) -> memoryview:
    """Write what the pipe takes of the child's stdin; close it when all is written."""
    assert proc.stdin is not None
    try:
        n = os.write(proc.stdin.fileno(), pending[:_READ_CHUNK])
        pending = pending[n:]
    except (BlockingIOError, InterruptedError):
        return pending
    except OSError:  # it closed its stdin: the rest is not wanted
        pending = pending[:0]
    if not pending:
        poller.unregister(proc.stdin.fileno())
        proc.stdin.close()
    return pending


def _pump(
    proc: subprocess.Popen[bytes],
    status_r: int,
    stdin: bytes,
    start: float,
    startup: float,
    timeout: float,
    max_output: int,
) -> Supervised:
    assert proc.stdin and proc.stdout and proc.stderr
    out_fd, err_fd, in_fd = proc.stdout.fileno(), proc.stderr.fileno(), proc.stdin.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    signalled = False
    truncated = False
    killed_by: str | None = None
    poller = select.poll()  # not select.select: fds above 1023 are common in Ray workers
    for fd in (out_fd, err_fd, status_r):
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    open_fds = {out_fd, err_fd, status_r}
    pending = memoryview(stdin)
    if pending:
        os.set_blocking(in_fd, False)
        poller.register(in_fd, select.POLLOUT | select.POLLERR)
    else:
        proc.stdin.close()
    deadline = start + startup  # until the status byte; then the program's own timeout
    exited_at: float | None = None
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:  # readable the moment the process exits: no polling delay
        poller.register(pidfd, select.POLLIN)
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                killed_by = "timeout"
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and (not open_fds - {status_r} or now - exited_at > _EXIT_GRACE_S):
                break  # done; after the grace, whatever still holds a pipe is killed with the tree
            wait_ms = min(deadline - now, 0.05) * 1000  # without a pidfd, notice the exit within 50 ms
            for fd, _event in poller.poll(max(1, int(wait_ms))):
                if fd == pidfd:
                    poller.unregister(pidfd)
                elif fd == in_fd:
                    pending = _feed(poller, proc, pending)
                else:
                    chunk = _read(fd)
                    if chunk is None:
                        continue
                    if not chunk:
                        poller.unregister(fd)
                        open_fds.discard(fd)
                    elif fd == status_r:
                        if not signalled:
                            deadline = time.monotonic() + timeout
                        signalled = True
                    else:
                        buf = bufs[fd]
                        room = max_output - len(buf)
                        buf += chunk[: max(room, 0)]
                        if len(chunk) > room:
                            truncated, killed_by = True, "output_limit"
            if killed_by:
                break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if not signalled:  # the byte may still be in the pipe if the child exited at once
        signalled = _readable(status_r)
    if killed_by is not None:
        kill_session(proc)
    try:
        returncode = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        returncode = proc.wait()
    return Supervised(
        returncode, bytes(bufs[out_fd]), bytes(bufs[err_fd]), killed_by, truncated, signalled, time.monotonic() - start
    )


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _read(fd: int) -> bytes | None:
    """A chunk, b"" at end of file, None when nothing is there after all."""
    try:
        return os.read(fd, _READ_CHUNK)
    except (BlockingIOError, InterruptedError):
        return None


def _readable(fd: int) -> bool:
    try:
        os.set_blocking(fd, False)
        return bool(os.read(fd, 1))
    except (BlockingIOError, OSError):
        return False


def kill_session(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child started with ``start_new_session=True`` and its process group.
    Safe from any thread, any number of times."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: pgid == pid
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass


def _kill_tree(proc: subprocess.Popen[bytes], kill_rest: Callable[[], object] | None) -> None:
    """Nothing the child started may outlive the run."""
    kill_session(proc)
    if kill_rest is not None:
        kill_rest()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        try:
            if pipe is not None:
                pipe.close()
        except OSError:
            pass

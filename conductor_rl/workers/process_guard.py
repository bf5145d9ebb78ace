"""Run a server so that it cannot outlive the process that started it.

    python -m conductor_rl.workers.process_guard --parent PID [--status FILE] [--grace S] [--detach] -- COMMAND ...

Started in a process group of its own (the caller's `start_new_session`), the
guard runs COMMAND as its child in that group. It stops the whole group
(SIGTERM, then SIGKILL after `--grace` seconds) when process PID ends, when it
is sent SIGTERM/SIGINT, or when COMMAND exits; COMMAND's return code goes to
`--status FILE` (written whole, by a rename).

The parent is a Ray actor, and every way it ends must end the server:
- `ray.kill` or a crash: no code of the actor runs then. The guard watches the
  parent's pid (with its start time, so a reused pid does not fool it).
- Ray kills an exiting worker's *direct* children with SIGKILL, and that would
  take the guard but leave the server. `--detach` forks once and lets the
  first process exit at once, so the guard is nobody's direct child; the
  group keeps the first process's pid as its id, which the caller uses.
- The guard itself killed: COMMAND gets SIGTERM from the kernel
  (PR_SET_PDEATHSIG, set in the guard's only thread), and vLLM's server stops
  its engine processes on SIGTERM.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

POLL_S = 0.5
PR_SET_PDEATHSIG = 1


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after "pid (comm)": state is field 3, starttime field 22
    if not fields or fields[0] == "Z":
        return None
    return int(fields[19])


def members(pgid: int, exclude: int = -1) -> list[int]:
    """Live (non-zombie) processes of group `pgid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == exclude:
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()  # state, ppid, pgrp, ...
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry))
    return found


def stop_group(pgid: int, grace_s: float, child: subprocess.Popen | None = None) -> None:
    """SIGTERM every process of group `pgid` but the caller, then SIGKILL what is left after `grace_s`."""
    me = os.getpid()
    _signal_all(members(pgid, me), signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if child is not None:
            child.poll()  # reap it once it exits
        if not members(pgid, me):
            return
        time.sleep(0.1)
    _signal_all(members(pgid, me), signal.SIGKILL)
    if child is not None:
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _die_with_guard() -> None:
    """In COMMAND's process, before exec: SIGTERM when the guard dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the guard's watch still holds
        pass


def _write_status(path: str | None, code: int) -> None:
    if path:
        tmp = f"{path}.tmp"
        Path(tmp).write_text(str(code))
        os.replace(tmp, path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="process_guard", description=__doc__.split("\n\n")[0])
    parser.add_argument("--parent", type=int, required=True, help="pid whose end stops COMMAND")
    parser.add_argument("--status", help="file that receives COMMAND's return code")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--detach", action="store_true", help="fork, and let the first process exit at once")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no COMMAND after --")
    parent_started = start_time(args.parent)
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # started without a group of its own: stopping ours must spare the caller
    if args.detach and os.fork() > 0:
        os._exit(0)  # the caller's direct child ends here; the guard lives on in the same group
    pgid = os.getpgrp()
    stopping = False

    def on_signal(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        child = subprocess.Popen(command, preexec_fn=_die_with_guard)  # noqa: PLW1509 (the guard has one thread)
    except OSError as err:
        print(f"process_guard: cannot start {command[0]!r}: {err}", file=sys.stderr, flush=True)
        _write_status(args.status, 127)
        return 127

    def parent_alive() -> bool:
        return parent_started is not None and start_time(args.parent) == parent_started

    while not stopping and child.poll() is None and parent_alive():
        time.sleep(POLL_S)
    code = child.poll()
    stop_group(pgid, args.grace, child)
    code = child.returncode if code is None else code
    code = 1 if code is None else (code if code >= 0 else 128 - code)  # killed by signal N: 128 + N
    _write_status(args.status, code)
    return code


if __name__ == "__main__":
    sys.exit(main())

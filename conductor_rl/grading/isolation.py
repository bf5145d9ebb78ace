"""How a sandboxed program is cut off from the host: the environment it gets, bubblewrap's options, and
the detection (once per bwrap path) of the best isolation this machine allows, falling back to rlimits
with the network cut by `unshare` where bubblewrap cannot start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

_SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"


def sandbox_env() -> dict[str, str]:
    """The whole environment a program gets: nothing inherited from the caller."""
    return {
        "PATH": _SANDBOX_PATH,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        # numeric libraries start one thread per core otherwise; threads count against the pids cap
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


_isolation_lock = threading.Lock()
_isolation_cache: dict[str, tuple[str, list[str], str]] = {}


# Hidden behind empty tmpfs mounts: home directories (keys, tokens, cloud credentials) and /run (sockets
# of host daemons; the program's host uid may be root, which the sockets' permissions would let in).
_HIDDEN_DIRS = ("/root", "/home", "/run")
_NOBODY = "65534"


def bwrap_args(bwrap: str, tmpfs_bytes: int, keep: tuple[str, ...] = ()) -> list[str]:
    """bubblewrap's options. `keep`: directories under a hidden one that must stay (the interpreter)."""
    args = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--uid",
        _NOBODY,
        "--gid",
        _NOBODY,
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    for hidden in _HIDDEN_DIRS:
        if os.path.isdir(hidden) and not os.path.islink(hidden):
            args += ["--tmpfs", hidden]
    args += ["--size", str(tmpfs_bytes), "--tmpfs", "/tmp"]
    # After the private /tmp, so an interpreter that lives under /tmp (a checkout there) stays visible.
    for path in keep:
        args += ["--ro-bind", path, path]
    return args + ["--chdir", "/tmp"]


_interpreter_lock = threading.Lock()
_interpreter_cache: dict[str, tuple[str, ...]] = {}


def interpreter_dirs(python: str) -> tuple[str, ...]:
    """The interpreter's own directories that lie under a hidden directory or /tmp (pyenv under /root, a venv
    in a checkout under /tmp, ...): they are bound back read-only. Only an answer is cached, never a failed
    probe: a probe killed once (its actor dying, a loaded machine) must not leave the process unable to
    start any program for the rest of its life."""
    with _interpreter_lock:
        if python in _interpreter_cache:
            return _interpreter_cache[python]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = [sys.prefix, sys.base_prefix]  # this interpreter: nothing to ask
    else:
        try:
            prefixes = subprocess.run(
                [python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                capture_output=True,
                text=True,
                timeout=30,
                env=sandbox_env(),
                check=True,
            ).stdout.split()
        except (OSError, subprocess.SubprocessError):
            return ()  # the sandbox will fail to start it, and say so; the next call asks again
    dirs = {os.path.realpath(p) for p in prefixes} | {os.path.dirname(os.path.dirname(os.path.realpath(python)))}
    found = tuple(sorted(d for d in dirs if any(d == h or d.startswith(h + "/") for h in (*_HIDDEN_DIRS, "/tmp"))))
    with _interpreter_lock:
        _interpreter_cache[python] = found
    return found


def _starts(cmd: list[str], attempts: int = 3) -> tuple[bool, str]:
    """Whether `cmd` runs and exits 0. A probe killed by a signal or timed out says nothing about this
    machine (the answer is cached for the process's life), so it is asked again."""
    err = ""
    for _ in range(attempts):
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=30, env=sandbox_env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            err = str(exc)
            continue
        except OSError as exc:
            return False, str(exc)
        err = proc.stderr.decode(errors="replace").strip()[:500]
        if proc.returncode >= 0:
            return proc.returncode == 0, err
    return False, err


def detect_isolation(bwrap_path: str | None) -> tuple[str, list[str], str]:
    """("bwrap", [], "") or ("rlimits", network-cutting prefix, why bwrap is not used). Cached."""
    key = bwrap_path or ""
    with _isolation_lock:
        if key in _isolation_cache:
            return _isolation_cache[key]
        found = shutil.which(bwrap_path or "bwrap")
        why = "bubblewrap (bwrap) is not installed"
        if found:
            ok, err = _starts(bwrap_args(found, 1 << 20) + ["/bin/true"])
            if ok:
                _isolation_cache[key] = ("bwrap", [found], "")
                return _isolation_cache[key]
            why = f"bubblewrap cannot start here: {err}"
        prefix: list[str] = []
        unshare = shutil.which("unshare")
        # Best first: no network and an own pid namespace (kill(-1) and orphans stay inside), as root or
        # through a user namespace; then no network only.
        # A shell as the namespace's pid 1: the program as pid 1 would ignore its own SIGKILL, SIGTERM, ...
        pidns = ["--pid", "--fork", "--kill-child", "--mount-proc", "/bin/sh", "-c", '"$@"', "sh"]
        candidates = (
            (
                [unshare, "--net", *pidns],
                [unshare, "--map-root-user", "--net", *pidns],
                [unshare, "--net"],
                [unshare, "--map-root-user", "--net"],
            )
            if unshare
            else ()
        )
        for candidate in candidates:
            if _starts([*candidate, "/bin/true"])[0]:
                prefix = candidate
                break
        _isolation_cache[key] = ("rlimits", prefix, why)
        return _isolation_cache[key]

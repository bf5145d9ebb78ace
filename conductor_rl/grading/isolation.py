"""How a sandboxed program is cut off from the host: the environment it gets, bubblewrap's options, and
the detection (once per bwrap path) of the best isolation this machine allows, falling back to rlimits
with the network cut by `unshare` where bubblewrap cannot start."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
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


@functools.lru_cache(maxsize=16)
def interpreter_dirs(python: str) -> tuple[str, ...]:
    """The interpreter's own directories that lie under a hidden directory or /tmp (pyenv under /root, a venv
    in a checkout under /tmp, ...): they are bound back read-only."""
    try:
        out = subprocess.run(
            [python, "-I", "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            timeout=30,
            env=sandbox_env(),
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()  # the sandbox will fail to start it, and say so
    dirs = {os.path.realpath(p) for p in out.split()} | {os.path.dirname(os.path.dirname(os.path.realpath(python)))}
    return tuple(sorted(d for d in dirs if any(d == h or d.startswith(h + "/") for h in (*_HIDDEN_DIRS, "/tmp"))))


def _starts(cmd: list[str]) -> tuple[bool, str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=30, env=sandbox_env(), stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return proc.returncode == 0, proc.stderr.decode(errors="replace").strip()[:500]


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

"""Running untrusted Python programs: isolated, bounded, and never hanging.

`run_python(code, stdin, timeout_s, memory_mb)` runs `code` as ``__main__`` in
a fresh interpreter and returns a `SandboxResult`. What contains it:

* **bubblewrap** (``isolation="bwrap"``): every namespace unshared (no network,
  own pid and user namespace), uid/gid 65534 and no capabilities inside, the
  host root bound read-only with ``/root``, ``/home`` and ``/run`` hidden (the
  interpreter's own directories bound back), a private size-capped tmpfs at
  ``/tmp`` as working directory, a new session (no terminal injection), and
  ``--die-with-parent`` (a dying grader takes its sandboxes along). When the
  grader runs as root, the program's host uid is still root (bubblewrap maps
  the sandbox's uid to its caller's): the read-only root and the hidden
  directories are what keep it from host files and sockets; run the grader as
  an unprivileged user for a non-root host uid. When the program's first process exits, the kernel kills everything
  else in its pid namespace, so orphaned background children cannot survive.
* **rlimits** (``prlimit``): address space (`memory_mb`), CPU seconds, file
  size, open files, no core dumps.
* **a pids cgroup** (`conductor_rl.grading.cgroups`) when writable: caps processes and
  threads (a fork bomb) and lets the whole tree be killed however it forked.
* **a wall-clock timeout** that kills the process group and the cgroup.
* **capped output**: stdout and stderr are read as they come; past
  `max_output_bytes` on either, the program is killed (``killed_by="output_limit"``).
* **a scrubbed environment**: an empty one plus a minimal ``PATH``/``LANG``;
  nothing of the caller's (API keys included) reaches the program.

Without bubblewrap (or where it cannot start, e.g. in a container without user
namespaces) the program is refused (``require_isolation=True``, the default: an
`IsolationUnavailableError` naming the setting and the fix). Where a user opts in
(``require_isolation=False``) it runs under the same rlimits, cgroup and timeout in
a throw-away directory, behind ``unshare`` where that works (no network, and its
own pid namespace if possible), with a shell between it and the grader so that
killing its parent does not kill the grader, with ``no_new_privs`` and, as root,
no capabilities (``setpriv``); and the grader makes itself non-dumpable first, so
that the program cannot read the grader's ``/proc/<pid>/environ`` (which holds the
provider keys on a local cluster) even as the same uid. Other processes of the
same uid that hold keys (the driver, Ray's own) stay readable where no pid
namespace hides them, and the file system is NOT read-only: a warning says so
once, and ``SandboxResult.isolation`` says ``"rlimits"``.

"The sandbox failed" is kept apart from "the program failed": the program's
interpreter writes one byte on a private pipe before the program runs; if that
byte never comes (bubblewrap could not start, the interpreter could not load),
`run_python` raises `SandboxError`, which graders turn into an ERROR verdict.
The program cannot fake that failure, since the byte is written before it runs.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from conductor_rl.grading.cgroups import PidsCgroup
from conductor_rl.grading.isolation import bwrap_args, detect_isolation, interpreter_dirs, sandbox_env
from conductor_rl.grading.supervise import STARTUP_S, supervise

if TYPE_CHECKING:
    from conductor_rl.config import SandboxConfig

__all__ = [
    "DEFAULT_MAX_OUTPUT_BYTES",
    "IsolationUnavailableError",
    "Sandbox",
    "SandboxError",
    "SandboxResult",
    "run_python",
    "sandbox_env",
    "stray_processes",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_OUTPUT_BYTES = 1 << 20
_CODE_PATH_IN_BWRAP = "/tmp/main.py"

# Runs before the program, in the same interpreter: proves the sandbox started
# (one byte on the status pipe, then that pipe is closed), then runs the file as
# __main__. The program never sees the status pipe.
_PROLOGUE_MARK = "os.write(int(sys.argv[1])"  # in every sandboxed interpreter's command line
_PROLOGUE = (
    "import os, sys\n"
    "os.write(int(sys.argv[1]), b'S'); os.close(int(sys.argv[1]))\n"
    "sys.argv = sys.argv[3:]; __file__ = sys.argv[0]\n"  # argv[2] names the grader process (see stray_processes)
    "exec(compile(open(__file__, 'rb').read(), __file__, 'exec'))\n"
)


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program's fault): no verdict on the code."""


class IsolationUnavailableError(SandboxError):
    """Full isolation was required but bubblewrap is missing or cannot start."""


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run did.

    Attributes:
        returncode: the program's exit status; 128 + N when signal N ended it
            (negative only when the sandbox killed it: ``killed_by`` says why).
        stdout, stderr: decoded output (invalid UTF-8 replaced), each at most
            ``max_output_bytes`` long.
        timed_out: the wall-clock limit ran out and the program was killed.
        wall_s: seconds from start to the end of the run.
        killed_by: ``"timeout"``, ``"output_limit"`` or ``None`` when the sandbox
            did not kill it.
        output_truncated: more output was written than was kept.
        isolation: ``"bwrap"`` or ``"rlimits"`` (see the module docstring).
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float = 0.0
    killed_by: str | None = None
    output_truncated: bool = False
    isolation: str = "bwrap"

    @property
    def ok(self) -> bool:
        """Exited 0 on its own, within its limits."""
        return self.returncode == 0 and self.killed_by is None


_warned_fallback = False


class Sandbox:
    """Runs programs under fixed limits. Thread-safe: each `run` is independent.

    Args:
        timeout_s: default wall-clock limit per run.
        memory_mb: address-space limit (``RLIMIT_AS``) of the program.
        max_output_bytes: kept bytes of stdout and of stderr; more kills the program.
        max_processes: tasks (processes and threads) allowed in its pids cgroup.
        max_file_mb: largest file it may write, and the size of its ``/tmp``.
        require_isolation: refuse to run without bubblewrap (the default; False: the fallback above).
        python: the interpreter (default: this one, so the same libraries exist).
        bwrap_path: the bubblewrap binary to use (default: ``bwrap`` on PATH).
    """

    def __init__(
        self,
        timeout_s: float = 10.0,
        memory_mb: int = 512,
        *,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        max_processes: int = 64,
        max_file_mb: int = 64,
        require_isolation: bool = True,
        python: str | None = None,
        bwrap_path: str | None = None,
    ) -> None:
        if timeout_s <= 0 or memory_mb <= 0 or max_output_bytes <= 0 or max_processes <= 0 or max_file_mb <= 0:
            raise ValueError("sandbox limits must be positive")
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.max_processes = int(max_processes)
        self.max_file_mb = int(max_file_mb)
        self.require_isolation = require_isolation
        self.python = os.path.abspath(python or sys.executable)  # not realpath: that would leave the venv
        self.bwrap_path = bwrap_path
        prlimit, setpriv = shutil.which("prlimit"), shutil.which("setpriv")
        if prlimit is None or setpriv is None:
            raise SandboxError("prlimit or setpriv is not installed; install util-linux (apt-get install util-linux)")
        self._prlimit, self._setpriv = prlimit, setpriv

    @classmethod
    def from_config(cls, cfg: SandboxConfig) -> Sandbox:
        """From the ``grader.sandbox`` section of the configuration."""
        return cls(
            timeout_s=cfg.timeout_s,
            memory_mb=cfg.memory_mb,
            max_output_bytes=cfg.max_output_bytes,
            max_processes=cfg.max_processes,
            max_file_mb=cfg.max_file_mb,
            require_isolation=cfg.require_isolation,
        )

    @property
    def isolation(self) -> str:
        """``"bwrap"`` or ``"rlimits"``: what `run` will use (raises if isolation is required and missing)."""
        return self._isolation()[0]

    def _isolation(self) -> tuple[str, list[str]]:
        global _warned_fallback
        kind, prefix, why = detect_isolation(self.bwrap_path)
        if kind == "bwrap":
            return kind, prefix
        if self.require_isolation:
            raise IsolationUnavailableError(
                f"sandbox isolation is required (grader.sandbox.require_isolation) but {why}; "
                "install it with `apt-get install bubblewrap` (and allow user namespaces in containers), "
                "or set grader.sandbox.require_isolation=false to run untrusted code with rlimits only "
                "(docs/decisions.md, 'Code is graded only in bubblewrap': what that fallback keeps out and what not)"
            )
        _hide_own_environment()
        if not _warned_fallback:
            _warned_fallback = True
            what = (
                "no network and its own pid namespace"
                if "--pid" in prefix
                else "no network"
                if prefix
                else "NETWORK ACCESS"
            )
            log.warning(
                "sandbox: %s; untrusted code runs with rlimits, %s, an empty environment, and a WRITABLE file "
                "system; it can read the environment of this user's processes other than the grader where it "
                "has no pid namespace (install bubblewrap for isolation: apt-get install bubblewrap)",
                why,
                what,
            )
        return kind, prefix

    def _no_privileges(self) -> list[str]:
        """setpriv before the fallback's program: no privilege gained by exec, and as root no capability
        (without CAP_SYS_PTRACE, root cannot read a non-dumpable grader's environment either)."""
        if os.geteuid() == 0:
            return [self._setpriv, "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all"]
        return [self._setpriv, "--no-new-privs"]

    def _limits(self, timeout_s: float) -> list[str]:
        cmd = [
            self._prlimit,
            f"--as={self.memory_mb << 20}",
            f"--cpu={math.ceil(timeout_s) + 1}",  # a spinning program dies even if the wall clock missed it
            f"--fsize={self.max_file_mb << 20}",
            "--nofile=256",
            "--core=0",
        ]
        if os.geteuid() != 0 and not PidsCgroup.available():
            # Counts all of this user's processes, so allow the ones already running.
            running = sum(1 for p in os.listdir("/proc") if p.isdigit())
            cmd.append(f"--nproc={running + self.max_processes}")
        return cmd

    def run(self, code: str, stdin: str = "", timeout_s: float | None = None) -> SandboxResult:
        """Run `code` (Python source) with `stdin` as its standard input.

        Raises:
            SandboxError: the sandbox could not start the program.
            IsolationUnavailableError: ``require_isolation`` and no bubblewrap.
        """
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        if timeout <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout}")
        kind, prefix = self._isolation()
        cgroup = PidsCgroup.acquire(self.max_processes) if PidsCgroup.available() else None
        workdir = None
        status_r, status_w = os.pipe()
        code_fd = -1
        handed_over = False
        try:
            if kind == "bwrap":
                code_fd = os.memfd_create("main.py", 0)
                os.write(code_fd, code.encode("utf-8", "surrogatepass"))
                os.lseek(code_fd, 0, os.SEEK_SET)
                inner = [
                    *bwrap_args(prefix[0], self.max_file_mb << 20, interpreter_dirs(self.python)),
                    "--file",
                    str(code_fd),
                    _CODE_PATH_IN_BWRAP,
                ]
                code_path, cwd = _CODE_PATH_IN_BWRAP, "/"
            else:
                workdir = tempfile.mkdtemp(prefix="conductor-rl-sandbox-")
                code_path, cwd, inner = os.path.join(workdir, "main.py"), workdir, [*prefix, *self._no_privileges()]
                with open(code_path, "w", encoding="utf-8", errors="surrogatepass") as fh:
                    fh.write(code)
            cmd = [
                *self._limits(timeout),
                *inner,
                self.python,
                "-I",
                "-B",
                "-c",
                _PROLOGUE,
                str(status_w),
                _owner_tag(os.getpid()),
                code_path,
            ]
            # Join the cgroup before anything untrusted can fork. Without bubblewrap the shell stays as
            # the program's parent (no exec), so that killing its parent does not kill this process.
            run = "exec " if kind == "bwrap" else ""
            if cgroup is not None:
                cmd = ["/bin/sh", "-c", f'echo $$ > "$0" && {run}"$@"', str(cgroup.procs_file), *cmd]
            elif not run:
                cmd = ["/bin/sh", "-c", '"$@"', "sh", *cmd]
            fds = (status_w,) if code_fd < 0 else (status_w, code_fd)
            handed_over = True  # _supervise closes them
            return self._supervise(
                cmd, cwd, fds, status_r, stdin.encode("utf-8", "surrogatepass"), timeout, kind, cgroup
            )
        finally:
            os.close(status_r)
            if not handed_over:
                for fd in (status_w, code_fd):
                    if fd >= 0:
                        os.close(fd)
            if cgroup is not None:
                cgroup.release()
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    def _supervise(
        self,
        cmd: list[str],
        cwd: str,
        pass_fds: tuple[int, ...],
        status_r: int,
        stdin: bytes,
        timeout: float,
        kind: str,
        cgroup: PidsCgroup | None,
    ) -> SandboxResult:
        try:
            done = supervise(
                cmd,
                cwd=cwd,
                env=sandbox_env(),
                pass_fds=pass_fds,
                status_fd=status_r,
                stdin=stdin,
                timeout_s=timeout,
                max_output_bytes=self.max_output_bytes,
                kill_rest=None if cgroup is None else cgroup.kill_all,
            )
        except OSError as exc:
            raise SandboxError(f"could not start the sandbox ({cmd[0]}): {exc}") from exc
        stdout = done.stdout.decode("utf-8", errors="replace")
        stderr = done.stderr.decode("utf-8", errors="replace")
        if not done.signalled:
            if done.returncode < 0 and done.killed_by is None:  # see below: killed before the program ran
                raise SandboxError(f"the sandbox was killed from outside before it started (signal {-done.returncode})")
            if done.killed_by == "timeout":
                raise SandboxError(f"the sandbox did not start the program within {STARTUP_S:g}s (machine overloaded?)")
            raise SandboxError(
                f"the sandbox failed to start the program (exit {done.returncode}): {stderr.strip()[-500:]}"
            )
        if done.returncode < 0 and done.killed_by is None:
            # The program's own death by a signal is reported as 128 + N by bubblewrap or the shell in
            # front of it; a negative status means the sandbox itself was killed from outside (the
            # grader shutting down, an operator): no verdict on the program.
            raise SandboxError(f"the sandbox was killed from outside (signal {-done.returncode})")
        return SandboxResult(
            returncode=done.returncode,
            stdout=stdout,
            stderr=stderr,
            timed_out=done.killed_by == "timeout",
            wall_s=done.wall_s,
            killed_by=done.killed_by,
            output_truncated=done.truncated,
            isolation=kind,
        )


def _hide_own_environment() -> None:
    """Make this process non-dumpable (prctl PR_SET_DUMPABLE 0): its /proc files, `environ` among them,
    become readable by root with CAP_SYS_PTRACE only, so a program it starts without isolation cannot
    read the keys in its environment. Costs: no core dumps of the grader, no debugger attached by its
    own user. Idempotent."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise SandboxError(f"cannot make the grader non-dumpable (errno {ctypes.get_errno()}); not running code")


def run_python(
    code: str,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    *,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    max_processes: int = 64,
    require_isolation: bool = True,
) -> SandboxResult:
    """Run untrusted Python `code` in a sandbox (see the module docstring).

    Raises:
        SandboxError: the sandbox could not run the program (not the program's fault).
        IsolationUnavailableError: `require_isolation` and bubblewrap is missing.
    """
    sandbox = Sandbox(
        timeout_s,
        memory_mb,
        max_output_bytes=max_output_bytes,
        max_processes=max_processes,
        require_isolation=require_isolation,
    )
    return sandbox.run(code, stdin)


def _owner_tag(pid: int) -> str:
    return f"--conductor-rl-sandbox-of={pid}"


def stray_processes(*marks: str, owner: int | None = None) -> list[str]:
    """Live processes of programs sandboxed by process `owner` (default: this one), or
    with one of `marks` in their command line, and processes still in its sandbox cgroups: once
    every `Sandbox.run` of that process has returned, this is empty.

    For tests, benchmarks and operators; reads ``/proc``, so it sees this machine only."""
    owner = os.getpid() if owner is None else owner
    tag = _owner_tag(owner)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z" and ((_PROLOGUE_MARK in cmd and tag in cmd) or any(m and m in cmd for m in marks)):
            found.append(f"{entry}: {cmd[:200]}")
    if PidsCgroup.available():
        for procs in PidsCgroup.parent_dir().glob(f"{owner}-*/cgroup.procs"):
            found.extend(f"{pid}: in cgroup {procs.parent.name}" for pid in procs.read_text().split())
    return found

"""The sandbox's ordinary behaviour: I/O, exit status, limits, environment, isolation modes, failures."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from sandbox_helpers import HANG_GUARD_S, PROLOGUE_MARK, assert_nothing_left

from conductor_rl.grading import sandbox as sandbox_module
from conductor_rl.grading.sandbox import IsolationUnavailableError, Sandbox, SandboxError, run_python

NO_BWRAP = "/nonexistent/bwrap"


@pytest.fixture(params=["bwrap", "rlimits"])
def box(request) -> Sandbox:
    """A sandbox in each isolation mode (rlimits: bubblewrap made unavailable)."""
    rlimits = request.param == "rlimits"
    return Sandbox(timeout_s=5, bwrap_path=NO_BWRAP if rlimits else None, require_isolation=not rlimits)


def test_stdin_stdout_stderr_and_exit_status(box):
    r = box.run("import sys\nx = input()\nprint(x[::-1])\nprint('warn', file=sys.stderr)\nsys.exit(3)\n", stdin="abc\n")
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.killed_by) == (3, "cba\n", "warn\n", False, None)
    assert not r.ok and r.isolation == box.isolation
    assert_nothing_left()


def test_runs_as_main_and_ok(box):
    r = box.run("if __name__ == '__main__':\n    print('main')\n")
    assert r.ok and r.stdout == "main\n" and r.wall_s > 0


def test_exception_is_the_programs_failure_not_the_sandboxes(box):
    r = box.run("raise ValueError('boom')\n")
    assert r.returncode == 1 and "ValueError: boom" in r.stderr


def test_syntax_error_is_the_programs_failure(box):
    r = box.run("def f(:\n")
    assert r.returncode == 1 and "SyntaxError" in r.stderr


def test_large_stdin_and_output_do_not_deadlock(box):
    data = "x" * 3_000_000 + "\n"  # far beyond a pipe's 64 KiB buffer, both ways
    r = box.run("import sys\ns = sys.stdin.read()\nsys.stdout.write(str(len(s)))\n", stdin=data)
    assert r.ok and r.stdout == str(len(data))


def test_program_that_ignores_stdin_is_fine(box):
    r = box.run("print('no reading')", stdin="y\n" * 1_000_000)
    assert r.ok and r.stdout == "no reading\n"


def test_timeout(box):
    r = box.run("while True:\n    pass\n", timeout_s=0.5)
    assert r.timed_out and r.killed_by == "timeout" and not r.ok
    assert r.wall_s >= 0.5  # not before its time
    assert_nothing_left()


def test_output_is_capped():
    box = Sandbox(max_output_bytes=10_000)
    r = box.run("import sys\nsys.stdout.write('a' * 50_000)\nsys.stdout.flush()\nimport time\ntime.sleep(30)\n")
    assert r.output_truncated and r.killed_by == "output_limit" and len(r.stdout) == 10_000
    assert r.wall_s < HANG_GUARD_S  # killed at the cap, not after the program's 30 s sleep


def test_environment_is_scrubbed(monkeypatch, box):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("MY_TOKEN", "t0k3n")
    r = box.run("import os, json\nprint(json.dumps(dict(os.environ)))\n")
    assert "sk-test-secret" not in r.stdout and "t0k3n" not in r.stdout
    env = __import__("json").loads(r.stdout)
    assert not [k for k in env if any(s in k.upper() for s in ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"))]
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_memory_limit():
    r = Sandbox(memory_mb=256).run("x = bytearray(600 * 1024 * 1024)\nprint('allocated')\n")
    assert r.returncode != 0 and "MemoryError" in r.stderr and "allocated" not in r.stdout


def test_bwrap_mode_has_a_private_tmp_and_read_only_root():
    r = Sandbox().run(
        "import os\nopen('/tmp/scratch', 'w').write('ok')\nprint(os.getcwd(), sorted(os.listdir('/tmp')))\n"
        "try:\n    open('/usr/pwned', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
    )
    assert r.ok and r.isolation == "bwrap"
    # A checkout under /tmp has its interpreter bound back read-only: its top folder shows, nothing else.
    venv = os.path.abspath(sys.prefix)
    extra = [venv.split("/")[2]] if venv.startswith("/tmp/") else []
    assert r.stdout.splitlines() == [f"/tmp {sorted(['main.py', 'scratch', *extra])}", "30"]  # EROFS


def test_fallback_warns_once_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(sandbox_module, "_warned_fallback", False)
    caplog.set_level(logging.WARNING, logger="conductor_rl.grading.sandbox")
    box = Sandbox(bwrap_path=NO_BWRAP, require_isolation=False)
    assert box.run("print(1)").isolation == "rlimits"
    box.run("print(2)")
    warnings = [r for r in caplog.records if "bubblewrap" in r.getMessage()]
    assert len(warnings) == 1 and "not installed" in warnings[0].getMessage()


def test_fallback_runs_in_a_throwaway_directory():
    r = Sandbox(bwrap_path=NO_BWRAP, require_isolation=False).run(
        "import os\nprint(os.getcwd())\nopen('f', 'w').write('x')\n"
    )
    workdir = r.stdout.strip()
    assert r.ok and "conductor-rl-sandbox-" in workdir
    assert not __import__("os").path.exists(workdir)


def test_required_isolation_without_bwrap_names_the_fix():
    box = Sandbox(bwrap_path=NO_BWRAP)  # required by default
    with pytest.raises(IsolationUnavailableError, match="apt-get install bubblewrap"):
        box.run("print(1)")


def test_a_sandbox_that_cannot_start_the_program_raises():
    # An interpreter that does not exist: nothing ran, so this is not the program's failure.
    with pytest.raises(SandboxError, match="failed to start"):
        Sandbox(python="/nonexistent/python3").run("print(1)")


def test_exit_code_of_the_program_cannot_fake_a_sandbox_failure():
    r = Sandbox().run("import sys\nsys.stderr.write('bwrap: Can\\'t find source path\\n')\nsys.exit(1)\n")
    assert r.returncode == 1  # a result, not a SandboxError


def test_run_python_contract():
    r = run_python("print(input())", stdin="hi\n", timeout_s=5, memory_mb=256)
    assert (r.returncode, r.stdout, r.stderr, r.timed_out) == (0, "hi\n", "", False)


def test_bad_limits_are_rejected():
    with pytest.raises(ValueError):
        Sandbox(timeout_s=0)
    with pytest.raises(ValueError):
        Sandbox().run("pass", timeout_s=-1)


def test_sandbox_killed_from_outside_is_a_sandbox_error(box):
    import signal
    import threading
    import time

    import psutil

    def kill_the_sandbox() -> None:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            for child in psutil.Process().children():
                try:
                    if any(PROLOGUE_MARK in " ".join(p.cmdline()) for p in child.children(recursive=True)):
                        time.sleep(0.3)  # let the program start
                        child.send_signal(signal.SIGKILL)  # the sandbox's outermost process
                        return
                except psutil.Error:
                    pass
            time.sleep(0.01)

    killer = threading.Thread(target=kill_the_sandbox)
    killer.start()
    with pytest.raises(SandboxError, match="killed from outside"):
        box.run("import time\ntime.sleep(60)\n", timeout_s=HANG_GUARD_S)  # the killer comes long before
    killer.join()
    assert_nothing_left()


def _supervised(child: str, timeout_s: float, startup_s: float):
    """`supervise` on a Python child that is handed the status pipe's write end as argv[1]."""
    from conductor_rl.grading.supervise import supervise

    status_r, status_w = os.pipe()
    try:
        return supervise(
            [sys.executable, "-c", child, str(status_w)],
            cwd="/",
            env={},
            pass_fds=(status_w,),
            status_fd=status_r,
            stdin=b"",
            timeout_s=timeout_s,
            max_output_bytes=1000,
            startup_s=startup_s,
        )
    finally:
        os.close(status_r)


def test_a_slow_start_does_not_spend_the_programs_time():
    """The clock starts at the status byte: a start slower than the timeout (a loaded
    machine) leaves the program its whole time; a program that runs past it is killed."""
    slow_start = "import os, sys, time\ntime.sleep(1.0)\nos.write(int(sys.argv[1]), b'S')\ntime.sleep({})\n"
    done = _supervised(slow_start.format(0.1), timeout_s=0.5, startup_s=5.0)
    assert done.signalled and done.killed_by is None and done.returncode == 0 and done.wall_s >= 1.0
    done = _supervised(slow_start.format(30), timeout_s=0.5, startup_s=5.0)
    assert done.signalled and done.killed_by == "timeout" and done.wall_s >= 1.5


def test_a_child_that_never_starts_is_killed_after_the_startup_allowance():
    done = _supervised("import time\ntime.sleep(30)\n", timeout_s=60.0, startup_s=0.5)
    assert not done.signalled and done.killed_by == "timeout" and done.wall_s < HANG_GUARD_S


def test_an_interpreter_that_failed_its_probe_is_asked_again():
    # A failed probe (here: no interpreter yet; in a pool, the probe killed with its dying actor) must not
    # be remembered: the process would start no program again.
    from conductor_rl.grading.isolation import interpreter_dirs

    tmp_path = Path(tempfile.mkdtemp(dir="/tmp"))  # under /tmp, whose interpreters are bound back
    python = tmp_path / "bin" / "python"
    assert interpreter_dirs(str(python)) == ()
    python.parent.mkdir()
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    assert os.path.realpath(tmp_path) in interpreter_dirs(str(python))
    assert Sandbox(python=str(python)).run("print(6 * 7)").stdout == "42\n"
    shutil.rmtree(tmp_path)

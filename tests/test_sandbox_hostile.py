"""Hostile programs: each is contained, the sandbox goes on, and nothing is left running.

Every case runs under bubblewrap and under the rlimits fallback (bubblewrap made
unavailable), except where the fallback documents that it does not protect
(writes outside the working directory: without bubblewrap the root is writable).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time

import pytest
from sandbox_helpers import HANG_GUARD_S, assert_nothing_left

from conductor_rl.grading.sandbox import Sandbox

TIMEOUT = 2.0

# Each case runs a program until the sandbox stops it (often at its timeout), twice.
pytestmark = [pytest.mark.slow, pytest.mark.light]  # light: as above, and starts no Ray, vLLM or learner


@pytest.fixture(params=["bwrap", "rlimits"])
def box(request) -> Sandbox:
    return Sandbox(
        timeout_s=TIMEOUT,
        memory_mb=512,
        max_processes=32,
        bwrap_path=None if request.param == "bwrap" else "/nonexistent/bwrap",
        require_isolation=request.param == "bwrap",  # rlimits: the fallback a user opts in to
    )


@pytest.fixture(autouse=True)
def _still_works_and_clean_afterwards(request):
    """After every hostile program: nothing of it runs, and the sandbox still grades normally."""
    yield
    assert_nothing_left()
    box = request.node.funcargs.get("box") or Sandbox()
    r = box.run("print(sum(range(10)))")
    assert r.ok and r.stdout == "45\n"


def test_infinite_loop(box):
    start = time.monotonic()
    r = box.run("while True:\n    pass\n")
    assert r.timed_out and r.killed_by == "timeout"
    assert time.monotonic() - start < HANG_GUARD_S


def test_fork_bomb(box):
    start = time.monotonic()
    r = box.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n")
    assert not r.ok
    assert time.monotonic() - start < HANG_GUARD_S


def test_memory_bomb(box):
    # Up to the hang guard, not the 2 s timeout: beside the heavy tests a loaded machine can take longer
    # than that to fill 512 MB, and the test is about the memory limit.
    r = box.run("blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 1024 * 1024))\n", timeout_s=HANG_GUARD_S)
    assert not r.ok and "MemoryError" in r.stderr


def test_gigabytes_of_output(box):
    start = time.monotonic()
    r = box.run("import sys\nchunk = 'x' * 1_000_000\nfor _ in range(5000):\n    sys.stdout.write(chunk)\n")
    assert r.output_truncated and r.killed_by == "output_limit"
    assert len(r.stdout) == box.max_output_bytes
    assert time.monotonic() - start < HANG_GUARD_S


def test_output_flood_on_stderr(box):
    r = box.run("import os\nwhile True:\n    os.write(2, b'e' * 65536)\n")
    assert r.output_truncated and len(r.stderr) == box.max_output_bytes


def test_writes_outside_its_temp_folder_fail():
    target = f"/var/tmp/conductor-rl-escape-{os.getpid()}-{random.randrange(10**9)}"
    r = Sandbox().run(f"open({target!r}, 'w').write('escaped')\n")
    assert r.returncode != 0 and "Read-only file system" in r.stderr
    assert not os.path.exists(target)


def test_no_privileges_and_no_home_directories():
    r = Sandbox().run(
        "import os\nprint(os.getuid(), os.getgid())\n"
        "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])\n"
        "print(os.listdir('/run'), os.listdir('/home'))\n"
        "print(os.path.exists('/root/.bashrc') or os.path.exists('/root/.ssh'))\n"
    )
    assert r.ok and r.stdout.splitlines() == ["65534 65534", "0000000000000000", "[] []", "False"]


def test_its_temp_folder_is_private_and_gone(box):
    marker = f"conductor-rl-private-{random.randrange(10**9)}"
    r = box.run(f"import os\nopen({marker!r}, 'w').write('x')\nprint(os.path.abspath({marker!r}))\n")
    assert r.ok
    assert not os.path.exists(r.stdout.strip())


def test_big_file_is_refused(box):
    r = box.run("f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 1_000_000)\n")
    assert not r.ok and not r.timed_out  # the file size limit stops it, not the clock


def test_network_is_unreachable(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted: list[object] = []
    server.settimeout(0.2)

    def accept() -> None:
        try:
            accepted.append(server.accept())
        except OSError:
            pass

    try:
        r = box.run(
            "import socket\ns = socket.socket()\ns.settimeout(1)\n"
            f"s.connect(('127.0.0.1', {port}))\nprint('connected')\n"
        )
        accept()
    finally:
        server.close()
    assert "connected" not in r.stdout and r.returncode != 0
    assert not accepted


def test_secrets_in_the_parent_environment_are_not_visible(box, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-hostile-test-0123456789")
    r = box.run(
        "import os\nprint(os.environ.get('OPENAI_API_KEY'))\n"
        "print(open('/proc/self/environ', 'rb').read())\n"
        "print(open('/proc/%d/environ' % os.getppid(), 'rb').read() if os.getppid() > 1 else b'')\n"
    )
    assert "sk-hostile-test" not in r.stdout + r.stderr
    assert r.stdout.startswith("None\n")


READ_EVERY_ENVIRON = """
import json, os, sys
key = sys.stdin.read().strip().encode()
holders, chain, pid = [], [], os.getpid()
for entry in os.listdir("/proc"):
    try:
        if entry.isdigit() and key in open(f"/proc/{entry}/environ", "rb").read():
            holders.append(int(entry))
    except OSError:
        pass
while pid > 1:
    status = open(f"/proc/{pid}/status").read()
    pid = int(status.split("PPid:")[1].split()[0])
    chain.append(pid)
print(json.dumps([holders, chain]))
"""


def test_without_isolation_the_program_cannot_read_its_graders_keys(tmp_path):
    """The worst fallback (no bubblewrap, no `unshare`, so the host's /proc): a grader whose environment
    holds a key runs a program that reads /proc/<pid>/environ of every process, its ancestors first."""
    import json
    import os
    import secrets
    import subprocess
    import sys

    key = "sk-" + secrets.token_hex(16)
    tools = tmp_path / "bin"  # prlimit and setpriv, and no unshare: no namespace can be made
    tools.mkdir()
    for tool in ("prlimit", "setpriv"):
        os.symlink(f"/usr/bin/{tool}", tools / tool)
    grader = (
        "import json, sys; from conductor_rl.grading.sandbox import Sandbox; "
        "box = Sandbox(bwrap_path='/nonexistent/bwrap', require_isolation=False); "
        f"r = box.run({READ_EVERY_ENVIRON!r}, stdin=sys.stdin.read()); "
        "print(json.dumps([r.isolation, r.stdout, r.stderr]))"
    )
    env = {**os.environ, "PATH": str(tools), "OPENAI_API_KEY": key}
    out = subprocess.run(
        [sys.executable, "-c", grader], input=key, env=env, capture_output=True, text=True, timeout=60, check=True
    )
    isolation, stdout, stderr = json.loads(out.stdout.strip().splitlines()[-1])
    assert isolation == "rlimits", stderr
    holders, chain = json.loads(stdout)
    assert holders == [], f"the program read a key in the environment of {holders}"
    assert len(chain) >= 2, chain  # it saw its ancestors on the host's /proc (the grader among them)


def test_killing_its_parent(box):
    # Its parent is the first process of its pid namespace (bubblewrap's, or a shell's without it),
    # which a SIGKILL from inside the namespace cannot end: the program goes on, and so does this test.
    r = box.run(
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(0.2)\nprint('after')\n"
    )
    assert r.ok and r.stdout == "after\n"


def test_orphaned_background_children_are_killed(box):
    # A double fork into a new session, then the grandchild becomes `sleep <unique number>`.
    mark = f"{random.randrange(10**6, 10**7)}.{random.randrange(10**6)}"
    r = box.run(
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{mark}'])\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('parent exits')\n"
    )
    assert r.ok and r.stdout == "parent exits\n"
    assert_nothing_left(f"sleep {mark}")


def test_deep_recursion(box):
    r = box.run("import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n")
    assert not r.ok


def test_ignoring_sigterm(box):
    r = box.run(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n"
    )
    assert r.timed_out


def test_closing_its_output_and_hanging(box):
    start = time.monotonic()
    r = box.run("import os, time\nos.close(1)\nos.close(2)\nos.close(0)\ntime.sleep(60)\n")
    assert r.timed_out
    assert time.monotonic() - start < HANG_GUARD_S


def test_redirecting_file_descriptors(box):
    r = box.run(
        "import os\nfd = os.open('/dev/null', os.O_WRONLY)\nos.dup2(fd, 1)\nprint('hidden')\n"
        "for n in range(3, 256):\n    try:\n        os.close(n)\n    except OSError:\n        pass\n"
    )
    assert r.ok and r.stdout == ""


def test_many_threads_are_capped():
    r = Sandbox(timeout_s=TIMEOUT, max_processes=16).run(
        "import threading, time\nn = 0\ntry:\n    for _ in range(200):\n"
        "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n        n += 1\n"
        "except RuntimeError:\n    pass\nprint(n)\n"
    )
    assert r.ok and int(r.stdout) < 16


def test_concurrent_hostile_programs_do_not_disturb_each_other():
    box = Sandbox(timeout_s=TIMEOUT)
    results: dict[str, object] = {}
    programs = {
        "loop": "while True:\n    pass\n",
        "flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
        "fine": "print(6 * 7)\n",
        "bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    }
    threads = [
        threading.Thread(target=lambda k=k, c=c: results.__setitem__(k, box.run(c))) for k, c in programs.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["fine"].ok and results["fine"].stdout == "42\n"
    assert results["loop"].timed_out and results["flood"].output_truncated and not results["bomb"].ok

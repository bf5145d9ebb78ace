"""How fast and how safely code is graded.

1. Throughput: the 164 HumanEval canonical solutions graded through a
   GraderPool (Ray actors, real sandboxes), against the floor measured in the
   same run on the same cores at the same concurrency: bare ``python -I -c pass``
   subprocesses of the same interpreter (no sandbox, no tests). Goal: ratio
   (pool programs/s over floor programs/s) >= 0.7. Also shown: the same 164
   programs run bare (no sandbox), which separates the tests' own cost from
   the sandbox's.
2. Hostile programs (infinite loop, fork bomb, memory bomb, output flood,
   writes outside /tmp, network, secrets, killing the parent, orphans, deep
   recursion, ignored SIGTERM, closed descriptors): contained / total. A case
   is contained when its run ends within its timeout (+2 s), its expectation
   holds, nothing it started is left running, and a normal program still runs.
3. Hanging samples: the 164 solutions with 10 % of them replaced by programs
   that never finish, spinning (``while True: pass``) or blocked (a long
   sleep); each hung sample should cost at most its timeout in slot-seconds
   (extra wall time x concurrency / hung samples). A spinning one also takes a
   core from the others while it runs, so on a machine with fewer cores than
   slots it costs more than its timeout; that is reported, not hidden.

    python benchmarks/sandbox.py [--json] [--actors N] [--concurrency N] [--hang-timeout S]

Prints human-readable lines; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

from benchmarks.measure import keep_result
from conductor_rl.config import GraderConfig, SandboxConfig
from conductor_rl.data import load_humaneval
from conductor_rl.grading import Verdict
from conductor_rl.grading.code import humaneval_program
from conductor_rl.grading.sandbox import Sandbox, SandboxError, stray_processes
from conductor_rl.grading.service import GradeRequest

GOAL_RATIO = 0.7


def log(msg: str) -> None:
    print(msg, flush=True)


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def floor_pass(n: int, concurrency: int) -> float:
    """Bare interpreter starts per second: the cheapest any sandboxed program can be."""
    cmd = [sys.executable, "-I", "-c", "pass"]
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: subprocess.run(cmd, check=True), range(concurrency)))  # warm the page cache
        start = time.perf_counter()
        list(pool.map(lambda _: subprocess.run(cmd, check=True), range(n)))
    return rate(n, time.perf_counter() - start)


def bare_programs(questions, concurrency: int) -> float:
    """The HumanEval programs (tests included) run without any sandbox: programs per second."""

    def run(q) -> None:
        program = humaneval_program(q.reference, q.meta)
        subprocess.run([sys.executable, "-I", "-c", program], capture_output=True, check=True)

    with ThreadPoolExecutor(concurrency) as pool:
        start = time.perf_counter()
        list(pool.map(run, questions))
    return rate(len(questions), time.perf_counter() - start)


HANGS = {
    "spinning": "    while True:\n        pass\n",  # burns a core until killed
    "blocked": "    import time\n    time.sleep(3600)\n",  # a deadlock or a wait: holds a slot, no CPU
}


def requests_of(questions, hang_every: int = 0, hang: str = "spinning") -> list[GradeRequest]:
    out = []
    for i, q in enumerate(questions):
        answer = q.reference
        if hang_every and i % hang_every == 0:
            answer = q.meta["prompt"] + HANGS[hang]
        out.append(GradeRequest("code_humaneval", answer, q.reference, q.meta))
    return out


# ---------------------------------------------------------------------------
# hostile programs


def hostile_cases(port: int, mark: str) -> dict[str, tuple[str, object]]:
    """name -> (program, expectation on the SandboxResult)."""
    return {
        "infinite_loop": ("while True:\n    pass\n", lambda r: r.timed_out),
        "fork_bomb": (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            lambda r: not r.ok,
        ),
        "memory_bomb": (
            "b = []\nwhile True:\n    b.append(bytearray(50 << 20))\n",
            lambda r: "MemoryError" in r.stderr,
        ),
        "output_flood": (
            "import sys\nwhile True:\n    sys.stdout.write('x' * 1000000)\n",
            lambda r: r.output_truncated,
        ),
        "write_outside_tmp": (
            f"open('/var/tmp/{mark}', 'w').write('x')\n",
            lambda r: r.returncode != 0 and not os.path.exists(f"/var/tmp/{mark}"),
        ),
        "network": (
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')\n",
            lambda r: "connected" not in r.stdout,
        ),
        "read_secret": ("import os\nprint(os.environ.get('OPENAI_API_KEY'))\n", lambda r: "sk-bench" not in r.stdout),
        "kill_parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", lambda r: True),
        "orphans": (
            "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv('/bin/sleep', ['sleep', '{mark}'])\n    os._exit(0)\n",
            lambda r: r.ok,
        ),
        "deep_recursion": (
            "import sys\nsys.setrecursionlimit(10**9)\ndef f(n):\n    return f(n + 1) + 1\nf(0)\n",
            lambda r: not r.ok,
        ),
        "ignore_sigterm": (
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.01)\n",
            lambda r: r.timed_out,
        ),
        "close_fds": (
            "import os, time\nfor fd in (0, 1, 2):\n    os.close(fd)\ntime.sleep(60)\n",
            lambda r: r.timed_out,
        ),
    }


def run_hostile(timeout_s: float) -> dict[str, object]:
    os.environ["OPENAI_API_KEY"] = "sk-bench-not-a-real-key"
    box = Sandbox(timeout_s=timeout_s)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    mark = f"{random.randrange(10**6, 10**7)}.{random.randrange(10**6)}"
    failed = []
    cases = hostile_cases(server.getsockname()[1], mark)
    try:
        for name, (program, expect) in cases.items():
            start = time.monotonic()
            try:
                result = box.run(program)
                ok = bool(expect(result)) and time.monotonic() - start < timeout_s + 2
            except SandboxError as exc:
                ok, result = False, exc
            ok = ok and not stray_processes(mark) and box.run("print(1)").stdout == "1\n"
            log(f"  hostile {name:18s} {'contained' if ok else 'NOT CONTAINED'}")
            if not ok:
                failed.append(name)
    finally:
        server.close()
        os.environ.pop("OPENAI_API_KEY", None)
    return {"contained": len(cases) - len(failed), "total": len(cases), "failed": failed}


# ---------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2, help="sandboxes at once per actor")
    parser.add_argument("--hang-timeout", type=float, default=2.0, help="sandbox timeout in the hanging run")
    args = parser.parse_args()
    slots = args.actors * args.concurrency

    import ray

    from actors.grader import GraderPool

    questions = load_humaneval()
    n = len(questions)
    log(f"{n} HumanEval programs, {args.actors} actors x {args.concurrency} sandboxes, {os.cpu_count()} CPUs")

    ray.init(
        num_cpus=max(slots, os.cpu_count() or 1),
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        config = GraderConfig(actors=args.actors, concurrency=args.concurrency, sandbox=SandboxConfig(timeout_s=10))
        pool = GraderPool(config, num_cpus=0.5)
        isolation = pool.wait_ready()[0]["isolation"]
        pool.grade_many(requests_of(questions[:slots]))  # warm-up: imports, page cache

        # The floor is measured before and after the pool's run and averaged: other load on the
        # machine drifts, and the ratio should compare like with like.
        floor_before = floor_pass(n, slots)
        start = time.perf_counter()
        results = pool.grade_many(requests_of(questions))
        wall = time.perf_counter() - start
        floor = (floor_before + floor_pass(n, slots)) / 2
        log(f"floor: bare `python -I -c pass`: {floor:.1f}/s")
        bare = bare_programs(questions, slots)
        log(f"same programs without a sandbox: {bare:.1f}/s")
        correct = sum(r.verdict is Verdict.CORRECT for r in results)
        pool_rate = rate(n, wall)
        log(
            f"pool: {wall:.2f}s, {pool_rate:.1f} programs/s, {correct}/{n} correct, "
            f"ratio to floor {pool_rate / floor:.2f} (goal >= {GOAL_RATIO}), to bare programs {pool_rate / bare:.2f}"
        )

        hang_every = 10
        hung = len(range(0, n, hang_every))
        hang_config = config.model_copy(update={"sandbox": SandboxConfig(timeout_s=args.hang_timeout)})
        hang_pool = GraderPool(hang_config, num_cpus=0.5)
        hang_pool.wait_ready()
        hangs = {}
        for hang in HANGS:
            start = time.perf_counter()
            hang_results = hang_pool.grade_many(requests_of(questions, hang_every, hang))
            hang_wall = time.perf_counter() - start
            # Slot-seconds beyond the run without hangs, less the programs the hung ones replaced.
            cost = max(0.0, hang_wall - wall * (n - hung) / n) * slots / hung
            hangs[hang] = {
                "wall_s": round(hang_wall, 3),
                "programs_per_s": round(rate(n, hang_wall), 2),
                "hung_wrong": sum(r.verdict is Verdict.WRONG and "timed out" in r.detail for r in hang_results),
                "others_correct": sum(r.verdict is Verdict.CORRECT for r in hang_results),
                "cost_per_hung_sample_s": round(cost, 3),
            }
            log(
                f"10% {hang} hangs: {hang_wall:.2f}s, {hangs[hang]['hung_wrong']}/{hung} hung samples WRONG "
                f"(timed out), {hangs[hang]['others_correct']}/{n - hung} others correct; each hung sample "
                f"cost {cost:.2f} slot-seconds (timeout {args.hang_timeout:g}s)"
            )
        hang_pool.close()
        pool.close()
    finally:
        ray.shutdown()

    hostile = run_hostile(timeout_s=2.0)
    log(f"hostile programs contained: {hostile['contained']}/{hostile['total']}")

    figures = {
        "benchmark": "sandbox",
        "isolation": isolation,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "actors": args.actors,
        "concurrency_per_actor": args.concurrency,
        "programs": n,
        "pool_wall_s": round(wall, 3),
        "pool_programs_per_s": round(pool_rate, 2),
        "pool_correct": correct,
        "floor_python_pass_per_s": round(floor, 2),
        "bare_programs_per_s": round(bare, 2),
        "ratio": round(pool_rate / floor, 3),
        "ratio_to_bare_programs": round(pool_rate / bare, 3),
        "goal_ratio": GOAL_RATIO,
        "hostile_contained": hostile["contained"],
        "hostile_total": hostile["total"],
        "hostile_failed": hostile["failed"],
        "hang_share": round(hung / n, 3),
        "hang_timeout_s": args.hang_timeout,
        "hung_samples": hung,
        "hang_spinning": hangs["spinning"],
        "hang_blocked": hangs["blocked"],
        # A blocked sample should hold its slot no longer than its timeout (plus start-up); a spinning
        # one also takes a core from the others while it runs, so it costs more on a busy machine.
        "hang_cost_within_timeout": hangs["blocked"]["cost_per_hung_sample_s"] <= args.hang_timeout * 1.1,
    }
    keep_result(figures)
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()

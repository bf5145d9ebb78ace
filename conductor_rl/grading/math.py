"""Mathematical-equivalence grading with math-verify, bounded in time and killable.

math-verify's own timeouts use ``signal.alarm``, which works only in the main
thread; graders run in threads (Ray actors, thread pools). So math-verify runs
with its timeouts off (``parsing_timeout=None``, ``timeout_seconds=None``) in a
long-lived child process that imports it once and answers one JSON line per
request. The parent waits with a timeout; on timeout it kills the child (a new
one starts lazily on the next call) and returns an ``ERROR`` verdict.

What is graded (decided here, see `MathGrader.grade`):

* only the text after the last ``</think>``;
* the last complete ``\\boxed{...}`` if there is one (its content at most
  `MAX_BOXED_CHARS` characters, else ``WRONG``: an answer that long is the
  policy's doing, not the grader's); otherwise math-verify's own extraction
  on the last `MAX_TAIL_CHARS` characters of the response.

With the input bounded like this, a math-verify timeout is rare and is treated
as a grader failure: ``ERROR``, which is never scored (see
`conductor_rl.grading.verdict.reward`).

The child gets the parent's environment minus every variable whose name holds
KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL, runs in its own session with ``/``
as working directory and an address-space limit, exits when the parent goes
away, and is killed by `MathGrader.close`, by garbage collection of the grader,
or at interpreter exit.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref

from conductor_rl.data.boxed import last_boxed
from conductor_rl.grading.answers import strip_reasoning
from conductor_rl.grading.supervise import kill_session
from conductor_rl.grading.verdict import GradeResult, Verdict

__all__ = [
    "MAX_BOXED_CHARS",
    "MAX_REFERENCE_CHARS",
    "MAX_TAIL_CHARS",
    "TEST_HANG_ENV",
    "MathGrader",
    "default_math_grader",
]

MAX_TAIL_CHARS = 4096
"""Without a ``\\boxed{}``, only this many trailing characters of a response are parsed."""
MAX_BOXED_CHARS = 1000
"""A boxed answer longer than this is WRONG without being parsed."""
MAX_REFERENCE_CHARS = 4096
"""A reference longer than this is a data error (ERROR)."""
TEST_HANG_ENV = "CONDUCTOR_RL_MATH_GRADER_TEST_HANG"
"""Test hook: when this variable is set (non-empty) in the environment the child
starts with, a request whose response contains its value makes the child sleep
for an hour, so that tests exercise the real timeout-and-kill path."""

_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_MAX_LINE_BYTES = 1 << 20

# The child program, run as ``python -c``: it never imports conductor_rl (whose
# package __init__ may be heavy), and it removes the working directory from
# sys.path so that no stray math.py or json.py can shadow a standard module.
_CHILD_SOURCE = r"""
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import json, logging, os, threading, time

def _watch_parent(parent_pid):
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)
        time.sleep(0.5)

def main():
    parent_pid = int(sys.argv[1])
    memory_mb = int(sys.argv[2])
    if memory_mb > 0:
        try:
            import resource
            soft, hard = resource.getrlimit(resource.RLIMIT_AS)
            limit = memory_mb * 1024 * 1024
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            if soft == resource.RLIM_INFINITY or soft > limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        except Exception:
            pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    # The protocol owns the original stdout; anything else printed goes to stderr.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for name in ("math_verify", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.ERROR)
    from math_verify import parse, verify

    hang_token = os.environ.get(%(hang_env)r, "")
    gold_cache = {}

    def parse_gold(ref):
        if ref in gold_cache:
            return gold_cache[ref]
        got = []
        for text in ("$" + ref + "$", "\\boxed{" + ref + "}", ref):
            got = parse(text, parsing_timeout=None)
            if got:
                break
        if len(gold_cache) > 20000:
            gold_cache.clear()
        gold_cache[ref] = got
        return got

    def handle(req):
        pred_text = req["pred"]
        if hang_token and hang_token in pred_text:
            time.sleep(3600)
        gold = parse_gold(req["gold"])
        if not gold:
            return {"status": "bad_reference"}
        pred = parse(pred_text, parsing_timeout=None)
        if not pred:
            return {"status": "no_answer"}
        correct = verify(gold, pred, timeout_seconds=None)
        shown = pred[-1] if isinstance(pred[-1], str) else str(pred[0])
        return {"status": "ok", "correct": bool(correct), "extracted": shown[:1000]}

    handle({"pred": "\\boxed{\\frac{1}{2}}", "gold": "0.5"})  # warm caches before "ready"
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for raw in sys.stdin.buffer:
        try:
            req = json.loads(raw)
        except Exception as exc:
            out.write(json.dumps({"id": None, "status": "error", "error": "bad request: %%r" %% exc}) + "\n")
            out.flush()
            continue
        try:
            reply = handle(req)
        except BaseException as exc:
            reply = {"status": "error", "error": "%%s: %%s" %% (type(exc).__name__, str(exc)[:500])}
        reply["id"] = req.get("id")
        out.write(json.dumps(reply) + "\n")
        out.flush()

main()
""" % {"hang_env": TEST_HANG_ENV}


def _child_env() -> dict[str, str]:
    """The parent's environment without anything that looks like a secret."""
    return {k: v for k, v in os.environ.items() if not any(s in k.upper() for s in _SECRET_MARKERS)}


class _ChildGone(Exception):
    """The child exited or its pipes broke (not a timeout)."""


class _ChildState:
    """The running child, kept apart from MathGrader so that a finalizer can reach it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.buf = b""
        self.next_id = 0

    def kill(self) -> None:
        """Kill the child now (safe from any thread, any number of times)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            kill_session(proc)

    def shutdown(self) -> None:
        """Kill the child, reap it, and close its pipes."""
        proc = self.proc
        self.kill()
        self.proc = None
        self.buf = b""
        if proc is None:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


class MathGrader:
    """math-verify equivalence grading in a killable child process.

    Reusable and thread-safe: one child serves every thread, one request at a
    time (a lock is held around each request and its reply). The first call
    starts the child and pays math-verify's import; later calls cost a few ms.

    Args:
        timeout_s: the longest one grade may take before the child is killed and
            the verdict is ``ERROR``.
        startup_timeout_s: the longest starting a child (import and warm-up) may
            take.
        memory_mb: the child's address-space limit (``RLIMIT_AS``); 0 for none.

    Use as a context manager, or call `close`; the child is also killed when the
    grader is garbage-collected and at interpreter exit.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        *,
        startup_timeout_s: float = 120.0,
        memory_mb: int = 4096,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.startup_timeout_s = float(startup_timeout_s)
        self.memory_mb = int(memory_mb)
        self._lock = threading.Lock()
        self._closed = False
        self._state = _ChildState()
        self._finalizer = weakref.finalize(self, _ChildState.shutdown, self._state)
        self.restarts = 0
        """How many children were started after the first (after timeouts or crashes)."""
        self._started = 0

    # -- lifecycle -------------------------------------------------------------

    @property
    def child_pid(self) -> int | None:
        """The pid of the running child, or None if none is running."""
        proc = self._state.proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def warm_up(self) -> None:
        """Start the child now instead of on the first `grade`."""
        with self._lock:
            self._check_open()
            self._ensure_child()

    def close(self) -> None:
        """Kill the child and refuse further grades. Idempotent."""
        self._closed = True
        self._state.kill()  # interrupts a grade in flight in another thread
        with self._lock:
            self._finalizer()

    def __enter__(self) -> MathGrader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MathGrader is closed")

    def _ensure_child(self) -> None:
        state = self._state
        if state.proc is not None and state.proc.poll() is None:
            return
        if state.proc is not None:
            state.shutdown()
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD_SOURCE, str(os.getpid()), str(self.memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            bufsize=0,
            env=_child_env(),
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        state.proc = proc
        state.buf = b""
        if self._started:
            self.restarts += 1
        self._started += 1
        try:
            line = self._read_line(time.monotonic() + self.startup_timeout_s)
        except _ChildGone as err:
            code = proc.poll()
            state.shutdown()
            raise _ChildGone(f"math-verify child exited during start-up (exit code {code})") from err
        if line is None:
            state.shutdown()
            raise _ChildGone(f"math-verify child did not start within {self.startup_timeout_s:g}s")
        try:
            ready = json.loads(line)
        except ValueError:
            ready = {}
        if not ready.get("ready"):
            state.shutdown()
            raise _ChildGone(f"math-verify child sent an unexpected greeting: {line[:200]!r}")

    # -- protocol --------------------------------------------------------------

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the child, or None at the deadline; _ChildGone on EOF."""
        state = self._state
        proc = state.proc
        if proc is None or proc.stdout is None:
            raise _ChildGone("no child")
        fd = proc.stdout.fileno()
        poller = select.poll()  # not select.select: fds above 1023 are common in Ray workers
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while b"\n" not in state.buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                if not poller.poll(max(1, int(remaining * 1000) + 1)):
                    continue
                chunk = os.read(fd, 65536)
            except OSError as exc:
                raise _ChildGone(f"pipe error: {exc}") from exc
            if not chunk:
                raise _ChildGone("child closed its output")
            state.buf += chunk
            if len(state.buf) > _MAX_LINE_BYTES:
                raise _ChildGone("child sent an oversized reply")
        line, _, state.buf = state.buf.partition(b"\n")
        return line

    def _request(self, pred: str, gold: str) -> dict | None:
        """Send one request and wait for its reply: the reply, or None on timeout."""
        self._ensure_child()
        state = self._state
        state.next_id += 1
        rid = state.next_id
        data = (json.dumps({"id": rid, "pred": pred, "gold": gold}, ensure_ascii=False) + "\n").encode(
            "utf-8", "surrogatepass"
        )
        proc = state.proc
        assert proc is not None and proc.stdin is not None
        deadline = time.monotonic() + self.timeout_s
        try:
            view = memoryview(data)
            while view:
                n = proc.stdin.write(view)
                view = view[n or 0 :]
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise _ChildGone(f"could not write to child: {exc}") from exc
        while True:
            line = self._read_line(deadline)
            if line is None:
                return None
            try:
                reply = json.loads(line)
            except ValueError as exc:
                raise _ChildGone(f"unreadable reply {line[:200]!r}") from exc
            if reply.get("id") == rid:
                return reply
            # A stale or unmatched line: skip it and keep waiting.

    # -- grading ---------------------------------------------------------------

    def grade(self, response: str, reference: str) -> GradeResult:
        """Grade `response` against the LaTeX/plain `reference` (e.g. ``\\frac{14}{3}``).

        ``CORRECT``/``WRONG`` as math-verify decides; ``WRONG`` with
        ``extracted=None`` when the response holds no answer; ``ERROR`` when
        math-verify timed out (the child is killed), crashed, or could not parse
        the reference. Never raises for a bad response; raises RuntimeError if
        the grader was closed.
        """
        self._check_open()
        if not isinstance(response, str):
            return GradeResult(Verdict.ERROR, None, f"response is not a string: {type(response).__name__}")
        if not isinstance(reference, str) or not reference.strip():
            return GradeResult(Verdict.ERROR, None, f"empty or non-string reference: {reference!r}")
        if len(reference) > MAX_REFERENCE_CHARS:
            return GradeResult(Verdict.ERROR, None, f"reference longer than {MAX_REFERENCE_CHARS} chars")
        text = strip_reasoning(response)
        box = last_boxed(text)
        if box is not None:
            if not box.strip():
                return GradeResult(Verdict.WRONG, None, "empty boxed answer")
            if len(box) > MAX_BOXED_CHARS:
                return GradeResult(Verdict.WRONG, None, f"boxed answer too long ({len(box)} > {MAX_BOXED_CHARS} chars)")
            pred = "\\boxed{" + box + "}"
        else:
            pred = text[-MAX_TAIL_CHARS:]
            if not pred.strip():
                return GradeResult(Verdict.WRONG, None, "empty response")
        # Lone surrogates cannot cross the pipe as UTF-8; they are never part of an answer.
        pred = pred.encode("utf-8", "replace").decode("utf-8")
        gold = reference.strip().encode("utf-8", "replace").decode("utf-8")

        with self._lock:
            self._check_open()
            reply = None
            failure = ""
            for _attempt in range(2):  # a child that died between calls is restarted once
                try:
                    reply = self._request(pred, gold)
                except _ChildGone as exc:
                    failure = str(exc)
                    self._state.shutdown()
                    if self._closed:
                        return GradeResult(Verdict.ERROR, None, "MathGrader closed during grading")
                    continue
                except OSError as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                    self._state.shutdown()
                    continue
                if reply is None:
                    self._state.shutdown()  # kill the hung child; the next call starts a new one
                    return GradeResult(Verdict.ERROR, box, f"math-verify timed out after {self.timeout_s:g}s")
                break
            if reply is None:
                return GradeResult(Verdict.ERROR, box, f"math-verify child failed: {failure}")

        status = reply.get("status")
        if status == "ok":
            shown = box if box is not None else reply.get("extracted")
            if reply.get("correct"):
                return GradeResult(Verdict.CORRECT, shown, "equivalent to reference")
            return GradeResult(Verdict.WRONG, shown, "not equivalent to reference")
        if status == "no_answer":
            if box is not None:
                return GradeResult(Verdict.WRONG, box, "boxed answer could not be parsed")
            return GradeResult(Verdict.WRONG, None, "no answer found")
        if status == "bad_reference":
            return GradeResult(Verdict.ERROR, box, f"could not parse reference {reference[:200]!r}")
        return GradeResult(Verdict.ERROR, box, f"math-verify error: {reply.get('error', reply)}")


_default: MathGrader | None = None
_default_lock = threading.Lock()


def default_math_grader() -> MathGrader:
    """A process-wide MathGrader (5 s timeout), created on first use."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = MathGrader()
        return _default

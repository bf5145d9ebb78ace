"""A stand-in for vLLM's OpenAI-compatible server process, for tests of how served workers are
started, checked and stopped (conductor_rl/workers/serving.py) without loading a model.

    python -m conductor_rl.testing.fake_vllm_server PORT NAME...

It answers GET /health and GET /v1/models (listing the NAMEs) on 127.0.0.1:PORT, and starts a child
process of its own (`sleep`), as vLLM has its engine processes, which it stops on SIGTERM as vLLM
does. `command(port, *names)` is the command line that starts it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def command(port: int, *names: str) -> list[str]:
    return [sys.executable, "-m", "conductor_rl.testing.fake_vllm_server", str(port), *names]


def serve(port: int, names: list[str]) -> None:
    child = subprocess.Popen(["sleep", "300"])

    def stop(*_args: object) -> None:
        child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    print("engine child", child.pid, flush=True)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: object) -> None:
            pass

        def do_GET(self) -> None:
            known = self.path in ("/health", "/v1/models")
            body = b"" if self.path == "/health" else json.dumps({"data": [{"id": n} for n in names]}).encode()
            self.send_response(200 if known else 404)
            self.end_headers()
            self.wfile.write(body)

    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])

"""A real headless browser for tests: Debian's `chromium`, driven over the Chrome DevTools
Protocol (a websocket per page; `websockets`' synchronous client). Only what the tests use:
open a page, evaluate JavaScript, wait for a condition, take a screenshot."""

from __future__ import annotations

import base64
import itertools
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

LISTENING = re.compile(r"DevTools listening on (ws://[^\s]+)")


def find_chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    assert found, "no chromium: scripts/setup.sh installs it (apt-get install chromium) for the page's browser test"
    return found


class HeadlessChromium:
    def __init__(self, profile: Path, width: int = 1100, height: int = 1400) -> None:
        from websockets.sync.client import connect

        self.proc = subprocess.Popen(
            [
                find_chromium(),
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        port = None
        deadline = time.monotonic() + 60
        seen = []
        while port is None and time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}: {''.join(seen)[-2000:]}")
            seen.append(line)
            match = LISTENING.search(line)
            if match:
                port = int(match.group(1).split(":")[2].split("/")[0])
        assert port, f"chromium did not start its DevTools endpoint: {''.join(seen)[-2000:]}"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self.ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'", 30)

    def wait_for(self, condition: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout_s:g} s: {condition}")
            time.sleep(0.2)

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait(10)

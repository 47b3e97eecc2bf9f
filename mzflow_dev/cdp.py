"""A headless Chromium driven through the DevTools protocol (``websockets``), for the
plugin's click-through test (tests/test_airflow_ui.py) and the screenshots
(scripts/airflow_screenshot.py). No Playwright: it is not installed here, and the
few commands needed (navigate, evaluate in a frame, screenshot) are a page of code.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
MISSING = ("no headless Chromium on PATH (looked for " + ", ".join(CHROMIUM) + "): "
           "run scripts/ensure-chromium.sh (make test does)")


def find_chromium() -> str | None:
    return next((b for b in CHROMIUM if shutil.which(b)), None)


class Browser:
    """One page (tab) of a headless Chromium."""

    def __init__(self, ws: Any, pgid: int = 0):
        self.ws = ws
        self.pgid = pgid  # the browser's process group (its own session)
        self._id = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events arrive between answers: skip them
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})  # type: ignore[no-any-return]

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def frames(self) -> list[dict[str, Any]]:
        """The page's frames, the top one first: (id, url)."""
        out = []
        todo = [self.send("Page.getFrameTree")["frameTree"]]
        while todo:
            node = todo.pop(0)
            out.append(node["frame"])
            todo += node.get("childFrames", [])
        return out

    def evaluate(self, expression: str, frame_id: str | None = None) -> Any:
        """``expression``'s value in the frame (the top one by default). A sandboxed
        iframe is reached through an isolated world of its own."""
        params: dict[str, Any] = {"expression": expression, "returnByValue": True}
        if frame_id is not None:
            world = self.send("Page.createIsolatedWorld", frameId=frame_id, worldName="mzflow")
            params["contextId"] = world["executionContextId"]
        got = self.send("Runtime.evaluate", **params)
        if "exceptionDetails" in got:
            raise RuntimeError(f"{expression}: {got['exceptionDetails']}")
        return got["result"].get("value")

    def wait_for(self, what: str, check: Any, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = check()
            except RuntimeError as e:  # a frame navigated away mid-call
                last = e
            if last and not isinstance(last, Exception):
                return last
            time.sleep(0.5)
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}: {last!r}")

    def screenshot(self, out: Path) -> None:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        out.write_bytes(base64.b64decode(data))


@contextmanager
def chromium(binary: str, width: int = 1600, height: int = 1000) -> Iterator[Browser]:
    """A headless Chromium on a private profile and a free debugging port; stopped on
    exit with its process group (its own session): the binary may be a wrapper whose
    browser, zygotes and renderers outlived a terminate of the wrapper alone (two
    browsers were left running for an hour after the UI tests)."""
    from websockets.sync.client import connect

    profile = Path(tempfile.mkdtemp(prefix="mzflow-chromium-"))
    proc = subprocess.Popen([binary, "--headless", "--no-sandbox", "--disable-gpu",
                             "--hide-scrollbars", f"--window-size={width},{height}",
                             "--remote-debugging-port=0", f"--user-data-dir={profile}",
                             "about:blank"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{binary} did not start (exit {proc.poll()})")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            page = next(t for t in json.loads(r.read()) if t["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None) as ws:
            browser = Browser(ws, proc.pid)
            browser.send("Page.enable")
            yield browser
    finally:
        _stop_group(proc)
        shutil.rmtree(profile, ignore_errors=True)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group, then SIGKILL to whatever is left of it."""
    import os
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    proc.poll()

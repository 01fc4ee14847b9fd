"""A real JupyterLab, driven in headless Chromium, for tests/test_lab_browser.py.

:func:`lab_server` starts ``jupyter lab`` as ``make lab`` does (its ``JUPYTER_CONFIG_PATH`` and
settings overrides: ``scripts/jupyter/``), on a free port with a token, on a copy of the
notebooks, with the app exposed to the page (``--expose-app-in-browser``) and its own
settings, workspace and runtime folders. :class:`Browser` is headless Chromium over its DevTools
protocol (``websocket-client``), evaluating JavaScript in the page.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process ended ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def lab_server(notebooks: Path, tmp: Path):
    """``(base_url, token)`` of a JupyterLab serving ``notebooks``, configured as ``make lab``."""
    port, token = free_port(), "labtest"
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "scripts" / "jupyter"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTER_DATA_DIR": str(tmp / "data"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))}
    cmd = [str(BIN / "jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--ServerApp.token={token}", f"--notebook-dir={notebooks}", "--expose-app-in-browser",
           "--ServerApp.open_browser=False"]
    if hasattr(os, "getuid") and os.getuid() == 0:
        cmd.append("--allow-root")
    log = tmp / "lab.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=notebooks)
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/api/status?token={token}", proc, 120, log)
        yield base, token
    finally:
        _stop(proc)


class Browser:
    """Headless Chromium, one page, driven over the DevTools protocol."""

    def __init__(self, tmp: Path):
        import websocket

        binary = shutil.which(os.environ.get("CHROMIUM") or "chromium")
        if not binary:
            raise RuntimeError("headless Chromium is needed: `make browser` installs Debian's chromium "
                               "(or set CHROMIUM to a Chromium binary)")
        port = free_port()
        self._log = tmp / "chromium.log"
        with open(self._log, "w") as out:
            self.proc = subprocess.Popen(
                [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp / 'profile'}", f"--remote-debugging-port={port}",
                 "--window-size=1440,900", "about:blank"], stdout=out, stderr=subprocess.STDOUT)
        _wait_http(f"http://127.0.0.1:{port}/json/version", self.proc, 60, self._log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list") as r:
            page = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=600,
                                              suppress_origin=True)
        self._id = 0

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, script: str, timeout: float = 300):
        """The value of the JavaScript expression ``script`` (a promise is awaited), as JSON."""
        res = self.call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True,
                        timeout=int(timeout * 1000))
        if "exceptionDetails" in res:
            raise RuntimeError(f"in the page: {res['exceptionDetails']}")
        return res["result"].get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            _stop(self.proc)

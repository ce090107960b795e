"""A headless Chromium (Debian's ``chromium``) driven over the DevTools protocol with aiohttp's
websocket client: open a page, wait for a script's answer, read the console, take a
screenshot. Enough for the pages' tests (tests/test_web_browser.py) without selenium or a
browser download; used by docs/web.md's screenshots too."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """``async with Browser() as b: await b.open(url); await b.wait_for("js expr")``."""

    def __init__(self, width: int = 1300, height: int = 900) -> None:
        self.size = (width, height)
        self.console: list[str] = []
        self._ids = itertools.count(1)
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile = tempfile.mkdtemp(prefix="azserve-chromium-")

    async def __aenter__(self) -> Browser:
        exe = chromium_path()
        if exe is None:
            raise RuntimeError("no chromium on this machine")
        self._proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--remote-debugging-port=0", "--hide-scrollbars",
             f"--user-data-dir={self._profile}", f"--window-size={self.size[0]},{self.size[1]}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError("chromium did not start")
            await asyncio.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        self._http = aiohttp.ClientSession()
        async with self._http.get(f"http://127.0.0.1:{port}/json/list") as r:
            pages = [t for t in await r.json() if t["type"] == "page"]
        self._ws = await self._http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)
        self._reader = asyncio.create_task(self._read(), name="cdp-reader")
        await self.send("Page.enable")
        await self.send("Runtime.enable")
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._ws.close()
        await self._http.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    async def _read(self) -> None:
        async for msg in self._ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self._replies:
                self._replies.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"]["args"]
                self.console.append(
                    " ".join(str(a.get("value", a.get("description"))) for a in args)
                )
            elif data.get("method") == "Runtime.exceptionThrown":
                details = data["params"]["exceptionDetails"]
                self.console.append(
                    "exception: "
                    + str(details.get("exception", {}).get("description", details.get("text")))
                )

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        i = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[i] = fut
        await self._ws.send_str(json.dumps({"id": i, "method": method, "params": params}))
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def open(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def evaluate(self, expression: str) -> Any:
        out = await self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                              awaitPromise=True)  # fmt: skip
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """The first truthy value of ``expression``, polled; TimeoutError with the console."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(RuntimeError):
                value = await self.evaluate(expression)
                if value:
                    return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{expression!r} stayed false; console: {self.console}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> None:
        out = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(out["data"]))


__all__ = ["Browser", "chromium_path"]

"""Open-loop load generator for Slack interaction requests, run in its own process.

    python -m bench.loadgen SPEC.json OUT.json

SPEC: {"url", "secret", "rate", "warmup": [body, ...], "bodies": [body, ...], "timeout"}.
Request i of a phase is due at t0 + i/rate and is sent then whether or not earlier requests
were answered (open loop: a slow server cannot slow the arrivals down). Each request is
signed when it is sent, as Slack does (``X-Slack-Request-Timestamp`` and ``X-Slack-Signature``
over the exact body), over a pool of keep-alive HTTP/1.1 connections opened before the clock
starts. Latency counts from when the request was DUE, so the generator's own lateness is
charged too; ``lag`` (sent - due) is reported so it can be told apart.

A hand-rolled HTTP/1.1 client rather than aiohttp's: it adds far less per request, so the
figures show the server, not the client.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from slack_sandbox.signing import sign_request
from tests.support.paths import PROJECT_ROOT

USER_AGENT = "Slackbot 1.0 (+https://api.slack.com/robots)"
START_DELAY = 0.05  # seconds between scheduling the first request and its due time
PREOPENED = 24  # keep-alive connections opened before the clock starts


@dataclass
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class Pool:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[Connection] = []
        self.opened = 0

    async def open(self) -> Connection:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.opened += 1
        return Connection(reader, writer)

    async def acquire(self) -> Connection:
        return self.idle.pop() if self.idle else await self.open()

    def release(self, conn: Connection, keep: bool) -> None:
        if keep:
            self.idle.append(conn)
        else:
            conn.writer.close()

    def close(self) -> None:
        for conn in self.idle:
            conn.writer.close()
        self.idle.clear()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, keep-alive) of one HTTP/1.1 response; the body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name:
            headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection", "").lower() != "close"


class Generator:
    def __init__(self, url: str, secret: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.path = parts.path or "/"
        self.authority = parts.netloc
        self.pool = Pool(parts.hostname or "127.0.0.1", parts.port or 80)
        self.secret, self.timeout = secret, timeout

    def request_bytes(self, body: bytes) -> bytes:
        signed = sign_request(self.secret, int(time.time()), body)
        head = (
            f"POST {self.path} HTTP/1.1\r\nHost: {self.authority}\r\n"
            f"User-Agent: {USER_AGENT}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in signed.items())
            + f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def one(self, index: int, body: bytes, due: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        status, error = 0, ""
        try:
            async with asyncio.timeout(self.timeout):
                conn = await self.pool.acquire()
                conn.writer.write(self.request_bytes(body))
                status, keep = await read_response(conn.reader)
            self.pool.release(conn, keep)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        done = loop.time()
        return {
            "i": index,
            "latency": done - due,
            "lag": sent - due,
            "done_wall": time.time(),
            "status": status,
            "error": error,
        }

    async def phase(self, bodies: list[bytes], rate: float) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        t0 = loop.time() + START_DELAY
        tasks = []
        for i, body in enumerate(bodies):
            due = t0 + i / rate
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.one(i, body, due)))
        return list(await asyncio.gather(*tasks))

    async def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        conns = await asyncio.gather(*(self.pool.open() for _ in range(PREOPENED)))
        self.pool.idle.extend(conns)
        rate = float(spec["rate"])
        await self.phase([b.encode() for b in spec.get("warmup", [])], rate)
        started = time.time()
        samples = await self.phase([b.encode() for b in spec["bodies"]], rate)
        self.pool.close()
        return {"started_wall": started, "samples": samples, "connections": self.pool.opened}


async def run_in_subprocess(workdir: Path, spec: dict[str, Any], budget: float) -> dict[str, Any]:
    """Run a load in a child process (without blocking this event loop); its result."""
    spec_path, out_path = _write_spec(workdir, spec)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.loadgen", str(spec_path), str(out_path), cwd=PROJECT_ROOT
    )
    try:
        await asyncio.wait_for(proc.wait(), budget)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise RuntimeError(f"the load generator did not finish within {budget:g}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the load generator failed (exit {proc.returncode})")
    return _read_result(out_path)


def _write_spec(workdir: Path, spec: dict[str, Any]) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec), encoding="utf-8")
    return spec_path, workdir / "out.json"


def _read_result(path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return result


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    generator = Generator(spec["url"], spec["secret"], float(spec.get("timeout", 3.0)))
    result = asyncio.run(generator.run(spec))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

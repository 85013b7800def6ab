"""Test helpers: a uvicorn server in a thread on a free loopback port, a live tracker on SQLite built on
it, and a throwaway PostgreSQL."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn

from shared.net import free_port


class ServerThread:
    """Serve an ASGI app on 127.0.0.1:port until `stop()`; `start()` again serves on the same port."""

    def __init__(self, app_factory, port: int | None = None):
        self.app_factory, self.port = app_factory, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = None
        self.thread = None

    def start(self) -> ServerThread:
        config = uvicorn.Config(self.app_factory(), host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError(f"tracker test server did not start on {self.url}")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@contextmanager
def live_tracker(folder: Path, **app_options) -> Iterator[ServerThread]:
    """A tracker on SQLite in `folder` with one API token, served until the block ends: the
    ServerThread carries `url`, `token` and `store` (`app_options` go to `create_app`)."""
    from services.tracker.app import create_app
    from services.tracker.store import Store

    store = Store(f"sqlite:///{folder}/tracker.db")
    token = store.create_token("test")
    srv = ServerThread(lambda: create_app(store=store, **app_options)).start()
    srv.token, srv.store = token, store
    try:
        yield srv
    finally:
        srv.stop()
        store.engine.dispose()


def pg_bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


class PostgresCluster:
    """initdb + pg_ctl a cluster in a temp dir (as the `postgres` user when run as root)."""

    def __init__(self):
        self.bin = pg_bin_dir()
        self.dir = tempfile.mkdtemp(prefix="moelab-pg-")
        self.port = free_port()
        self.as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        cmd = [os.path.join(self.bin, args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> str:
        if self.as_postgres:
            shutil.chown(self.dir, "postgres", "postgres")
        data = os.path.join(self.dir, "data")
        self._run("initdb", "-D", data, "-A", "trust", "-U", "postgres")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} -c fsync=off -c max_connections=100"
        self._run("pg_ctl", "-D", data, "-w", "-l", os.path.join(self.dir, "log"), "-o", opts, "start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "tracker")
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/tracker"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", os.path.join(self.dir, "data"), "-m", "fast", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

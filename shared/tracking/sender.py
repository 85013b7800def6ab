"""The run's background thread: turns the buffer into batches and delivers them, never blocking `log`.

Every `flush_interval` seconds (or as soon as a batch's worth of points is buffered) the buffer is
cut into batches and sent in order behind the run's init. While the server cannot be reached each
op is appended to the spool and the spool is replayed with exponential back-off (capped at
`retry_max_s`); ops keep their order because nothing is sent directly while a spool exists. A
heartbeat every `heartbeat_s` seconds tells the server the process is alive: the server marks a
run whose heartbeats stop (a SIGKILL, a lost node) `crashed`. At the run's end the spool is
retried for the close window only if the server was reached at some point of the run (an outage
it may come back from); a server never reached gets one more try and the spool is left for
`moelab tracker sync`, so a run without a tracker does not end with a half-minute wait.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from shared.tracking.buffer import Buffer
from shared.tracking.spool import RejectedLog, Spool
from shared.tracking.transport import Transport, Unreachable, deliver


class Sender:
    def __init__(
        self,
        *,
        run_id: str,
        url: str,
        lock: threading.Condition,
        buffer: Buffer,
        transport: Transport | None,
        spool: Spool,
        rejected: RejectedLog,
        init_op: dict[str, Any],
        flush_interval: float,
        retry_max_s: float,
        heartbeat_s: float,
        max_batch_points: int,
        max_batch_bytes: int,
    ):
        self.run_id, self.url = run_id, url
        self.lock, self.buffer, self.transport = lock, buffer, transport
        self.spool, self.rejected = spool, rejected
        self.flush_interval, self.retry_max_s, self.heartbeat_s = flush_interval, retry_max_s, heartbeat_s
        self.max_batch_points, self.max_batch_bytes = max_batch_points, max_batch_bytes
        self.ops: list[dict[str, Any]] = [init_op]
        self.final_op: dict[str, Any] | None = None
        self.closing = False
        self.busy = False
        self.deadline_s = 30.0
        self._next_retry = 0.0
        self._backoff = 0.25
        self.reached = False  # the server took something from this run (an op or a heartbeat)
        self._points_direct = 0  # scalar points stored by direct sends (the spool counts its own)
        self._last_beat = time.time()
        self._warned = False
        self.thread = threading.Thread(target=self._loop, name=f"tracking-{run_id}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def idle(self) -> bool:
        """Nothing buffered, queued or in flight, and (online) nothing left in the spool."""
        with self.lock:
            quiet = not self.buffer.pending and not self.ops and not self.busy
        return quiet and (self.transport is None or not self.spool.exists())

    @property
    def points_stored(self) -> int:
        """Scalar points of this run the server acknowledged, sent directly or replayed from the spool."""
        return self._points_direct + self.spool.points_stored

    def close(self, final_op: dict[str, Any], timeout: float) -> None:
        """Send everything and then `final_op` (the finish), trying for up to `timeout` seconds."""
        self.deadline_s = timeout
        with self.lock:
            self.final_op, self.closing = final_op, True
            self.lock.notify()
        self.thread.join(timeout + 5.0)
        if self.transport:
            self.transport.close()

    def _loop(self) -> None:
        while True:
            with self.lock:
                if not self.closing and self.buffer.pending < self.max_batch_points:
                    self.lock.wait(self.flush_interval)
                self.busy = True
                self.ops.extend(self.buffer.take_batches(self.run_id, self.max_batch_points, self.max_batch_bytes))
                closing = self.closing
                if closing and self.final_op:
                    self.ops.append(self.final_op)
                ops, self.ops = self.ops, []
            try:
                self._deliver(ops, final=closing)
                if not closing:
                    self._heartbeat()
            finally:
                with self.lock:
                    self.busy = False
            if closing:
                return

    def _deliver(self, ops: list[dict[str, Any]], final: bool) -> None:
        if self.transport is None:  # offline: everything goes to the spool for `moelab tracker sync`
            for op in ops:
                self.spool.append(op)
            return
        deadline = time.time() + self.deadline_s
        if final and not self.reached:
            # A server this run never reached is not expected back within the close window: one
            # more try, then the spool is left for `moelab tracker sync` instead of waiting it out.
            self._next_retry = 0.0
        pending = list(ops)
        while pending and not self.spool.exists():
            try:
                self._points_direct += deliver(self.transport, pending[0], self.rejected.add)
                pending.pop(0)
                self.reached = True
            except Unreachable as exc:
                self._warn(exc)
                break
        for op in pending:
            self.spool.append(op)
        while self.spool.exists():
            if time.time() >= self._next_retry:
                try:
                    self.spool.replay(self.transport, self.rejected)
                    self._backoff = 0.25
                    self.reached = True
                except Unreachable as exc:
                    self._warn(exc)
                    self._backoff = min(self._backoff * 2, self.retry_max_s)
                    self._next_retry = time.time() + self._backoff
            if not final or time.time() >= deadline or not self.reached:
                return
            time.sleep(min(0.1, max(0.0, self._next_retry - time.time())))

    def _heartbeat(self) -> None:
        if self.transport is None or self.spool.exists() or time.time() - self._last_beat < self.heartbeat_s:
            return
        if self.transport.heartbeat(self.run_id):
            self._last_beat, self.reached = time.time(), True

    def _warn(self, exc: Exception) -> None:
        if not self._warned:
            self._warned = True
            print(f"tracking: cannot deliver to {self.url} ({exc}); spooling to {self.spool.path} and retrying",
                  file=sys.stderr)


"""The one thread that drives a generation engine for many callers.

Callers (a server's request handlers, on other threads) submit requests and are called back when each is
done; they may also hand the loop a function to run between two steps (``call``: prompt scoring for
``echo``), so that only this thread computes on the device. The thread steps the engine while anything
waits or decodes, and sleeps on ``engine.wake`` otherwise: no busy loop.

An engine step that raises leaves the engine in an unknown state: the loop stops, every request it holds
is called back (without a completion) and later submissions are refused with ``EngineFailed``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from marin_pipelines.inference.engine import Engine, Pending
from marin_pipelines.inference.sampling import SamplingParams

log = logging.getLogger(__name__)


class EngineFailed(RuntimeError):
    """The engine raised in a step; the loop no longer runs."""


class EngineLoop:
    """Steps ``engine`` on a thread of its own once ``start`` is called (or, in tests, on the caller's
    thread through ``turn``)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.failure: BaseException | None = None
        self._watched: list[tuple[Pending, Callable[[], None]]] = []
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self.engine.wake.set()
        if self._thread is not None:
            self._thread.join()

    def submit(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        on_done: Callable[[], None],
        on_text: Callable[[str], None] | None = None,
    ) -> Pending:
        """``engine.submit`` (its ValueError and QueueFull included), with ``on_done`` called once the
        request has ended, from this loop's thread or, for a request that ended already, from here."""
        if self.failure is not None:
            raise EngineFailed(f"the engine failed: {self.failure}")
        pending = self.engine.submit(prompt, params, on_text)
        with self._lock:  # the loop checks what is done under the same lock: no request is missed
            ended = pending.done.is_set()
            if not ended:
                self._watched.append((pending, on_done))
        if ended:
            on_done()
        return pending

    def cancel(self, pending: Pending) -> None:
        """End a request at the next step (its client went away)."""
        self.engine.cancel(pending)
        self.engine.wake.set()

    def call(self, function: Callable[[], Any]) -> Future:
        """Run ``function`` on the loop's thread before its next step; its result or error in the future."""
        if self.failure is not None:
            raise EngineFailed(f"the engine failed: {self.failure}")
        future: Future = Future()
        self._calls.put((function, future))
        self.engine.wake.set()
        return future

    def busy(self) -> bool:
        return not (self.engine.idle() and self._calls.empty())

    def turn(self) -> None:
        """The queued calls, one engine step, and the callbacks of the requests that ended."""
        while not self._calls.empty():
            function, future = self._calls.get_nowait()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function())
                except Exception as e:  # the caller's to report (a bad prompt to score)
                    future.set_exception(e)
        self.engine.step()
        with self._lock:
            ended = [(p, done) for p, done in self._watched if p.done.is_set()]
            self._watched = [(p, done) for p, done in self._watched if not p.done.is_set()]
        for _, on_done in ended:
            on_done()

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.engine.wake.clear()  # before looking: a submit from now on wakes the wait below
            if not self.busy():
                self.engine.wake.wait()
                continue
            try:
                self.turn()
            except Exception as e:
                log.exception("the engine failed; the server cannot generate any more")
                self._fail(e)
                return

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        with self._lock:
            watched, self._watched = self._watched, []
        for _, on_done in watched:
            on_done()
        while not self._calls.empty():
            _, future = self._calls.get_nowait()
            future.set_exception(EngineFailed(f"the engine failed: {error}"))

"""This process's helper: a child process that holds MLflow for it, so that a study's own process never
imports MLflow nor waits on its store (about 2 s of imports holding the interpreter lock at start-up, and
every store call after), and that writes its traces (`lme.tracking.traces`) on another core.

The helper is a plain child process (`python -c ...`, so it starts the same way under any launcher: Hydra's
basic one, joblib's loky workers, Ray, submitit), fed pickled messages on its stdin by a thread of ours, in the
order they were sent, and answering on its stdout. Two kinds of message:

- `send(message)`: handed over, never answered (a trace);
- `call(kind, payload)`: answered; the caller waits for the answer (its lock released: the study's other
  threads run meanwhile) and gets the value back, or `HelperError` with the helper's one-line reason. A call
  is answered after everything sent before it (a job's last traces before its run's end).

The helper ignores Ctrl-C (the study handles it, then makes its last calls) and stops at the end of its input,
when this process is gone. Its side is `lme.tracking.traces.helper_main`.

The helper runs at a lower CPU priority than the study (`NICENESS` more, `yield_cpu`): on a machine with
few cores its trace writing (10-12 ms of CPU per trace in MLflow's store) competed for them with the
study's event loop and memory building. It still gets every core the study leaves idle, and its answers
to calls are small. S x 3 seeds at L = 0.5 s on 2 cores, four alternated pairs: 63.8 s against 65.8 s on
average, each pair in its favour (README, fifth pass).
"""

from __future__ import annotations

import itertools
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, BinaryIO

from lme.util.errors import LmeError

_COMMAND = "from lme.tracking.traces import helper_main; helper_main()"


NICENESS = 10  # how much lower the helper's CPU priority is than the study's (Unix `nice`)


def yield_cpu() -> None:
    """In the helper: lower this process's CPU priority by `NICENESS` (nothing where the system has no `nice`)."""
    try:
        os.nice(NICENESS)
    except (AttributeError, OSError):  # Windows; a system that refuses it
        pass


class HelperError(LmeError):
    """A call the helper could not carry out (the reason is the helper's), or a helper that stopped."""


def frame(value: Any) -> bytes:
    """`value` pickled, with its length first."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return struct.pack("<Q", len(data)) + data


def read_frame(stream: BinaryIO) -> Any:
    """The next value `frame` wrote on `stream`; None at its end."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack("<Q", head)
    data = stream.read(size)
    return pickle.loads(data) if len(data) == size else None


class Helper:
    """The study's side of the helper process (see the module doc)."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where `lme` is, first on the helper's path
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.process = subprocess.Popen([sys.executable, "-c", _COMMAND], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._feeder = threading.Thread(target=self._feed, name="lme-helper-feeder", daemon=True)
        self._feeder.start()
        self._ids = itertools.count(1)
        self._calling = threading.Lock()  # one call waits for its answer at a time
        # Answers are read by a thread of ours: a Ctrl-C in a waiting call never cuts a frame in half.
        self._answers: queue.Queue[tuple[int, bool, Any] | None] = queue.Queue()
        threading.Thread(target=self._collect, name="lme-helper-answers", daemon=True).start()

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, message: tuple[str, Any]) -> None:
        """Hand `message` to the helper, after everything sent before it; no answer."""
        self._outbox.put(frame(message))

    def call(self, kind: str, payload: Any) -> Any:
        """Ask the helper and wait for its answer (see the module doc). An answer left unread by a call that was
        interrupted (Ctrl-C) is skipped by the next."""
        with self._calling:
            if not self.alive():
                raise HelperError(f"lme's helper process stopped (exit status {self.process.poll()}) before it was "
                                  f"asked ({kind}); what it held for this process is lost")
            number = next(self._ids)
            self._outbox.put(frame(("call", (number, kind, payload))))
            while True:
                answer = self._answers.get()
                if answer is None:  # the helper's output ended: it stopped
                    self._answers.put(None)  # for any later call too
                    try:
                        status = self.process.wait(5)
                    except subprocess.TimeoutExpired:
                        status = None
                    raise HelperError(f"lme's helper process stopped (exit status {status}) before it answered "
                                      f"({kind}); what it held for this process is lost")
                answered, ok, value = answer
                if answered == number:  # an earlier call's answer, left by a Ctrl-C, is skipped
                    break
        if not ok:
            raise HelperError(value)
        return value

    def _collect(self) -> None:
        try:
            while (answer := read_frame(self.process.stdout)) is not None:  # type: ignore[arg-type]
                self._answers.put(answer)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # a helper killed mid-answer
            pass
        self._answers.put(None)

    def _feed(self) -> None:
        stdin = self.process.stdin
        while (data := self._outbox.get()) is not None:
            try:
                stdin.write(data)  # type: ignore[union-attr]
                stdin.flush()  # type: ignore[union-attr]
            except (BrokenPipeError, OSError, ValueError):  # the helper is gone: a call says so
                return

    def stop(self, timeout: float = 30.0) -> int | None:
        """End the helper's input and wait for it to finish what it was sent; its exit status (None if it is
        still running after `timeout` seconds)."""
        self._outbox.put(None)
        self._feeder.join(timeout)
        try:
            self.process.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


_HELPERS: list[Helper] = []  # this process's helper, once started
_LOCK = threading.Lock()


def helper() -> Helper:
    """This process's helper, started on first use (and again if it stopped)."""
    with _LOCK:
        if not (_HELPERS and _HELPERS[0].alive()):
            _HELPERS[:] = [Helper()]
        return _HELPERS[0]


def running_helper() -> Helper | None:
    """This process's helper if one is running (none is started)."""
    with _LOCK:
        return _HELPERS[0] if _HELPERS and _HELPERS[0].alive() else None


def stop_helper() -> None:
    """Stop this process's helper, if one runs, once it has done what it was sent (a later use starts another)."""
    with _LOCK:
        stopping, _HELPERS[:] = list(_HELPERS), []
    for running in stopping:
        running.stop()


def answer(stream: BinaryIO, number: int, ok: bool, value: Any) -> None:
    """The helper's side: answer call `number` on `stream` (the value, or the reason it failed)."""
    stream.write(frame((number, ok, value)))
    stream.flush()

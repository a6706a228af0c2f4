"""Progress on stderr: a tqdm bar on a terminal, a one-line report every 30 s otherwise.

    with progress("[bm25 seed=1]", len(questions), "questions") as bar:
        for question in questions:
            ...
            bar.update()

What a `Progress` shows depends on where it writes:

- a terminal (`stream.isatty()`): a tqdm bar on that stream;
- anything else (a log file, a pipe, a batch job's output): one line every
  `interval_s` seconds, and a last line at `close()` when it ran for at least
  one interval, e.g.

      lme: [bm25 seed=1] 120/498 questions (24.1%), 3.20 questions/s, ETA 1m58s
      lme: semantic: embedding turns with minilm-packaged 12,000/188,991 texts (6.3%), 41.5 texts/s, ETA 1h08m
      lme: fetch longmemeval_s_cleaned.json 120.5/264.4 MB (45.6%), 8.1 MB/s, ETA 18s

  The lines come from the updates and from a background timer thread, so a
  single step that lasts minutes still reports every interval (with the count
  it has); the thread ends at `close()`. Interval 0 writes a line at every update.
- disabled (the caller's `enabled=False`, or `set_enabled(False)`, which the
  config key `progress: false` sets): nothing at all.

The rate is the average since the start (updates counted from `initial`, so a
resumed job's earlier questions do not inflate it); the ETA is what is left at
that rate. `update()` costs a lock and a clock read, a microsecond or so.

`LME_PROGRESS_INTERVAL_S` overrides the 30 s default interval (tests use 0.2).

A terminal that reports no width (a pseudo-terminal whose size was never set) gets bars 80 columns wide.
The libraries' own bars (huggingface_hub, transformers' "Loading weights") are turned off
(`quiet_library_bars`, at lme's start and when a model loads), so only lme's bars and lines show.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from lme.util.errors import LmeError

INTERVAL_ENV = "LME_PROGRESS_INTERVAL_S"
DEFAULT_INTERVAL_S = 30.0
PREFIX = "lme: "
BYTES = "bytes"  # the unit whose counts are shown scaled (kB, MB, GB)

_enabled = True


def set_enabled(flag: bool) -> None:
    """The master switch: False turns every progress bar and line of this process off."""
    global _enabled
    _enabled = bool(flag)


def is_enabled() -> bool:
    return _enabled


@contextmanager
def enabled_as(flag: bool) -> Iterator[None]:
    """`set_enabled(flag)` for the duration of a `with` block, then the previous setting again."""
    previous = _enabled
    set_enabled(flag)
    try:
        yield
    finally:
        set_enabled(previous)


def config_flag(value: Any, key: str = "progress") -> bool:
    """The config key `progress` (true/false) as a bool; one sentence for anything else."""
    if isinstance(value, bool):
        return value
    raise LmeError(f"{key} must be true or false, not {value!r}.")


def default_interval() -> float:
    """`LME_PROGRESS_INTERVAL_S` when set to a number >= 0, else 30 s."""
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if text:
        try:
            value = float(text)
        except ValueError:
            return DEFAULT_INTERVAL_S
        if math.isfinite(value) and value >= 0:
            return value
    return DEFAULT_INTERVAL_S


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


FALLBACK_COLUMNS, FALLBACK_ROWS = 80, 24  # a bar's room on a terminal that reports no size


def _columns(stream: Any) -> int:
    """The terminal's width in columns; 0 when it reports none (a pseudo-terminal whose size was never set,
    as some terminal emulators and tools open, says 0 x 0: tqdm drew nothing there, not even the count)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


# Libraries' own progress bars (huggingface_hub's downloads, transformers' "Loading weights"), which would
# draw over lme's bars and lines; lme says what a job does itself.
LIBRARY_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"


def quiet_library_bars() -> None:
    """Turn the libraries' own progress bars off for this process and the processes it starts: huggingface_hub's
    (and so transformers', which follows it) through `HF_HUB_DISABLE_PROGRESS_BARS=1`, and, when they are imported
    already, through their switches. lme's own bars (tqdm directly) are not affected. A user who set
    `HF_HUB_DISABLE_PROGRESS_BARS` keeps that setting. Imports nothing."""
    if os.environ.get(LIBRARY_BARS_ENV, "").strip() not in ("", "1"):
        return
    os.environ[LIBRARY_BARS_ENV] = "1"
    hub = sys.modules.get("huggingface_hub.utils")
    if hub is not None and callable(getattr(hub, "disable_progress_bars", None)):
        hub.disable_progress_bars()
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None and callable(getattr(transformers_logging, "disable_progress_bar", None)):
        transformers_logging.disable_progress_bar()


# ------------------------------------------------------------------------------------------ formatting


def format_duration(seconds: float) -> str:
    """18s, 1m58s, 1h08m, 2d03h (to the nearest second)."""
    total = max(0, round(seconds)) if math.isfinite(seconds) else 0
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


_BYTE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def _byte_scale(value: float) -> tuple[float, str]:
    for size, name in _BYTE_UNITS:
        if abs(value) >= size:
            return size, name
    return 1.0, "B"


def format_rate(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


_TQDM: Any = None


def _tqdm_class() -> Any:
    """tqdm without its monitor thread (a thread that outlives the bar; the bars here update often)."""
    global _TQDM
    if _TQDM is None:
        from tqdm import tqdm

        class Tqdm(tqdm):  # type: ignore[misc, type-arg]
            monitor_interval = 0

        _TQDM = Tqdm
    return _TQDM


class Progress:
    """A count towards an optional total, shown as a bar, as periodic lines, or not at all (see the module).

    Made by `progress()`; use it as a context manager or call `close()`.
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        unit: str,
        mode: str,
        stream: TextIO,
        interval_s: float,
        initial: int = 0,
    ) -> None:
        self.label = label
        self.unit = unit
        self.mode = mode  # "off" | "bar" | "lines"
        self.stream = stream
        self.interval_s = interval_s
        self.total = total
        self.n = initial
        self.initial = initial
        self.started = time.monotonic()
        self.lines = 0  # lines written (mode "lines")
        self.closed = False
        self._lock = threading.Lock()
        self._next_at = self.started + interval_s
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if mode == "bar":
            tqdm = _tqdm_class()
            options: dict[str, Any] = {"unit": "B", "unit_scale": True, "unit_divisor": 1000} if unit == BYTES else {
                "unit": f" {unit}"}
            width: dict[str, Any] = ({"dynamic_ncols": True} if _columns(stream) > 0
                                     else {"ncols": FALLBACK_COLUMNS, "nrows": FALLBACK_ROWS})
            self._bar = tqdm(total=total, initial=initial, desc=label, file=stream, **width, **options)
        elif mode == "lines" and interval_s > 0:
            self._thread = threading.Thread(target=self._tick, name="lme-progress", daemon=True)
            self._thread.start()

    def __repr__(self) -> str:
        return f"Progress({self.label!r}, {self.n}/{self.total} {self.unit}, mode={self.mode})"

    # -- counting ------------------------------------------------------------------------------

    def update(self, n: int = 1) -> None:
        """Count `n` more (negative to take some back)."""
        if self.mode == "off":
            self.n += n
            return
        with self._lock:
            self.n += n
            if self._bar is not None:
                self._bar.update(n)
                return
            if self.closed:
                return
            now = time.monotonic()
            if now >= self._next_at:
                self._emit_locked(now)

    def set_total(self, total: int | None) -> None:
        with self._lock:
            self.total = total
            if self._bar is not None:
                self._bar.total = total
                self._bar.refresh()

    def write(self, text: str) -> None:
        """Write a line of your own to the stream without breaking the bar (tqdm clears and redraws it)."""
        with self._lock:
            if self._bar is not None and not self.closed:
                self._bar.write(text, file=self.stream)
                return
            try:
                self.stream.write(text + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        """Stop the timer and finish the display: the bar's last state, or a last line when it ran an interval."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            self._stop.set()
            if self._bar is not None:
                self._bar.close()
            elif self.mode == "lines":
                now = time.monotonic()
                if self.lines or now - self.started >= self.interval_s:
                    self._emit_locked(now, final=True)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- lines ---------------------------------------------------------------------------------

    def _tick(self) -> None:
        while True:
            with self._lock:
                if self.closed:
                    return
                now = time.monotonic()
                if now >= self._next_at:
                    self._emit_locked(now)
                delay = self._next_at - now
            if self._stop.wait(max(delay, 0.001)):
                return

    def _emit_locked(self, now: float, final: bool = False) -> None:
        self._next_at = now + self.interval_s
        try:
            self.stream.write(PREFIX + self.line(now, final) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed or broken stream: progress is never worth a crash
            pass
        self.lines += 1

    def _amount(self, value: float, total: float | None) -> str:
        if self.unit == BYTES:
            size, name = _byte_scale(total if total else value)
            shown = f"{value / size:.1f}" if size > 1 else f"{value:.0f}"
            if total is None:
                return f"{shown} {name}"
            whole = f"{total / size:.1f}" if size > 1 else f"{total:.0f}"
            return f"{shown}/{whole} {name}"
        return f"{value:,}" + (f"/{total:,}" if total is not None else "") + f" {self.unit}"

    def _rate(self, rate: float) -> str:
        if self.unit == BYTES:
            size, name = _byte_scale(rate)
            return f"{rate / size:.1f} {name}/s"
        return f"{format_rate(rate)} {self.unit}/s"

    def line(self, now: float | None = None, final: bool = False) -> str:
        """The report as of `now` (without the `lme: ` prefix)."""
        now = time.monotonic() if now is None else now
        elapsed = max(now - self.started, 1e-9)
        n, total = self.n, self.total
        parts = [f"{self.label} {self._amount(n, total)}"]
        if total:
            parts[0] += f" ({100.0 * n / total:.1f}%)"
        rate = (n - self.initial) / elapsed
        parts.append(self._rate(max(rate, 0.0)))
        if final:
            parts.append(f"in {format_duration(elapsed)}")
        elif total is not None:
            left = total - n
            parts.append(f"ETA {format_duration(left / rate)}" if rate > 0 and left >= 0 else "ETA unknown")
        return ", ".join(parts)


def progress(
    label: str,
    total: int | None,
    unit: str,
    enabled: bool | None = None,
    stream: TextIO | None = None,
    interval_s: float | None = None,
    *,
    initial: int = 0,
    bar: bool | None = None,
) -> Progress:
    """A `Progress` for `label`, counting `unit` (`"bytes"` is shown scaled) towards `total` (None: unknown).

    `enabled`: None follows `set_enabled`; True or False is this caller's own switch, and
    `set_enabled(False)` still turns it off. `stream`: default `sys.stderr` (as it is at the
    call). `interval_s`: default `LME_PROGRESS_INTERVAL_S` or 30 s. `initial`: already done
    before this start (counted, but not in the rate). `bar`: None a tqdm bar on a terminal
    and lines elsewhere; True a bar wherever it writes; False lines even on a terminal.
    """
    stream = sys.stderr if stream is None else stream
    interval = default_interval() if interval_s is None else max(0.0, float(interval_s))
    on = _enabled and (enabled is None or bool(enabled))
    if not on:
        mode = "off"
    elif bar is None:
        mode = "bar" if _is_tty(stream) else "lines"
    else:
        mode = "bar" if bar else "lines"
    return Progress(label, total, unit, mode, stream, interval, initial=initial)

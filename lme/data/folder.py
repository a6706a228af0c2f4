"""The data folder (`data_dir`, `LME_DATA_DIR`): where `lme data fetch` puts, and every command finds,
LongMemEval's files, the judge templates and the reference study's instructions file.

What is looked for, and where (`ITEMS`; `candidates` gives the exact order):

| item | file | also in |
|---|---|---|
| `s`, `m`, `oracle` | `longmemeval_s_cleaned`, `longmemeval_m_cleaned`, `longmemeval_oracle` + `.json`, `.json.xz` or `.json.gz` | `longmemeval/` |
| `templates` | `judge_templates.json` (as `lme data fetch templates` writes it, or a copy of the same form) | `longmemeval/` |
| `instructions` | `study_instructions.json` (`instructions=study`) | `oh_study/` |
| `locomo` | `locomo10` + `.json`, `.json.xz` or `.json.gz` (`dataset=locomo`) | `locomo/` |

The folder itself first, then its named subfolder, so that a folder laid out as `DATA/longmemeval/...`,
`DATA/oh_study/...` (one folder per source) works as well as one flat folder; within a folder `.json`
(what `lme data fetch` writes) first, then `.json.xz`, then `.json.gz`. The first that exists is the
one every command uses (`data_file`, the configs' `${lme_data_file:${data_dir},s}`); when none does, the
path `lme data fetch` would write, so that the command's missing-file sentence (`missing_sentence`)
names the folder it looked in and the command that gets the file.

Dataset names (`short_name`): a file whose stem is an official file's (`longmemeval_s_cleaned.json.xz`
wherever it lies) is named by its short name (`s`), however it was chosen (`dataset=s` or
`dataset.path=...`); any other file by its stem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath

DATA_SUFFIXES: tuple[str, ...] = (".json", ".json.xz", ".json.gz")  # the order a folder is searched in
_COMPRESSION = (".gz", ".xz", ".bz2", ".zst")
_FORMATS = (".json", ".jsonl")


@dataclass(frozen=True)
class DataItem:
    """One file the data folder holds."""

    key: str  # s | m | oracle | templates | instructions
    stem: str  # the file's name without its suffix
    suffixes: tuple[str, ...]  # the suffixes accepted, in the order they are preferred
    subfolder: str  # the one subfolder looked in after the folder itself
    what: str  # how a sentence names it
    setting: str  # the setting that points at a file elsewhere
    command: str | None  # the command that puts it into the folder (None: the user supplies it)

    @property
    def filename(self) -> str:
        """The name `lme data fetch` writes (the first suffix)."""
        return self.stem + self.suffixes[0]

    @property
    def get(self) -> str:
        """How to get it into the folder, for sentences."""
        if self.command:
            return f"run `{self.command}`"
        return f"copy the study's {self.filename} there (lme never ships its texts)"


ITEMS: dict[str, DataItem] = {
    "s": DataItem("s", "longmemeval_s_cleaned", DATA_SUFFIXES, "longmemeval", "LongMemEval-S file", "dataset.path=FILE",
                  "python -m lme data fetch s"),
    "m": DataItem("m", "longmemeval_m_cleaned", DATA_SUFFIXES, "longmemeval", "LongMemEval-M file", "dataset.path=FILE",
                  "python -m lme data fetch m --record-digest"),
    "oracle": DataItem("oracle", "longmemeval_oracle", DATA_SUFFIXES, "longmemeval", "LongMemEval oracle file",
                       "dataset.path=FILE", "python -m lme data fetch oracle --record-digest"),
    "templates": DataItem("templates", "judge_templates", (".json",), "longmemeval", "judge templates file",
                          "judge.templates_path=FILE (or LME_JUDGE_TEMPLATES)", "python -m lme data fetch templates"),
    "locomo": DataItem("locomo", "locomo10", DATA_SUFFIXES, "locomo", "LoCoMo file", "dataset.path=FILE",
                       "python -m lme data fetch locomo"),
    "instructions": DataItem("instructions", "study_instructions", (".json",), "oh_study",
                             "study instructions file (instructions=study)", "instructions.source=FILE (or LME_STUDY_INSTRUCTIONS)",
                             None),
}
DATASET_KEYS: tuple[str, ...] = ("s", "m", "oracle")
SAMPLE_STEM = "longmemeval_sample"  # the bundled sample (lme.data.sample.SAMPLE_PATH), never in the data folder
# An official file's stem -> the dataset's short name (runs `<design>-<dataset>-seed<N>`, params, reports).
SHORT_NAMES: dict[str, str] = {**{ITEMS[key].stem: key for key in DATASET_KEYS}, SAMPLE_STEM: "sample",
                               ITEMS["locomo"].stem: "locomo"}


def item(key: str) -> DataItem:
    from lme.util.errors import LmeError

    try:
        return ITEMS[str(key)]
    except KeyError:
        raise LmeError(f"unknown data-folder item {key!r} (known: {', '.join(ITEMS)}).") from None


def candidates(data_dir: str | Path, key: str) -> list[Path]:
    """Every path looked at for `key`, in order: the folder, then its subfolder; `.json` before `.json.xz`
    before `.json.gz`."""
    wanted = item(key)
    root = Path(str(data_dir)).expanduser()
    return [folder / (wanted.stem + suffix) for folder in (root, root / wanted.subfolder) for suffix in wanted.suffixes]


def locate(data_dir: str | Path, key: str) -> Path | None:
    """The first of `candidates` that exists (a dangling link counts: its reader says what is wrong), else None."""
    return next((path for path in candidates(data_dir, key) if os.path.lexists(path)), None)


def default_path(data_dir: str | Path, key: str) -> Path:
    """Where `lme data fetch` puts `key`: the folder itself, `.json`."""
    return Path(str(data_dir)).expanduser() / item(key).filename


def looked_in(data_dir: str | Path, key: str) -> str:
    """`longmemeval_s_cleaned.json, .json.xz or .json.gz in /d or /d/longmemeval` (for sentences)."""
    wanted = item(key)
    root = Path(str(data_dir)).expanduser()
    names = [wanted.filename, *wanted.suffixes[1:]]
    named = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"{named} in {root} or {root / wanted.subfolder}"


def missing_sentence(data_dir: str | Path, key: str) -> str:
    """One sentence for a file the folder lacks: what, where it was looked for, how to get it."""
    wanted = item(key)
    return (f"no {wanted.what} in the data folder {Path(str(data_dir)).expanduser()} (looked for "
            f"{looked_in(data_dir, key)}); {wanted.get}, or set {wanted.setting}.")


_MISSING: dict[Path, tuple[Path, str]] = {}  # a path `data_file` gave for a file the folder lacks -> (folder, key)


def data_file(data_dir: str | Path, key: str) -> Path:
    """The file every command uses for `key`: `locate`'s, or `default_path` when the folder holds none (remembered,
    so that whoever finds it missing can say where it was looked for: `missing_in_folder`)."""
    found = locate(data_dir, key)
    if found is not None:
        return found
    path = default_path(data_dir, key)
    _MISSING[path] = (Path(str(data_dir)).expanduser(), key)
    return path


def missing_in_folder(path: str | Path | None) -> str | None:
    """`missing_sentence` for `path` when it is what the data folder gave for a file it lacks and it is still
    missing; None for any other path (a file named on the command line is reported as such)."""
    if path is None:
        return None
    candidate = Path(str(path)).expanduser()
    entry = _MISSING.get(candidate)
    if entry is None or os.path.lexists(candidate):
        return None
    return missing_sentence(*entry)


def data_stem(path: object) -> str:
    """The file name of `path` without `.json`/`.jsonl` and a compression suffix ("" for no path)."""
    if path is None:
        return ""
    name = PurePath(str(path).strip().rstrip("/\\")).name
    stem = name
    for suffix in _COMPRESSION:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    for suffix in _FORMATS:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    return stem or name


def short_name(path: object, default_stem: object = None, short: object = None) -> str:
    """A dataset's name: the short name of an official file (`s` for any `longmemeval_s_cleaned.json*`), `short`
    for the group's own file (stem `default_stem`), else the file's stem."""
    stem = data_stem(path)
    if stem in SHORT_NAMES:
        return SHORT_NAMES[stem]
    if (not stem or stem == str(default_stem)) and short is not None:
        return str(short)
    return stem


def content_sha256(path: str | Path) -> str:
    """SHA-256 of the JSON a data file holds: of its bytes for `.json`, of its decompressed bytes for `.json.xz`
    and `.json.gz` (lme's pins are of the official, uncompressed `.json`), read in chunks."""
    import gzip
    import hashlib
    import lzma

    path = Path(path)
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix.lower(), open)
    digest = hashlib.sha256()
    with opener(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

"""OmegaConf resolvers lme's configs use; registered once, on import.

- `${lme_sample_path:}`: the bundled synthetic sample's path;
- `${lme_stem:PATH}`: a data file's name without its directory and its `.json` / `.jsonl` suffix,
  after any compression suffix (`.gz`, `.xz`, `.bz2`, `.zst`): `/d/longmemeval_s_cleaned.json.xz`
  -> `longmemeval_s_cleaned`;
- `${lme_dataset_name:PATH,DEFAULT_STEM,SHORT}`: a dataset's name as params, errors, estimates and
  reports show it: `SHORT` (`s`, `sample`, ...) while PATH is the group's own file (its stem is
  DEFAULT_STEM, wherever `data_dir` puts it, compressed or not), else PATH's stem, so that
  `dataset.path=/x/foo.json.xz` is reported as dataset `foo`, never as the group it replaced.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from omegaconf import OmegaConf

_COMPRESSION = (".gz", ".xz", ".bz2", ".zst")
_FORMATS = (".json", ".jsonl")


def _sample_path() -> str:
    from lme.data.sample import SAMPLE_PATH

    return str(SAMPLE_PATH)


def data_stem(path: Any) -> str:
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


def dataset_name(path: Any, default_stem: Any, short: Any) -> str:
    """`short` while `path` is the group's own file (stem `default_stem`), else the stem of `path`."""
    stem = data_stem(path)
    if not stem or stem == str(default_stem):
        return str(short)
    return stem


def register() -> None:
    if not OmegaConf.has_resolver("lme_sample_path"):
        OmegaConf.register_new_resolver("lme_sample_path", _sample_path)
    if not OmegaConf.has_resolver("lme_stem"):
        OmegaConf.register_new_resolver("lme_stem", data_stem)
    if not OmegaConf.has_resolver("lme_dataset_name"):
        OmegaConf.register_new_resolver("lme_dataset_name", dataset_name)


register()

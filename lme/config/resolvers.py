"""OmegaConf resolvers lme's configs use; registered once, on import.

- `${lme_sample_path:}`: the bundled synthetic sample's path;
- `${lme_stem:PATH}`: a data file's name without its directory and its `.json` / `.jsonl` suffix,
  after any compression suffix (`.gz`, `.xz`, `.bz2`, `.zst`): `/d/longmemeval_s_cleaned.json.xz`
  -> `longmemeval_s_cleaned`;
- `${lme_dataset_name:PATH,DEFAULT_STEM,SHORT}`: a dataset's name as params, errors, estimates and
  reports show it: an official file's short name wherever it lies and however it was chosen
  (`longmemeval_s_cleaned.json.xz` is `s` under `dataset=s` and under `dataset.path=...` alike),
  `SHORT` while PATH is the group's own file (stem DEFAULT_STEM), else PATH's stem, so that
  `dataset.path=/x/foo.json.xz` is reported as dataset `foo`, never as the group it replaced;
- `${lme_data_file:DATA_DIR,KEY}`: the data folder's file for KEY (`s`, `m`, `oracle`, `templates`,
  `instructions`), in any accepted compression, in DATA_DIR or its subfolder (`lme.data.folder`);
- `${lme_text:PATH}`: the text of a UTF-8 file, e.g. `${lme_text:instructions/pipeline/base.txt}`
  (`text_file` gives the rules: where PATH is looked for, and the one trailing newline dropped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf


def _sample_path() -> str:
    from lme.data.sample import SAMPLE_PATH

    return str(SAMPLE_PATH)


def data_stem(path: Any) -> str:
    """The file name of `path` without `.json`/`.jsonl` and a compression suffix ("" for no path)."""
    from lme.data.folder import data_stem as stem

    return stem(path)


def dataset_name(path: Any, default_stem: Any, short: Any) -> str:
    """An official file's short name wherever it lies (`s` for any `longmemeval_s_cleaned.json*`), `short` for the
    group's own file (stem `default_stem`), else the stem of `path` (`lme.data.folder.short_name`)."""
    from lme.data.folder import short_name

    return short_name(path, default_stem, short)


def data_file(data_dir: Any, key: Any) -> str:
    """`${lme_data_file:${data_dir},KEY}`: the data folder's file for KEY (`s`, `m`, `oracle`, `templates`,
    `instructions`): the first of its accepted names that exists there or in its subfolder, else where
    `lme data fetch` puts it (`lme.data.folder.data_file`)."""
    from lme.data.folder import data_file as located

    return str(located(str(data_dir), str(key)))


def text_file(path: Any, config_root: Path | None = None, cwd: Path | None = None) -> str:
    """The text of the UTF-8 file `path`, less ONE trailing newline: a prompt is kept in a `.txt` file
    as its exact text followed by a single "\n" (what editors add), which is dropped, so the text
    ends as written (a text meant to end with a newline is written with two). Line endings are read
    as `\n` (a CRLF checkout gives the same text); nothing else is changed.

    Where it is looked for: an absolute `path` as is; a relative one under the config root
    (`lme.config_root()`, `config_root` here), else under the current directory (`cwd`), so a
    design of one's own outside the config root names its files by absolute path or by a path from
    where lme runs. A missing or non-UTF-8 file raises `LmeError`, one sentence naming both."""
    from lme import CONF_DIR
    from lme.util.errors import LmeError

    root = Path(config_root if config_root is not None else CONF_DIR)
    here = Path(cwd if cwd is not None else Path.cwd())
    name = str(path).strip() if path is not None else ""
    given = Path(name).expanduser()
    candidates = [given] if given.is_absolute() else [root / given, here / given]
    found = next((candidate for candidate in candidates if name and candidate.is_file()), None)
    if found is None:
        where = "" if given.is_absolute() else f" under the config root {root} or the current directory {here}"
        raise LmeError(f"lme_text: no text file {name!r}{where}"
                       f"{'; the config root is ' + str(root) if given.is_absolute() else ''}.")
    try:
        with open(found, encoding="utf-8", newline=None) as handle:
            text = handle.read()
    except UnicodeDecodeError as exc:
        raise LmeError(f"lme_text: text file {str(found)!r} is not UTF-8 (byte {exc.start}); "
                       f"the config root is {root}.") from None
    except OSError as exc:
        raise LmeError(f"lme_text: text file {str(found)!r} cannot be read ({exc.strerror or type(exc).__name__}); "
                       f"the config root is {root}.") from None
    return text.removesuffix("\n")


def _text(path: Any) -> str:
    """`${lme_text:PATH}`: one argument only (`text_file`'s others are for tests)."""
    return text_file(path)


def register() -> None:
    if not OmegaConf.has_resolver("lme_sample_path"):
        OmegaConf.register_new_resolver("lme_sample_path", _sample_path)
    if not OmegaConf.has_resolver("lme_stem"):
        OmegaConf.register_new_resolver("lme_stem", data_stem)
    if not OmegaConf.has_resolver("lme_dataset_name"):
        OmegaConf.register_new_resolver("lme_dataset_name", dataset_name)
    if not OmegaConf.has_resolver("lme_data_file"):
        OmegaConf.register_new_resolver("lme_data_file", data_file)
    if not OmegaConf.has_resolver("lme_text"):
        OmegaConf.register_new_resolver("lme_text", _text)


register()

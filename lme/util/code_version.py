"""Which code made a result: the git commit and dirty flag of lme's checkout and the installed versions of the
packages a result depends on, read without importing any of them.

Two readers: a preregistration record (`lme.provenance.prereg.code_version`, `build_record`'s `packages`) and every MLflow
run's tags (`code_tags`, computed once per process: about 10-30 ms of `git`, nothing imported).
"""

from __future__ import annotations

import functools
import platform
import subprocess
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from lme import PACKAGE_DIR, __version__

# What a run's result depends on: lme itself, the model gateway, MLflow, Hydra and the embedding stack.
RUN_PACKAGES: tuple[str, ...] = ("lme", "litellm", "mlflow", "hydra-core", "sentence-transformers", "onnxruntime",
                                 "torch")
NOT_INSTALLED = "not installed"

GIT_COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own: the run page shows it as the Git commit
GIT_DIRTY_TAG = "lme.git.dirty"
VERSION_TAG_PREFIX = "lme.version."  # lme.version.<package>, lme.version.python


def package_versions(names: Sequence[str] = RUN_PACKAGES) -> dict[str, str | None]:
    """Installed versions (`importlib.metadata`, nothing imported); None when not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = None
    return versions


def git(root: Path, *args: str) -> str | None:
    """`git -C root ARGS`' output, or None (no git, not a checkout, an error)."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(root: Path, pathspecs: Sequence[str] = ()) -> tuple[str | None, bool | None]:
    """The commit checked out at `root` and whether the work tree differs from it (`git status --porcelain` over
    the whole checkout, less the `pathspecs` excluded); (None, None) outside a git checkout."""
    commit = git(root, "rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git(root, "status", "--porcelain", "--", ":(top)", *pathspecs)
    return commit.strip(), (bool(status.strip()) if status is not None else None)


def lme_checkout(package_dir: Path = PACKAGE_DIR) -> Path | None:
    """The git checkout lme runs from (the folder holding the `lme` package is the checkout's top); None for an
    installed lme, even one whose site-packages sits inside some other checkout (a virtual environment in it)."""
    root = package_dir.parent
    top = git(root, "rev-parse", "--show-toplevel")
    if top is None or not top.strip():
        return None
    try:
        return root if Path(top.strip()).resolve() == root.resolve() else None
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def code_tags() -> dict[str, str]:
    """MLflow run tags naming the code that made a run: `mlflow.source.git.commit` and `lme.git.dirty` (from a git
    checkout only), `lme.version.<package>` for lme, Python and `RUN_PACKAGES` ('not installed' for one that is
    not), and MLflow's source tags, so the runs table's Source column says `lme <version> @ <commit>`. Once per
    process."""
    tags: dict[str, str] = {}
    checkout = lme_checkout()
    commit, dirty = git_state(checkout) if checkout is not None else (None, None)
    if commit:
        tags[GIT_COMMIT_TAG] = commit
        if dirty is not None:
            tags[GIT_DIRTY_TAG] = str(dirty).lower()
    versions = package_versions()
    versions["lme"] = versions.get("lme") or __version__  # a checkout on PYTHONPATH, not installed
    tags[VERSION_TAG_PREFIX + "python"] = platform.python_version()
    for name, found in versions.items():
        tags[VERSION_TAG_PREFIX + name] = found or NOT_INSTALLED
    source = f"lme {versions['lme']}"
    if commit:
        source += f" @ {commit[:10]}" + (" (dirty)" if dirty else "")
    tags["mlflow.source.type"] = "LOCAL"
    tags["mlflow.source.name"] = source
    return tags

"""Every MLflow run says which code made it: the git commit and dirty flag of lme's checkout and the versions of lme,
Python and the packages a result depends on, as tags, read without importing those packages. Against a real SQLite
store in tmp_path and real git checkouts made in tmp_path."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from lme.util import code_version as provenance
from lme.tracking.runs import JobRun, TrackingSettings

ROOT = Path(__file__).resolve().parents[1]
HAS_GIT = shutil.which("git") is not None


def _git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


def _checkout(top: Path) -> Path:
    """A git checkout at `top` with one commit, an `lme` package at its top and one under a virtual environment."""
    (top / "lme").mkdir(parents=True)
    (top / "lme" / "__init__.py").write_text("", encoding="utf-8")
    (top / ".venv" / "site-packages" / "lme").mkdir(parents=True)
    (top / ".gitignore").write_text(".venv/\n", encoding="utf-8")
    _git(top, "init", "-q")
    _git(top, "add", ".")
    _git(top, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return top


def test_a_runs_tags_name_its_commit_and_package_versions(tmp_path):
    from mlflow.tracking import MlflowClient

    settings = TrackingSettings(uri=f"sqlite:///{tmp_path}/mlflow.db", artifact_location=str(tmp_path / "mlruns"))
    provenance.code_tags.cache_clear()  # read now, as the checkout is now (the cache lasts a process)
    run = JobRun(settings, "a-run", {"lme.role": "retrieval"})  # every kind of run: jobs, parents, retrieval, reports
    run.finish()
    tags = MlflowClient(settings.uri).get_run(run.run_id).data.tags
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True) if HAS_GIT \
        else None
    if head is not None and head.returncode == 0:
        assert tags["mlflow.source.git.commit"] == head.stdout.strip()
        dirty = bool(_git(ROOT, "status", "--porcelain"))
        assert tags["lme.git.dirty"] == str(dirty).lower()
        assert tags["mlflow.source.name"].startswith(f"lme {version('lme')} @ {head.stdout.strip()[:10]}")
    else:  # not a checkout: no commit is claimed
        assert "mlflow.source.git.commit" not in tags and "lme.git.dirty" not in tags
    assert tags["lme.version.python"] == platform.python_version()
    assert tags["lme.version.lme"] == version("lme")
    for package in ("litellm", "mlflow", "hydra-core", "sentence-transformers", "torch"):
        assert tags[f"lme.version.{package}"] == version(package)
    onnxruntime = provenance.package_versions(["onnxruntime"])["onnxruntime"]
    assert tags["lme.version.onnxruntime"] == (onnxruntime or provenance.NOT_INSTALLED)
    assert tags["lme.role"] == "retrieval" and tags["mlflow.source.type"] == "LOCAL"


def test_the_tags_are_read_without_importing_the_packages():
    """`code_tags` in a fresh interpreter: none of the heavy packages it names is imported."""
    code = ("import sys; from lme.util.code_version import code_tags; tags = code_tags(); "
            "heavy = [m for m in ('torch', 'litellm', 'mlflow', 'sentence_transformers', 'onnxruntime', 'hydra') "
            "if m in sys.modules]; print(heavy, 'lme.version.torch' in tags)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] True"


@pytest.mark.skipif(not HAS_GIT, reason="needs git")
def test_the_commit_is_the_checkout_lme_runs_from_never_one_around_an_installed_lme(tmp_path):
    top = _checkout(tmp_path / "repo")
    assert provenance.lme_checkout(top / "lme") == top
    assert provenance.lme_checkout(top / ".venv" / "site-packages" / "lme") is None  # a venv inside a checkout
    assert provenance.lme_checkout(tmp_path / "elsewhere" / "lme") is None
    commit, dirty = provenance.git_state(top)
    assert commit == _git(top, "rev-parse", "HEAD") and dirty is False
    (top / "lme" / "new.py").write_text("x = 1\n", encoding="utf-8")
    assert provenance.git_state(top) == (commit, True)
    assert provenance.git_state(tmp_path / "elsewhere") == (None, None)

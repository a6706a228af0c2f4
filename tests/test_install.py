"""The config root, `conf/` at the top of the repository: a wheel carries it (as `lme/conf`), so a
non-editable install run from another directory still runs `python -m lme`; users' own designs come
from a folder of their own through `hydra.searchpath`.

The wheel test builds from a copy of the sources (a fresh build directory, nothing written into the
checkout) and installs with `--no-deps --target`: the dependencies come from the current
environment, put after the wheel on PYTHONPATH, which must win over this checkout's editable install.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from lme import CONF_DIR, PACKAGE_DIR, config_root
from lme.cli import compose_config

REPO = PACKAGE_DIR.parent
ACCURACY = re.compile(r"^design (\S+), seed 0: accuracy \d\.\d{3} \(\d+/2\)", re.MULTILINE)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "PYTHONPATH"))}
    return {**env, **extra}


def _user_designs(root: Path) -> Path:
    """A folder of the user's own, laid out like `conf/`: one design, BM25 in half the byte budget."""
    (root / "design").mkdir(parents=True)
    (root / "design" / "mine.yaml").write_text(
        "# @package _global_\n"
        "defaults:\n  - override /retriever: fts5\n  - override /memory: retrieved\n"
        "design_name: mine\nmemory:\n  max_bytes: 48000\n",
        encoding="utf-8",
    )
    return root


def test_the_config_root_is_conf_at_the_top_of_the_checkout():
    assert CONF_DIR == REPO / "conf" and (CONF_DIR / "config.yaml").is_file()
    assert not (PACKAGE_DIR / "conf").exists()


def test_a_package_holding_conf_is_its_own_config_root(tmp_path):
    """A wheel's layout (`lme/conf/config.yaml`) wins; a folder without config.yaml does not count."""
    package = tmp_path / "site" / "lme"
    (package / "conf").mkdir(parents=True)
    assert config_root(package) == tmp_path / "site" / "conf"
    (package / "conf" / "config.yaml").write_text("defaults: []\n", encoding="utf-8")
    assert config_root(package) == package / "conf"


def test_a_users_design_in_another_folder_composes_through_the_search_path(tmp_path):
    mine = _user_designs(tmp_path / "my_designs")
    cfg = compose_config([f"hydra.searchpath=[file://{mine}]", "+design=mine"])
    assert cfg.design_name == "mine" and cfg.memory.max_bytes == 48000
    assert cfg.retriever._target_ == compose_config(["+design=bm25"]).retriever._target_  # the shipped groups still compose
    assert compose_config([f"hydra.searchpath=[file://{mine}]", "+design=hybrid"]).design_name == "hybrid"


# ---------------------------------------------------------------- a wheel, installed non-editable


def _build_wheel(source: Path, out: Path) -> Path:
    """`pip wheel --no-deps` without build isolation when this environment can build (setuptools with
    bdist_wheel, as CI's venv has); else with isolation, which fetches setuptools from the index."""
    setuptools = importlib.util.find_spec("setuptools")
    can_build_here = setuptools is not None and (
        importlib.util.find_spec("wheel") is not None
        or (Path(setuptools.origin).parent / "command" / "bdist_wheel.py").is_file()
    )
    isolation = ["--no-build-isolation"] if can_build_here else []
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", str(out), "."],
                          cwd=source, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("lme-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel of a copy of the sources, installed with `pip install --no-deps --target`."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(PACKAGE_DIR, source / "lme", ignore=skip)
    shutil.copytree(CONF_DIR, source / "conf", ignore=skip)
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    wheel = _build_wheel(source, tmp / "dist")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"lme/conf/{p.relative_to(CONF_DIR).as_posix()}" for p in CONF_DIR.rglob("*") if p.is_file()}
    assert shipped and shipped <= names, sorted(shipped - names)
    assert not any(name.startswith("conf/") for name in names)  # inside the package, not a top-level `conf`
    site = tmp / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return site


def _lme(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lme", *args], cwd=cwd, env=_env(PYTHONPATH=str(site)),
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_wheel_installed_non_editable_runs_from_another_directory(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([sys.executable, "-c", "import lme; print(lme.__file__); print(lme.CONF_DIR)"],
                           cwd=elsewhere, env=_env(PYTHONPATH=str(installed)), capture_output=True, text=True,
                           timeout=60)
    assert where.returncode == 0, where.stderr[-2000:]
    module, conf = where.stdout.split()
    assert Path(module) == installed / "lme" / "__init__.py"  # PYTHONPATH wins over the checkout's editable install
    assert Path(conf) == installed / "lme" / "conf"

    run = _lme(installed, elsewhere, "tracking.enabled=false", "limit=2", f"cache_dir={tmp_path}/cache",
               f"hydra.run.dir={tmp_path}/out")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert ACCURACY.search(run.stdout + run.stderr).group(1) == "default", run.stdout[-2000:]
    hydra = yaml.safe_load((tmp_path / "out" / ".hydra" / "hydra.yaml").read_text(encoding="utf-8"))
    main = [s for s in hydra["hydra"]["runtime"]["config_sources"] if s["provider"] == "main"]
    assert [Path(s["path"]) for s in main] == [installed / "lme" / "conf"]  # the wheel's configs, not the checkout's


@pytest.mark.slow
def test_a_users_design_in_another_folder_runs_with_the_installed_wheel(installed, tmp_path):
    mine = _user_designs(tmp_path / "my_designs")
    run = _lme(installed, tmp_path, f"hydra.searchpath=[file://{mine}]", "+design=mine", "tracking.enabled=false",
               "limit=2", f"cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/out")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert ACCURACY.search(run.stdout + run.stderr).group(1) == "mine", run.stdout[-2000:]
    config = yaml.safe_load((tmp_path / "out" / ".hydra" / "config.yaml").read_text(encoding="utf-8"))
    assert config["design_name"] == "mine" and config["memory"]["max_bytes"] == 48000

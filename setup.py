"""The package list, the one thing pyproject.toml cannot say: lme's packages, and the checkout's
top-level `conf/` (the Hydra config root) installed as `lme/conf`, so that a wheel carries the
configs (`lme.config_root` finds them in either place). Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

CONF = ["lme.conf", *(f"lme.conf.{name}" for name in find_namespace_packages(where="conf"))]

setup(
    packages=[*find_namespace_packages(include=["lme", "lme.*"]), *CONF],
    package_dir={"lme.conf": "conf"},
)

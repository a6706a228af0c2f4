"""lme: evaluate the long-term memory of chat assistants on LongMemEval."""

from pathlib import Path

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent


def config_root(package_dir: Path = PACKAGE_DIR) -> Path:
    """The Hydra config root, `conf/`. In a wheel it is inside the package (`lme/conf`: setup.py
    installs the checkout's top-level `conf/` there); in a checkout (an editable install, or the
    checkout on PYTHONPATH) it is `conf/` next to the package, so edits to it take effect at once."""
    packaged = package_dir / "conf"
    return packaged if (packaged / "config.yaml").is_file() else package_dir.parent / "conf"


CONF_DIR = config_root()

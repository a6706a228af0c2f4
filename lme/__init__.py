"""lme: evaluate the long-term memory of chat assistants on LongMemEval."""

import os
from pathlib import Path

# Offline by itself: litellm fetches its model price map from GitHub on import unless told to use the copy it
# ships, and waits on that request where there is no network. Set before anything can import litellm (every lme
# process imports this package first); a value the user set is kept.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent


def config_root(package_dir: Path = PACKAGE_DIR) -> Path:
    """The Hydra config root, `conf/`. In a wheel it is inside the package (`lme/conf`: setup.py
    installs the checkout's top-level `conf/` there); in a checkout (an editable install, or the
    checkout on PYTHONPATH) it is `conf/` next to the package, so edits to it take effect at once."""
    packaged = package_dir / "conf"
    return packaged if (packaged / "config.yaml").is_file() else package_dir.parent / "conf"


CONF_DIR = config_root()

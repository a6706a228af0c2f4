"""The one gateway to model providers: call cache, retries, limits, accounting."""

import os

# litellm must use its bundled price map, never fetch one over the network on import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

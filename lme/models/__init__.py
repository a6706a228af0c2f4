"""The one gateway to model providers: call cache, retries, limits, accounting."""

# litellm uses its bundled price map, never one fetched over the network on import: `lme/__init__.py` sets
# LITELLM_LOCAL_MODEL_COST_MAP=True (unless the user set it) before anything imports litellm.

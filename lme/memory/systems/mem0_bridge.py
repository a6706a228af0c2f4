"""What lme plugs into mem0ai (imported only by `lme.memory.systems.mem0`, after it has set Mem0's environment):
its LLM and its embedder as Mem0 classes, registered with Mem0's factories, and `open_memory`, one namespace's
`mem0.Memory` on local disk.

- `GatewayLlm` (Mem0 LLM provider `lme-gateway`): Mem0's `generate_response` handed to the adapter
  (`Mem0System.complete`), which dates the prompt and sends it through lme's gateway. Registered with
  `LlmFactory.register_provider`; Mem0's config model accepts only its own provider names, so the LLM part of
  the config is built with `LlmConfig.model_construct` (no validation of the name).
- `SharedEmbedder` (Mem0 embedder provider `lme-sentence-transformers`): a sentence-transformers model loaded
  once per process by `lme.retrieval.dense.load_sentence_transformer` (a packaged model with no hub access) and
  shared by every namespace's Memory, encoding as Mem0's `huggingface` embedder does (`encode`, as lists).
- `open_memory`: Qdrant in local mode under the namespace's folder (`qdrant/`, on disk) and Mem0's history
  database (`history.db`) beside it.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Literal, Optional

from mem0 import Memory
from mem0.configs.base import MemoryConfig
from mem0.embeddings.base import EmbeddingBase
from mem0.embeddings.configs import EmbedderConfig
from mem0.llms.base import LLMBase
from mem0.llms.configs import LlmConfig
from mem0.utils.factory import EmbedderFactory, LlmFactory

# Mem0 warns at every Memory opened that spaCy or fastembed is missing (its entity boosts and BM25 are then off:
# `Mem0System.settings` records which are installed); lme opens one per ingestion and search.
logging.getLogger("mem0").setLevel(logging.ERROR)

LLM_PROVIDER = "lme-gateway"
EMBEDDER_PROVIDER = "lme-sentence-transformers"
COLLECTION = "memories"  # lme.memory.systems.mem0.QDRANT_COLLECTION: it checks the collection is there

_MODELS: dict[str, tuple[Any, threading.Lock]] = {}  # model alias -> (loaded model, its lock), set by `register`


class GatewayLlm(LLMBase):
    """Mem0's LLM: every request goes to the adapter bound after the Memory is built (`bind`)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.adapter: Any = None

    def bind(self, adapter: Any) -> None:
        self.adapter = adapter

    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None, tools: Any = None,
                          tool_choice: str = "auto", **kwargs: Any) -> str:
        if self.adapter is None:
            raise RuntimeError("lme's Mem0 LLM was used before an adapter was bound to it")
        return self.adapter.complete(messages, response_format)


class SharedEmbedder(EmbeddingBase):
    """Mem0's embedder: lme's process-wide sentence-transformers model (`config.model` is its alias)."""

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.model, self.lock = _MODELS[self.config.model]
        self.config.embedding_dims = self.config.embedding_dims

    def embed(self, text: Any, memory_action: Optional[Literal["add", "search", "update"]] = None) -> list[float]:
        with self.lock:
            return self.model.encode(text, convert_to_numpy=True, show_progress_bar=False).tolist()

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        if not texts:
            return []
        with self.lock:
            return [row.tolist() for row in self.model.encode(list(texts), convert_to_numpy=True,
                                                               show_progress_bar=False)]


def register(embedder: str, model: Any, lock: threading.Lock) -> None:
    """Register lme's providers with Mem0's factories (idempotent) and the embedder's loaded model."""
    LlmFactory.register_provider(LLM_PROVIDER, f"{__name__}.GatewayLlm")
    EmbedderFactory.provider_to_class[EMBEDDER_PROVIDER] = f"{__name__}.SharedEmbedder"
    _MODELS[embedder] = (model, lock)


def open_memory(folder: Path, embedder: str, dims: int, custom_instructions: str | None, adapter: Any) -> Memory:
    """The namespace's Mem0 `Memory` in `folder` (Qdrant local mode, on disk; its history database), its LLM
    bound to `adapter`. The caller holds the folder's lock and calls `close_memory` when done."""
    config = MemoryConfig(
        vector_store={"provider": "qdrant", "config": {
            "collection_name": COLLECTION, "path": str(folder / "qdrant"), "on_disk": True,
            "embedding_model_dims": dims}},
        llm=LlmConfig.model_construct(provider=LLM_PROVIDER, config={}),
        embedder=EmbedderConfig.model_construct(provider=EMBEDDER_PROVIDER,
                                                config={"model": embedder, "embedding_dims": dims}),
        history_db_path=str(folder / "history.db"),
        custom_instructions=custom_instructions,
    )
    memory = Memory(config)
    memory.llm.bind(adapter)
    return memory


def close_memory(memory: Memory) -> None:
    """Close the Memory's history database and its Qdrant client (which holds Qdrant's lock on the folder)."""
    try:
        memory.close()
    finally:
        client = getattr(memory.vector_store, "client", None)
        if client is not None:
            client.close()

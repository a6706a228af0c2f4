"""Faster CPU encoding: a sentence-transformers model exported to ONNX, run by ONNX Runtime or OpenVINO.

`embedding.backend` chooses how a sentence-transformers model runs:

- `torch`: sentence-transformers itself (`SentenceTransformerEncoder`);
- `onnx`: the whole model (transformer, pooling, normalisation: the `sentence_embedding` output of its
  module chain) exported once to ONNX from the locally loaded model (`torch.onnx.export`, no network),
  run by ONNX Runtime on the CPU;
- `openvino`: the same ONNX file compiled by OpenVINO for the CPU.

`embedding.precision` is `fp32` (the exported weights) or `int8`: ONNX Runtime's dynamic quantization of
the MatMul weights (signed int8, per output channel; activations quantized on the fly), the file then run
by either runtime. sentence-transformers' own ONNX/OpenVINO backends need `optimum-onnx` / `optimum-intel`,
which pin `transformers` below the version lme installs; so lme exports and quantizes with `torch.onnx` and
`onnxruntime.quantization` directly, the same steps those backends take.

An export is written once per model, library versions and precision under `<cache_dir>/onnx/` (beside the
embedding cache; `$LME_ONNX_DIR` instead when set, one folder any number of caches share), atomically, and
checked before use: on a fixed set of probe texts the fp32 export must give the same vectors as torch (cosine
>= 0.9999 on each), the int8 file close ones (>= 0.95), else it is refused. The cache key of the vectors
(`model_id`) names the backend and precision, so vectors of different precision never mix; torch fp32 keeps
the plain model id, so caches filled before this option stay valid.

Dynamic quantization scales each call's activations by their range over the whole batch, so an int8 vector
would depend on the texts batched with it (and on their padding); int8 therefore encodes one text per call,
and a text's vector is the same whatever else is encoded, in any run and any order. One text is too small a
piece of work to share between cores (ONNX Runtime's threads spend much of each call waiting on each other),
so ONNX Runtime's int8 runs one thread per call and as many calls at once as the machine has cores, each
core taking the next text (the session runs concurrently; the tokenizer is used under a lock); the vectors
are the same bit for bit as one call at a time. Measured on 2 cores, 600 S turns: 88-103 against 74-79
texts/s (`scripts/bench_backends.py` gives the figures against torch).

Texts are tokenized by the model's own tokenizer (truncated at its `max_seq_length`), with the prompt
prepended as sentence-transformers does; batches go longest first so padding stays small. Models whose
pooling leaves the prompt out (`include_prompt: false`) are refused with a prompt, as the exported graph
cannot drop it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lme.util.errors import LmeError, first_line

RUNTIMES: tuple[str, ...] = ("torch", "onnx", "openvino")
PRECISIONS: tuple[str, ...] = ("fp32", "int8")
EXPORT_FORMAT = 1  # bump when the export steps change: a new folder, never a stale file
PROBE_TEXTS = (
    "I moved to Lisbon in March and started a new job at the bakery.",
    "What time does the pharmacy close on Sundays?",
    "We adopted a second cat last weekend; her name is Miso.",
    "ok",
    "The quarterly report is due on the 14th, two days after the team offsite in Denver, "
    "which I still have to book flights for.",
)
# The smallest cosine to torch's vector an export may give on each probe text: fp32 must give torch's vectors;
# int8 moves them a little (MiniLM: 0.974 at worst on the probes, 0.975 over 2,000 S turns), a broken file far.
MIN_PROBE_COSINE = {"fp32": 0.9999, "int8": 0.95}
EXPORTS_ENV = "LME_ONNX_DIR"
TORCH_FP32 = "embedding.backend=torch embedding.precision=fp32"  # the way back to sentence-transformers itself


def exports_root(cache_path: str | Path | None) -> Path:
    """Where a model's exports go: `$LME_ONNX_DIR` when set, else `onnx/` beside the embedding cache file
    (a temporary folder for a retriever without one)."""
    chosen = os.environ.get(EXPORTS_ENV, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    if cache_path in (None, ""):
        return Path(tempfile.gettempdir()) / "lme-embedding" / "onnx"
    return Path(str(cache_path)).expanduser().parent / "onnx"


def check_runtime(runtime: str, precision: str) -> None:
    if runtime not in RUNTIMES:
        raise LmeError(f"embedding.backend must be one of {', '.join(RUNTIMES)}, not {runtime!r}.")
    if precision not in PRECISIONS:
        raise LmeError(f"embedding.precision must be one of {', '.join(PRECISIONS)}, not {precision!r}.")
    if runtime == "torch" and precision != "fp32":
        raise LmeError("embedding.precision=int8 needs embedding.backend=onnx or openvino (torch runs fp32).")


def runtime_suffix(runtime: str, precision: str) -> str:
    """What a backend adds to the model id that keys its vectors: nothing for torch fp32."""
    return "" if runtime == "torch" else f"|{runtime}-{precision}"


def _versions() -> str:
    from importlib.metadata import version

    return ",".join(f"{name}={version(name)}" for name in ("torch", "transformers", "sentence-transformers", "onnxruntime"))


def export_dir(root: Path, model_id: str, max_seq_length: int | None) -> Path:
    """The folder of one model's exports: named by the model, the library versions and the export format."""
    digest = hashlib.sha256(f"{EXPORT_FORMAT}|{model_id}|{max_seq_length}|{_versions()}".encode()).hexdigest()[:20]
    return root / digest


def _atomic(path: Path, write: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(prefix=path.name, suffix=".part", dir=path.parent)
    os.close(handle)
    try:
        write(temp)
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.unlink(temp)


def export_fp32(model: Any, path: Path) -> None:
    """Export the sentence-transformers `model` (its whole module chain) to ONNX at `path`."""
    import torch

    names = _input_names(model)

    class Chain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return self.model(dict(zip(names, inputs)))["sentence_embedding"]

    sample = model.tokenizer(list(PROBE_TEXTS[:2]), padding=True, return_tensors="pt")
    axes = {name: {0: "batch", 1: "tokens"} for name in names} | {"embedding": {0: "batch"}}

    def write(temp: str) -> None:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(Chain().eval(), tuple(sample[name] for name in names), temp, input_names=list(names),
                              output_names=["embedding"], dynamic_axes=axes, opset_version=17, dynamo=False)

    _atomic(path, write)


def quantize_int8(source: Path, path: Path) -> None:
    """ONNX Runtime's dynamic int8 quantization of `source`'s MatMul weights (per channel), written to `path`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    def write(temp: str) -> None:
        with warnings.catch_warnings(), _quiet_root_logger():
            warnings.simplefilter("ignore")
            quantize_dynamic(str(source), temp, weight_type=QuantType.QInt8, per_channel=True,
                             op_types_to_quantize=["MatMul"], extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})

    _atomic(path, write)


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """ONNX Runtime's quantization logs a line per tensor (and advice) on the root logger, which a Hydra run
    prints at INFO; below ERROR, those records are dropped while it runs."""
    root = logging.getLogger()

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR

    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def _input_names(model: Any) -> tuple[str, ...]:
    sample = model.tokenizer(["a"], return_tensors="pt")
    return tuple(name for name in ("input_ids", "attention_mask", "token_type_ids") if name in sample)


class _Session:
    """One compiled model: ONNX Runtime's session or OpenVINO's compiled model, run on int64 inputs."""

    def __init__(self, runtime: str, path: Path, threads: int) -> None:
        self.runtime = runtime
        if runtime == "onnx":
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.log_severity_level = 3
            self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            self.inputs = {item.name for item in self._session.get_inputs()}
        else:
            import openvino as ov

            core = ov.Core()
            self._compiled = core.compile_model(str(path), "CPU", {"INFERENCE_NUM_THREADS": threads})
            self._request = self._compiled.create_infer_request()
            self.inputs = {name for port in self._compiled.inputs for name in port.get_names()}

    def run(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        feed = {name: value for name, value in feed.items() if name in self.inputs}
        if self.runtime == "onnx":
            return np.asarray(self._session.run(None, feed)[0])
        return np.asarray(self._request.infer(feed)[self._compiled.output(0)])


def _gpu_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(torch.cuda.is_available() or (mps is not None and mps.is_available()))


def _missing(runtime: str, precision: str) -> str | None:
    import importlib.util

    needed = ["onnxruntime"] + (["onnx"] if precision == "int8" else []) + (["openvino"] if runtime == "openvino" else [])
    absent = [name for name in needed if importlib.util.find_spec(name) is None]
    return ", ".join(absent) or None


class OnnxEncoder:
    """Texts -> unit vectors with an exported model (see the module doc), loaded on first use."""

    def __init__(self, model: Any, model_id: str, runtime: str, precision: str, root: Path, batch_size: int,
                 max_seq_length: int | None, threads: int | None = None, gpu_wanted: bool = False) -> None:
        check_runtime(runtime, precision)
        if runtime == "torch":
            raise LmeError("OnnxEncoder runs backend onnx or openvino; torch is SentenceTransformerEncoder.")
        self._load_model = model  # () -> the loaded SentenceTransformer (for its tokenizer, and the export)
        self.base_model_id = model_id
        self.runtime = runtime
        self.precision = precision
        self.root = Path(root)
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.threads = threads or len(os.sched_getaffinity(0))
        # one text per int8 call: the calls run side by side, one core each (see the module doc)
        self.workers = self.threads if (runtime == "onnx" and precision == "int8") else 1
        self._lock = threading.Lock()
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer is not to be called from two threads at once
        self._session: _Session | None = None
        self._tokenizer: Any = None
        self._max_length: int | None = None
        self.probe_cosine: float | None = None  # the export's smallest cosine to torch on the probe texts
        self.gpu_wanted = gpu_wanted  # the retriever's device was not `cpu`: say so if a GPU sits idle

    @property
    def model_id(self) -> str:
        return self.base_model_id + runtime_suffix(self.runtime, self.precision)

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def files(self) -> tuple[Path, Path]:
        """(the fp32 export, the file this encoder runs)."""
        folder = export_dir(self.root, self.base_model_id, self.max_seq_length)
        fp32 = folder / "model.fp32.onnx"
        return fp32, fp32 if self.precision == "fp32" else folder / f"model.{self.precision}.onnx"

    def load(self) -> None:
        if self._session is not None:
            return
        absent = _missing(self.runtime, self.precision)
        if absent:
            remedy = ('pip install -e ".[fast-cpu]"' if absent == "openvino"
                      else "they are dependencies of lme: pip install -e .")
            raise LmeError(f"embedding.backend={self.runtime} precision={self.precision} needs the package(s) "
                           f"{absent} ({remedy}).")
        model = self._load_model()
        self._no_prompt = any(type(module).__name__ == "Pooling" and getattr(module, "include_prompt", True) is False
                              for module in model)
        fp32, target = self.files()
        found = [path for path in (fp32, target) if path.is_file()]  # exports of an earlier run, not written now
        try:
            if not target.is_file():
                print(f"lme: exporting {self.base_model_id} to ONNX ({self.precision}) in {target.parent}, once for "
                      f"this model and these library versions", file=sys.stderr)
            if not fp32.is_file():
                export_fp32(model, fp32)
            if target != fp32 and not target.is_file():
                quantize_int8(fp32, target)
            session = _Session(self.runtime, target, 1 if self.workers > 1 else self.threads)
        except LmeError:
            raise
        except Exception as exc:  # noqa: BLE001 - export, quantization and runtime errors end here
            raise self._unusable(found, target, exc) from None
        if self.gpu_wanted and _gpu_available():
            print(f"lme: embedding.backend={self.runtime} runs {self.base_model_id} on the CPU although a GPU is "
                  f"available; {TORCH_FP32} uses the GPU (other vectors, their "
                  f"own cache key).", file=sys.stderr)
        self._tokenizer = model.tokenizer
        self._max_length = self.max_seq_length or model.max_seq_length
        self._session = session
        reference = np.asarray(model.encode(list(PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True))
        try:  # a file that loads but is not this model's export (other inputs, outputs or sizes)
            mine = self._encode(list(PROBE_TEXTS), "")
            self.probe_cosine = float(np.min(np.sum(reference * mine, axis=1)))
        except Exception as exc:  # noqa: BLE001 - the runtime's errors on a foreign graph end here
            self._session = None
            raise self._unusable([target], target, exc) from None
        if self.probe_cosine < MIN_PROBE_COSINE[self.precision]:
            self._session = None
            raise LmeError(f"embedding model {self.base_model_id}: the {self.runtime} {self.precision} export at {target} "
                           f"gives other vectors than torch (cosine {self.probe_cosine:.5f} < "
                           f"{MIN_PROBE_COSINE[self.precision]}); delete it to "
                           f"export again, or use {TORCH_FP32}.")

    def _unusable(self, found: list[Path], target: Path, exc: BaseException) -> LmeError:
        """The one sentence for an export that cannot be made or run: an export found on disk (damaged,
        truncated, a part missing, another model's) is named with what to do (delete it: lme exports it again,
        once); otherwise the export itself failed in its folder."""
        if found:
            names = " and ".join(str(path) for path in found)
            return LmeError(f"embedding model {self.base_model_id}: backend {self.runtime} ({self.precision}) cannot "
                            f"use the export at {names} ({first_line(exc)}): it is damaged, cut short or not this "
                            "model's; delete it and lme exports the model again, once.")
        return LmeError(f"embedding model {self.base_model_id}: backend {self.runtime} ({self.precision}) could not be "
                        f"prepared in {target.parent} ({first_line(exc)}); check that the folder is writable and has "
                        f"room, or use {TORCH_FP32}.")

    def encode(self, texts: Sequence[str], prompt: str) -> np.ndarray:
        with self._lock:
            self.load()
            if prompt and self._no_prompt:
                raise LmeError(f"embedding model {self.base_model_id}: its pooling leaves the prompt out, which an "
                               f"exported graph cannot do; use {TORCH_FP32}.")
            return self._encode(list(texts), prompt)

    def _encode(self, texts: list[str], prompt: str) -> np.ndarray:
        assert self._session is not None
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        rows: dict[int, np.ndarray] = {}
        size = 1 if self.precision == "int8" else self.batch_size  # see the module doc: one text per int8 call
        parts = [order[start:start + size] for start in range(0, len(order), size)]
        if self.workers > 1 and len(parts) > 1:
            self._run_side_by_side(parts, texts, prompt, rows)
        else:
            for part in parts:
                self._run_part(part, texts, prompt, rows)
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        out = np.stack([rows[i] for i in range(len(texts))]).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)

    def _run_part(self, part: list[int], texts: list[str], prompt: str, rows: dict[int, np.ndarray]) -> None:
        assert self._session is not None
        with self._tokenizer_lock:
            encoded = self._tokenizer([prompt + texts[i] for i in part], padding=True, truncation=True,
                                      max_length=self._max_length, return_tensors="np")
        vectors = self._session.run({name: np.asarray(value, dtype=np.int64) for name, value in encoded.items()})
        for i, vector in zip(part, vectors):
            rows[i] = vector

    def _run_side_by_side(self, parts: list[list[int]], texts: list[str], prompt: str,
                          rows: dict[int, np.ndarray]) -> None:
        """`_run_part` over `parts` on `workers` threads (this one among them), each taking the next part; the
        first failure (or a Ctrl-C in this thread) stops the others after their current part and is raised."""
        pending = iter(parts)
        taking = threading.Lock()
        stop = threading.Event()
        failures: list[BaseException] = []

        def work() -> None:
            try:
                while not stop.is_set():
                    with taking:
                        part = next(pending, None)
                    if part is None:
                        return
                    self._run_part(part, texts, prompt, rows)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread, which raises it
                failures.append(exc)
                stop.set()

        helpers = [threading.Thread(target=work, name=f"lme-onnx-{n}", daemon=True)
                   for n in range(1, min(self.workers, len(parts)))]
        for helper in helpers:
            helper.start()
        try:
            work()
        finally:
            stop.set()
            for helper in helpers:
                helper.join()
        if failures:
            raise failures[0]

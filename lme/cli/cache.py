"""`python -m lme cache merge|export|import`: fold call caches together; share embedding vectors.

    python -m lme cache merge SOURCE... [--into FILE] [overrides]
    python -m lme cache export FILE [--model MODEL] [--cache FILE] [--force] [overrides]
    python -m lme cache import FILE [--keep-existing] [--cache FILE] [overrides]

`merge`: machines of a cluster each keep their call cache on local disk (SQLite's locks do not hold on
network filesystems); after a sweep, merge them into the cache the next run reads. The target defaults to
`<cache_dir>/calls.sqlite` of the composed config (`cache_dir=`, `LME_CACHE_DIR`). Entries the target
already has are kept; merging the same file twice adds nothing.

`export` writes the embedding cache's vectors (of one model with `--model`, e.g.
`sentence-transformers/all-MiniLM-L6-v2|onnx-int8`, MiniLM on its default backend) to one portable SQLite
file: each vector under its content address (SHA-256 of model id, prompt and text; the model id names its
backend and precision where it has them, so vectors of different precision never mix), with a manifest of
models, dims, count and a digest. `import` verifies that file (digest, count, dims, dtype) and adds its
vectors to the embedding cache; a vector already there is skipped when identical, and a different one under
the same key stops the import (nothing imported, exit 2) unless `--keep-existing` keeps the cache's and
imports the rest. A teammate who imports the file encodes nothing that it holds. The embedding cache is the
run's semantic retriever's `cache_path` (default `<cache_dir>/embeddings.sqlite`), or `--cache FILE`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lme.util.errors import LmeError

USAGE = ("usage: python -m lme cache merge SOURCE [SOURCE ...] [--into FILE] [overrides] | "
         "cache export FILE [--model MODEL] [--cache FILE] [--force] [overrides] | "
         "cache import FILE [--keep-existing] [--cache FILE] [overrides]")


def main(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.design import compose_design
    from lme.models.cache import merge_caches

    overrides, rest = split_overrides(argv)
    if not rest or rest[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1].strip("\n"))
        return 0
    if rest[0] == "export":
        return export_main(rest[1:], overrides)
    if rest[0] == "import":
        return import_main(rest[1:], overrides)
    if rest[0] != "merge":
        raise LmeError(f"cache: unknown action {rest[0]!r}; {USAGE}")
    args = rest[1:]
    into: Path | None = None
    if "--into" in args:
        at = args.index("--into")
        if at + 1 >= len(args):
            raise LmeError("cache merge: --into needs a file.")
        into = Path(args[at + 1])
        args = args[:at] + args[at + 2 :]
    unknown = [arg for arg in args if arg.startswith("-")]
    if unknown:
        raise LmeError(f"cache merge: unknown option {unknown[0]!r}; {USAGE}")
    if not args:
        raise LmeError(f"cache merge: name at least one source cache file; {USAGE}")
    sources = [Path(arg) / "calls.sqlite" if Path(arg).is_dir() else Path(arg) for arg in args]
    target = into or compose_design(overrides).cache_dir / "calls.sqlite"
    added = merge_caches(target, sources)
    for source, count in added.items():
        print(f"{source}: {count} entries added")
    print(f"merged {len(sources)} cache(s) into {target}")
    return 0


def embedding_cache_path(overrides: Sequence[str]) -> Path:
    """The embedding cache of the composed config: its semantic retriever's `cache_path` (hybrid's semantic
    part's), else `<cache_dir>/embeddings.sqlite`."""
    from lme.cli.embed import semantic_parts
    from lme.config.design import compose_design

    design = compose_design(overrides)
    paths = {part.cache.path for part in semantic_parts(design.build_retriever()) if part.cache.path is not None}
    if len(paths) > 1:
        raise LmeError(f"cache: the retriever has several embedding caches ({', '.join(sorted(map(str, paths)))}); "
                       "name one with --cache FILE.")
    return paths.pop() if paths else design.cache_dir / "embeddings.sqlite"


def _models_line(models: Sequence[Any]) -> str:
    return "; ".join(f"{entry.model}: {entry.count:,} vectors of {entry.dim} dims" for entry in models) or "none"


def export_main(argv: Sequence[str], overrides: Sequence[str]) -> int:
    from lme.cli.parser import make_parser
    from lme.retrieval.embedding_cache import export_embeddings

    parser = make_parser("python -m lme cache export", "Write the embedding cache's vectors to one portable file.")
    parser.add_argument("file", metavar="FILE", help="the export file to write (SQLite)")
    parser.add_argument("--model", help="only the vectors of this model id (as the cache names it)")
    parser.add_argument("--cache", type=Path, help="the embedding cache to read (default: the config's)")
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    options = parser.parse_args(list(argv))
    source = options.cache or embedding_cache_path(overrides)
    started = time.perf_counter()
    summary = export_embeddings(source, options.file, model=options.model, overwrite=options.force)
    print(f"exported {summary.count:,} vectors from {source} to {summary.path} ({summary.bytes / 1e6:,.1f} MB, "
          f"{time.perf_counter() - started:.1f} s); {_models_line(summary.models)}; sha256 {summary.digest}")
    if summary.damaged:
        print(f"lme: {source}: {summary.damaged:,} damaged vector(s) (NaN, infinite, or of a wrong length or type) "
              "were left out of the export; the cache encodes them again when they are next used.",
              file=sys.stderr, flush=True)
    return 0


def import_main(argv: Sequence[str], overrides: Sequence[str]) -> int:
    from lme.cli.parser import make_parser
    from lme.retrieval.embedding_cache import import_embeddings

    parser = make_parser("python -m lme cache import", "Verify an export file and add its vectors to the "
                         "embedding cache.")
    parser.add_argument("file", metavar="FILE", help="an export written by `lme cache export`")
    parser.add_argument("--keep-existing", action="store_true",
                        help="where the cache holds another vector under the same key, keep the cache's and "
                        "import the rest (default: import nothing and exit 2)")
    parser.add_argument("--cache", type=Path, help="the embedding cache to add to (default: the config's)")
    options = parser.parse_args(list(argv))
    target = options.cache or embedding_cache_path(overrides)
    started = time.perf_counter()
    summary = import_embeddings(options.file, target, keep_existing=options.keep_existing)
    kept = f", {summary.conflicting:,} different ones kept as the cache had them" if summary.conflicting else ""
    print(f"imported {summary.added:,} of {summary.count:,} vectors from {summary.path} into {summary.target} "
          f"({summary.identical:,} identical already there{kept}; {time.perf_counter() - started:.1f} s); "
          f"{_models_line(summary.models)}")
    return 0

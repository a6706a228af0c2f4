"""`python -m lme cache merge SOURCE... [--into FILE] [overrides]`: fold per-machine call caches into one.

Machines of a cluster each keep their call cache on local disk (SQLite's locks do not hold on network
filesystems); after a sweep, merge them into the cache the next run reads. The target defaults to
`<cache_dir>/calls.sqlite` of the composed config (`cache_dir=`, `LME_CACHE_DIR`). Entries the target
already has are kept; merging the same file twice adds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lme.errors import LmeError

USAGE = "usage: python -m lme cache merge SOURCE [SOURCE ...] [--into FILE] [overrides]"


def main(argv: Sequence[str]) -> int:
    from lme.compose import split_overrides
    from lme.design import compose_design
    from lme.models.cache import merge_caches

    overrides, rest = split_overrides(argv)
    if not rest or rest[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + (__doc__ or "").split("\n\n", 1)[1].strip())
        return 0
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

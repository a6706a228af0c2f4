"""`python -m lme data ...`: fetch, statistics and the dev/test split.

    python -m lme data fetch ...                         see `python -m lme data fetch --help`
    python -m lme data where [--verify] [--json] [overrides]  what the data folder holds, and what it lacks
    python -m lme data stats [--json] [overrides]         statistics of the selected questions
    python -m lme data split [overrides] [--rule stratified|study] [--seed N] [--dev-size N] [--out DIR] [--check]

`stats` takes the same overrides as a run (`dataset=s`, `dataset.path=FILE`,
`split=dev`, `question_types=[...]`, `limit=N`, ...) and describes exactly the
questions that run would use. `split` draws the dev/test split from the
question ids and types of the configured file (see `lme.data.splits`).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lme.cli.parser import ArgumentParser, make_parser
from lme.util.errors import LmeError

if TYPE_CHECKING:
    from lme.data.fetch import FetchResult

USAGE = """usage: python -m lme data COMMAND ...

commands:
  fetch   download a LongMemEval file, the judge templates or LoCoMo's file, verified by SHA-256
  where   what the data folder (data_dir, LME_DATA_DIR) holds for each dataset, the judge templates and the
          study's instructions, and the command that gets what it lacks: [--verify] [--json] [overrides]
  stats   dataset statistics of the questions a run would use: [--json] [overrides]
  split   draw the dev/test split from a file's question ids and types
          [overrides] [--rule stratified|study] [--seed N] [--dev-size N] [--out DIR] [--check]

overrides are a run's: dataset=s|m|oracle|sample|locomo, dataset.path=FILE, split=dev|test|study_dev|study_test,
question_ids=[...], question_types=[...], limit=N"""


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "fetch":
        return fetch_command(rest)
    if command == "where":
        return where_command(rest)
    if command == "stats":
        return stats_command(rest)
    if command == "split":
        return split_command(rest)
    raise LmeError(f"unknown data command {command!r} (known: fetch, where, stats, split); see python -m lme data --help.")


# ----------------------------------------------------------------------------------------------
# data fetch (the fetching itself is lme.data.fetch)


def fetch_parser() -> ArgumentParser:
    from lme.data.fetch import DATASETS, LOCOMO_BASE_URL_ENV, TARGETS, TEMPLATES_REPO_BASE_URL

    parser = make_parser(
        "python -m lme data fetch",
        "Download LongMemEval files and the judge templates, or LoCoMo's file, into data_dir, verified by SHA-256.",
        hint=f"python -m lme data fetch {'|'.join(TARGETS)} [--record-digest] [data_dir=DIR]",
        epilog="Overrides such as data_dir=DIR (or LME_DATA_DIR) are read as in a run.",
    )
    files = "; ".join(f"{f.name}: {f.description}{'' if f.sha256 else ', no pin in lme yet'}"
                      for f in DATASETS.values())
    parser.add_argument("target", choices=TARGETS,
                        help=f"a data file ({files}), the judge templates, locomo (LoCoMo's locomo10.json, "
                             f"CC BY-NC 4.0), or all (LongMemEval's files and the templates, not LoCoMo)")
    parser.add_argument("--record-digest", action="store_true",
                        help="for a file lme has no pin for, record the digest of this first download in "
                             "{data_dir}/pins.json instead of refusing it")
    parser.add_argument("--endpoint", default=None,
                        help="Hugging Face hub endpoint (default: HF_ENDPOINT or https://huggingface.co)")
    parser.add_argument("--templates-base-url", default=TEMPLATES_REPO_BASE_URL,
                        help="where LongMemEval's files are served, by commit (default: raw.githubusercontent.com)")
    parser.add_argument("--locomo-base-url", default=None,
                        help=f"where LoCoMo's files are served, by commit (default: {LOCOMO_BASE_URL_ENV} or "
                             "raw.githubusercontent.com/snap-research/LoCoMo)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress (as the override progress=false); otherwise a bar on a terminal, "
                             "a line every 30 s elsewhere")
    return parser


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let `kill PID` clean up like Ctrl-C does (only possible in the main thread)."""
    try:
        previous: Any = signal.signal(signal.SIGTERM, signal.default_int_handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _describe(result: FetchResult) -> str:
    if result.name == "locomo":
        from lme.data.fetch import LOCOMO_COMMIT, LOCOMO_LICENSE

        state = "downloaded and verified" if result.downloaded else "already present and verified"
        line = (f"{result.path.name}: {state} (LoCoMo, commit {LOCOMO_COMMIT[:8]}), SHA-256 {result.sha256} "
                f"-> {result.path}")
        return f"{line}\n  {LOCOMO_LICENSE}." if result.downloaded else line
    if result.name == "templates":
        state = "downloaded, extracted and verified" if result.downloaded else "already present and verified"
        return f"judge templates: {state} (5 templates, SHA-256 pinned in lme) -> {result.path}"
    state = "downloaded and verified" if result.downloaded else "already present and verified"
    line = f"{result.path.name}: {state}, SHA-256 {result.sha256} -> {result.path}"
    if result.recorded:
        line += (f"\n  lme has no pin for this file: its digest was recorded in {result.digest_source} "
                 f"and later fetches are checked against it")
    elif result.digest_source != "lme":
        line += f" (digest recorded earlier in {result.digest_source})"
    return line


def fetch_command(
    argv: Sequence[str],
    *,
    dataset_pins: Mapping[str, str] | None = None,
    template_pins: Mapping[str, str] | None = None,
    locomo_pin: str | None = None,
    out: Callable[[str], None] | None = None,
) -> int:
    """`python -m lme data fetch TARGET [--record-digest] [overrides]`; argv is what follows `fetch`.

    Raises `LmeError` (one sentence) on any refusal; the CLI prints it and exits 2.
    `dataset_pins`, `template_pins` and `locomo_pin` replace lme's pins (tests only).
    """
    from lme.config.compose import split_overrides
    from lme.data.fetch import (
        DATASETS,
        REPO_ID,
        REVISION,
        expected_digest,
        fetch_dataset,
        fetch_locomo,
        fetch_templates,
        project_pins,
        user_pins_path,
    )
    from lme.data.judge_templates import LONGMEMEVAL_TEMPLATE_SHA256
    from lme.util.progress import config_flag, enabled_as

    args = list(argv)
    if args[:1] == ["fetch"]:
        args = args[1:]
    overrides, rest = split_overrides(args)
    options = fetch_parser().parse_args(rest)
    from lme.config.design import compose_design

    design = compose_design(overrides)
    data_dir = design.data_dir
    emit = out or (lambda line: print(line, flush=True))

    names = [*DATASETS, "templates"] if options.target == "all" else [options.target]
    pins = project_pins() if dataset_pins is None else dict(dataset_pins)
    if options.target == "all" and not options.record_digest:
        unknown = [DATASETS[n].filename for n in DATASETS
                   if expected_digest(DATASETS[n], data_dir, pins, REPO_ID, REVISION)[0] is None]
        if unknown:
            raise LmeError(
                f"{', '.join(unknown)} {'has' if len(unknown) == 1 else 'have'} no pinned SHA-256 in lme; rerun "
                f"with --record-digest to record the digest of the first download in {user_pins_path(data_dir)}, "
                f"or fetch the pinned files one by one."
            )
    with _sigterm_as_interrupt(), enabled_as(config_flag(design.progress)):
        for name in names:
            if name == "locomo":
                from lme.data.fetch import LOCOMO_SHA256

                result = fetch_locomo(data_dir, base_url=options.locomo_base_url,
                                      sha256=LOCOMO_SHA256 if locomo_pin is None else locomo_pin,
                                      progress=False if options.no_progress else None)
            elif name == "templates":
                result = fetch_templates(data_dir, base_url=options.templates_base_url,
                                         pins=LONGMEMEVAL_TEMPLATE_SHA256 if template_pins is None else template_pins)
            else:
                result = fetch_dataset(
                    name, data_dir, record_digest=options.record_digest, endpoint=options.endpoint, pins=pins,
                    progress=False if options.no_progress else None,
                )
            emit(_describe(result))
    return 0


# ----------------------------------------------------------------------------------------------
# data where (the lookup itself is lme.data.folder)


def _size(n: int) -> str:
    """1234567 -> `1.2 MB` (decimal units, as `ls -h --si`)."""
    if n < 1000:
        return f"{n} bytes"
    value, unit = float(n), "bytes"
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 1000:
            break
    return f"{value:.1f} {unit}"


def _data_dir_source(overrides: Sequence[str]) -> str:
    import os

    if any(o.lstrip("+~").startswith("data_dir=") for o in overrides):
        return "data_dir= on the command line"
    if os.environ.get("LME_DATA_DIR"):
        return "LME_DATA_DIR"
    if any(o.lstrip("+~").startswith("cache_dir=") for o in overrides) or os.environ.get("LME_CACHE_DIR"):
        return "the default, ${cache_dir}/data"
    return "the default, ${cache_dir}/data; set data_dir= or LME_DATA_DIR"


def survey(data_dir: Path, verify: bool = False) -> list[dict[str, Any]]:
    """One entry per data-folder item (the datasets s, m, oracle, locomo, the bundled sample, the judge templates and the
    study's instructions): where it was found (or `missing` with the sentence that says how to get it), its
    size, and its check. Data files are hashed only with `verify` (S is 257 MB of JSON, M 2.6 GB: the pins are
    of the official `.json`, so a `.json.xz` / `.json.gz` is decompressed to be hashed); the templates and the
    instructions, a few KB each, are always verified, each template / composed step against its pinned digest."""
    import os

    from lme.data import folder
    from lme.data.fetch import DATASETS, REPO_ID, REVISION, expected_digest, project_pins
    from lme.data.sample import SAMPLE_PATH

    entries: list[dict[str, Any]] = []
    from lme.data.fetch import LOCOMO_SHA256

    for key in (*folder.DATASET_KEYS, "locomo", "templates", "instructions"):
        found = folder.locate(data_dir, key)
        entry: dict[str, Any] = {"item": key, "option": f"dataset={key}" if key in (*DATASETS, "locomo") else
                                 {"templates": "judge templates", "instructions": "instructions=study"}[key]}
        if found is None or not os.path.exists(found):
            wanted = folder.ITEMS[key]
            entry |= {"status": "missing", "path": None, "size": None,
                      "check": f"missing (looked for {folder.looked_in(data_dir, key)}); {wanted.get}, or set "
                               f"{wanted.setting}",
                      "sentence": folder.missing_sentence(data_dir, key)}
            entries.append(entry)
            continue
        entry |= {"status": "found", "path": str(found), "size": found.stat().st_size}
        if key in (*DATASETS, "locomo"):
            if key == "locomo":  # pinned in lme by its commit's digest (`lme data fetch locomo`)
                pin, source = LOCOMO_SHA256, "lme"
            else:
                pin, source = expected_digest(DATASETS[key], data_dir, project_pins(), REPO_ID, REVISION)
            entry["pin"] = pin
            where = "lme" if source == "lme" else source
            if not verify:
                pinned = f"pinned in {where}" if pin else f"no pin yet: `{folder.ITEMS[key].command}` records one"
                entry["check"] = f"SHA-256 not checked (--verify hashes it; {pinned})"
            else:
                digest = folder.content_sha256(found)
                entry["sha256"] = digest
                held = "" if found.suffix == ".json" else " of the JSON it holds"
                if pin is None:
                    entry["check"] = f"SHA-256{held} {digest} (no pin to compare with)"
                elif digest == pin:
                    entry["check"] = f"SHA-256{held} matches the pin ({where}): the official file"
                else:
                    entry["check"] = (f"SHA-256{held} {digest[:12]}... differs from the pin {pin[:12]}... ({where}): "
                                      "not the official file (runs use it as it is)")
        else:
            entry["check"] = _verified(key, found)
        entries.append(entry)
    entries.insert(len(folder.DATASET_KEYS), {
        "item": "sample", "option": "dataset=sample", "status": "bundled", "path": str(SAMPLE_PATH),
        "size": SAMPLE_PATH.stat().st_size, "check": "bundled with lme (synthetic)"})
    for key, variable in (("templates", "LME_JUDGE_TEMPLATES"), ("instructions", "LME_STUDY_INSTRUCTIONS")):
        if os.environ.get(variable):
            entry = next(e for e in entries if e["item"] == key)
            entry["override"] = f"{variable}={os.environ[variable]} (runs read that file instead)"
    return entries


def _verified(key: str, path: Path) -> str:
    from lme.util.errors import LmeError

    try:
        if key == "templates":
            from lme.data.judge_templates import load_templates

            return f"{len(load_templates(path))} templates, each SHA-256 matches lme's pin"
        from lme.answer.study_instructions import STUDY_STEPS, load_study_instructions

        load_study_instructions(path)
        return f"{len(STUDY_STEPS)} steps, each composes to the study's published SHA-256"
    except LmeError as exc:
        return f"refused: {exc}"


def where_command(argv: Sequence[str], out: Callable[[str], None] | None = None) -> int:
    """`python -m lme data where [--verify] [--json] [overrides]`: what the data folder holds."""
    from lme.config.compose import split_overrides
    from lme.data import folder
    from lme.config.design import compose_design

    overrides, rest = split_overrides(argv)
    parser = make_parser(
        "python -m lme data where",
        "What the data folder (data_dir, LME_DATA_DIR) holds for each dataset option, the judge templates and the "
        "study's instructions file; what it lacks, with the command that gets it. No network.",
        epilog="Each file is looked for in the folder, then in its subfolder (longmemeval/ for LongMemEval's files "
               "and templates, oh_study/ for the study's instructions), as .json, .json.xz or .json.gz.")
    parser.add_argument("--verify", action="store_true",
                        help="hash the data files too (decompressing .json.xz / .json.gz) and compare with the pins; "
                             "without it only the templates and instructions (a few KB) are checked")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    options = parser.parse_args(rest)
    data_dir = compose_design(overrides).data_dir
    entries = survey(data_dir, verify=options.verify)
    emit = out or (lambda line: print(line, flush=True))
    if options.json:
        emit(json.dumps({"data_dir": str(data_dir), "absolute": str(data_dir.resolve()),
                         "from": _data_dir_source(overrides), "items": entries}))
        return 0
    emit(f"data folder: {data_dir} ({_data_dir_source(overrides)})"
         + ("" if data_dir.is_dir() else "; it does not exist yet"))
    emit(f"  looked in: the folder, then {', '.join(sorted({i.subfolder + '/' for i in folder.ITEMS.values()}))}")
    width = max(len(e["option"]) for e in entries)
    for e in entries:
        if e["status"] == "missing":
            emit(f"  {e['option']:<{width}}  {e['check']}")
        else:
            emit(f"  {e['option']:<{width}}  {e['path']}  {_size(e['size'])}  {e['check']}")
        if e.get("override"):
            emit(f"  {'':<{width}}  {e['override']}")
    return 0


def stats_command(argv: Sequence[str]) -> int:
    """`python -m lme data stats [--json] [overrides]`: LongMemEval's per-question statistics, or, for
    `dataset.benchmark=locomo`, LoCoMo's counts with each conversation counted once (`lme.data.stats`)."""
    from dataclasses import asdict

    from lme.config.compose import split_overrides
    from lme.data.dataset import load_dataset
    from lme.data.stats import dataset_stats, format_table, stats_json

    overrides, rest = split_overrides(argv)
    parser = make_parser("python -m lme data stats", "Dataset statistics, no model call.")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    options = parser.parse_args(rest)
    from lme.config.design import compose_design

    spec = compose_design(overrides).dataset
    path, questions = load_dataset(spec)
    if spec.benchmark == "locomo":  # questions share their conversation: each history counted once
        from lme.data.benchmark import benchmark_named, json_document
        from lme.data.load import read_data
        from lme.data.stats import format_locomo_table, locomo_stats

        locomo = locomo_stats(questions, json_document(read_data(path), path), benchmark_named("locomo").categories)
        print(json.dumps(asdict(locomo)) if options.json else f"{path}\n\n{format_locomo_table(locomo)}")
        return 0
    stats = dataset_stats(questions)
    if options.json:
        print(json.dumps(stats_json(stats)))
    else:
        print(f"{path}\n\n{format_table(stats)}")
    return 0


def split_command(argv: Sequence[str]) -> int:
    from lme.config.compose import split_overrides
    from lme.config.design import compose_design
    from lme.data.dataset import load_file
    from lme.data.splits import (
        DEV_SIZE,
        SPLIT_RULES,
        SPLIT_SEED,
        STUDY_SPLIT_SEED,
        committed_split,
        make_split,
        make_study_split,
        split_names,
        split_path,
        write_split,
    )

    overrides, rest = split_overrides(argv)
    parser = make_parser("python -m lme data split", "Draw the dev/test split from a file.")
    parser.add_argument("--rule", choices=SPLIT_RULES, default="stratified",
                        help="stratified: lme's split by type (s_dev.txt, s_test.txt; seed 0); study: the reference "
                             "study's split by question group (s_study_dev.txt, s_study_test.txt; seed 17)")
    parser.add_argument("--seed", type=int, default=None,
                        help=f"the split's seed (default {SPLIT_SEED}; with --rule study {STUDY_SPLIT_SEED})")
    parser.add_argument("--dev-size", type=int, default=None,
                        help=f"development questions (default {DEV_SIZE}; --rule study takes a fifth of the groups)")
    parser.add_argument("--out", type=Path, help="write the two id lists into this folder")
    parser.add_argument("--check", action="store_true", help="fail unless the split equals the committed lists")
    options = parser.parse_args(rest)
    study = options.rule == "study"
    if study and options.dev_size is not None:
        raise LmeError("python -m lme data split: --dev-size has no meaning with --rule study, whose development "
                       "set is the first fifth of the question groups.")
    seed = options.seed if options.seed is not None else (STUDY_SPLIT_SEED if study else SPLIT_SEED)
    dev_size = options.dev_size if options.dev_size is not None else DEV_SIZE
    spec = compose_design(overrides).dataset
    path = spec.path
    questions = load_file(path, spec.benchmark, spec.options)
    if not study and not 0 <= dev_size <= len(questions):
        raise LmeError(f"{path}: holds {len(questions)} questions, too few for --dev-size {dev_size}.")
    types = {q.question_id: q.question_type for q in questions}
    if study:
        split = make_study_split((q.question_id for q in questions), seed)
    else:
        split = make_split(((q.question_id, q.question_type) for q in questions), seed, dev_size)
    names = split_names(options.rule)

    print(f"{path}: {len(questions)} questions, seed {seed}, rule {options.rule}")
    print(f"| question_type | {names[0]} | {names[1]} |\n|---|---:|---:|")
    for question_type in dict.fromkeys(types.values()):
        counts = [sum(types[qid] == question_type for qid in ids) for ids in (split.dev, split.test)]
        print(f"| {question_type} | {counts[0]} | {counts[1]} |")
    print(f"| all | {len(split.dev)} | {len(split.test)} |")

    committed = committed_split(options.rule) if all(split_path(name).is_file() for name in names) else None
    same = committed is not None and (split.dev, split.test) == (committed.dev, committed.test)
    print("equal to the committed lists" if same else "differs from the committed lists")
    if options.out is not None:
        for written in write_split(split, options.out, options.rule):
            print(f"wrote {written}")
    if options.check and not same:
        changed = len(set(split.dev) ^ set(committed.dev if committed else ()))
        raise LmeError(
            f"{path}: the split drawn with seed {seed} (rule {options.rule}) differs from the committed lists "
            f"({changed} ids change sides or are absent)."
        )
    sys.stdout.flush()
    return 0

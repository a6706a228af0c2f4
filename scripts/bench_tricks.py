"""Each start-up and per-question trick of lme measured with it on and off (issue 37): fresh processes, on and
off alternated, medians and spread. The table of figures is docs/performance.md, "Tricks and what each saves".

    python scripts/bench_tricks.py TRICK [--pairs 3] [--data S]
    python scripts/bench_tricks.py all --pairs 3

A trick is switched off inside the child process only (a module attribute replaced before use, a memo's bound
set to 0, an empty template folder), never in the code:

- `parse_pause` (`lme.data.load.load_questions`): the collector paused while the file parses: the load's CPU
  and the collector's CPU during it (`gc.callbacks`);
- `file_freeze` (`lme.data.dataset._load_held`): S frozen once loaded: one full collection afterwards;
- `litellm_freeze` (`lme.models.litellm_loader.import_litellm`): the import paused and frozen: its CPU and one
  full collection afterwards;
- `job_freeze` (a freeze after the first job's parts, as `lme.study.job._run_job` did until 2026-12-07, removed
  when this measured it moving nothing): what is still unfrozen once litellm and the file are frozen and a bm25
  design's parts are built: one full collection afterwards;
- `memo_key` (`lme.models.cache._MESSAGES`), `memo_payload` (`lme.answer.reader._PAYLOADS`): the same ~100 KB
  reader prompt for 3 seeds, per question;
- `store_template` (`lme.tracking.store_template.create_whole`): a new MLflow SQLite store, a copy of the
  template against MLflow's migrations;
- `warm_call` (`lme.models.litellm_loader.warm_call_path`), `warm_tokenizers` (`lme.study.job.warm_tokenizers`):
  the first (mock) completion, the first token count, warmed or not.

`--study startup|gc` measures in whole studies instead (`scripts/bench_orchestration.py`'s study command against
the loopback server, rounds rotating the order of the switches): `startup`, a single run's time to its first
request on S (4 questions); `gc`, S's first `--questions` x 3 seeds at zero latency, the collector's time in the
study's process and the objects each freeze moved. There the tricks are switched off by
`scripts/bench_tricks_site/sitecustomize.py` (on the studies' PYTHONPATH), which can also switch off
`held_parse`, `prefetch`, `helper_warm` and `helper_nice`:

    python scripts/bench_tricks.py --study gc --rounds 2 --questions 20 parse_pause file_freeze litellm_freeze job_freeze
    python scripts/bench_tricks.py --study startup --rounds 3 held_parse prefetch helper_warm
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import DEFAULT_S, ROOT  # noqa: E402

TRICKS = ("parse_pause", "file_freeze", "litellm_freeze", "job_freeze", "memo_key", "memo_payload", "store_template",
          "warm_call", "warm_tokenizers")
STUDY_TRICKS = (*TRICKS, "held_parse", "prefetch", "helper_warm", "helper_nice")
TEMPLATES_ENV = "LME_MLFLOW_TEMPLATES"
SITE = Path(__file__).resolve().parent / "bench_tricks_site"
S = DEFAULT_S


def _collection_ms(generation: int) -> float:
    """The CPU of one collection of `generation` now, in ms (a full one first, so garbage does not count)."""
    gc.collect()
    began = time.process_time()
    gc.collect(generation)
    return 1000 * (time.process_time() - began)


def child(mode: str, side: str) -> dict[str, float]:
    """One side of one trick, measured in this process."""
    on = side == "on"
    if mode == "parse_pause":  # lme.data.load.load_questions: the collector paused while S parses
        import contextlib

        import lme.data.load as load

        if not on:
            load.collection_paused = contextlib.nullcontext
        from lme.data.load import read_data
        data = read_data(S)
        spent = {"gc_cpu_s": 0.0, "collections": 0, "began": 0.0}

        def collecting(phase: str, info: dict) -> None:
            if phase == "start":
                spent["began"] = time.process_time()
            else:
                spent["gc_cpu_s"] += time.process_time() - spent["began"]
                spent["collections"] += 1

        gc.callbacks.append(collecting)
        cpu, wall = time.process_time(), time.perf_counter()
        load.load_questions(S, data=data)
        return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                "gc_cpu_s": spent["gc_cpu_s"], "collections": spent["collections"]}
    if mode == "file_freeze":  # dataset._load_held: S frozen after the parse; what a full collection costs later
        from lme.data.dataset import load_questions_once
        import lme.data.dataset as dataset

        if not on:
            dataset.freeze_long_lived = lambda *args, **kwargs: False
        load_questions_once(Path(S))
        gc.collect()
        return {"full_collection_ms": _collection_ms(2), "gen1_ms": _collection_ms(1), "tracked": len(gc.get_objects())}
    if mode == "litellm_freeze":  # litellm_loader.import_litellm: import with the collector paused, then frozen
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        import contextlib

        import lme.util.heap as heap

        if not on:
            heap.collection_paused = contextlib.nullcontext
            heap.freeze_long_lived = lambda *args, **kwargs: False
        from lme.models.litellm_loader import import_litellm
        cpu, wall = time.process_time(), time.perf_counter()
        import_litellm()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        return {"import_cpu_s": cpu, "import_wall_s": wall, "full_collection_ms": _collection_ms(2)}
    if mode == "job_freeze":  # job: after the first job's parts, everything alive frozen (litellm, file frozen before)
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        from lme.models.litellm_loader import import_litellm
        import_litellm()
        from lme.config.design import compose_design
        design = compose_design(["+design=bm25", f"dataset.path={S}", "limit=5"])
        from lme.data.dataset import load_dataset
        load_dataset(design.dataset)
        import lme.answer.run  # noqa: F401
        import lme.study.job  # noqa: F401

        design.build_retriever()
        from lme.util.heap import freeze_long_lived

        if on:
            freeze_long_lived("job")
        else:
            gc.collect(1)
        return {"full_collection_ms": _collection_ms(2), "tracked": len(gc.get_objects())}
    if mode == "memo_key":  # models.cache._messages_digest: 3 seeds send the same ~100 KB reader prompt
        import lme.models.cache as cache
        if not on:
            cache._MESSAGES.max_chars = 0
        import random
        random.seed(1)
        words = ["memory", "session", "turn", "date", "user", "assistant", "café", "2023/05/01"]
        per = []
        for number in range(100):
            text = " ".join(random.choice(words) for _ in range(15000)) + str(number)  # ~100 KB
            messages = [{"role": "system", "content": "instr"}, {"role": "user", "content": text}]
            began = time.perf_counter()
            for _seed in range(3):
                cache._messages_digest([dict(m) for m in messages]).copy()
            per.append(time.perf_counter() - began)
        return {"ms_per_question_3_seeds": 1000 * sum(per) / len(per)}
    if mode == "memo_payload":  # answer.reader.reader_payload: the same memory's payload encoded once for 3 seeds
        import lme.answer.reader as reader
        if not on:
            reader._PAYLOADS.max_chars = 0
        from lme.data.load import load_questions
        from lme.memory.base import Memory
        per = []
        for q in load_questions(S)[:100]:
            text = "\n".join(f"[{t.turn_id}] {t.content}" for t in q.turns())[:100_000]
            memory = Memory(text, len(text.encode()), ())
            began = time.process_time()
            for _seed in range(3):
                reader.reader_payload(q, memory, None, "lme")
            per.append(time.process_time() - began)
        return {"ms_per_question_3_seeds": 1000 * sum(per) / len(per)}
    if mode == "store_template":  # store_template.create_whole: a new store as a copy of an empty one
        import tempfile

        from mlflow.tracking import MlflowClient

        from lme.tracking.store_template import create_whole
        folder = Path(tempfile.mkdtemp())
        if not on:
            os.environ[TEMPLATES_ENV] = str(folder / "templates")  # empty: migrations run

        def make(t: Path) -> None:
            MlflowClient(tracking_uri=f"sqlite:///{t.absolute()}").search_experiments(max_results=1)
        cpu, wall = time.process_time(), time.perf_counter()
        create_whole(folder / "mlflow.db", make)
        MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}").search_experiments(max_results=1)
        return {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall}
    if mode == "warm_call":  # litellm_loader.warm_call_path: litellm's first-call set-up done before the first request
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        from lme.models.litellm_loader import import_litellm, warm_call_path
        litellm = import_litellm()
        if on:
            warm_call_path()
        cpu, wall = time.process_time(), time.perf_counter()
        litellm.completion(model="openai/gpt-5-mini", messages=[{"role": "user", "content": "q"}],
                           mock_response="a", api_key="x", num_retries=0)
        return {"first_call_cpu_ms": 1000 * (time.process_time() - cpu),
                "first_call_wall_ms": 1000 * (time.perf_counter() - wall)}
    if mode == "warm_tokenizers":  # job.warm_tokenizers: the reader's tokenizer loaded before the first count
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        from lme.models.litellm_loader import import_litellm
        import_litellm()
        from lme.models.pricing import count_input_tokens
        if on:
            count_input_tokens("gpt-5-mini", [{"role": "user", "content": "warm"}])
        cpu, wall = time.process_time(), time.perf_counter()
        count_input_tokens("gpt-5-mini", [{"role": "user", "content": "the first question"}])
        return {"first_count_cpu_ms": 1000 * (time.process_time() - cpu),
                "first_count_wall_ms": 1000 * (time.perf_counter() - wall)}
    raise SystemExit(mode)


def measure(trick: str, pairs: int) -> dict[str, object]:
    """`pairs` on/off pairs of fresh children, alternating which side runs first; medians, min and max."""
    found: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    for number in range(pairs):
        for side in (("on", "off") if number % 2 == 0 else ("off", "on")):
            done = subprocess.run([sys.executable, __file__, trick, "--child", side, "--data", str(S)],
                                  capture_output=True, text=True, cwd=ROOT, check=False)
            if done.returncode:
                raise SystemExit(f"bench_tricks: {trick} {side} failed:\n{done.stderr[-2000:]}")
            found[side].append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary: dict[str, object] = {"trick": trick, "pairs": pairs, "date": time.strftime("%Y-%m-%d %H:%M"),
                                  "load_average": round(os.getloadavg()[0], 1)}
    for key in found["on"][0]:
        for side in ("on", "off"):
            values = [run[key] for run in found[side]]
            summary[f"{key} {side}"] = {"median": round(statistics.median(values), 4),
                                        "min": round(min(values), 4), "max": round(max(values), 4)}
    return summary


def _study_once(kind: str, off: str, root: Path, questions: int) -> dict[str, object]:
    """One study with the tricks `off` (comma-separated, "" for none) switched off."""
    import tempfile

    import bench_orchestration as orchestration

    log = Path(tempfile.mkdtemp(prefix="log-", dir=root))
    saved = dict(os.environ)
    os.environ.update({"BENCH_TRICKS_OFF": off, "BENCH_TRICKS_LOG": str(log),
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), saved.get("PYTHONPATH")]))})
    try:
        work = Path(tempfile.mkdtemp(prefix="study-", dir=root))
        if kind == "startup":
            run = orchestration.run_study(S, orchestration.STARTUP_QUESTIONS, 1, 0.0, 32, work, multirun=False)
        else:
            run = orchestration.run_study(S, questions, 3, 0.0, 32, work)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    studies = [json.loads(path.read_text(encoding="utf-8")) for path in log.glob("*.json")]
    study = next((found for found in studies if str(found["argv"][0]).endswith("__main__.py")), None)
    collector = sum(seconds for _, seconds in study["generations"].values()) if study else float("nan")
    return {"first_request_s": run.first_request_s, "wall_s": run.wall_s, "collector_s": collector,
            "full_collections": study["generations"]["2"][0] if study else -1,
            "frozen_objects": study["freezes"] if study else {}}


def study(kind: str, tricks: list[str], rounds: int, questions: int) -> dict[str, object]:
    """Rounds of studies, the trick switches rotating: one with every trick on, then one per trick off."""
    import tempfile

    configs = ["", *tricks]
    found: dict[str, list[dict[str, object]]] = {config or "all on": [] for config in configs}
    with tempfile.TemporaryDirectory(prefix="lme-bench-tricks-") as folder:
        for number in range(rounds):
            for config in configs[number % len(configs):] + configs[:number % len(configs)]:
                result = _study_once(kind, config, Path(folder), questions)
                found[config or "all on"].append(result)
                print(f"bench_tricks: round {number + 1}, {config or 'all on'} off: {json.dumps(result)}",
                      file=sys.stderr, flush=True)
    summary: dict[str, object] = {"study": kind, "rounds": rounds, "date": time.strftime("%Y-%m-%d %H:%M"),
                                  "load_average": round(os.getloadavg()[0], 1)}
    for config, runs in found.items():
        summary[config] = {key: {"median": round(statistics.median(run[key] for run in runs), 3),  # type: ignore[misc]
                                 "runs": [round(run[key], 3) for run in runs]}  # type: ignore[arg-type]
                           for key in ("first_request_s", "wall_s", "collector_s")}
        summary[config]["frozen_objects"] = [run["frozen_objects"] for run in runs]  # type: ignore[index]
    return summary


def main(argv: list[str] | None = None) -> int:
    global S
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trick", nargs="+", choices=[*STUDY_TRICKS, "all"])
    parser.add_argument("--study", choices=("startup", "gc"), help="measure in whole studies (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="--study: rounds, each every switch once (3)")
    parser.add_argument("--questions", type=int, default=20, help="--study gc: S's first N questions (20)")
    parser.add_argument("--pairs", type=int, default=3, help="on/off pairs, alternated (3)")
    parser.add_argument("--data", type=Path, default=DEFAULT_S, help=f"a LongMemEval file (default {DEFAULT_S})")
    parser.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    S = args.data
    if args.child:
        print(json.dumps(child(args.trick[0], args.child)))
        return 0
    chosen = list(STUDY_TRICKS if args.study else TRICKS) if "all" in args.trick else args.trick
    if args.study:
        print(json.dumps(study(args.study, chosen, args.rounds, args.questions)), flush=True)
        return 0
    unknown = sorted(set(chosen) - set(TRICKS))
    if unknown:
        parser.error(f"{', '.join(unknown)}: measured in whole studies only (--study startup|gc)")
    for trick in chosen:
        print(json.dumps(measure(trick, args.pairs)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A multirun's data file is loaded once, in the background, while the parent sets up MLflow."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import read_write

import lme
import lme.config.resolvers  # noqa: F401
from lme.data import dataset
from lme.config.design import design_from_config, sweeps_dataset
from lme.util.errors import LmeError
from lme.study.multirun import runs_jobs_here

CONF = lme.CONF_DIR


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=overrides, return_hydra_config=True)


@pytest.fixture(autouse=True)
def nothing_loaded():
    dataset._LOADED.clear()
    yield
    dataset._LOADED.clear()


def test_the_prefetched_file_is_the_one_the_job_gets():
    cfg = _compose(["+design=bm25"])
    thread = dataset.prefetch_dataset(design_from_config(cfg, check=False).dataset)
    assert thread is not None
    thread.join(timeout=60)
    assert len(dataset._LOADED) == 1
    held = next(iter(dataset._LOADED.values()))
    path, questions = dataset.load_dataset(design_from_config(cfg, check=False).dataset)
    assert questions and questions[0] is held[0]  # the job's load waited for the prefetch, it did not read again
    assert {q.question_id for q in questions} <= {q.question_id for q in held}


def test_a_job_started_during_the_prefetch_waits_for_it_and_loads_once():
    cfg = _compose(["+design=bm25"])
    thread = dataset.prefetch_dataset(design_from_config(cfg, check=False).dataset)
    _, questions = dataset.load_dataset(design_from_config(cfg, check=False).dataset)  # at once: the prefetch is most likely still loading
    thread.join(timeout=60)
    (held,) = dataset._LOADED.values()
    assert questions[0] is held[0]  # one load: a second would have left other objects behind


def test_a_bad_file_is_reported_by_the_job_not_the_prefetch(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('[{"question_id": ', encoding="utf-8")
    cfg = _compose(["+design=bm25", f"dataset.path={bad}"])
    thread = dataset.prefetch_dataset(design_from_config(cfg, check=False).dataset)
    thread.join(timeout=60)  # fails quietly
    assert dataset._LOADED == {}
    with pytest.raises(LmeError, match="broken.json"):
        dataset.load_dataset(design_from_config(cfg, check=False).dataset)


def test_no_prefetch_of_a_file_the_process_holds_until_it_changes(tmp_path):
    cfg = _compose(["+design=bm25"])
    spec = design_from_config(cfg, check=False).dataset
    dataset.load_dataset(spec)
    assert dataset.prefetch_dataset(spec) is None  # held: nothing to load
    copy = tmp_path / Path(spec.path).name
    copy.write_bytes(Path(spec.path).read_bytes())
    other = design_from_config(_compose(["+design=bm25", f"dataset.path={copy}"]), check=False).dataset
    thread = dataset.prefetch_dataset(other)  # another file: loaded, and the first one let go
    assert thread is not None
    thread.join(timeout=60)
    assert dataset.prefetch_dataset(other) is None


@pytest.mark.slow  # one single run of two sample questions, offline reader and judge, in this process
def test_a_single_run_loads_its_file_in_the_background_while_it_imports(tmp_path, monkeypatch):
    """Without a multirun parent to start it, the job itself starts the load in a background thread before
    its imports (litellm) and waits for it; a later job of the same process loads nothing."""
    import threading

    from lme.study.job import run_job

    loads = []
    real_load = dataset.load_questions

    def noting_thread(path, **kwargs):
        loads.append(threading.current_thread().name)
        return real_load(path, **kwargs)

    monkeypatch.setattr(dataset, "load_questions", noting_thread)
    overrides = ["+design=bm25", "limit=2", "tracking.enabled=false", f"cache_dir={tmp_path / 'cache'}"]
    for job in ("one", "two"):  # each job writes under ./outputs of its own folder
        (tmp_path / job).mkdir()
    monkeypatch.chdir(tmp_path / "one")
    run_job(design_from_config(_compose(overrides)))
    assert loads == ["lme-prefetch"]
    monkeypatch.chdir(tmp_path / "two")
    run_job(design_from_config(_compose([*overrides, "seed=2"])))
    assert loads == ["lme-prefetch"]  # held: the second job neither loads nor starts a thread


def test_a_job_waits_for_a_prefetch_its_thread_has_not_yet_started(monkeypatch):
    """The prefetch holds the load lock from the moment it is asked for, so a job that asks for the file
    before the scheduler has run the prefetch thread waits for that load instead of making its own."""
    import threading
    import time

    loads = []
    real_load = dataset.load_questions

    def noting_thread(path, **kwargs):
        loads.append(threading.current_thread().name)
        return real_load(path, **kwargs)

    class LateThread(threading.Thread):
        def run(self):
            time.sleep(0.3)  # scheduled late: the job reaches the file first
            super().run()

    monkeypatch.setattr(dataset, "load_questions", noting_thread)
    monkeypatch.setattr(dataset.threading, "Thread", LateThread)
    spec = design_from_config(_compose(["+design=bm25"]), check=False).dataset
    thread = dataset.prefetch_dataset(spec)
    assert thread is not None
    path, questions = dataset.load_dataset(spec)
    assert loads == ["lme-prefetch"]
    assert questions and any(q is questions[0] for q in next(iter(dataset._LOADED.values())))
    thread.join(timeout=60)
    assert dataset.prefetch_dataset(spec) is None  # held now: nothing more to start, and the lock is free
    assert dataset._LOADING.acquire(timeout=1)
    dataset._LOADING.release()


def test_no_prefetch_for_a_streamed_file_a_missing_file_or_a_sweep_over_data(tmp_path):
    assert dataset.prefetch_dataset(design_from_config(_compose(["+design=bm25", "dataset.stream=true"])).dataset) is None
    assert dataset.prefetch_dataset(
        design_from_config(_compose(["+design=bm25", f"dataset.path={tmp_path / 'absent.json'}"]), check=False).dataset) is None
    for sweep, over_data in ((["dataset=sample,oracle"], True), (["dataset.path=a.json,b.json"], True),
                             (["+design=bm25", "seed=1,2,3"], False), (["dataset=oracle", "seed=range(1,4)"], False)):
        dataset._LOADED.clear()  # nothing held: only the sweep decides
        cfg = _compose(["+design=bm25"])
        with read_write(cfg.hydra.overrides):  # what on_multirun_start sees: the sweep's overrides as typed
            cfg.hydra.overrides.task = sweep
        assert sweeps_dataset(cfg) is over_data, sweep
        thread = dataset.prefetch_dataset(design_from_config(cfg, check=False).dataset)
        assert (thread is None) is over_data
        if thread is not None:
            thread.join(timeout=60)


def test_only_the_basic_launcher_runs_jobs_in_this_process():
    assert runs_jobs_here(_compose(["+design=bm25"]))
    assert not runs_jobs_here(_compose(["+design=bm25", "hydra/launcher=joblib"]))


def test_tokenizers_of_counted_models_are_warmed_in_the_background_others_not():
    """`warm_tokenizers` counts a token for each paid reader and judge model in a thread when their calls
    are counted (a dollar cap), loading the tokenizer before the first reservation needs it; offline
    models, or paid ones with no cap or token rate limit (bounded by bytes, never counted), start none."""
    from lme.study.job import warm_tokenizers
    from lme.models import pricing

    offline = design_from_config(_compose(["budget.study_dollars=5"]), check=False)
    assert warm_tokenizers(offline) is None
    uncapped = design_from_config(_compose(["reader=gpt5_mini", "judge=longmemeval"]), check=False)
    assert warm_tokenizers(uncapped) is None
    paid = design_from_config(_compose(["reader=gpt5_mini", "judge=longmemeval", "budget.study_dollars=5"]),
                              check=False)
    thread = warm_tokenizers(paid)
    assert thread is not None and thread.name == "lme-warm-tokenizers"
    thread.join(timeout=60)
    assert not thread.is_alive()
    # the warmed counts are remembered: the same count again is served from the process's memo
    before = dict(pricing._COUNTS)
    for part in (paid.reader, paid.judge):
        assert pricing.count_input_tokens(part.model.node["model"], [{"role": "user", "content": "warm"}]) > 0
    assert pricing._COUNTS == before


def test_warming_follows_the_gateways_rule_for_when_an_input_is_counted(monkeypatch):
    """A token rate limit alone (no dollar cap) is read by the gateway's limiter, so that model's tokenizer is
    warmed; the judge, with neither, is not. Both decisions come from `pricing.input_is_counted`."""
    from lme.study.job import warm_tokenizers
    from lme.models import pricing
    from lme.models.pricing import input_is_counted

    assert input_is_counted(False, 60_000.0) and input_is_counted(True, None) and not input_is_counted(False, None)
    monkeypatch.setattr(pricing, "_COUNTS", {})  # a fresh memo: what the thread counted is all there is
    limited = design_from_config(_compose(["reader=gpt5_mini", "judge=longmemeval",
                                           "+reader.model.tokens_per_minute=60000"]), check=False)
    thread = warm_tokenizers(limited)
    assert thread is not None
    thread.join(timeout=60)
    assert len(pricing._COUNTS) == 1
    warm = [{"role": "user", "content": "warm"}]
    pricing.count_input_tokens(limited.reader.model.node["model"], warm)
    assert len(pricing._COUNTS) == 1  # the reader's count was the warmed one
    pricing.count_input_tokens(limited.judge.model.node["model"], warm)
    assert len(pricing._COUNTS) == 2  # the judge's was not warmed


def test_a_held_back_parse_waits_for_its_release_and_parses_the_bytes_read_before(monkeypatch):
    """`hold_parse`: the thread reads (and decompresses) the file at once but parses nothing until
    `release_parse()`; then it parses those bytes, once."""
    import time

    calls = []
    real_load = dataset.load_questions

    def noting(path, **kwargs):
        calls.append(kwargs.get("data"))
        return real_load(path, **kwargs)

    monkeypatch.setattr(dataset, "load_questions", noting)
    spec = design_from_config(_compose(["+design=bm25"]), check=False).dataset
    thread = dataset.prefetch_dataset(spec, hold_parse=True)
    assert thread is not None
    try:
        time.sleep(0.5)  # the bundled sample reads in well under this
        assert calls == [] and thread.is_alive() and dataset._LOADED == {}
    finally:
        dataset.release_parse()
    thread.join(timeout=60)
    assert len(calls) == 1 and isinstance(calls[0], bytes) and calls[0][:1] == b"["
    assert len(dataset._LOADED) == 1


def test_a_job_asking_for_a_held_back_file_lets_the_parse_go_and_waits_for_it():
    """Nobody released the parse: the job's own load does, then waits for that one load (no deadlock on the
    load lock the prefetch holds, no second load)."""
    spec = design_from_config(_compose(["+design=bm25"]), check=False).dataset
    thread = dataset.prefetch_dataset(spec, hold_parse=True)
    assert thread is not None
    _, questions = dataset.load_dataset(spec)
    thread.join(timeout=60)
    assert not thread.is_alive()
    (held,) = dataset._LOADED.values()
    assert questions[0] is held[0]
    assert dataset._PARSE.is_set()


def test_the_parse_is_let_go_however_the_start_up_beside_it_ends():
    """`loading_in_background`: the block is the caller's start-up; a failure in it still lets the file parse
    (a job that runs later finds it loaded, and nothing waits on a parse no one released)."""
    spec = design_from_config(_compose(["+design=bm25"]), check=False).dataset
    with pytest.raises(RuntimeError, match="start-up failed"):
        with dataset.loading_in_background(spec) as thread:
            assert thread is not None and not dataset._PARSE.is_set()
            raise RuntimeError("start-up failed")
    assert dataset._PARSE.is_set()
    thread.join(timeout=60)
    assert not thread.is_alive() and len(dataset._LOADED) == 1


def test_bytes_read_ahead_load_as_the_file_does(tmp_path):
    """`load_questions(path, data=read_data(path))` gives the questions the file gives, and bad bytes are
    reported against the file, in the same sentence as when it is read there."""
    from lme.data.load import load_questions, read_data

    spec = design_from_config(_compose(["+design=bm25"]), check=False).dataset
    ahead = load_questions(spec.path, data=read_data(spec.path))
    assert ahead == load_questions(spec.path) and len(ahead) > 1
    bad = tmp_path / "broken.json"
    bad.write_text('[{"question_id": ', encoding="utf-8")
    with pytest.raises(LmeError) as from_file:
        load_questions(bad)
    with pytest.raises(LmeError) as from_bytes:
        load_questions(bad, data=read_data(bad))
    assert str(from_bytes.value) == str(from_file.value) and "broken.json" in str(from_bytes.value)

"""Progress on stderr (`lme.util.progress`): periodic lines off a terminal, a tqdm bar on one, nothing when
disabled; and the embedding, fetch, `lme memory` and `lme retrieval` paths that report through it."""

from __future__ import annotations

import hashlib
import io
import json
import re
import threading
import time

import pytest

from lme.util import progress as progress_module
from lme.util.errors import LmeError
from lme.util.progress import (
    INTERVAL_ENV,
    Progress,
    config_flag,
    default_interval,
    enabled_as,
    format_duration,
    progress,
    set_enabled,
)

LINE = re.compile(r"^lme: \[bm25 seed=1\] (\d+)/10 questions \((\d+\.\d)%\), [\d.,]+ questions/s, (ETA \S+|in \S+)$")


class TerminalStream(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _enabled_and_fast(monkeypatch: pytest.MonkeyPatch):
    """Every test starts with progress on and a 0.2 s interval, and leaves the switch as it found it."""
    monkeypatch.setenv(INTERVAL_ENV, "0.2")
    with enabled_as(True):
        yield


def _progress_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "lme-progress"]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


# ---------------------------------------------------------------------------------------------- the display


def test_lines_appear_at_the_interval_off_a_terminal() -> None:
    stream = io.StringIO()
    started = time.monotonic()
    with progress("[bm25 seed=1]", 10, "questions", stream=stream) as shown:
        assert shown.mode == "lines"
        for _ in range(7):
            shown.update()
            time.sleep(0.1)
    seconds = time.monotonic() - started
    lines = _lines(stream.getvalue())
    assert 2 <= len(lines) <= seconds / 0.2 + 1, lines  # at most one per 0.2 s, plus the last one
    assert all(LINE.match(line) for line in lines), lines
    assert lines[-1].startswith("lme: [bm25 seed=1] 7/10 questions (70.0%)") and " in " in lines[-1]
    done = [int(LINE.match(line).group(1)) for line in lines]
    assert done == sorted(done)
    assert all("ETA" in line for line in lines[:-1])


def test_a_long_silent_step_still_prints_the_current_state() -> None:
    stream = io.StringIO()
    with progress("[bm25 seed=1]", 10, "questions", stream=stream) as shown:
        shown.update(3)
        time.sleep(0.9)  # no update at all: the timer thread reports
        timer_lines = _lines(stream.getvalue())
    assert len(timer_lines) >= 2, timer_lines
    assert all(line.startswith("lme: [bm25 seed=1] 3/10 questions (30.0%)") for line in timer_lines)


def test_a_short_run_prints_nothing() -> None:
    stream = io.StringIO()
    with progress("[bm25 seed=1]", 10, "questions", stream=stream, interval_s=30) as shown:
        shown.update(10)
    assert stream.getvalue() == ""


def test_disabled_prints_nothing_and_starts_no_thread() -> None:
    stream = io.StringIO()
    before = threading.active_count()
    with progress("off by the caller", 5, "questions", enabled=False, stream=stream) as shown:
        assert shown.mode == "off" and threading.active_count() == before
        shown.update(5)
        time.sleep(0.3)
    set_enabled(False)  # what `progress: false` does
    terminal = TerminalStream()
    for stream_ in (stream, terminal):
        with progress("off by the switch", 5, "questions", enabled=True, stream=stream_) as shown:
            assert shown.mode == "off" and threading.active_count() == before
            shown.update(5)
            time.sleep(0.3)
    assert stream.getvalue() == "" and terminal.getvalue() == ""


def test_a_terminal_gets_a_tqdm_bar() -> None:
    stream = TerminalStream()
    before = threading.active_count()
    with progress("[bm25 seed=1]", 4, "questions", stream=stream) as shown:
        assert shown.mode == "bar" and threading.active_count() == before  # tqdm draws; no timer thread
        for _ in range(4):
            shown.update()
    text = stream.getvalue()
    assert "\r" in text and "[bm25 seed=1]" in text and "4/4" in text and "100%" in text
    assert "lme: " not in text  # no periodic line on a terminal
    assert "questions/s" in text


def test_the_timer_thread_stops_at_close() -> None:
    before = threading.active_count()
    shown = progress("[bm25 seed=1]", 10, "questions", stream=io.StringIO())
    assert threading.active_count() == before + 1 and len(_progress_threads()) == 1
    shown.update()
    shown.close()
    assert threading.active_count() == before and not _progress_threads()
    shown.close()  # closing twice is harmless
    shown.update()  # and so is a late update: nothing is printed, nothing restarts
    assert not _progress_threads()


def test_the_thread_stops_when_the_block_raises() -> None:
    before = threading.active_count()
    with pytest.raises(RuntimeError), progress("[x]", None, "questions", stream=io.StringIO()):
        raise RuntimeError("boom")
    assert threading.active_count() == before


def test_updates_from_many_threads_all_count_and_cost_microseconds() -> None:
    stream = io.StringIO()
    with progress("[bm25 seed=1]", 40_000, "questions", stream=stream) as shown:
        workers = [threading.Thread(target=lambda: [shown.update() for _ in range(10_000)]) for _ in range(4)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - started
    assert shown.n == 40_000
    assert seconds / 40_000 < 50e-6  # a lock and a clock read (a few microseconds) even on a loaded machine


def test_interval_zero_writes_a_line_per_update_and_the_last_one() -> None:
    stream = io.StringIO()
    with progress("[bm25 seed=1]", 10, "questions", stream=stream, interval_s=0) as shown:
        assert not _progress_threads()
        shown.update(4)
        shown.update(6)
    lines = _lines(stream.getvalue())
    assert len(lines) == 3 and lines[0].startswith("lme: [bm25 seed=1] 4/10 questions (40.0%)")
    assert lines[-1].startswith("lme: [bm25 seed=1] 10/10 questions (100.0%)") and " in " in lines[-1]


def test_bytes_are_scaled_and_an_unknown_total_has_no_eta() -> None:
    stream = io.StringIO()
    with progress("fetch f.json", 264_400_000, "bytes", stream=stream, interval_s=0) as shown:
        shown.update(120_500_000)
    assert _lines(stream.getvalue())[0].startswith("lme: fetch f.json 120.5/264.4 MB (45.6%), ")
    assert re.search(r", [\d.]+ [kMG]?B/s, ETA \S+$", _lines(stream.getvalue())[0])
    stream = io.StringIO()
    with progress("embedding", None, "texts", stream=stream, interval_s=0) as shown:
        shown.update(12_000)
    first = _lines(stream.getvalue())[0]
    assert first.startswith("lme: embedding 12,000 texts, ") and "ETA" not in first and "%" not in first


def test_set_total_and_initial_work_and_initial_is_not_in_the_rate() -> None:
    shown = Progress("[x]", None, "questions", "lines", io.StringIO(), 30.0, initial=100)
    shown.set_total(200)
    shown.started -= 10  # ten seconds ago
    shown.update(20)
    line = shown.line()
    shown.close()
    assert line.startswith("[x] 120/200 questions (60.0%), 2.00 questions/s, ETA ")  # 20 in 10 s, not 120


def test_durations_and_the_interval_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [format_duration(s) for s in (0, 18.2, 118, 4080, 3 * 86400 + 7200)] == ["0s", "18s", "1m58s", "1h08m",
                                                                                     "3d02h"]
    monkeypatch.setenv(INTERVAL_ENV, "0.5")
    assert default_interval() == 0.5
    for bad in ("soon", "-1", "nan", ""):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        assert default_interval() == 30.0
    monkeypatch.delenv(INTERVAL_ENV)
    assert default_interval() == 30.0


def test_the_switch_and_the_config_flag() -> None:
    with enabled_as(False):
        assert not progress_module.is_enabled()
        with enabled_as(True):
            assert progress_module.is_enabled()
        assert not progress_module.is_enabled()
    assert progress_module.is_enabled()
    assert config_flag(True) is True and config_flag(False) is False
    with pytest.raises(LmeError, match=r"^progress must be true or false, not 'maybe'\.$"):
        config_flag("maybe")


def test_the_config_has_progress_on_by_default() -> None:
    from lme.cli import compose_config

    assert compose_config([]).progress is True
    assert compose_config(["progress=false"]).progress is False


# ---------------------------------------------------------------------------------------------- where it reports


def test_embedding_reports_texts_encoded_with_the_model_name(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from lme.retrieval import embedding_cache
    from lme.retrieval.dense import DenseRetriever

    monkeypatch.setenv(INTERVAL_ENV, "0")
    monkeypatch.setattr(embedding_cache, "PROGRESS_MIN_TEXTS", 1)  # a few dozen texts count as a large batch
    dense = DenseRetriever("minilm-packaged", device="cpu", batch_size=2, cache_path=None)  # chunks of 32 texts
    texts = [f"Note {index}: I watered the fern on the balcony and read chapter {index}." for index in range(40)]
    vectors = dense.embed(texts, "", "turns")
    dense.close()
    assert vectors.shape[0] == 40
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lme: ")]
    label = "lme: semantic: embedding turns with minilm-packaged "
    assert len(lines) == 3 and all(line.startswith(label) for line in lines), lines  # 2 chunks and the last line
    assert lines[0].startswith(label + "32/40 texts (80.0%)") and "texts/s, ETA" in lines[0]
    assert lines[-1].startswith(label + "40/40 texts (100.0%)")


def test_embedding_reports_nothing_when_progress_is_off(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from lme.retrieval import embedding_cache
    from lme.retrieval.dense import DenseRetriever

    monkeypatch.setenv(INTERVAL_ENV, "0")
    monkeypatch.setattr(embedding_cache, "PROGRESS_MIN_TEXTS", 1)
    dense = DenseRetriever("minilm-packaged", device="cpu", batch_size=2, cache_path=None)
    with enabled_as(False):
        dense.embed([f"text {index}" for index in range(40)], "", "turns")
    dense.close()
    assert "lme: " not in capsys.readouterr().err


def test_fetch_reports_bytes(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from data.hub_server import HubServer
    from lme.data.fetch import DATASETS, REPO_ID, REVISION, fetch_dataset

    monkeypatch.setenv(INTERVAL_ENV, "0")
    filename = DATASETS["s"].filename
    data = json.dumps([{"filler": "x" * 1000, "index": index} for index in range(200)]).encode("utf-8")
    pins = {filename: hashlib.sha256(data).hexdigest()}
    with HubServer(REPO_ID, REVISION, {filename: data}) as hub:
        fetch_dataset("s", tmp_path / "data", endpoint=hub.url, pins=pins, progress=None)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lme: ")]
    size = f"{len(data) / 1000:.1f}"
    assert lines and all(line.startswith(f"lme: fetch {filename} ") for line in lines), lines
    assert lines[-1].startswith(f"lme: fetch {filename} {size}/{size} kB (100.0%), ") and "B/s, in " in lines[-1]


def test_the_fetch_command_respects_progress_false(tmp_path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from data.hub_server import HubServer
    from lme.cli.data import fetch_command
    from lme.data import fetch

    monkeypatch.setenv(INTERVAL_ENV, "0")
    filename = fetch.DATASETS["oracle"].filename
    data = b'[{"question_id": "a"}]' * 100
    pins = {filename: hashlib.sha256(data).hexdigest()}
    printed: list[str] = []
    with HubServer(fetch.REPO_ID, fetch.REVISION, {filename: data}) as hub:
        argv = ["oracle", "--endpoint", hub.url, f"data_dir={tmp_path / 'off'}", "progress=false"]
        assert fetch_command(argv, dataset_pins=pins, out=printed.append) == 0
        off = capsys.readouterr().err
        argv = ["oracle", "--endpoint", hub.url, f"data_dir={tmp_path / 'on'}"]
        assert fetch_command(argv, dataset_pins=pins, out=printed.append) == 0
        on = capsys.readouterr().err
    assert "lme: fetch" not in off and "100%" not in off
    assert f"lme: fetch {filename} " in on  # a line, not a bar: stderr is not a terminal
    assert progress_module.is_enabled()  # the command left the switch as it found it


@pytest.mark.parametrize("command", ["memory", "retrieval"])
def test_the_per_question_commands_report_questions_done(tmp_path, capsys, monkeypatch, command) -> None:
    from lme.cli.memory import main as memory_main
    from lme.cli.retrieval import main as retrieval_main

    monkeypatch.setenv(INTERVAL_ENV, "0")
    main = {"memory": memory_main, "retrieval": retrieval_main}[command]
    common = ["limit=3", f"cache_dir={tmp_path}", "tracking.enabled=false"]
    assert main([*common, "--json"]) == 0
    on = capsys.readouterr().err
    assert main([*common, "--json", "progress=false"]) == 0
    off = capsys.readouterr().err
    assert progress_module.is_enabled()
    label = "memory (" if command == "memory" else "ranking ("
    lines = [line for line in on.splitlines() if line.startswith("lme: " + label)]
    assert len(lines) == 4, on  # one per question (interval 0) and the last one
    assert re.search(r" 3/3 questions \(100\.0%\), [\d.,]+ questions/s, in \S+$", lines[-1]), lines[-1]
    assert not [line for line in off.splitlines() if line.startswith("lme: " + label)], off
    with pytest.raises(LmeError, match="progress must be true or false"):
        main([*common, "progress=sometimes"])


def test_write_puts_a_line_above_the_bar_or_in_the_stream() -> None:
    terminal = TerminalStream()
    with progress("[x]", 2, "questions", stream=terminal) as shown:
        shown.update()
        shown.write("q1: correct")
        shown.update()
    assert "q1: correct\n" in terminal.getvalue() and "2/2" in terminal.getvalue()
    plain = io.StringIO()
    for enabled in (True, False):
        with progress("[x]", 2, "questions", enabled=enabled, stream=plain, interval_s=30) as shown:
            shown.write(f"line while enabled={enabled}")
    assert plain.getvalue() == "line while enabled=True\nline while enabled=False\n"


# ---------------------------------------------------------------------------------------------- in a terminal

LIBRARY_BAR_TEXT = ("Loading weights", "Batches", "it/s]")  # transformers', sentence-transformers', tqdm's default


def run_in_terminal(argv: list[str], env: dict[str, str], cwd, timeout: float = 600) -> str:
    """`argv`'s output (stdout and stderr) as a terminal shows it: the process runs on a pseudo-terminal whose
    size was never set (0 x 0, as some terminals and tools open one)."""
    import os
    import pty
    import select
    import subprocess

    master, slave = pty.openpty()
    process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, close_fds=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
    assert process.returncode == 0, b"".join(chunks).decode("utf-8", "replace")[-3000:]
    return b"".join(chunks).decode("utf-8", "replace")


def _lme_env(**extra: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LME_", "OPENAI", "HF_HUB_DISABLE_PROGRESS", "TQDM_"))}
    return {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1", **extra}


def test_a_terminal_that_reports_no_size_still_gets_a_bar() -> None:
    import os
    import pty
    import select

    master, slave = pty.openpty()  # never sized: 0 x 0, where tqdm drew nothing at all
    assert os.get_terminal_size(slave).columns == 0
    with os.fdopen(slave, "w", encoding="utf-8") as stream:
        with progress("[bm25 seed=1]", 4, "questions", stream=stream) as shown:
            assert shown.mode == "bar"
            for _ in range(4):
                shown.update()
        stream.flush()
    text = ""
    while select.select([master], [], [], 0.5)[0]:  # everything the bar wrote
        try:
            text += os.read(master, 65536).decode("utf-8", "replace")
        except OSError:  # EIO: nothing more
            break
    os.close(master)
    assert "[bm25 seed=1]" in text and "4/4" in text and "100%" in text, repr(text)


def test_library_bars_are_off_and_a_users_setting_is_kept(tmp_path) -> None:
    import subprocess
    import sys

    code = ("import os, sys; from lme.util.progress import quiet_library_bars; quiet_library_bars(); "
            "import huggingface_hub.utils as hub, transformers.utils.logging as tl; "
            "print(os.environ['HF_HUB_DISABLE_PROGRESS_BARS'], hub.are_progress_bars_disabled(), "
            "tl.is_progress_bar_enabled())")
    quiet = subprocess.run([sys.executable, "-c", code], env=_lme_env(), capture_output=True, text=True, timeout=120)
    assert quiet.stdout.split() == ["1", "True", "False"], quiet.stderr
    kept = subprocess.run([sys.executable, "-c", code], env=_lme_env(HF_HUB_DISABLE_PROGRESS_BARS="0"),
                          capture_output=True, text=True, timeout=120)
    assert kept.stdout.split() == ["0", "False", "True"], kept.stderr
    # imported first, then turned off: the switches, not only the variable
    late = ("import huggingface_hub.utils as hub, transformers.utils.logging as tl; "
            "from lme.util.progress import quiet_library_bars; quiet_library_bars(); "
            "print(hub.are_progress_bars_disabled(), tl.is_progress_bar_enabled())")
    late = subprocess.run([sys.executable, "-c", late], env=_lme_env(), capture_output=True, text=True, timeout=120)
    assert late.stdout.split() == ["True", "False"], late.stderr


SEMANTIC_SWEEP = ["+design=semantic", "-m", "seed=1,2", "limit=4", "embedding.backend=torch", "embedding.precision=fp32",
                  "tracking.enabled=false"]


@pytest.mark.slow
def test_a_sweep_in_a_terminal_shows_the_embedding_then_a_bar_per_job_and_a_line_per_finished_job(tmp_path) -> None:
    import sys

    argv = [sys.executable, "-m", "lme", *SEMANTIC_SWEEP, f"cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    text = run_in_terminal(argv, _lme_env(), cwd=tmp_path)
    for library in LIBRARY_BAR_TEXT:
        assert library not in text, (library, text[-3000:])
    embedding = text.find("[semantic seed=1] semantic: embedding turns with minilm-packaged")
    first_bar = text.find("[semantic seed=1]: ")  # tqdm writes the label, a colon, the bar
    assert 0 <= embedding < first_bar, text[-3000:]  # the job's embedding is shown before its questions bar
    for seed in (1, 2):
        bar = text[text.find(f"[semantic seed={seed}]: "):]
        assert "4/4" in bar.split("\n", 1)[0] and "questions/s" in bar.split("\n", 1)[0], text[-3000:]
        assert text.count(f"design semantic, seed {seed}: accuracy ") == 1  # its line once it finished
    assert text.count("these scores measure the stand-ins, not the design") == 1  # once, in the first job's summary


@pytest.mark.slow
def test_off_a_terminal_a_job_reports_its_embedding_before_its_questions(tmp_path) -> None:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "lme", *SEMANTIC_SWEEP, f"cache_dir={tmp_path / 'cache'}",
            f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = subprocess.run(argv, env=_lme_env(LME_PROGRESS_INTERVAL_S="0"), cwd=tmp_path, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("lme: [semantic seed=1]")]
    embedding = [i for i, line in enumerate(lines) if " semantic: embedding turns with minilm-packaged " in line]
    questions = [i for i, line in enumerate(lines) if re.search(r" \d+/4 questions \(", line)]
    assert embedding and questions and max(embedding) < min(questions), lines
    loading = [i for i, line in enumerate(lines) if re.search(r"minilm-packaged: loading the model for \d+ texts$", line)]
    assert len(loading) == 1 and loading[0] < min(embedding), lines  # the load first: the rate and ETA are encoding's
    assert re.search(r"embedding turns with minilm-packaged (\d+)/\1 texts \(100\.0%\), .* in \S+$",
                     lines[max(embedding)]), lines
    for library in LIBRARY_BAR_TEXT:
        assert library not in result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("design semantic, seed ")] == [
        line for line in result.stdout.splitlines() if re.match(r"design semantic, seed [12]: accuracy ", line)]
    assert len(re.findall(r"^design semantic, seed [12]: accuracy ", result.stdout, re.M)) == 2

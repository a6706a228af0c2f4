"""`lme data fetch`: end to end against a loopback hub (and raw-GitHub) server, never the internet.

The data files are small synthetic LongMemEval files; pins are injected
(`pins=` / `dataset_pins=`), never edited in the project. The judge-template
tests build an `evaluate_qa.py` shaped like LongMemEval's at test time, around
made-up templates, and around the real ones from the real test data (tests/shared_data.py,
LME_TEST_DATA) when it is there (skipped otherwise), so no template text is committed.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from data.evaluate_qa_fixture import TEMPLATE_KEYS, build_evaluate_qa
from data.hub_server import HubServer
from lme.cli import compose_config
from lme.cli.data import fetch_command
from lme.data.fetch import DATASETS, REPO_ID, REVISION, TEMPLATES_COMMIT, fetch_dataset, fetch_templates
from lme.data.judge_source import extract_templates
from lme.data.load import load_questions
from lme.util.errors import LmeError
from lme.judge import LONGMEMEVAL_TEMPLATE_SHA256, load_templates, make_judge
from lme.models.gateway import ModelSpec
from shared_data import TEMPLATES, needs

REPO_ROOT = Path(__file__).resolve().parents[2]
S_FILE = DATASETS["s"].filename
M_FILE = DATASETS["m"].filename
ORACLE_FILE = DATASETS["oracle"].filename
RAW_REPO = "/xiaowu0162/LongMemEval"  # raw.githubusercontent.com layout: /{owner}/{repo}/{commit}/{path}
RAW_PATH = f"{RAW_REPO}/{TEMPLATES_COMMIT}/src/evaluation/evaluate_qa.py"


def _record(index: int) -> dict:
    filler = " ".join(f"word{(index * 7 + k) % 97}" for k in range(400))
    return {
        "question_id": f"synthetic_{index:03d}",
        "question_type": "single-session-user",
        "question": f"What did I say in message {index}?",
        "answer": f"answer {index}",
        "question_date": "2023/06/10 (Sat) 09:30",
        "haystack_dates": ["2023/06/01 (Thu) 18:05"],
        "haystack_session_ids": [f"answer_{index}"],
        "haystack_sessions": [[
            {"role": "user", "content": f"Note {index}: answer {index}. {filler}", "has_answer": True},
            {"role": "assistant", "content": f"Noted. {filler}"},
        ]],
        "answer_session_ids": [f"answer_{index}"],
    }


DATA = json.dumps([_record(i) for i in range(40)], indent=1).encode("utf-8")  # about 240 KB, official format
DATA_SHA = hashlib.sha256(DATA).hexdigest()
TAMPERED = DATA.replace(b"answer 7", b"answer 8", 1)

SYNTHETIC_TEMPLATES = {
    key: f"Synthetic {key} template for fetch tests.\n\nQuestion: {{}}\n\nAnswer: {{}}\n\nResponse: {{}}\n\nyes/no?"
    for key in TEMPLATE_KEYS
}
SYNTHETIC_PINS = {key: hashlib.sha256(text.encode("utf-8")).hexdigest() for key, text in SYNTHETIC_TEMPLATES.items()}


def _hub(files: dict[str, bytes] | None = None, **kwargs) -> HubServer:
    return HubServer(REPO_ID, REVISION, files if files is not None else {S_FILE: DATA, ORACLE_FILE: DATA}, **kwargs)


def _contents(folder: Path) -> list[str]:
    """Everything under a folder, hidden files and folders included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _one_sentence(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message
    assert message.endswith(".")


# ---------------------------------------------------------------------------------------------- data files


def test_fetch_downloads_verifies_and_shows_a_progress_bar_without_a_tty(tmp_path, capsys):
    data_dir = tmp_path / "data"
    with _hub() as hub:
        result = fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA})
    assert result.downloaded and result.sha256 == DATA_SHA and result.digest_source == "lme"
    assert (data_dir / S_FILE).read_bytes() == DATA
    assert _contents(data_dir) == [S_FILE]  # no staging folder, temp file or HF metadata left
    assert hub.gets(S_FILE) == 1
    err = capsys.readouterr().err
    assert "100%" in err  # tqdm wrote its bar to a captured (non-TTY) stderr without failing
    assert [q.question_id for q in load_questions(data_dir / S_FILE)][:2] == ["synthetic_000", "synthetic_001"]


def test_a_second_fetch_of_a_present_verified_file_downloads_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with _hub() as hub:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
        requests_after_first = len(hub.requests)
        again = fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    assert not again.downloaded and again.sha256 == DATA_SHA
    assert len(hub.requests) == requests_after_first  # not even a HEAD


def test_a_present_file_with_the_wrong_digest_is_refused_and_kept(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / S_FILE).write_bytes(TAMPERED)
    with _hub() as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    assert "is present but has SHA-256" in str(err.value) and "delete it" in str(err.value)
    _one_sentence(str(err.value))
    assert hub.requests == []


def test_a_tampered_download_is_refused_and_leaves_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with _hub({S_FILE: TAMPERED}) as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    message = str(err.value)
    _one_sentence(message)
    assert f"expected {DATA_SHA}" in message and hashlib.sha256(TAMPERED).hexdigest() in message
    assert hub.gets(S_FILE) == 1
    assert _contents(data_dir) == []


def test_a_connection_dropped_mid_body_that_cannot_resume_leaves_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with _hub(faults={S_FILE: ["drop", "500"]}) as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    _one_sentence(str(err.value))
    assert "nothing was kept" in str(err.value)
    assert hub.gets(S_FILE) == 2  # the first GET was cut mid-body; huggingface_hub's resume got a 500
    assert _contents(data_dir) == []


def test_a_dropped_connection_is_retried_and_the_result_still_verified(tmp_path):
    data_dir = tmp_path / "data"
    with _hub(faults={S_FILE: ["drop"]}) as hub:
        result = fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    assert result.downloaded and (data_dir / S_FILE).read_bytes() == DATA
    assert hub.gets(S_FILE) == 2  # huggingface_hub retried the cut download; what it kept is verified
    assert _contents(data_dir) == [S_FILE]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_an_interrupted_fetch_leaves_nothing(tmp_path, signum):
    """The real command in a child process, interrupted while the server holds the body half sent."""
    data_dir = tmp_path / "data"
    with _hub({ORACLE_FILE: DATA}, faults={ORACLE_FILE: ["stall"]}) as hub:
        code = textwrap.dedent(f"""
            import sys
            from lme.cli.data import fetch_command
            sys.exit(fetch_command(["oracle", "--record-digest", "--endpoint", {hub.url!r}, "data_dir={data_dir}"]))
        """)
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert hub.stalled.wait(timeout=60), child.communicate(timeout=5)
            staged = [p for p in _contents(data_dir) if p.startswith(".fetch-")]
            assert staged  # the download was under way, in its staging folder
            child.send_signal(signum)
            out, err = child.communicate(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
    if child.returncode == 0:
        # the interrupt landed where huggingface_hub retries (seen under heavy load): the fetch then
        # finished, and what it kept is the whole, verified file, never a partial one
        assert _contents(data_dir) == sorted([ORACLE_FILE, "pins.json"]), err.decode()
        assert (data_dir / ORACLE_FILE).read_bytes() == DATA
    else:
        assert _contents(data_dir) == [], err.decode()


def test_a_killed_fetch_leaves_a_staging_folder_the_next_fetch_removes(tmp_path):
    data_dir = tmp_path / "data"
    stale = data_dir / f".fetch-{S_FILE}.999999999.deadbeef"  # a pid no process has
    stale.mkdir(parents=True)
    (stale / S_FILE).write_bytes(DATA[:100])
    with _hub() as hub:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    assert _contents(data_dir) == [S_FILE]


def test_an_unknown_digest_is_refused_without_the_flag_and_recorded_with_it(tmp_path):
    data_dir = tmp_path / "data"
    with _hub() as hub:
        with pytest.raises(LmeError) as err:
            fetch_dataset("s", data_dir, endpoint=hub.url, pins={}, progress=False)
        _one_sentence(str(err.value))
        assert "--record-digest" in str(err.value) and "no pinned SHA-256" in str(err.value)
        assert hub.requests == [] and _contents(data_dir) == []  # refused before downloading anything

        result = fetch_dataset("s", data_dir, endpoint=hub.url, pins={}, record_digest=True, progress=False)
    assert result.downloaded and result.recorded
    pins_file = data_dir / "pins.json"
    assert result.digest_source == str(pins_file)
    recorded = json.loads(pins_file.read_text())["files"][S_FILE]
    assert recorded["sha256"] == DATA_SHA and recorded["revision"] == REVISION and recorded["repo"] == REPO_ID
    assert _contents(data_dir) == sorted([S_FILE, "pins.json"])

    # the recorded digest now guards later fetches: without the flag, and against a tampered copy
    (data_dir / S_FILE).unlink()
    with _hub({S_FILE: TAMPERED}) as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={}, progress=False)
    assert f"expected {DATA_SHA}" in str(err.value) and str(pins_file) in str(err.value)
    assert _contents(data_dir) == ["pins.json"]


def test_a_first_download_that_disagrees_with_the_hub_etag_is_not_recorded(tmp_path):
    data_dir = tmp_path / "data"
    with _hub(etags={S_FILE: "0" * 64}) as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=hub.url, pins={}, record_digest=True, progress=False)
    assert "the hub announced" in str(err.value)
    assert _contents(data_dir) == []


def test_no_network_is_one_sentence_pointing_to_dataset_path(tmp_path):
    data_dir = tmp_path / "data"
    started = time.monotonic()
    with pytest.raises(LmeError) as err:
        fetch_dataset("s", data_dir, endpoint=_closed_port_url(), pins={S_FILE: DATA_SHA}, progress=False)
    assert time.monotonic() - started < 10  # no minutes of retries before saying so
    message = str(err.value)
    _one_sentence(message)
    assert "no network" in message and "dataset.path=" in message
    assert _contents(data_dir) == []


def test_a_file_missing_on_the_hub_is_one_sentence(tmp_path):
    with _hub({}) as hub, pytest.raises(LmeError) as err:
        fetch_dataset("s", tmp_path / "data", endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    _one_sentence(str(err.value))
    assert S_FILE in str(err.value) and "not found" in str(err.value)


# ---------------------------------------------------------------------------------------------- the command


def test_command_fetches_with_overrides_and_reports(tmp_path):
    data_dir = tmp_path / "data"
    lines: list[str] = []
    with _hub() as hub:
        code = fetch_command(["fetch", "oracle", "--record-digest", "--no-progress", "--endpoint", hub.url,
                              f"data_dir={data_dir}"], out=lines.append)
    assert code == 0
    assert (data_dir / ORACLE_FILE).read_bytes() == DATA
    assert DATA_SHA in lines[0] and "recorded" in lines[0]


def test_command_all_refuses_unpinned_files_before_downloading(tmp_path):
    data_dir = tmp_path / "data"
    with _hub() as hub, pytest.raises(LmeError) as err:
        fetch_command(["all", "--endpoint", hub.url, "--templates-base-url", hub.url + RAW_REPO,
                       f"data_dir={data_dir}"],
                      dataset_pins={S_FILE: DATA_SHA})
    _one_sentence(str(err.value))
    assert M_FILE in str(err.value) and ORACLE_FILE in str(err.value) and "--record-digest" in str(err.value)
    assert hub.requests == [] and _contents(data_dir) == []


def test_command_all_fetches_everything(tmp_path):
    data_dir = tmp_path / "data"
    raw = {RAW_PATH: build_evaluate_qa(SYNTHETIC_TEMPLATES).encode()}
    with _hub({S_FILE: DATA, M_FILE: DATA, ORACLE_FILE: DATA}, raw=raw) as hub:
        lines: list[str] = []
        fetch_command(["all", "--record-digest", "--no-progress", "--endpoint", hub.url, "--templates-base-url",
                       hub.url + RAW_REPO, f"data_dir={data_dir}"], dataset_pins={S_FILE: DATA_SHA},
                      template_pins=SYNTHETIC_PINS, out=lines.append)
    assert _contents(data_dir) == sorted([S_FILE, M_FILE, ORACLE_FILE, "pins.json", "judge_templates.json"])
    assert set(json.loads((data_dir / "pins.json").read_text())["files"]) == {M_FILE, ORACLE_FILE}
    assert len(lines) == 4


def test_command_rejects_an_unknown_target_in_one_sentence(tmp_path):
    with pytest.raises(LmeError) as err:
        fetch_command(["x", f"data_dir={tmp_path}"])
    _one_sentence(str(err.value))
    assert "invalid choice" in str(err.value)


def test_command_reads_data_dir_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("LME_DATA_DIR", str(tmp_path / "env-data"))
    with _hub() as hub:
        fetch_command(["s", "--no-progress", "--endpoint", hub.url], dataset_pins={S_FILE: DATA_SHA}, out=lambda _: None)
    assert (tmp_path / "env-data" / S_FILE).read_bytes() == DATA


# ---------------------------------------------------------------------------------------------- dataset configs


@pytest.mark.parametrize("name", ["s", "m", "oracle"])
def test_dataset_configs_point_at_the_fetched_files(tmp_path, name):
    cfg = compose_config([f"dataset={name}", f"data_dir={tmp_path}"])
    assert Path(str(cfg.dataset.path)) == tmp_path / DATASETS[name].filename


def test_a_run_on_a_missing_fetched_file_says_how_to_fetch_it(tmp_path):
    from design_helpers import load_dataset

    cfg = compose_config(["dataset=m", f"data_dir={tmp_path}"])
    with pytest.raises(LmeError) as err:
        load_dataset(cfg)
    message = str(err.value)
    _one_sentence(message)
    assert "python -m lme data fetch m" in message and "dataset.path=" in message


def test_a_run_reads_a_fetched_file(tmp_path):
    from design_helpers import load_dataset

    with _hub() as hub:
        fetch_dataset("s", tmp_path, endpoint=hub.url, pins={S_FILE: DATA_SHA}, progress=False)
    path, questions = load_dataset(compose_config(["dataset=s", f"data_dir={tmp_path}", "limit=3"]))
    assert path == tmp_path / S_FILE and len(questions) == 3


# ---------------------------------------------------------------------------------------------- judge templates


@pytest.mark.parametrize("style", ["plain", "mixed"])
def test_templates_are_extracted_verified_and_stored(tmp_path, style):
    data_dir = tmp_path / "data"
    raw = {RAW_PATH: build_evaluate_qa(SYNTHETIC_TEMPLATES, style).encode()}
    with _hub({}, raw=raw) as hub:
        result = fetch_templates(data_dir, base_url=hub.url + RAW_REPO, pins=SYNTHETIC_PINS)
        again = fetch_templates(data_dir, base_url=hub.url + RAW_REPO, pins=SYNTHETIC_PINS)
    assert result.downloaded and not again.downloaded
    assert len([r for r in hub.requests if r[1] == RAW_PATH]) == 1
    stored = json.loads(result.path.read_text())
    assert stored["templates"] == SYNTHETIC_TEMPLATES and stored["sha256"] == SYNTHETIC_PINS
    assert TEMPLATES_COMMIT in stored["source"] and stored["url"] == hub.url + RAW_PATH
    assert load_templates(result.path, SYNTHETIC_PINS) == SYNTHETIC_TEMPLATES
    assert _contents(data_dir) == ["judge_templates.json"]


def test_a_tampered_template_is_refused_and_nothing_is_written(tmp_path):
    data_dir = tmp_path / "data"
    tampered = {**SYNTHETIC_TEMPLATES, "knowledge_update": SYNTHETIC_TEMPLATES["knowledge_update"] + " "}
    with _hub({}, raw={RAW_PATH: build_evaluate_qa(tampered).encode()}) as hub, pytest.raises(LmeError) as err:
        fetch_templates(data_dir, base_url=hub.url + RAW_REPO, pins=SYNTHETIC_PINS)
    message = str(err.value)
    _one_sentence(message)
    assert "'knowledge_update'" in message and f"expected {SYNTHETIC_PINS['knowledge_update']}" in message
    assert _contents(data_dir) == []


def test_a_damaged_templates_file_is_replaced_by_a_verified_one(tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "judge_templates.json").write_text('{"templates": {"abstention": "changed"}}')
    with _hub({}, raw={RAW_PATH: build_evaluate_qa(SYNTHETIC_TEMPLATES).encode()}) as hub:
        result = fetch_templates(data_dir, base_url=hub.url + RAW_REPO, pins=SYNTHETIC_PINS)
    assert result.downloaded and load_templates(result.path, SYNTHETIC_PINS) == SYNTHETIC_TEMPLATES


def test_templates_without_network_is_one_sentence(tmp_path):
    with pytest.raises(LmeError) as err:
        fetch_templates(tmp_path, base_url=_closed_port_url(), pins=SYNTHETIC_PINS)
    _one_sentence(str(err.value))
    assert "no network" in str(err.value) and "judge.templates_path=" in str(err.value)


def test_templates_missing_at_the_commit_is_one_sentence(tmp_path):
    with _hub({}) as hub, pytest.raises(LmeError) as err:
        fetch_templates(tmp_path, base_url=hub.url + RAW_REPO, pins=SYNTHETIC_PINS)
    _one_sentence(str(err.value))
    assert "HTTP 404" in str(err.value)


@needs(TEMPLATES)
@pytest.mark.parametrize("style", ["plain", "mixed"])
def test_the_real_templates_pass_the_project_pins_and_make_the_official_judge(tmp_path, monkeypatch, style):
    monkeypatch.delenv("LME_JUDGE_TEMPLATES", raising=False)
    real = json.loads(TEMPLATES.read_text(encoding="utf-8"))["templates"]
    data_dir = tmp_path / "data"
    with _hub({}, raw={RAW_PATH: build_evaluate_qa(real, style).encode()}) as hub:
        lines: list[str] = []
        assert fetch_command(["templates", "--templates-base-url", hub.url + RAW_REPO, f"data_dir={data_dir}"],
                             out=lines.append) == 0
    path = data_dir / "judge_templates.json"
    assert load_templates(path) == {key: real[key] for key in TEMPLATE_KEYS}  # lme's own pins
    judge = make_judge("longmemeval", True, ModelSpec(model="gpt-4o-2024-08-06"), templates_path=str(path))
    assert judge.digests == LONGMEMEVAL_TEMPLATE_SHA256
    cfg = compose_config(["judge=longmemeval", f"data_dir={data_dir}"])
    assert Path(str(cfg.judge.templates_path)) == path  # the official judge's config reads what fetch wrote


# ---------------------------------------------------------------------------------------------- the extractor


def _source_with(body: str) -> str:
    return "def get_anscheck_prompt(task, question, answer, response, abstention=False):\n" + textwrap.indent(
        textwrap.dedent(body), "    ")


def test_extractor_reads_a_flat_layout_and_shared_helper_strings():
    source = _source_with('''
        ask = "Question: {}\\n\\nAnswer: {}\\n\\nResponse: {}"
        if abstention:
            template = "A " + ask
        elif task == 'temporal-reasoning':
            template = "T " + ask
        elif task == 'knowledge-update':
            template = f"K {ask}"
        elif task == 'single-session-preference':
            template = "P " + ask
        elif task == 'single-session-user' or task in ('single-session-assistant', 'multi-session'):
            template = "S " + ask
        else:
            raise NotImplementedError
        return template.format(question, answer, response)
    ''')
    templates = extract_templates(source, "flat.py")
    assert templates["abstention"].startswith("A Question: {}")
    assert templates["knowledge_update"].startswith("K Question")
    assert templates["ssu_ssa_multisession"].startswith("S Question")


def test_extractor_reads_literals_formatted_in_place_inside_other_blocks():
    source = _source_with('''
        if abstention:
            return "A {} {} {}".format(question, answer, response)
        try:
            if task == 'temporal-reasoning':
                return ("T {} "
                        "{} {}").format(question, answer, response)
            elif task == 'knowledge-update':
                return "K {} {} {}".format(question, answer, response)
            elif task in {'single-session-preference'}:
                return "P {} {} {}".format(question, answer, response)
            elif task in ('single-session-user', 'single-session-assistant', 'multi-session'):
                return "S {} {} {}".format(question, answer, response)
        finally:
            pass
    ''')
    templates = extract_templates(source, "inline.py")
    assert templates == {"abstention": "A {} {} {}", "temporal_reasoning": "T {} {} {}",
                         "knowledge_update": "K {} {} {}", "single_session_preference": "P {} {} {}",
                         "ssu_ssa_multisession": "S {} {} {}"}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("if not abstention:\n    template = open('t').read()\nelse:\n    template = 'x'\n"
         "return template.format(1, 2, 3)\n", "Call expression"),
        ("if task == 'temporal-reasoning':\n    template = 'x'\nreturn template.format(1, 2, 3)\n",
         "defines no template for abstention"),
        ("template = 'x'\nreturn template.format(1, 2, 3)\n", "exactly one template key"),
        ("if len(task) > 3:\n    template = 'x'\nreturn template.format(1, 2, 3)\n", "branch condition"),
        ("if task == 'no-such-type':\n    template = 'x'\nreturn template.format(1, 2, 3)\n",
         "unknown question type 'no-such-type'"),
    ],
    ids=["not-a-literal", "missing-key", "no-branch", "odd-condition", "unknown-type"],
)
def test_extractor_refuses_what_it_cannot_read_in_one_sentence(body, needle):
    with pytest.raises(LmeError) as err:
        extract_templates(_source_with(body), "evaluate_qa.py")
    _one_sentence(str(err.value))
    assert needle in str(err.value)


def test_extractor_refuses_a_file_without_the_function_or_not_python():
    with pytest.raises(LmeError, match="defines no function get_anscheck_prompt"):
        extract_templates("x = 1\n", "evaluate_qa.py")
    with pytest.raises(LmeError, match="not valid Python"):
        extract_templates("<html>404</html>", "evaluate_qa.py")

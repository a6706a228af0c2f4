"""The dev/test split, the committed id lists, and selecting questions by split, ids, types and limit."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from design_helpers import load_dataset
from lme.cli import compose_config
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.data.select import Selection, select_questions
from lme.data.splits import (
    SPLIT_DIR,
    allocate,
    committed_split,
    make_split,
    read_ids,
    split_ids,
)
from lme.util.errors import DataError, LmeError
from shared_data import MINI, ORACLE, need
from shared_data import S_FILE as FULL_S

REPO = Path(__file__).resolve().parents[2]

S_TYPES = {
    "multi-session": 133,
    "temporal-reasoning": 133,
    "knowledge-update": 78,
    "single-session-user": 70,
    "single-session-assistant": 56,
    "single-session-preference": 30,
}
S_DEV = {
    "multi-session": 27,
    "temporal-reasoning": 27,
    "knowledge-update": 15,
    "single-session-user": 14,
    "single-session-assistant": 11,
    "single-session-preference": 6,
}
SHARED_COPY_LACKS = {"7e00a6cb", "gpt4_7a0daae1"}


def synthetic_questions() -> list[tuple[str, str]]:
    """500 (id, type) pairs shaped like S: its type sizes, 30 abstention questions on four types."""
    abstention = {"multi-session": 12, "temporal-reasoning": 6, "knowledge-update": 6, "single-session-user": 6}
    pairs = []
    for question_type, count in S_TYPES.items():
        for number in range(count):
            suffix = "_abs" if number < abstention.get(question_type, 0) else ""
            pairs.append((f"{question_type}-{number:03d}{suffix}", question_type))
    return pairs


# --- allocation and drawing -----------------------------------------------------------


def test_allocate_is_proportional_by_largest_remainder() -> None:
    assert allocate(S_TYPES, 100) == S_DEV
    assert allocate({"a": 1, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 0}  # ties: name order
    assert allocate({"a": 1, "b": 3}, 2) == {"a": 0, "b": 2}
    assert allocate({"a": 5, "b": 0}, 5) == {"a": 5, "b": 0}
    assert sum(allocate({"x": 7, "y": 11, "z": 13}, 10).values()) == 10
    with pytest.raises(LmeError):
        allocate({"a": 3}, 4)


def test_split_is_stratified_by_type_and_abstention() -> None:
    pairs = synthetic_questions()
    split = make_split(pairs, seed=0)
    types = dict(pairs)
    assert len(split.dev) == 100 and len(split.test) == 400
    assert set(split.dev).isdisjoint(split.test) and set(split.dev) | set(split.test) == set(types)
    assert Counter(types[qid] for qid in split.dev) == S_DEV
    dev_abstention = Counter(types[qid] for qid in split.dev if "_abs" in qid)
    assert dev_abstention == {
        "multi-session": 2,
        "temporal-reasoning": 1,
        "knowledge-update": 1,
        "single-session-user": 1,
    }
    assert list(split.dev) == sorted(split.dev) and list(split.test) == sorted(split.test)


def test_split_depends_on_the_seed_only() -> None:
    pairs = synthetic_questions()
    first = make_split(pairs, seed=0)
    assert make_split(list(reversed(pairs)), seed=0) == first  # file order does not matter
    other = make_split(pairs, seed=1)
    assert other.dev != first.dev
    assert Counter(dict(pairs)[qid] for qid in other.dev) == S_DEV


def test_split_rejects_a_repeated_id() -> None:
    with pytest.raises(LmeError, match="q1 is listed twice"):
        make_split([("q1", "multi-session"), ("q1", "multi-session")], dev_size=1)


# --- the committed lists ----------------------------------------------------------------


def test_committed_lists_are_100_dev_and_400_test_disjoint_sorted_ids() -> None:
    split = committed_split()
    assert len(split.dev) == 100 and len(split.test) == 400
    assert len(set(split.dev) | set(split.test)) == 500
    assert list(split.dev) == sorted(split.dev) and list(split.test) == sorted(split.test)
    for name in ("s_dev.txt", "s_test.txt"):
        lines = (SPLIT_DIR / name).read_text(encoding="utf-8").splitlines()
        assert all(line and line == line.strip() and " " not in line for line in lines)
    assert sum("_abs" in qid for qid in split.dev) == 5
    assert sum("_abs" in qid for qid in split.test) == 25


def test_oracle_file_reproduces_the_committed_lists() -> None:
    questions = load_questions(need(ORACLE))
    pairs = [(q.question_id, q.question_type) for q in questions]
    split = make_split(pairs)
    assert split == committed_split()
    types = dict(pairs)
    assert Counter(types[qid] for qid in split.dev) == S_DEV
    assert Counter(types.values()) == S_TYPES


def test_split_command_checks_and_writes_the_lists(tmp_path: Path) -> None:
    need(ORACLE)
    result = subprocess.run(
        [sys.executable, "-m", "lme", "data", "split", f"dataset.path={ORACLE}", "--check", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "equal to the committed lists" in result.stdout
    assert "| multi-session | 27 | 106 |" in result.stdout
    for name in ("s_dev.txt", "s_test.txt"):
        assert (tmp_path / name).read_bytes() == (SPLIT_DIR / name).read_bytes()


def test_split_command_check_fails_in_one_sentence_on_another_file() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lme", "data", "split", "--dev-size", "8", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "differs from the committed lists" in result.stderr
    assert "| all | 8 | 34 |" in result.stdout  # the bundled sample: 42 questions


@pytest.mark.slow
def test_shared_s_copy_lacks_exactly_two_split_ids_and_split_dev_names_the_missing_one() -> None:
    questions = load_questions(need(FULL_S))
    split = committed_split()
    assert set(split.dev) | set(split.test) == {q.question_id for q in questions} | SHARED_COPY_LACKS
    with pytest.raises(DataError) as caught:
        select_questions(questions, Selection(split="dev"), FULL_S)
    message = str(caught.value)
    assert "lacks 1 of the 100 questions of split dev (7e00a6cb)" in message
    assert "split_missing=skip" in message
    test = select_questions(questions, Selection(split="test", split_missing="skip"), FULL_S)
    assert len(test.questions) == 399 and test.skipped == ("gpt4_7a0daae1",)


# --- selection ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> list:
    return load_questions(SAMPLE_PATH)


def ids(selected) -> list[str]:
    return [q.question_id for q in selected.questions]


def test_no_filter_keeps_the_file(sample) -> None:
    assert ids(select_questions(sample, Selection(), SAMPLE_PATH)) == [q.question_id for q in sample]


def test_filters_combine_then_limit_takes_the_first(sample, tmp_path: Path) -> None:
    id_file = tmp_path / "mine.txt"
    chosen = [q.question_id for q in sample][::3]
    id_file.write_text("# my ids\n" + "\n".join(chosen) + "\n\n", encoding="utf-8")
    assert read_ids(id_file) == tuple(chosen)
    by_split = ids(select_questions(sample, Selection(split=str(id_file)), SAMPLE_PATH))
    assert by_split == chosen  # file order
    temporal = ids(
        select_questions(sample, Selection(split=str(id_file), question_types=("temporal-reasoning",)), SAMPLE_PATH)
    )
    types = {q.question_id: q.question_type for q in sample}
    assert temporal == [qid for qid in chosen if types[qid] == "temporal-reasoning"] and temporal
    limited = ids(
        select_questions(
            sample, Selection(split=str(id_file), question_types=("temporal-reasoning",), limit=1), SAMPLE_PATH
        )
    )
    assert limited == temporal[:1]
    assert ids(select_questions(sample, Selection(limit=0), SAMPLE_PATH)) == []


def test_explicit_ids_keep_their_order_and_a_missing_one_is_named(sample) -> None:
    wanted = (sample[5].question_id, sample[1].question_id)
    assert ids(select_questions(sample, Selection(question_ids=wanted), SAMPLE_PATH)) == list(wanted)
    with pytest.raises(DataError) as caught:
        select_questions(sample, Selection(question_ids=(sample[0].question_id, "nope_42")), SAMPLE_PATH)
    assert str(caught.value) == (f"{SAMPLE_PATH}: question nope_42 selected in config question_ids is not in the file.")


def test_split_ids_missing_from_the_file_fail_unless_skipped(sample, tmp_path: Path) -> None:
    id_file = tmp_path / "ids.txt"
    id_file.write_text(f"{sample[0].question_id}\nghost_1\nghost_2\n", encoding="utf-8")
    with pytest.raises(DataError) as caught:
        select_questions(sample, Selection(split=str(id_file)), SAMPLE_PATH)
    message = str(caught.value)
    assert message.startswith(f"{SAMPLE_PATH}: lacks 2 of the 3 questions of id list {id_file} (ghost_1, ghost_2)")
    assert "pass split_missing=skip to select the 1 it holds" in message
    selected = select_questions(sample, Selection(split=str(id_file), split_missing="skip"), SAMPLE_PATH)
    assert ids(selected) == [sample[0].question_id]
    assert selected.skipped == ("ghost_1", "ghost_2") and selected.split_size == 3


def test_a_file_holding_none_of_the_split_says_so(sample) -> None:
    for policy in ("error", "skip"):
        with pytest.raises(DataError) as caught:
            select_questions(sample, Selection(split="dev", split_missing=policy), SAMPLE_PATH)
        assert str(caught.value) == f"{SAMPLE_PATH}: holds none of the 100 questions of split dev."


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"question_types": ("multi-hops",)}, "unknown type 'multi-hops'"),
        ({"question_ids": ("a", "b", "a")}, "a is listed twice"),
        ({"limit": -1}, "limit=-1"),
        ({"split_missing": "ignore"}, "split_missing=ignore"),
    ],
)
def test_bad_selection_config_is_one_sentence(kwargs, needle) -> None:
    with pytest.raises(LmeError, match=needle):
        Selection(**kwargs)


def test_unknown_split_name_and_absent_id_file() -> None:
    with pytest.raises(LmeError, match="unknown split"):
        split_ids("validation")
    with pytest.raises(LmeError, match="no such id-list file"):
        split_ids("/nonexistent/ids.txt")


def test_config_values_accept_a_single_name_and_reject_a_non_number() -> None:
    selection = Selection.from_config(question_ids="q1", question_types=["multi-session"], limit=3)
    assert selection == Selection(question_ids=("q1",), question_types=("multi-session",), limit=3)
    assert Selection.from_config(question_ids=[]) == Selection()
    with pytest.raises(LmeError, match="limit=ten"):
        Selection.from_config(limit="ten")
    assert Selection.from_config(question_ids=[21436231]).question_ids == ("21436231",)


def test_an_id_hydra_reads_as_a_float_is_reported_with_how_to_quote_it() -> None:
    cfg = compose_config(["question_ids=[6e984301]"])
    with pytest.raises(LmeError) as caught:
        load_dataset(cfg)
    assert str(caught.value) == (
        "config question_ids: inf was read as a float, not a name; quote ids that look like numbers, "
        "e.g. question_ids=['6e984301']."
    )


# --- through the config, as a run selects --------------------------------------------------


def test_run_config_selects_types_and_limit(sample) -> None:
    path, questions = load_dataset(compose_config(["question_types=[knowledge-update,multi-session]", "limit=4"]))
    assert path == SAMPLE_PATH
    expected = [q.question_id for q in sample if q.question_type in ("knowledge-update", "multi-session")][:4]
    assert [q.question_id for q in questions] == expected


def test_run_config_unknown_type_is_an_error() -> None:
    with pytest.raises(LmeError, match="config question_types: unknown type 'multi_session'"):
        load_dataset(compose_config(["question_types=[multi_session]"]))


def test_run_config_that_selects_nothing_says_so() -> None:
    with pytest.raises(LmeError, match="selects no question .*limit=0"):
        load_dataset(compose_config(["limit=0"]))


def test_split_dev_on_the_mini_file(capsys: pytest.CaptureFixture[str]) -> None:
    need(MINI)
    with pytest.raises(DataError, match=r"lacks 9\d of the 100 questions of split dev .*split_missing=skip"):
        load_dataset(compose_config([f"dataset.path={MINI}", "split=dev"]))
    _, questions = load_dataset(compose_config([f"dataset.path={MINI}", "split=dev", "split_missing=skip"]))
    dev = set(committed_split().dev)
    mini_ids = [q.question_id for q in load_questions(MINI)]
    assert [q.question_id for q in questions] == [qid for qid in mini_ids if qid in dev]
    assert questions
    warning = capsys.readouterr().err
    assert warning.startswith("lme: warning: ") and "questions of split dev" in warning and "skipped" in warning


@pytest.mark.slow
def test_a_run_records_the_selected_ids_in_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow.tracking import MlflowClient

    from lme.config.design import design_from_config
    from lme.study.job import run_job

    monkeypatch.chdir(tmp_path)
    cfg = compose_config(
        [
            "question_types=[temporal-reasoning]",
            "limit=2",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
            f"tracking.artifact_location={tmp_path}/mlruns",
            f"cache_dir={tmp_path}/cache",
        ]
    )
    run_job(design_from_config(cfg))
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("lme").experiment_id])
    local = client.download_artifacts(run.info.run_id, "question_ids.txt", str(tmp_path))
    expected = [q.question_id for q in load_questions(SAMPLE_PATH) if q.question_type == "temporal-reasoning"][:2]
    assert Path(local).read_text(encoding="utf-8").splitlines() == expected
    assert run.data.params["question_types"] == json.dumps(["temporal-reasoning"])

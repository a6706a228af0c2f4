"""`lme data fetch locomo` against a loopback raw-GitHub server (never the internet), and `lme data stats` on
LoCoMo files: a tiny made-up one written here, and the real one from the shared test data (skipped without it).

The made-up file has LoCoMo's shape and no text from LoCoMo; its digest is pinned through `fetch_locomo(sha256=)` /
`fetch_command(locomo_pin=)`. The real file is only read from the shared data, never committed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from data.hub_server import HubServer
from lme.cli.data import fetch_command, stats_command
from lme.data.fetch import LOCOMO_COMMIT, LOCOMO_LICENSE, LOCOMO_SHA256, REPO_ID, REVISION, TARGETS, fetch_locomo
from lme.data.dataset import load_file
from lme.util.errors import LmeError
from shared_data import LOCOMO, needs

RAW_REPO = "/snap-research/LoCoMo"
RAW_PATH = f"{RAW_REPO}/{LOCOMO_COMMIT}/data/locomo10.json"


def _turn(speaker: str, dia: str, text: str, photo: str | None = None) -> dict:
    turn = {"speaker": speaker, "dia_id": dia, "text": text}
    if photo is not None:
        turn |= {"img_url": ["http://example.invalid/p.jpg"], "blip_caption": photo}
    return turn


def _tiny() -> list[dict]:
    """Two conversations: 3 sessions, 7 turns (2 with a photo), 6 questions."""
    one = {
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bo",
            "session_1_date_time": "9:00 am on 1 May, 2023",
            "session_1": [_turn("Ann", "D1:1", "I bought a red kite."), _turn("Bo", "D1:2", "Nice!", "a kite")],
            "session_2_date_time": "10:30 am on 3 May, 2023",
            "session_2": [_turn("Ann", "D2:1", "It flew well."), _turn("Bo", "D2:2", "Great.")],
        },
        "qa": [
            {"question": "What colour is the kite?", "answer": "red", "evidence": ["D1:1"], "category": 4},
            {"question": "How many kites?", "answer": 1, "evidence": ["D1:1; D9:9"], "category": 1},
            {"question": "When did it fly?", "answer": "3 May 2023", "evidence": ["D2:1"], "category": 2},
            {"question": "What is Bo's dog called?", "adversarial_answer": "Rex", "evidence": [], "category": 5},
        ],
    }
    two = {
        "sample_id": "conv-b",
        "conversation": {
            "speaker_a": "Cy", "speaker_b": "Di",
            "session_1_date_time": "2:00 pm on 5 June, 2023",
            "session_1": [_turn("Cy", "D1:1", "Hello."), _turn("Di", "D1:2", "Look.", "a café"),
                          _turn("Cy", "D1:3", "Lovely.")],
        },
        "qa": [
            {"question": "What did Di show?", "answer": "a café", "evidence": ["D1:2"], "category": 3},
            {"question": "What is Cy's job?", "answer": "none", "evidence": ["D"], "category": 5},
        ],
    }
    return [one, two]


TINY = json.dumps(_tiny(), indent=1, ensure_ascii=False).encode("utf-8")
TINY_SHA = hashlib.sha256(TINY).hexdigest()


def _server(body: bytes | None) -> HubServer:
    return HubServer(REPO_ID, REVISION, {}, raw={} if body is None else {RAW_PATH: body})


def _contents(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def _one_sentence(message: str) -> None:
    assert "\n" not in message and "Traceback" not in message and message.endswith(".")


# ---------------------------------------------------------------------------------------------- fetch


def test_fetch_downloads_verifies_and_a_second_fetch_downloads_nothing(tmp_path, capsys):
    data_dir = tmp_path / "data"
    with _server(TINY) as hub:
        result = fetch_locomo(data_dir, base_url=hub.url + RAW_REPO, sha256=TINY_SHA)
        again = fetch_locomo(data_dir, base_url=hub.url + RAW_REPO, sha256=TINY_SHA)
    assert result.downloaded and result.sha256 == TINY_SHA and result.path == data_dir / "locomo10.json"
    assert (data_dir / "locomo10.json").read_bytes() == TINY
    assert not again.downloaded and again.path == result.path
    assert [m for m, p, _ in hub.requests] == ["GET"] and hub.requests[0][1] == RAW_PATH
    assert _contents(data_dir) == ["locomo10.json"]  # no staging folder left
    assert "100%" in capsys.readouterr().err  # the progress bar, as the other fetches show it
    assert len(load_file(result.path, "locomo")) == 6


def test_the_command_reads_the_base_url_from_the_environment_and_prints_the_license_once(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    with _server(TINY) as hub:
        monkeypatch.setenv("LME_LOCOMO_BASE_URL", hub.url + RAW_REPO)
        first: list[str] = []
        second: list[str] = []
        assert fetch_command(["locomo", "--no-progress", f"data_dir={data_dir}"], locomo_pin=TINY_SHA,
                             out=first.append) == 0
        assert fetch_command(["locomo", "--no-progress", f"data_dir={data_dir}"], locomo_pin=TINY_SHA,
                             out=second.append) == 0
    assert len(hub.requests) == 1
    assert "downloaded and verified" in first[0] and LOCOMO_LICENSE in first[0] and "CC BY-NC 4.0" in first[0]
    assert "already present and verified" in second[0] and "CC BY-NC" not in second[0]


def test_a_wrong_digest_is_refused_in_one_sentence_and_leaves_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with _server(TINY) as hub, pytest.raises(LmeError) as err:
        fetch_locomo(data_dir, base_url=hub.url + RAW_REPO, progress=False)  # lme's pin: not the made-up file
    message = str(err.value)
    _one_sentence(message)
    assert f"expected {LOCOMO_SHA256}" in message and TINY_SHA in message and "discarded" in message
    assert _contents(data_dir) == []


def test_a_missing_file_is_one_sentence_and_leaves_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with _server(None) as hub, pytest.raises(LmeError) as err:
        fetch_locomo(data_dir, base_url=hub.url + RAW_REPO, sha256=TINY_SHA, progress=False)
    _one_sentence(str(err.value))
    assert "HTTP 404" in str(err.value)
    assert _contents(data_dir) == []


def test_a_present_copy_with_another_digest_is_refused_and_kept(tmp_path):
    data_dir = tmp_path / "data"
    (data_dir / "locomo").mkdir(parents=True)
    (data_dir / "locomo" / "locomo10.json").write_bytes(TINY + b"\n")
    with _server(TINY) as hub, pytest.raises(LmeError) as err:
        fetch_locomo(data_dir, base_url=hub.url + RAW_REPO, sha256=TINY_SHA, progress=False)
    _one_sentence(str(err.value))
    assert "is present but has SHA-256" in str(err.value) and hub.requests == []
    assert _contents(data_dir) == ["locomo", "locomo/locomo10.json"]


def test_locomo_is_a_target_of_its_own_and_not_part_of_all():
    from lme.cli.data import fetch_parser

    assert "locomo" in TARGETS
    assert fetch_parser().parse_args(["locomo"]).target == "locomo"
    assert "all (LongMemEval's files and the templates, not LoCoMo)" in " ".join(fetch_parser().format_help().split())


@needs(LOCOMO)
def test_the_real_file_passes_lme_s_pin(tmp_path):
    real = LOCOMO.read_bytes()
    data_dir = tmp_path / "data"
    with _server(real) as hub:
        lines: list[str] = []
        fetch_command(["locomo", "--no-progress", "--locomo-base-url", hub.url + RAW_REPO, f"data_dir={data_dir}"],
                      out=lines.append)
    assert (data_dir / "locomo10.json").read_bytes() == real
    assert LOCOMO_SHA256 in lines[0]


# ---------------------------------------------------------------------------------------------- stats


def _stats(capsys, *argv: str) -> str:
    assert stats_command(list(argv)) == 0
    return capsys.readouterr().out


def test_stats_of_a_tiny_file_count_each_conversation_once(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_bytes(TINY)
    got = json.loads(_stats(capsys, "dataset=locomo", f"dataset.path={path}", "--json"))
    history_a = sum(len(t.encode()) for t in ("I bought a red kite.", "Nice! and shared a kite.", "It flew well.",
                                              "Great."))
    history_b = sum(len(t.encode()) for t in ("Hello.", "Look. and shared a café.", "Lovely."))
    assert {k: v for k, v in got.items() if k != "per_conversation"} == {
        "conversations": 2, "sessions": 3, "turns": 7, "photo_turns": 2, "questions": 6,
        "categories": {"multi-hop": 1, "temporal": 1, "open-domain": 1, "single-hop": 1, "adversarial": 2},
        "adversarial_without_answer": 1, "integer_answers": 1, "unresolved_evidence": 2,
        "history_bytes": history_a + history_b,
    }
    assert got["per_conversation"] == [
        {"conversation": "conv-a", "sessions": 2, "turns": 4, "photo_turns": 1, "history_bytes": history_a,
         "questions": {"multi-hop": 1, "temporal": 1, "open-domain": 0, "single-hop": 1, "adversarial": 1}},
        {"conversation": "conv-b", "sessions": 1, "turns": 3, "photo_turns": 1, "history_bytes": history_b,
         "questions": {"multi-hop": 0, "temporal": 0, "open-domain": 1, "single-hop": 0, "adversarial": 1}},
    ]
    table = _stats(capsys, "dataset=locomo", f"dataset.path={path}")
    assert "| conversations | 2 |" in table and "| conv-a | 2 | 4 | 1 | 1 | 1 | 0 | 1 | 1 |" in table


def test_stats_follow_the_selection(tmp_path, capsys):
    path = tmp_path / "tiny.json"
    path.write_bytes(TINY)
    got = json.loads(_stats(capsys, "dataset=locomo", f"dataset.path={path}", "question_types=[adversarial]",
                            "--json"))
    assert (got["conversations"], got["questions"], got["adversarial_without_answer"], got["integer_answers"],
            got["unresolved_evidence"], got["turns"]) == (2, 2, 1, 0, 1, 7)


@needs(LOCOMO)
def test_stats_of_the_real_file(capsys):
    got = json.loads(_stats(capsys, "dataset=locomo", f"dataset.path={LOCOMO}", "--json"))
    assert (got["conversations"], got["sessions"], got["turns"], got["questions"]) == (10, 272, 5882, 1986)
    assert got["categories"] == {"multi-hop": 282, "temporal": 321, "open-domain": 96, "single-hop": 841,
                                 "adversarial": 446}
    assert (got["photo_turns"], got["adversarial_without_answer"], got["integer_answers"],
            got["unresolved_evidence"]) == (1226, 444, 6, 3)
    rows = got["per_conversation"]
    assert len(rows) == 10 and sum(r["turns"] for r in rows) == 5882
    assert sum(sum(r["questions"].values()) for r in rows) == 1986

"""Mem0's LoCoMo judge (J) as lme's `judge=locomo_j`: the template file (shape, pinned digest), the request it sends
(Mem0's, key for key), how its replies are read (CORRECT / WRONG, anything else a failed verdict), category 5 by
LoCoMo's own rule without a call, the call cache, the judge's description, and a whole run against the loopback
server.

Tests that need Mem0's real template read it from the shared data (`shared_data`); the others write a made-up
template and pass its own digest to the loader."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import shared_data
from loopback import LoopbackServer
from shared_data import needs

from lme.config.design import compose_design
from lme.data import locomo_judge
from lme.data.locomo_judge import (
    ADVERSARIAL_NOTE,
    LOCOMO_J_KEY,
    LOCOMO_J_TEMPLATE_SHA256,
    MEM0_REQUEST,
    adversarial_correct,
    load_locomo_judge,
    read_label,
)
from lme.data.load import load_questions
from lme.data.records import Question
from lme.data.sample import SAMPLE_PATH
from lme.judge import Judge, describe_judge, make_judge, parse_verdict, recorded_judge
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text

ROOT = Path(__file__).resolve().parents[1]
REAL_FILE = shared_data.ROOT / "locomo" / "judge_templates.json"
needs_real = needs(REAL_FILE)
KEY_ENV = "LME_TEST_KEY"
MADE_UP = ("Made-up judge.\nQ: {question}\nReference: {gold_answer}\nCandidate: {generated_answer}\n"
           "Reply in JSON with the key \"label\": CORRECT or WRONG.\n")
MADE_UP_SHA256 = sha256_text(MADE_UP)


def question(question_type: str = "single-hop", text: str = "What colour is Mel's bike?", answer: str = "Red",
             qid: str = "conv-9_q3") -> Question:
    return Question(question_id=qid, question_type=question_type, question=text, answer=answer,
                    question_date=datetime(2023, 5, 8), question_date_text="8 May 2023", sessions=(),
                    answer_session_ids=())


def judge_file(tmp_path: Path, template: str = MADE_UP, name: str = "judge_templates.json", **changes) -> Path:
    """A LoCoMo judge file of the shared file's shape, with `template` (its digest stated) and `changes` applied."""
    data = {"source": {"repository": "mem0ai/mem0", "path": "evaluation/metrics/llm_judge.py", "commit": "0" * 40},
            "request": dict(MEM0_REQUEST), "template": template, "template_sha256": sha256_text(template)}
    data.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def real_template() -> str:
    return json.loads(REAL_FILE.read_text(encoding="utf-8"))["template"]


def made_up_judge(server: LoopbackServer, template: str = MADE_UP, tmp_path: Path | None = None) -> Judge:
    """Mem0's protocol on a made-up template, at the loopback server (the real template: `real_judge`)."""
    templates = {LOCOMO_J_KEY: template}
    if tmp_path is not None:  # read through the loader, with the template's own digest
        templates = load_locomo_judge(judge_file(tmp_path, template), expected_sha256=sha256_text(template)).templates
    spec = ModelSpec(model="gpt-4o-mini", params={"temperature": 0.0, "response_format": {"type": "json_object"}},
                     api_base=server.base_url, api_key_env=KEY_ENV, max_attempts=1)
    return Judge(name="locomo-j", official=False, model=spec, templates=templates, verdict="locomo_label",
                 protocol="locomo_j")


def real_judge(server: LoopbackServer, tmp_path: Path) -> Judge:
    """judge=locomo_j as composed, its template file a copy of the shared one, at the loopback server."""
    path = judge_file(tmp_path, real_template())
    design = compose_design(["judge=locomo_j", f"judge.templates_path={path}",
                             f"judge.model.api_base={server.base_url}", f"judge.model.api_key_env={KEY_ENV}"],
                            check=True)
    return design.judge.build()


def judged(judge: Judge, q: Question, answer: str, cache_path: Path):
    cache = CallCache(cache_path)
    try:
        return asyncio.run(judge.judge(Gateway(cache), q, answer))
    finally:
        cache.close()


def one_sentence(message: str, path: Path) -> None:
    assert "\n" not in message and message.endswith(".") and str(path) in message, message


# -- the file ------------------------------------------------------------------------------------------------------


@needs_real
def test_the_shared_file_verifies_against_the_pin():
    loaded = load_locomo_judge(REAL_FILE)
    assert loaded.sha256 == LOCOMO_J_TEMPLATE_SHA256 and loaded.templates == {LOCOMO_J_KEY: real_template()}
    assert loaded.source["repository"] == "mem0ai/mem0" and loaded.source["commit"] == locomo_judge.LOCOMO_J_SOURCE[2]


@needs_real
def test_a_changed_real_template_is_refused_naming_the_file_and_both_digests(tmp_path):
    changed = real_template().replace("CORRECT", "RIGHT", 1)
    path = judge_file(tmp_path, changed)
    with pytest.raises(LmeError) as caught:
        load_locomo_judge(path)
    message = str(caught.value)
    one_sentence(message, path)
    assert sha256_text(changed) in message and LOCOMO_J_TEMPLATE_SHA256 in message and "refused" in message


def test_a_made_up_template_loads_with_its_own_digest_and_is_refused_against_lmes_pin(tmp_path):
    path = judge_file(tmp_path)
    assert load_locomo_judge(path, expected_sha256=MADE_UP_SHA256).templates == {LOCOMO_J_KEY: MADE_UP}
    with pytest.raises(LmeError) as caught:
        load_locomo_judge(path)
    one_sentence(str(caught.value), path)
    assert MADE_UP_SHA256 in str(caught.value) and LOCOMO_J_TEMPLATE_SHA256 in str(caught.value)


def _without(key: str) -> dict:
    data = {"source": {}, "request": dict(MEM0_REQUEST), "template": MADE_UP, "template_sha256": MADE_UP_SHA256}
    del data[key]
    return data


@pytest.mark.parametrize(("content", "words"), [
    (json.dumps(_without("template")), "field 'template' of the LoCoMo judge template file is missing"),
    (json.dumps(_without("request")), "field 'request' of the LoCoMo judge template file is missing"),
    (json.dumps(_without("template_sha256")), "field 'template_sha256'"),
    (json.dumps(_without("source")), "field 'source'"),
    (json.dumps({**_without("template"), "template": 7}), "field 'template' of the LoCoMo judge template file is an "
                                                           "integer, expected a string"),
    (json.dumps({**_without("request"), "request": {**MEM0_REQUEST, "temperature": "0"}}),
     "field 'request.temperature' of the LoCoMo judge template file is a string, expected an integer or a number"),
    (json.dumps({**_without("request"), "request": {**MEM0_REQUEST, "label_key": "verdict"}}),
     "field 'request.label_key' of the LoCoMo judge template file is \"verdict\", but lme's LoCoMo judge sends and "
     "reads Mem0's \"label\""),
    (json.dumps({**_without("request"), "request": {**MEM0_REQUEST, "model": "gpt-4o"}}), "'request.model'"),
    (json.dumps({**_without("template_sha256"), "template_sha256": "ab" * 32}), "the file is inconsistent"),
    (json.dumps([1, 2]), "holds an array, not a JSON object"),
    ("{\"template\": ", "is not valid JSON"),
    ("", "is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "more than 64 deep"),
    (b"{\"template\": \"\xff\"}", "is not UTF-8 (byte 14)"),
    ("{\"source\": {}, \"x\": \"\\ud800\"}", "field x of the LoCoMo judge template file holds a lone UTF-16 surrogate"),
])
def test_a_bad_file_is_one_sentence_naming_the_file_and_field(tmp_path, content, words):
    path = tmp_path / "judge_templates.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(LmeError) as caught:
        load_locomo_judge(path, expected_sha256=MADE_UP_SHA256)
    one_sentence(str(caught.value), path)
    assert words in str(caught.value)


def test_a_template_filling_other_fields_is_refused(tmp_path):
    template = "Q: {question} A: {answer} R: {generated_answer}"
    path = judge_file(tmp_path, template)
    with pytest.raises(LmeError, match=r"fills \['answer', 'generated_answer', 'question'\], not \['question', "
                                       r"'gold_answer', 'generated_answer'\]"):
        load_locomo_judge(path, expected_sha256=sha256_text(template))


def test_a_missing_file_or_a_directory_names_the_file_and_the_setting(tmp_path):
    for path, words in ((tmp_path / "none.json", "file not found"), (tmp_path, "is a directory")):
        with pytest.raises(LmeError) as caught:
            load_locomo_judge(path)
        one_sentence(str(caught.value), path)
        assert words in str(caught.value) and "LME_LOCOMO_JUDGE" in str(caught.value)


# -- the config ---------------------------------------------------------------------------------------------------


def test_the_config_is_mem0s_request_and_the_file_comes_from_the_setting_or_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("LME_LOCOMO_JUDGE", raising=False)
    design = compose_design(["judge=locomo_j", f"data_dir={tmp_path}"])
    spec = design.judge
    assert (spec.name, spec.protocol, spec.verdict, spec.official, spec.system_message) == \
        ("locomo-j", "locomo_j", "locomo_label", False, None)
    model = spec.model.node
    assert model["model"] == "gpt-4o-mini"
    params = {key: (dict(value) if key == "response_format" else value) for key, value in model["params"].items()}
    assert params == {"temperature": 0.0, "response_format": {"type": "json_object"}}  # no max_tokens: Mem0 sets none
    assert isinstance(params["temperature"], float)
    assert spec.templates_path == f"{tmp_path}/locomo/judge_templates.json"
    with pytest.raises(LmeError) as caught:  # the folder has no file: one sentence naming it and the setting
        spec.build()
    one_sentence(str(caught.value), tmp_path / "locomo" / "judge_templates.json")
    monkeypatch.setenv("LME_LOCOMO_JUDGE", str(tmp_path / "mine.json"))
    assert compose_design(["judge=locomo_j"]).judge.templates_path == str(tmp_path / "mine.json")


def test_bad_protocol_settings_are_refused():
    with pytest.raises(LmeError, match=r"judge.protocol: expected one of longmemeval, locomo_j, got 'mem0'"):
        compose_design(["judge=locomo_j", "judge.protocol=mem0"], check=True)
    with pytest.raises(LmeError, match="does not go with judge.protocol 'locomo_j'"):
        make_judge("locomo-j", False, ModelSpec(model="gpt-4o-mini"), templates_path="x.json", verdict="exact_yes_no",
                   protocol="locomo_j")
    with pytest.raises(LmeError, match="does not go with judge.protocol 'longmemeval'"):
        make_judge("x", False, ModelSpec(model="m"), templates={}, verdict="locomo_label")
    with pytest.raises(LmeError, match="system_message must be null"):
        make_judge("locomo-j", False, ModelSpec(model="gpt-4o-mini"), templates_path="x.json", verdict="locomo_label",
                   protocol="locomo_j", system_message="Be fair.")


def test_the_judge_is_described_as_mem0s_locomo_judge():
    label = describe_judge("locomo-j", False, "gpt-4o-mini", offline=False)
    assert (label.kind, label.text, label.official) == ("locomo-j", "Mem0's LoCoMo judge (J) on gpt-4o-mini", False)
    assert recorded_judge("locomo-j", False, "gpt-4o-mini") == label
    other = describe_judge("locomo-j", False, "openai/gpt-4o-2024-08-06", offline=False)
    assert other.text == ("Mem0's LoCoMo judge (J) on openai/gpt-4o-2024-08-06 (Mem0's evaluation used "
                          "gpt-4o-mini)")
    assert describe_judge("locomo-j", False, "lme-offline/lexical-judge", offline=True).kind == "stand-in"


# -- the request ----------------------------------------------------------------------------------------------------


def assert_mem0_request(body: dict, content: str, model: str = "gpt-4o-mini") -> None:
    """Mem0's request: the filled template as the one user message, the model, temperature 0.0 (a float, as
    Mem0's 0.0 is sent), JSON mode, and no other setting (litellm adds none to an OpenAI chat request)."""
    assert set(body) == {"messages", "model", "temperature", "response_format"}, sorted(body)
    assert body["messages"] == [{"role": "user", "content": content}]
    assert body["model"] == model
    assert body["temperature"] == 0.0 and isinstance(body["temperature"], float)
    assert body["response_format"] == {"type": "json_object"}


@needs_real
@pytest.mark.usefixtures("test_key")
def test_the_real_template_is_sent_byte_for_byte_as_mem0_sends_it(tmp_path):
    q = question(text="When did Caroline go to the LGBTQ support group?", answer="7 May 2023")
    with LoopbackServer(reply='{"label": "CORRECT"}') as server:
        judge = real_judge(server, tmp_path)
        verdict = judged(judge, q, "She went on 7 May 2023.", tmp_path / "c.sqlite")
        (request,) = server.completion_requests
    expected = real_template().format(question=q.question, gold_answer="7 May 2023",
                                      generated_answer="She went on 7 May 2023.")
    assert_mem0_request(request.body, expected)
    assert expected.count("7 May 2023") == 2 and q.question in expected
    assert verdict.correct is True and verdict.error is None and verdict.reply == '{"label": "CORRECT"}'
    assert judge.digests == {LOCOMO_J_KEY: LOCOMO_J_TEMPLATE_SHA256}


@pytest.mark.usefixtures("test_key")
def test_a_made_up_template_is_filled_by_name_and_sent_alone(tmp_path):
    q = question(text="How many {cats} does Jon have?", answer=str(3))  # LoCoMo's integer answers: str() of the int
    with LoopbackServer(reply='{"label": "WRONG"}') as server:
        verdict = judged(made_up_judge(server, tmp_path=tmp_path), q, "Two {cats}.", tmp_path / "c.sqlite")
        (request,) = server.completion_requests
    assert_mem0_request(request.body, "Made-up judge.\nQ: How many {cats} does Jon have?\nReference: 3\n"
                                      "Candidate: Two {cats}.\nReply in JSON with the key \"label\": CORRECT or "
                                      "WRONG.\n")
    assert verdict.correct is False and verdict.error is None


# -- the reply --------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("test_key")
@pytest.mark.parametrize(("reply", "correct", "error"), [
    ('{"label": "CORRECT"}', True, None),
    ('{"label": "WRONG"}', False, None),
    ('{"reason": "same date", "label": "CORRECT"}', True, None),
    ('```json\n{"label": "CORRECT"}\n```', True, None),  # Mem0 reads inside a fence
    ("not json", None, "UnparseableVerdict: the judge replied 'not json', not JSON"),
    ('{"label": "maybe"}', None, "UnparseableVerdict: the judge's label is '\"maybe\"', neither CORRECT nor WRONG"),
    ('{"label": "correct"}', None, "neither CORRECT nor WRONG"),  # Mem0 compares exactly: no case variants
    ('{"label": true}', None, "neither CORRECT nor WRONG"),
    ("{}", None, "UnparseableVerdict: the judge replied '{}', JSON without a 'label' key"),
    ('["CORRECT"]', None, "JSON without a 'label' key"),
    ("", None, "EmptyVerdict"),
    ("[" * 5000 + "]" * 5000, None, "nested more than 64 deep"),
])
def test_only_a_correct_or_wrong_label_is_a_verdict(reply, correct, error, tmp_path):
    with LoopbackServer(reply=reply) as server:
        verdict = judged(made_up_judge(server), question(), "Red.", tmp_path / "c.sqlite")
        assert len(server.completion_requests) == 1
    if error is None:
        assert verdict.correct is correct and verdict.error is None and verdict.reply == reply
    else:  # a failed call: the answer counts as wrong, and the run says why
        assert verdict.correct is False and verdict.reply is None and verdict.call is not None
        assert not verdict.call.ok and error in verdict.error and verdict.note.startswith("judge call failed: ")
    assert parse_verdict(reply, "locomo_label") is (correct if error is None else None)


def test_read_label_gives_the_reason():
    assert read_label(' {"label": "WRONG"} \n') == (False, "")
    assert read_label("CORRECT") == (None, "the judge replied 'CORRECT', not JSON")


# -- category 5 -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("answer", "correct"), [
    ("No information available.", True),
    ("That is NOT MENTIONED in the conversations.", True),
    ("It was not mentioned.", True),
    ("Melanie painted a sunset.", False),
    ("There is no info about it.", False),
])
def test_the_adversarial_rule(answer, correct):
    assert adversarial_correct(answer) is correct


@pytest.mark.usefixtures("test_key")
@pytest.mark.parametrize(("answer", "correct"), [("Not mentioned in the conversation.", True),
                                                  ("She adopted a dog.", False)])
def test_an_adversarial_question_makes_no_call_and_follows_locomos_rule(answer, correct, tmp_path):
    with LoopbackServer(reply='{"label": "CORRECT"}') as server:
        verdict = judged(made_up_judge(server), question("adversarial", answer="Not mentioned"), answer,
                         tmp_path / "c.sqlite")
        assert server.requests == []
    assert verdict.correct is correct and verdict.call is None and verdict.reply is None and verdict.error is None
    assert verdict.note == ADVERSARIAL_NOTE and "not LLM-judged" in verdict.note


@pytest.mark.usefixtures("test_key")
def test_a_missing_answer_is_wrong_without_a_call(tmp_path):
    with LoopbackServer(reply='{"label": "CORRECT"}') as server:
        for answer in (None, "  "):
            verdict = judged(made_up_judge(server), question(), answer, tmp_path / "c.sqlite")
            assert verdict.correct is False and verdict.call is None
        assert server.requests == []


# -- the cache -------------------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("test_key")
def test_judge_calls_are_cached_without_a_seed(tmp_path):
    """One prompt is one call, whichever run (seed, design) asks: the judge's calls carry no seed."""
    with LoopbackServer(reply='{"label": "CORRECT"}') as server:
        judge = made_up_judge(server)
        first = judged(judge, question(), "Red.", tmp_path / "c.sqlite")
        again = judged(judge, question(qid="conv-9_q3"), "Red.", tmp_path / "c.sqlite")
        other = judged(judge, question(), "Crimson.", tmp_path / "c.sqlite")
        assert len(server.completion_requests) == 2
        assert "seed" not in server.completion_requests[0].body
    assert first.correct and again.correct and other.correct
    assert not first.call.cached and again.call.cached and not other.call.cached


# -- a whole run ------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_on_the_sample_with_judge_locomo_j(tmp_path):
    """`python -m lme judge=locomo_j` on the bundled sample (LongMemEval's shape: no adversarial questions), the
    template file given by LME_LOCOMO_JUDGE (a made-up template: lme refuses it against its pin, so the run stops
    before any call), then with the real one when the shared data is there."""
    key = "sk-lme-locomo-0123456789abcdef"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI", "HYDRA"))}
    env |= {"LME_FAKE_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

    def command(url: str) -> list[str]:
        models = []
        for part, model in (("reader", "openai/gpt-4o-mini"), ("judge", "gpt-4o-mini")):
            models += [f"{part}.model.model={model}", f"++{part}.model.api_base={url}",
                       f"++{part}.model.api_key_env=LME_FAKE_KEY", f"{part}.model.max_attempts=1"]
        return [sys.executable, "-m", "lme", "judge=locomo_j", "limit=3", "concurrency=1", "tracking.enabled=false",
                f"cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/run", *models]

    def reply(body: dict) -> str:
        return '{"label": "CORRECT"}' if body.get("response_format") else "An answer."

    made_up = judge_file(tmp_path)
    with LoopbackServer(reply=reply) as server:
        refused = subprocess.run(command(server.base_url), cwd=ROOT, capture_output=True, text=True, timeout=300,
                                 env=env | {"LME_LOCOMO_JUDGE": str(made_up)})
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"{made_up}: the LoCoMo judge template has SHA-256 {MADE_UP_SHA256}" in refused.stderr
        assert server.requests == [] and "Traceback" not in refused.stderr
        if not REAL_FILE.is_file():
            pytest.skip(shared_data.REASON)
        real = judge_file(tmp_path, real_template(), name="real.json")
        done = subprocess.run(command(server.base_url), cwd=ROOT, capture_output=True, text=True, timeout=300,
                              env=env | {"LME_LOCOMO_JUDGE": str(real)})
        assert done.returncode == 0, done.stderr[-3000:]
        judge_bodies = [r.body for r in server.completion_requests if r.body.get("response_format")]
    questions = load_questions(SAMPLE_PATH)[:3]
    prompts = {real_template().format(question=q.question, gold_answer=q.answer, generated_answer="An answer.")
               for q in questions}
    assert len(judge_bodies) == 3
    for body in judge_bodies:
        assert set(body) == {"messages", "model", "temperature", "response_format"}
        assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0.0
        (message,) = body["messages"]
        assert message["role"] == "user" and message["content"] in prompts
    rows = [json.loads(line) for line in (tmp_path / "run" / "outcomes.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(row["correct"] is True for row in rows)
    assert "Mem0's LoCoMo judge (J) on gpt-4o-mini" in done.stdout + done.stderr


@needs_real
def test_the_template_digest_is_in_the_preregistration_record(tmp_path):
    from lme.cli import main as lme_main
    from lme.provenance.prereg import load_record

    path = judge_file(tmp_path, real_template())
    out = tmp_path / "rec.yaml"
    with pytest.raises(SystemExit) as done:
        lme_main(["prereg", "freeze", "--out", str(out), "+design=bm25", "limit=2", "judge=locomo_j",
                  f"cache_dir={tmp_path}/c",
                  f"judge.templates_path={path}"])
    assert done.value.code == 0
    record = load_record(out)
    assert record["judge_templates"] == {LOCOMO_J_KEY: LOCOMO_J_TEMPLATE_SHA256}
    assert record["models"]["judge"]["model"] == "gpt-4o-mini"

"""The model-built memory: one call through the gateway per distinct input (seeds and reruns pay once), its
calls in the job's ledger, a cap that stops it, where its output goes; and the cross-run stage of designs 13
and 15 choosing only the disagreeing questions its question rule selects."""

from __future__ import annotations

import asyncio
import json

import pytest

from lme.answer.reader import Reader
from lme.answer.rules import Rule
from lme.study.arbiter import arbitrate
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.util.errors import LmeError
from lme.memory.model_built import ModelBuiltMemoryBuilder, attach_gateway, cut_at_line, memory_parts
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.memory.user_log import UserLogMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.ledger import Budget, BudgetExhausted, Ledger
from lme.models.offline import NOTE_MODEL, extract_notes
from lme.retrieval.fts5 import FTS5Retriever

LEDGER_TEXT = "- [s0001:0] 2023-05-01: one thing\nTotal: 1"


@pytest.fixture(scope="module")
def questions():
    return {q.question_id: q for q in load_questions(SAMPLE_PATH)}


def user_log(**kwargs) -> UserLogMemoryBuilder:
    return UserLogMemoryBuilder(FTS5Retriever(), **kwargs)


def loopback_model(server) -> ModelSpec:
    """A paid-looking model on the loopback server (priced, so its calls reserve and settle in the ledger)."""
    return ModelSpec(model="openai/gpt-5-nano", api_base=server.base_url, api_key_env="LME_TEST_KEY", max_attempts=1,
                     input_cost_per_token=1e-6, output_cost_per_token=1e-6, params={"max_completion_tokens": 64})


def builder(model: ModelSpec, place: str = "replace_log", **kwargs) -> ModelBuiltMemoryBuilder:
    return ModelBuiltMemoryBuilder(inner=user_log(), model=model, instruction="Write notes.", place=place, **kwargs)


def test_one_paid_call_per_distinct_input_across_seeds_and_reruns_all_in_the_jobs_ledger(
        tmp_path, questions, warm_litellm, test_key):
    from loopback import LoopbackServer

    first, second = questions["d82c07cd"], questions["ba26d851"]
    with LoopbackServer(reply="- [s0004:0] The user walks a beagle named Biscuit.") as server:
        notes = builder(loopback_model(server))
        for job in ("seed1", "seed2", "rerun"):  # three jobs (two seeds, then a rerun) on one call cache
            cache, ledger = CallCache(tmp_path / "calls.sqlite"), Ledger(tmp_path / "ledger.sqlite", "study", job)
            gateway = Gateway(cache, ledger=ledger, budget=Budget())
            attach_gateway([notes], gateway)
            memories = [notes.build(first), notes.build(second), notes.build(first)]
            gateway.close_background()
            calls = [m.notes["model_call"] for m in memories]
            assert calls == (["paid", "paid", "cached"] if job == "seed1" else ["cached"] * 3), job
            cache.close()
            ledger.close()
        requests = server.completion_requests
    assert len(requests) == 2  # one per distinct input, whatever the seed or the rerun
    assert {r.body["messages"][0]["content"] for r in requests} == {"Write notes."}
    assert "seed" not in requests[0].body
    rows = Ledger(tmp_path / "ledger.sqlite", "study", "x").rows("study")
    assert [(row["job"], row["model"]) for row in rows] == [("seed1", "openai/gpt-5-nano")] * 2
    assert all(row["status"] == "paid" and row["dollars"] > 0 for row in rows)


def test_a_call_cap_stops_the_model_built_memory_cleanly(tmp_path, questions, warm_litellm, test_key):
    from loopback import LoopbackServer

    with LoopbackServer(reply="- a note") as server:
        notes = builder(loopback_model(server))
        ledger = Ledger(tmp_path / "ledger.sqlite", "study", "capped")
        gateway = Gateway(CallCache(tmp_path / "calls.sqlite"), ledger=ledger, budget=Budget(job_calls=1))
        attach_gateway([notes], gateway)
        assert notes.build(questions["d82c07cd"]).notes["model_call"] == "paid"
        with pytest.raises(BudgetExhausted):
            notes.build(questions["ba26d851"])
        gateway.close_background()
        assert len(server.completion_requests) == 1
    assert ledger.open_reservations() == 0 and len(ledger.rows("study")) == 1


def test_replace_replace_log_and_append_put_the_output_where_they_say(questions, loopback, test_key):
    question = questions["d82c07cd"]
    inner = user_log().build(question)
    header, log, rest = memory_parts(inner)
    assert header.startswith("Question date:") and "[s0004:0]" in log and rest.startswith("\n\n## Assistant replies")
    model = ModelSpec(model="openai/gpt-5-nano", api_base=loopback.base_url, api_key_env="LME_TEST_KEY",
                      max_attempts=1)
    gateway = Gateway()
    made = {}
    for place in ("replace", "replace_log", "append"):
        built = builder(model, place, title="## Ledger")
        attach_gateway([built], gateway)
        made[place] = built.build(question)
    gateway.close_background()
    block = "## Ledger\nok"  # the loopback fixture answers "ok"
    assert made["replace"].text == f"{header}\n\n{block}" and made["replace"].turn_ids == ()
    assert made["replace_log"].text == f"{header}\n\n{block}{rest}"
    assert made["append"].text == f"{header}\n\n{log}\n\n{block}{rest}"
    assert made["append"].turn_ids == inner.turn_ids
    assert made["replace_log"].turn_ids == tuple(t for t in inner.turn_ids if t not in log)
    assert all(m.n_bytes == len(m.text.encode()) for m in made.values())


def test_append_makes_room_by_dropping_the_last_replies_whole(questions):
    question = questions["d82c07cd"]
    inner = user_log().build(question)
    budget = inner.n_bytes + 40  # the offline notes (hundreds of bytes) do not fit without dropping replies
    built = ModelBuiltMemoryBuilder(inner=user_log(), model=ModelSpec(model=NOTE_MODEL), instruction="Notes.",
                                    place="append", max_bytes=budget).build(question)
    assert built.n_bytes <= budget and built.notes["model_call"] == "paid"
    replies = [t for t in inner.turn_ids if t not in built.turn_ids]
    kept = [t for t in built.turn_ids if question.session_of(t).turns[int(t.split(":")[1])].role == "assistant"]
    assert replies and kept == [t for t in inner.turn_ids if t in kept]  # a prefix of the replies, in order
    assert built.text.rstrip().endswith(question.session_of(kept[-1]).turns[int(kept[-1].split(":")[1])].content)


def test_the_offline_note_taker_keeps_first_person_sentences_or_those_the_question_names():
    log = ("Question date: 2023-09-02 (Saturday).\n\n## User messages\n### Session s0000, 2023-07-15\n"
           "[s0000:0] I bought three new plants for my balcony. What soil do they need?\n"
           "[s0000:2] Is it going to rain?")
    assert extract_notes(log) == "### Session s0000, 2023-07-15\n- [s0000:0] I bought three new plants for my balcony."
    assert extract_notes("Question: How many plants did I buy?\n\n" + log).endswith("- [s0000:0] I bought three "
                                                                                 "new plants for my balcony.")
    assert extract_notes("nothing here") == "No notes."


def test_bad_settings_and_a_memory_without_a_log_are_one_sentence(questions):
    spec = ModelSpec(model=NOTE_MODEL)
    with pytest.raises(LmeError, match="memory.place 'over' is unknown"):
        ModelBuiltMemoryBuilder(inner=user_log(), model=spec, instruction="x", place="over")
    with pytest.raises(LmeError, match="needs an instruction"):
        ModelBuiltMemoryBuilder(inner=user_log(), model=spec, instruction=" ")
    retrieved = ModelBuiltMemoryBuilder(inner=RetrievedMemoryBuilder(FTS5Retriever()), model=spec, instruction="x")
    with pytest.raises(LmeError, match="input user_log needs an inner memory with a user log"):
        retrieved.build(questions["d82c07cd"])
    paid = ModelBuiltMemoryBuilder(inner=user_log(), model=ModelSpec(model="openai/gpt-5-nano"), instruction="x")
    with pytest.raises(LmeError, match="needs a job's gateway"):
        paid.build(questions["d82c07cd"])
    assert cut_at_line("ab\ncd\nef", 5) == "ab\ncd" and cut_at_line("abc", 10) == "abc"


def test_the_cross_run_stage_reads_only_disagreeing_questions_its_rule_selects(tmp_path, questions, loopback,
                                                                               test_key):
    counting = Rule(name="ledger_select", on="question", patterns=("how many", "how much"))
    chosen = [q for q in questions.values() if counting.fires(q.question, None)]
    other = next(q for q in questions.values() if not counting.fires(q.question, None))
    agreeing = chosen[1] if len(chosen) > 1 else None
    answers = {chosen[0].question_id: ["2", "3"], other.question_id: ["a", "b"]}
    if agreeing is not None:
        answers[agreeing.question_id] = ["4", "4"]
    ledger = ModelBuiltMemoryBuilder(inner=user_log(), model=ModelSpec(model=NOTE_MODEL), instruction="Ledger.",
                                     place="replace", include_question=True, title="## Ledger")
    reader = Reader(name="loopback", model=ModelSpec(model="openai/gpt-4o-mini", api_base=loopback.base_url,
                                                     api_key_env="LME_TEST_KEY", max_attempts=1))
    gateway = Gateway(CallCache(tmp_path / "calls.sqlite"))
    attach_gateway([ledger], gateway)
    outcomes = asyncio.run(arbitrate(
        list(questions.values()), answers, ledger, reader, "Count.", None, gateway, 1,
        select=lambda text: counting.fires(text, None), show_earlier=False))
    gateway.close_background()
    by_id = {o.question_id: o for o in outcomes}
    assert [o.question_id for o in outcomes if o.chosen] == [chosen[0].question_id]
    assert not by_id[other.question_id].chosen  # disagreeing, but not a counting question
    if agreeing is not None:
        assert not by_id[agreeing.question_id].chosen  # a counting question whose runs agree
    picked = by_id[chosen[0].question_id]
    assert picked.answer == "ok" and picked.memory_call == "paid"
    (request,) = loopback.completion_requests
    payload = json.loads(request.body["messages"][1]["content"])
    assert "earlier_answers" not in payload and "## Ledger" in payload["memory"]
    assert "[s" not in payload["memory"].split("## Ledger", 1)[0].replace("Question date", "")  # the log is replaced


def test_designs_13_and_15_compose_a_counting_ledger_stage_and_the_notes_design_its_memory():
    from lme.config.design import compose_design
    from lme.config.design import plain
    from lme.provenance.prereg import text_digests

    for name, place in (("13_ledger_replace", "replace"), ("15_ledger_append", "append")):
        design = compose_design([f"+design=study/{name}"])
        stage = design.arbiter
        assert stage is not None and stage.name == "ledger" and not stage.earlier_answers
        assert stage.memory is not None and stage.memory.node["place"] == place
        assert stage.select.fires("How many books did I finish?", None)
        assert not stage.select.fires("How many days passed between the two trips?", None)
        assert not stage.select.fires("Where did I buy my boots?", None)
        digests = text_digests(plain(design.config))
        assert {"arbiter.memory.instruction", "arbiter.select", "instruction.ledger"} <= set(digests)
    notes = compose_design(["+design=study/dev_notes_bm25", "memory/writer@memory.model=gpt5_nano"])
    assert notes.memory.node["model"]["model"] == "openai/gpt-5-nano" and notes.retriever.target.endswith("FTS5Retriever")
    assert "memory.instruction" in text_digests(plain(notes.config))
    with pytest.raises(LmeError, match="arbiter.select"):
        compose_design(["+design=study/13_ledger_replace", "arbiter.select.on=answer"])


def test_lme_estimate_counts_the_notes_calls_once_for_all_seeds_and_sends_none(tmp_path):
    from lme.config.design import compose_design
    from lme.study.estimate import estimate_design

    design = compose_design(["+design=study/dev_notes_bm25", "memory/writer@memory.model=gpt5_nano", "limit=3",
                             f"cache_dir={tmp_path}"])
    estimate = estimate_design(design, [1, 2, 3])
    (note,) = [n for n in estimate.notes if n.startswith("memory notes")]
    assert "openai/gpt-5-nano): 3 model calls for all seeds together, 0 already cached" in note
    assert not (tmp_path / "calls.sqlite").exists()  # nothing sent: an estimate opens no call cache


@pytest.mark.slow
def test_a_two_seed_sweep_pays_the_notes_once_in_the_first_jobs_ledger(tmp_path):
    """`python -m lme +design=study/dev_notes_bm25 -m seed=1,2` with the writer on the loopback server."""
    import os
    import subprocess
    import sys

    from loopback import LoopbackServer

    with LoopbackServer(reply="- [s0000:0] The user keeps notes.") as server:
        args = [sys.executable, "-m", "lme", "+design=study/dev_notes_bm25", "limit=2", "tracking.enabled=false",
                "memory/writer@memory.model=gpt5_nano", f"memory.model.api_base={server.base_url}",
                "memory.model.api_key_env=LOOPBACK_KEY", f"cache_dir={tmp_path}/cache", "-m", "seed=1,2"]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))} | {"LOOPBACK_KEY": "sk-x"}
        result = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert len(server.completion_requests) == 2  # one per question, for both seeds
    (sweep,) = (tmp_path / "multirun" / "study_dev_notes_bm25").iterdir()
    first, second = (json.loads((sweep / n / "metrics.json").read_text()) for n in ("0", "1"))
    assert first["memory_model_calls_paid"] == 2 and first["memory_model_spent_usd"] > 0
    assert "memory_model_calls" not in second or second.get("memory_model_calls_paid", 0) == 0
    rows = Ledger(tmp_path / "cache" / "ledger.sqlite", "default", "x").rows()
    assert [row["model"] for row in rows] == ["openai/gpt-5-nano"] * 2
    assert {row["job"] for row in rows} == {str((sweep / "0").resolve())}  # the first job's name

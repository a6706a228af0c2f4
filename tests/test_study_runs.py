"""The reference study's runs as it ran them (issue 38, items 1 and 3).

Per-step views: a `rules.order` step may name the view it reads (`{rule: decline, view: NAME}`), a design may add
views beside the `view` group's (`views.NAME`), and the study's design runs read their first decline over the
earlier whole-session view without the content-word step, while the confirmation run (study/confirmation) reads
both over today's. Designs that do not use the syntax compose as before.

The study payload: under `reader.payload=study` every reader request's user message holds exactly `question`,
`questionDate` and `memory`, on every step; a repeated identical request (the second decline of an unchanged
answer over the same view) is kept apart in the call cache's key, not in what the model reads. Model calls go to
the loopback OpenAI server; nothing of lme's own is mocked."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from loopback import LoopbackServer

from lme import CONF_DIR
from lme.answer.run import answer_question, repeat_marker
from lme.answer.study_instructions import STUDY_INSTRUCTION_SHA256, study_digest
from lme.config.design import canonical_design, compose_design, plain
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.memory.sessions import WholeSessionView
from lme.models.cache import CallCache, call_key
from lme.models.gateway import Gateway
from lme.retrieval.fts5 import FTS5Retriever
from lme.util.errors import LmeError
from shared_data import STUDY_INSTRUCTIONS as STUDY_FILE
from shared_data import needs

ROOT = Path(__file__).resolve().parents[1]
KEY_ENV = "LME_TEST_KEY"
EARLY = "whole_sessions_no_content_words"
TODAY = "whole_sessions"
STUDY_KEYS = ["question", "questionDate", "memory"]
DECLINES = "The memory does not contain enough information to answer this question."  # the decline rule fires
STUDY_DESIGNS = sorted(path.stem for path in (CONF_DIR / "design" / "study").glob("*.yaml"))
ONE_DECLINE = ["03_decline", "05_advice_decline", "06_counting", "07_arbiter", "09_routed_decline"]
TWO_DECLINES = ["10_second_decline", "11_current_state_whole_sessions", "12_recall", "13_ledger_replace",
                "14_current_state_first_pass", "15_ledger_append"]


def design(name: str, *overrides: str, check: bool = True):
    return compose_design([f"+design={name}", *overrides], check=check)


def steps(built) -> list[tuple[str, str]]:
    return [(step.rule.name, step.rule.view) for step in built.instructions.rules]


def declines(built) -> list[str]:
    return [view for name, view in steps(built) if name == "decline"]


# -- per-step views ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ONE_DECLINE)
def test_a_design_run_with_one_decline_reads_it_over_the_earlier_view(name):
    built = design(f"study/{name}")
    assert declines(built) == [EARLY]
    assert built.known_views() == ["first_pass", TODAY, EARLY]


@pytest.mark.parametrize("name", TWO_DECLINES)
def test_a_design_run_with_two_declines_reads_the_first_over_the_earlier_view(name):
    built = design(f"study/{name}")
    assert declines(built) == [EARLY, TODAY]
    assert ("recall", TODAY) in steps(built) or "recall" not in dict(steps(built))
    # the step takes the rule's trigger, paragraphs and instruction; only the view differs
    first, second = (step for step in built.instructions.rules if step.rule.name == "decline")
    assert first.instruction == second.instruction == built.instructions.texts["decline"]
    assert (first.rule.on, first.rule.patterns, first.rule.paragraphs) == (
        second.rule.on, second.rule.patterns, second.rule.paragraphs)


def test_the_confirmation_run_reads_both_declines_over_todays_view_and_is_the_pipeline():
    confirmation, pipeline = design("study/confirmation"), design("pipeline")
    assert steps(confirmation) == [("advice", "first_pass"), ("decline", TODAY), ("decline", TODAY),
                                   ("recall", TODAY)] == steps(pipeline)
    assert confirmation.views == {} and confirmation.instructions.texts == pipeline.instructions.texts

    def without_name_and_order(built):
        canonical = canonical_design(plain(built.config))
        canonical.pop("design_name")
        canonical["rules"].pop("order")
        return canonical

    assert without_name_and_order(confirmation) == without_name_and_order(pipeline)
    # design 12's development run differs from it in the first decline's view only
    development = design("study/12_recall")
    assert steps(development) == [("advice", "first_pass"), ("decline", EARLY), ("decline", TODAY), ("recall", TODAY)]


@needs(STUDY_FILE)
def test_the_confirmation_run_with_the_studys_texts_pairs_with_the_published_digests():
    built = design("study/confirmation", "setup=study", "instructions=study", f"instructions.source={STUDY_FILE}")
    texts = built.instructions.texts
    assert {step: study_digest(texts[step]) for step in STUDY_INSTRUCTION_SHA256} == dict(STUDY_INSTRUCTION_SHA256)
    assert built.reader.payload == "study"


def test_the_cfg_job_output_shows_each_declines_view():
    def job(name: str) -> str:
        done = subprocess.run([sys.executable, "-m", "lme", f"+design=study/{name}", "--cfg", "job"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    tenth = job("10_second_decline")
    assert f"  - advice\n  - rule: decline\n    view: {EARLY}\n  - decline\n" in tenth
    assert f"views:\n  {EARLY}:\n" in tenth and "content_sessions: 0" in tenth
    confirmation = job("confirmation")
    assert (f"  - advice\n  - rule: decline\n    view: {TODAY}\n  - rule: decline\n    view: {TODAY}\n  - recall\n"
            in confirmation)
    assert "\nviews:" not in confirmation


def test_the_earlier_view_is_todays_without_the_content_word_step():
    built = design("study/10_second_decline")
    early, today = dict(built.views[EARLY].node), dict(built.view.node)
    assert early.pop("content_sessions") == 0 and today.pop("content_sessions") == 3
    assert early.pop("name") == EARLY and today.pop("name") == TODAY
    assert early == today


def test_without_the_content_word_step_sessions_come_from_dates_then_retrieval_only():
    retriever = FTS5Retriever()
    off, on = WholeSessionView(retriever, content_sessions=0), WholeSessionView(retriever)
    for question in load_questions(SAMPLE_PATH)[:6]:
        chosen = off.candidates(question)
        assert all(choice.step in ("dates", "retrieval") for choice in chosen)
        # the date step is today's; what follows it is the retriever's order, no session put first for its words
        dates = [c.index for c in on.candidates(question) if c.step == "dates"]
        assert [c.index for c in chosen if c.step == "dates"] == dates
        ranked = list(dict.fromkeys(int(turn_id.split(":")[0][1:]) for turn_id in retriever.rank(question, 100).turn_ids))
        assert [c.index for c in chosen if c.step == "retrieval"] == [i for i in ranked if i not in dates]
        memory = off.build(question)
        assert memory.notes["from_content"] == "0" and memory.notes["builder"] == "whole_sessions"


def test_designs_that_do_not_name_a_view_have_no_further_views_and_compose_as_before():
    for name in ("pipeline", "first_pass", "bm25", "study/02_user_log_fused", "study/04_advice", "study/08_routed"):
        built = design(name)
        assert built.views == {} and "views" not in built.config
        assert all(isinstance(entry, str) for entry in (built.config.get("rules") or {}).get("order") or ())


def test_a_step_may_name_any_view_the_design_has():
    built = design("pipeline", f"+view@views.{EARLY}={EARLY}",
                   f"rules.order=[advice,{{rule:decline,view:{EARLY}}},{{rule:recall,view:{EARLY}}},"
                   "{rule:decline,view:whole_sessions},{rule:advice}]", check=True)
    assert steps(built) == [("advice", "first_pass"), ("decline", EARLY), ("recall", EARLY), ("decline", TODAY),
                            ("advice", "first_pass")]
    views = built.build_views(FTS5Retriever())
    assert sorted(views) == [TODAY, EARLY]
    assert views[EARLY].content_sessions == 0 and views[TODAY].content_sessions == 3


@pytest.mark.parametrize(("overrides", "message"), [
    (["rules.order=[{rule:decline,view:nowhere}]"],
     r"^rules.order\[0\].view: 'nowhere' is not a view \(known: first_pass, whole_sessions\)\.$"),
    (["rules.order=[{rule:decline,lens:whole_sessions}]"], r"^rules.order\[0\]: unknown key 'lens'"),
    (["rules.order=[{view:whole_sessions}]"], r"^rules.order\[0\].rule: expected a rule name, found None\.$"),
    (["rules.order=[{rule:nothing,view:whole_sessions}]"], r"^rules.order\[0\]: rule 'nothing' is not defined"),
    ([f"+view@views.other={EARLY}"], r"^views.other.name: 'whole_sessions_no_content_words' differs from the key"),
    ([f"+view@views.whole_sessions={EARLY}"], r"^views.whole_sessions: a view's name is a letter"),
    (["+views.x=3"], r"^views.x: expected a view node with a `_target_`"),
    # a step's view is checked against its paragraphs as a rule's is: the user-log paragraph over whole sessions
    (["rules.order=[{rule:advice,view:whole_sessions}]"],
     r"^design pipeline: step advice reads memory \"whole_sessions\" but its instruction lists paragraph \"user_log\""),
])
def test_a_step_or_view_that_does_not_fit_is_one_sentence(overrides, message):
    with pytest.raises(LmeError, match=message):
        design("pipeline", *overrides)


def test_a_routes_view_is_still_the_first_pass_memory():
    with pytest.raises(LmeError, match="a route only chooses the first pass's instruction"):
        design("study/08_routed", f"+view@views.{EARLY}={EARLY}", f"rules.definitions.advice.view={EARLY}")


# -- the study payload -------------------------------------------------------------------------------------------


def test_a_repeated_read_is_marked_in_the_payload_under_lmes_form_and_in_the_cache_key_under_the_studys():
    assert repeat_marker("study", 1) == repeat_marker("lme", 1) == (None, None)
    assert repeat_marker("study", 2) == (None, 2)
    assert repeat_marker("lme", 2) == ({"attempt": 2}, None)
    messages = [{"role": "user", "content": "{}"}]
    plain_key = call_key("gpt-5-mini", messages, {}, 1)
    assert call_key("gpt-5-mini", messages, {}, 1, None) == plain_key  # every other call's key is unchanged
    assert len({plain_key, call_key("gpt-5-mini", messages, {}, 1, 2), call_key("gpt-5-mini", messages, {}, 1, 3)}) == 3


def _sweep(tmp_path: Path, server: LoopbackServer, names: list[str], *overrides: str) -> None:
    """One multirun over `names` under setup=study: BM25 replies (no gated embedding model), lme's offline judge,
    the reader at the loopback server, two questions each, each design with its own call cache."""
    args = [sys.executable, "-m", "lme", "-m", "+design=" + ",".join(f"study/{name}" for name in names),
            "setup=study", "dataset=sample", "retriever=fts5", "judge=offline", "split=null", "limit=2",
            f"reader.model.api_base={server.base_url}", f"reader.model.api_key_env={KEY_ENV}",
            # each design its own call cache, so that every design's requests reach the server
            "tracking.enabled=false", f"cache_dir={tmp_path}/cache/" + "${design_name}", "hydra.sweep.dir=sweep",
            "progress=false",
            "concurrency=2", *overrides]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    env[KEY_ENV] = "sk-loopback-test"
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]


def _check_every_body(server: LoopbackServer) -> Counter[str]:
    """Every reader request's user message is the study's compact JSON with exactly its three keys; the requests
    counted by instruction."""
    assert server.requests
    seen: Counter[str] = Counter()
    for request in server.requests:
        system, user = request.body["messages"]
        assert user["role"] == "user"
        payload = json.loads(user["content"])
        assert list(payload) == STUDY_KEYS, sorted(payload)
        assert user["content"] == json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        seen[system["content"]] += 1
    return seen


@pytest.mark.slow
def test_every_study_designs_reader_requests_carry_exactly_the_studys_three_keys(tmp_path):
    """Every design under conf/design/study/ (lme's wording), every step: the answer always declines, so both
    declines fire, and the question rules fire where their words are."""
    with LoopbackServer(reply=DECLINES) as server:
        _sweep(tmp_path, server, STUDY_DESIGNS)
    seen = _check_every_body(server)
    decline = design("pipeline").instructions.texts["decline"]
    # two questions, each declining: two decline reads in each two-decline design and the confirmation, one in each
    # one-decline design (design 11's current-state re-read sends the decline instruction too)
    assert seen[decline] >= 2 * (2 * (len(TWO_DECLINES) + 1) + len(ONE_DECLINE))


@pytest.mark.slow
@needs(STUDY_FILE)
def test_every_study_design_with_the_studys_texts_sends_exactly_the_three_keys(tmp_path):
    source = f"instructions.source={STUDY_FILE}"
    names = []
    for name in STUDY_DESIGNS:  # those whose steps are the study's (the others run lme's wording, above)
        try:
            design(f"study/{name}", "setup=study", "instructions=study", source)
        except LmeError:
            continue
        names.append(name)
    assert {"confirmation", "10_second_decline", "12_recall"} <= set(names)
    with LoopbackServer(reply=DECLINES) as server:
        _sweep(tmp_path, server, names, "instructions=study", source)
    seen = _check_every_body(server)
    published = {study_digest(text): text for text in seen}
    assert {STUDY_INSTRUCTION_SHA256["first_pass"], STUDY_INSTRUCTION_SHA256["decline"]} <= set(published)


@pytest.mark.usefixtures("test_key")
def test_the_two_declines_over_one_view_make_two_calls_with_one_body_and_a_rerun_makes_none(tmp_path):
    """The confirmation run's two declines over today's view, on an answer that still declines: the same request
    twice, two calls (the second is not the first's cached reply), each cached under its own key."""
    with LoopbackServer(reply=DECLINES) as server:
        built = design("study/confirmation", "setup=study", "dataset=sample", "retriever=fts5",
                       f"reader.model.api_base={server.base_url}", f"reader.model.api_key_env={KEY_ENV}")
        reader, retriever = built.reader.build(), built.build_retriever()
        builder, views = built.build_memory(retriever), built.build_views(retriever)
        question = load_questions(SAMPLE_PATH)[0]

        def ask() -> object:
            cache = CallCache(tmp_path / "calls.sqlite")
            try:
                return asyncio.run(answer_question(question, builder, reader, built.instructions.first_pass, None,
                                                   Gateway(cache), 1, built.instructions.rules, views))
            finally:
                cache.close()

        outcome = ask()
        first_run = list(server.requests)
        ask()
        rerun = server.requests[len(first_run):]
    decline = built.instructions.texts["decline"]
    sent = [request.body for request in first_run if request.body["messages"][0]["content"] == decline]
    assert len(sent) == 2 and sent[0] == sent[1]  # two calls, byte for byte the same request
    assert list(json.loads(sent[0]["messages"][1]["content"])) == STUDY_KEYS
    decline_steps = [step for step in outcome.steps if step.rule == "decline"]
    assert [(step.view, step.reread, step.reader.calls, step.reader.cached_calls) for step in decline_steps] == [
        (TODAY, True, 1, 0), (TODAY, True, 1, 0)]
    assert rerun == []  # both were cached, each under its own key


@pytest.mark.usefixtures("test_key")
def test_lmes_own_payload_still_numbers_the_repeated_read(tmp_path):
    with LoopbackServer(reply=DECLINES) as server:
        built = design("pipeline", "dataset=sample", "retriever=fts5", "reader=gpt5_mini",
                       f"reader.model.api_base={server.base_url}",
                       f"reader.model.api_key_env={KEY_ENV}")
        reader, retriever = built.reader.build(), built.build_retriever()
        question = load_questions(SAMPLE_PATH)[0]
        cache = CallCache(tmp_path / "calls.sqlite")
        try:
            asyncio.run(answer_question(question, built.build_memory(retriever), reader, built.instructions.first_pass,
                                        None, Gateway(cache), 1, built.instructions.rules, built.build_views(retriever)))
        finally:
            cache.close()
    decline = built.instructions.texts["decline"]
    payloads = [json.loads(request.body["messages"][1]["content"]) for request in server.requests
                if request.body["messages"][0]["content"] == decline]
    assert [list(payload) for payload in payloads] == [["question", "question_date", "memory"],
                                                       ["question", "question_date", "memory", "attempt"]]
    assert payloads[1]["attempt"] == 2


def test_the_study_files_are_all_listed_here():
    named = set(ONE_DECLINE) | set(TWO_DECLINES) | {"confirmation"}
    assert named <= set(STUDY_DESIGNS)
    for name in named:  # each says which run it is and what view each decline reads
        head = (CONF_DIR / "design" / "study" / f"{name}.yaml").read_text(encoding="utf-8").split("\ndefaults:")[0]
        assert "whole_sessions" in head and ("confirmation" in head or "design runs" in head), name


def test_two_views_of_one_job_keep_their_memories_apart():
    """A job's memories are reused by its later seeds under a digest of the builder's node: each view its own."""
    from lme.study.job import reuse_memories

    built = design("study/10_second_decline", "retriever=fts5")
    retriever = built.build_retriever()
    views = built.build_views(retriever)
    _, wrapped = reuse_memories(built, SAMPLE_PATH, built.build_memory(retriever), views)
    assert sorted(wrapped) == [TODAY, EARLY] and wrapped[TODAY].digest != wrapped[EARLY].digest

"""The reference study's designs as files (conf/design/study/): each composes to the steps its number says;
routed instructions (designs 8 and 9) choose the first pass's instruction by a question rule, in one pass;
the full history as memory and its overflow policy; the BM25 memory with resolved-date lines."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lme import CONF_DIR
from lme.answer.reader import Reader
from lme.answer.rules import parse_routes, select_routes
from lme.answer.study_instructions import STUDY_INSTRUCTION_SHA256, study_digest
from lme.data.load import load_questions
from lme.data.sample import SAMPLE_PATH
from lme.config.design import canonical_design, compose_design, plain
from lme.util.errors import LmeError
from lme.util.hashing import sha256_text
from lme.judge import make_judge
from lme.memory.full_history import FullHistoryMemoryBuilder
from lme.memory.retrieved import RetrievedMemoryBuilder
from lme.memory.user_log import UserLogMemoryBuilder
from lme.models.cache import CallCache
from lme.models.gateway import Gateway, ModelSpec
from lme.models.offline import JUDGE_MODEL, READER_MODEL
from lme.retrieval.fts5 import FTS5Retriever
from lme.answer.run import QuestionRecord, answer_question
from judging import OFFLINE_TEMPLATES
from shared_data import MINI, S_FILE, available, needs
from shared_data import STUDY_INSTRUCTIONS as STUDY_FILE

ROOT = Path(__file__).resolve().parents[1]
needs_mini = needs(MINI)
needs_study_file = needs(STUDY_FILE)

USER_LOG = "lme.memory.user_log.UserLogMemoryBuilder"
RETRIEVED = "lme.memory.retrieved.RetrievedMemoryBuilder"
FULL = "lme.memory.full_history.FullHistoryMemoryBuilder"
FIRST = ("user_log", "calibration", "answer_format")
ADVICE = ("advice", "first_pass", ("user_log", "answer_format", "advice"))
DECLINE = ("decline", "whole_sessions", ("whole_sessions", "answer_format"))
# the design runs' first decline: the earlier whole-session view, without the content-word step
EARLIER_DECLINE = ("decline", "whole_sessions_no_content_words", ("whole_sessions", "answer_format"))
RECALL = ("recall", "whole_sessions", ("whole_sessions", "answer_format", "recall"))
COUNTING = ("counting", "first_pass", ("user_log", "calibration", "counting"))
STATE_FIRST_PASS = ("current_state", "first_pass", (*FIRST, "current_state"))
STATE_WHOLE = ("current_state", "whole_sessions", ("whole_sessions", "answer_format"))  # the decline instruction
ROUTES = (("advice", ADVICE[2]), ("current_state", STATE_FIRST_PASS[2]))

# file -> (retriever, memory builder, first-pass paragraphs, re-reads in order (rule, view, paragraphs), routes,
#          arbiter (view, paragraphs) or None, split). Helper B's model-built designs (13, 15, dev_notes) are
# tested with the model-built memory.
EXPECTED = {
    "01_user_log_bm25": ("bm25", USER_LOG, FIRST, (), (), None, None),
    "02_user_log_fused": ("hybrid", USER_LOG, FIRST, (), (), None, None),
    "03_decline": ("hybrid", USER_LOG, FIRST, (EARLIER_DECLINE,), (), None, None),
    "04_advice": ("hybrid", USER_LOG, FIRST, (ADVICE,), (), None, None),
    "05_advice_decline": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE), (), None, None),
    "06_counting": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE, COUNTING), (), None, None),
    "07_arbiter": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE), (),
                   ("first_pass", (*FIRST, "arbiter")), None),
    "08_routed": ("hybrid", USER_LOG, FIRST, (), ROUTES, None, None),
    "09_routed_decline": ("hybrid", USER_LOG, FIRST, (EARLIER_DECLINE,), ROUTES, None, None),
    "10_second_decline": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE, DECLINE), (), None, None),
    "11_current_state_whole_sessions": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE, DECLINE, STATE_WHOLE), (),
                                        None, None),
    "12_recall": ("hybrid", USER_LOG, FIRST, (ADVICE, EARLIER_DECLINE, DECLINE, RECALL), (), None, None),
    "confirmation": ("hybrid", USER_LOG, FIRST, (ADVICE, DECLINE, DECLINE, RECALL), (), None, None),
    "14_current_state_first_pass": ("hybrid", USER_LOG, FIRST,
                                    (ADVICE, EARLIER_DECLINE, DECLINE, RECALL, STATE_FIRST_PASS),
                                    (), None, None),
    "dev_bm25_96kb": ("bm25", RETRIEVED, (), (), (), None, None),
    "dev_semantic_96kb": ("semantic", RETRIEVED, (), (), (), None, None),
    "dev_bm25_resolved_dates": ("bm25", RETRIEVED, (), (), (), None, None),
    "dev_user_log_bm25": ("bm25", USER_LOG, ("user_log", "calibration"), (), (), None, None),
    "dev_user_log_fused_answer_format": ("hybrid", USER_LOG, FIRST, (), (), None, None),
    "dev_current_state": ("hybrid", USER_LOG, FIRST, (STATE_FIRST_PASS,), (), None, None),
    "full_history": ("bm25", FULL, (), (), (), None, None),
}
OTHERS = {"13_ledger_replace", "15_ledger_append", "dev_notes_bm25"}  # helper B's (model-built memory)

# The development runs (the write-up's "Development path", on the 100 development questions): each file's leading
# comment gives the write-up's figure (questions correct in two or three runs, of 100), or says it is not published.
DEV_FIGURES = {
    "dev_bm25_96kb": "87 of 100",
    "dev_semantic_96kb": "91 of 100",
    "dev_bm25_resolved_dates": "87 of 100",
    "dev_notes_bm25": "90 and 91 of 100",
    "dev_user_log_bm25": "94 of 100",
    "dev_user_log_fused_answer_format": "95 of 100",
    "dev_current_state": "not published",
}


def design(name: str, *overrides: str):
    return compose_design([f"+design=study/{name}", *overrides], check=True)


def test_every_study_file_is_expected_here_or_is_a_model_built_design():
    files = {path.stem for path in (CONF_DIR / "design" / "study").glob("*.yaml")}
    assert set(EXPECTED) <= files
    assert files - set(EXPECTED) <= OTHERS
    for path in (CONF_DIR / "design" / "study").glob("*.yaml"):  # each says what it is in its first lines
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0] == "# @package _global_" and lines[1].startswith("# ") and len(lines[1]) > 20, path.name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_study_design_has_the_steps_its_number_says(name):
    retriever, memory, first, rereads, routes, arbiter, split = EXPECTED[name]
    built = design(name)
    assert built.name == f"study_{name}"
    assert built.retriever.name == retriever and built.memory.target == memory
    assert built.instructions.first_pass_paragraphs == first
    assert [(s.rule.name, s.rule.view, s.rule.paragraphs) for s in built.instructions.rules] == list(rereads)
    assert [(s.rule.name, s.rule.paragraphs) for s in built.instructions.routes] == list(routes)
    assert all(s.rule.view == "first_pass" and s.rule.on == "question" for s in built.instructions.routes)
    assert (None if built.arbiter is None else (built.arbiter.view, built.arbiter.paragraphs)) == arbiter
    assert built.dataset.selection.split == split


def test_design_3_adds_exactly_the_decline_rule_after_the_first_pass():
    rules = design("03_decline").instructions.rules
    assert [step.rule.name for step in rules] == ["decline"]
    assert rules[0].rule.on == "answer" and rules[0].rule.view == "whole_sessions_no_content_words"


def test_design_11_re_reads_current_state_over_whole_sessions_with_the_decline_instruction():
    instructions = design("11_current_state_whole_sessions").instructions
    state = instructions.rules[-1]
    assert state.rule.name == "current_state" and state.rule.on == "question" and state.rule.view == "whole_sessions"
    assert state.instruction == instructions.texts["decline"]


def test_design_14_re_reads_current_state_over_the_first_pass_memory_after_recall():
    instructions = design("14_current_state_first_pass").instructions
    assert [step.rule.name for step in instructions.rules][-2:] == ["recall", "current_state"]
    assert instructions.rules[-1].rule.view == "first_pass"
    assert instructions.texts["current_state"].endswith(instructions.paragraphs["current_state"])


def test_user_log_with_bm25_replies_reads_the_bm25_top_100_list():
    assert design("01_user_log_bm25").memory.node["top_k"] == 100
    assert design("dev_user_log_bm25").memory.node["top_k"] == 100
    assert design("02_user_log_fused").memory.node["top_k"] == 200  # the merge of two top-100 lists


@pytest.mark.parametrize(("study", "shipped"), [("02_user_log_fused", "first_pass"), ("confirmation", "pipeline"),
                                                ("full_history", "full_history")])
def test_design_2_and_the_confirmation_run_are_the_shipped_first_pass_and_pipeline(study, shipped):
    def without_name(built):
        canonical = canonical_design(plain(built.config))
        canonical.pop("design_name")
        if "rules" in canonical:  # the steps as run: `decline` and `{rule: decline, view: <its own view>}` are one
            canonical["rules"]["order"] = [[step.rule.name, step.rule.view] for step in built.instructions.rules]
        return canonical

    assert without_name(design(study)) == without_name(compose_design([f"+design={shipped}"], check=True))


def test_each_development_run_is_a_file_whose_leading_comment_gives_the_write_ups_figure():
    files = {path.stem for path in (CONF_DIR / "design" / "study").glob("dev_*.yaml")}
    assert files == set(DEV_FIGURES)
    for name, figure in DEV_FIGURES.items():
        text = (CONF_DIR / "design" / "study" / f"{name}.yaml").read_text(encoding="utf-8")
        comment = " ".join(line.removeprefix("# ") for line in text.split("\ndefaults:", 1)[0].splitlines()[1:])
        assert f"Write-up's figure: {figure}" in comment or f"Write-up's figures: {figure}" in comment, name


def test_the_place_name_design_reads_lmes_own_current_state_paragraph_with_the_value_removed():
    built = design("dev_current_state")
    paragraph = (CONF_DIR / "instructions" / "study_dev" / "current_state.txt").read_text(encoding="utf-8")[:-1]
    assert built.instructions.paragraphs["current_state"] == paragraph
    assert built.instructions.texts["current_state"] == built.instructions.compose([*FIRST, "current_state"])
    # its own file, not the one designs 8, 9 and 14 read
    assert paragraph != design("14_current_state_first_pass").instructions.paragraphs["current_state"]


@needs(S_FILE)
def test_the_place_name_designs_paragraph_holds_no_reference_answer_of_s():
    from lme.provenance.audit import Text, find_hits

    paragraph = (CONF_DIR / "instructions" / "study_dev" / "current_state.txt").read_text(encoding="utf-8")
    assert find_hits([Text("current_state", paragraph)], load_questions(S_FILE)) == []


def test_the_bm25_memory_with_resolved_date_lines_is_the_bm25_memory_with_them():
    assert design("dev_bm25_resolved_dates").memory.node["resolved_dates"] is True
    assert "resolved_dates" not in design("dev_bm25_96kb").memory.node


def test_every_command_of_the_study_pages_tables_composes_as_written():
    page = (ROOT / "docs" / "reference-study.md").read_text(encoding="utf-8")
    section = page.split("\n## The reference study's designs\n", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"`python -m lme (\+design=study/[^`]+)`", section)
    named = {command.split()[0].removeprefix("+design=study/") for command in commands}
    files = {path.stem for path in (CONF_DIR / "design" / "study").glob("*.yaml")}
    assert set(EXPECTED) <= named <= files  # each design above has its command; each command names a file
    for command in commands:
        args = [arg for arg in command.split() if arg not in ("-m", "seed=1,2,3")]
        assert command.endswith("-m seed=1,2,3")
        # the development memories ran on the study's 100 development questions, the 15 designs on all 500
        assert ("split=study_dev" in args) == args[0].startswith("+design=study/dev_"), command
        if "instructions=study" in args:
            if not available(STUDY_FILE):
                continue
            args.append(f"instructions.source={STUDY_FILE}")
        compose_design(args, check=True)


# The write-up's headline table: design, mean of three runs, questions correct in two or three runs, reader cost per
# answer (the first pass has none of its own: it is the confirmation run before its re-reads).
HEADLINE = [("confirmation", "93.07%", "474", "$0.0108"), ("02_user_log_fused", "91.20%", "458", ""),
            ("dev_semantic_96kb", "88.87%", "445", "$0.0049"), ("dev_bm25_96kb", "86.13%", "431", "$0.0051")]


@pytest.mark.parametrize("page", ["README.md", "docs/reference-study.md"])
def test_the_write_ups_headline_table_is_on_the_page_with_the_command_of_each_row(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    if page != "README.md":  # at the top of the study page
        text = text.split("\n## The study's headline results\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    for name, mean, count, cost in HEADLINE:
        command = f"`python -m lme +design=study/{name} setup=study instructions=study -m seed=1,2,3`"
        (row,) = [row for row in rows if command in row]
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert mean in cells and (count in cells or any(cell.startswith(f"{count} (") for cell in cells)), row
        assert (cost in cells) if cost else not any(cell.startswith("$") for cell in cells), row
    assert "$121.83" in text and "EmbeddingGemma" in text and "OPENAI_API_KEY" in text


# -- routed instructions ----------------------------------------------------------------------------------------


@needs_mini
def test_routes_choose_the_expected_instruction_on_real_questions():
    questions = {q.question_id: q for q in load_questions(MINI)}
    instructions = design("08_routed").instructions
    routes = [step.rule for step in instructions.routes]
    chosen = select_routes(routes, [(qid, q.question) for qid, q in questions.items()])
    assert chosen == {"advice": ["06878be2", "06f04340"], "current_state": ["031748ae"]}
    # "accessories that would complement my current photography setup": both fire, the first route wins
    assert routes[1].fires(questions["06878be2"].question, None)
    texts = instructions.texts
    assert instructions.first_pass_for(questions["06878be2"].question) == texts["advice"]
    assert instructions.first_pass_for(questions["031748ae"].question) == texts["current_state"]
    for qid, question in questions.items():
        if qid not in {"06878be2", "06f04340", "031748ae"}:
            assert instructions.first_pass_for(question.question) == texts["first_pass"]
    assert texts["advice"] == instructions.compose(["user_log", "answer_format", "advice"])
    assert texts["current_state"] == instructions.compose([*FIRST, "current_state"])


@needs_mini
def test_a_routed_first_pass_sends_its_routes_instruction_in_one_read(tmp_path):
    questions = {q.question_id: q for q in load_questions(MINI)}
    instructions = design("08_routed").instructions
    builder = UserLogMemoryBuilder(FTS5Retriever(), top_k=100)
    reader = Reader(name="offline", model=ModelSpec(model=READER_MODEL))
    judge = make_judge("offline", False, ModelSpec(model=JUDGE_MODEL), templates=OFFLINE_TEMPLATES)
    cache = CallCache(tmp_path / "calls.sqlite")
    expected = {"06878be2": "advice", "031748ae": "current_state", "01493427": "first_pass"}
    try:
        for qid, step in expected.items():
            record = QuestionRecord()
            outcome = asyncio.run(answer_question(
                questions[qid], builder, reader, instructions.first_pass, judge, Gateway(cache), 1,
                record=record, routes=instructions.routes))
            assert [s.rule for s in outcome.steps] == ["first_pass"] and outcome.reader.calls == 1
            assert outcome.steps[0].instruction_sha256 == sha256_text(instructions.texts[step])
            (read,) = record.reads
            assert read.step == "first_pass" and read.messages[0]["content"] == instructions.texts[step]
    finally:
        cache.close()


def test_the_rules_command_lists_each_routes_questions_first_route_first(capsys):
    from lme.cli.rules import main

    assert main(["+design=study/09_routed_decline", "--json"]) == 0
    out, err = capsys.readouterr()
    # the bundled sample: its six preference questions ask for suggestions; three ask how things stand now
    assert json.loads(out) == {"route:advice": ["38553ac8", "cfdef303", "a1645f58", "571aa4f6", "11fba56e", "c329870a"],
                               "route:current_state": ["681091fe", "681091fe_abs", "09642b31"]}
    assert "| route:advice | 6 |" in err and "decline" in err
    assert main(["+design=study/08_routed"]) == 0
    out, _ = capsys.readouterr()
    assert "### route:current_state (3)" in out and "the first route in rules.routes that fires" in out


def test_routes_are_refused_in_one_sentence_unless_they_are_question_rules_over_the_first_pass():
    definitions = plain(compose_design(["+design=pipeline"]).config)["rules"]["definitions"]
    paragraphs = ["user_log", "answer_format", "advice", "whole_sessions", "recall"]
    views = ["first_pass", "whole_sessions"]

    def routes(names):
        return parse_routes({"order": [], "routes": names, "definitions": definitions}, paragraphs, views)

    assert [rule.name for rule in routes(["advice"])] == ["advice"]
    assert routes([]) == () and parse_routes({"definitions": definitions}, paragraphs, views) == ()
    with pytest.raises(LmeError, match=r"^rules.routes\[0\]: rule 'nope' is not defined in rules.definitions"):
        routes(["nope"])
    with pytest.raises(LmeError, match=r"^rules.routes\[0\]: rule 'decline' reads the answer; .* `on: question`\.$"):
        routes(["decline"])
    with pytest.raises(LmeError, match=r"^rules.routes\[0\]: rule 'recall' reads view 'whole_sessions'"):
        routes(["recall"])
    with pytest.raises(LmeError, match=r"^rules.routes\[1\]: rule 'advice' is listed twice"):
        routes(["advice", "advice"])
    with pytest.raises(LmeError, match=r"^rules.routes: expected a list of strings"):
        routes("advice")


def test_a_route_whose_paragraphs_describe_another_memory_is_refused():
    with pytest.raises(LmeError, match="step advice reads memory \"retrieved\""):
        compose_design(["+design=study/08_routed", "memory=retrieved", "instructions.first_pass=[]"])


def test_routes_are_in_the_design_digest_the_prereg_digests_and_the_logged_instructions():
    from lme.provenance.prereg import text_digests

    routed = design("08_routed")
    assert design("08_routed", "rules.routes=[advice]").config_sha256 != routed.config_sha256
    digests = text_digests(plain(routed.config))
    assert "rules.routes" in digests
    assert digests["instruction.advice"] == routed.instructions.sha256s()["advice"]
    assert set(routed.instructions.sha256s()) == {"first_pass", "advice", "current_state"}


@needs_study_file
def test_routed_designs_run_the_studys_texts_with_the_advice_route_verified():
    routed = design("09_routed_decline", "instructions=study", f"instructions.source={STUDY_FILE}")
    texts = routed.instructions.texts
    for step in ("first_pass", "advice", "decline"):
        assert study_digest(texts[step]) == STUDY_INSTRUCTION_SHA256[step]
    assert texts["current_state"].endswith(routed.instructions.paragraphs["current_state"])


@needs_study_file
@pytest.mark.parametrize("name", ["06_counting", "07_arbiter", "11_current_state_whole_sessions",
                                  "14_current_state_first_pass", "dev_bm25_96kb", "full_history"])
def test_study_designs_with_lmes_own_extra_paragraphs_compose_with_the_studys_texts(name):
    built = design(name, "instructions=study", f"instructions.source={STUDY_FILE}")
    if built.instructions.first_pass_paragraphs:
        assert study_digest(built.instructions.first_pass) == STUDY_INSTRUCTION_SHA256["first_pass"]
    else:
        assert built.instructions.first_pass == built.instructions.base  # the study's verified base alone


@needs_study_file
def test_a_development_first_pass_the_study_did_not_publish_is_refused_with_its_texts():
    with pytest.raises(LmeError, match="step first_pass composes base \\+ \\[user_log, calibration\\]"):
        design("dev_user_log_bm25", "instructions=study", f"instructions.source={STUDY_FILE}")


# -- the full history as memory ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_question():
    return load_questions(SAMPLE_PATH)[0]


def test_the_full_history_holds_every_turn_in_date_order(sample_question):
    memory = FullHistoryMemoryBuilder().build(sample_question)
    assert memory.turn_ids == tuple(turn.turn_id for turn in sample_question.turns())
    assert memory.notes["overflow"] == "false" and memory.skipped_turn_ids == ()
    first, last = sample_question.turns()[0], sample_question.turns()[-1]
    assert memory.text.startswith(f"[{first.turn_id}] ") and memory.text.endswith(last.content)
    assert memory.n_bytes == len(memory.text.encode("utf-8"))


@pytest.mark.parametrize("policy", ["oldest", "newest"])
def test_an_overflowing_history_keeps_whole_contiguous_turns_by_its_policy(sample_question, policy):
    whole = FullHistoryMemoryBuilder().build(sample_question)
    budget = whole.n_bytes // 3
    memory = FullHistoryMemoryBuilder(max_bytes=budget, overflow_policy=policy).build(sample_question)
    ids = [turn.turn_id for turn in sample_question.turns()]
    kept = list(memory.turn_ids)
    assert 0 < len(kept) < len(ids) and memory.n_bytes <= budget
    assert kept == (ids[: len(kept)] if policy == "oldest" else ids[len(ids) - len(kept):])
    assert memory.notes["overflow"] == "true" and memory.notes["overflow_policy"] == policy
    assert set(memory.skipped_turn_ids) == set(ids) - set(kept)
    assert memory.text in whole.text  # whole turns, never cut


def test_an_overflowing_history_under_refuse_stops_the_question_in_one_sentence(sample_question):
    with pytest.raises(LmeError, match=rf"^question {sample_question.question_id}: its full history is \d+ bytes, "
                                       r"over memory.max_bytes \(1000\), and memory.overflow_policy is refuse"):
        FullHistoryMemoryBuilder(max_bytes=1000, overflow_policy="refuse").build(sample_question)


def test_an_unknown_overflow_policy_is_refused_naming_the_key():
    with pytest.raises(LmeError, match="^memory.overflow_policy 'latest' is unknown for the full history"):
        FullHistoryMemoryBuilder(overflow_policy="latest")
    with pytest.raises(LmeError, match="memory.overflow_policy"):
        compose_design(["+design=full_history", "memory.overflow_policy=latest"], check=True)


# -- BM25 with resolved-date lines ------------------------------------------------------------------------------


def test_resolved_date_lines_follow_retrieved_user_turns_that_hold_relative_dates():
    questions = load_questions(SAMPLE_PATH)
    plain_builder = RetrievedMemoryBuilder(FTS5Retriever())
    dated_builder = RetrievedMemoryBuilder(FTS5Retriever(), resolved_dates=True)
    found = 0
    for question in questions:
        before, after = plain_builder.build(question), dated_builder.build(question)
        assert "\nResolved dates: " not in before.text
        lines = after.text.count("\nResolved dates: ")
        assert after.n_bytes <= dated_builder.max_bytes
        if lines:
            found += 1
            assert after.notes["resolved_dates"] == "true"
            for block in after.text.split("\n\n"):
                if "\nResolved dates: " in block:
                    assert " user: " in block.split("\n", 1)[0]  # only after a user turn
    assert found  # the sample holds relative dates in retrieved user turns


# -- end to end -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_design_8_runs_end_to_end_offline_and_logs_each_routes_instruction(tmp_path):
    ids = "[38553ac8,681091fe,755a3ac1,d82c07cd]"  # sample questions: advice, current state, two others
    args = [sys.executable, "-m", "lme", "+design=study/08_routed", f"question_ids={ids}",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"tracking.artifact_location={tmp_path}/mlruns",
            f"cache_dir={tmp_path}/cache", "hydra.run.dir=out"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {row["question_id"]: row for row in map(json.loads, (tmp_path / "out" / "outcomes.jsonl").read_text().splitlines())}
    texts = design("08_routed").instructions.texts
    expected = {"38553ac8": "advice", "681091fe": "current_state", "755a3ac1": "first_pass", "d82c07cd": "first_pass"}
    for qid, step in expected.items():
        (first,) = rows[qid]["steps"]
        assert first["rule"] == "first_pass" and first["instruction_sha256"] == sha256_text(texts[step])
        assert rows[qid]["reader"]["calls"] == 1 and rows[qid]["answer"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("lme").experiment_id])
    for step in ("first_pass", "advice", "current_state"):
        assert run.data.params[f"instruction.{step}.sha256"] == sha256_text(texts[step])


@pytest.mark.slow
def test_every_study_design_runs_offline_on_the_bundled_sample(tmp_path):
    """One multirun over the study's designs (two questions each), in one process, offline."""
    names = ",".join(f"study/{name}" for name in sorted(EXPECTED))
    args = [sys.executable, "-m", "lme", "-m", f"+design={names}", "split=null", "limit=2", "tracking.enabled=false",
            f"cache_dir={tmp_path}/cache", "hydra.sweep.dir=sweep", "progress=false"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LME_", "OPENAI"))}
    done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    journals = sorted((tmp_path / "sweep").glob("*/outcomes.jsonl"))
    assert len(journals) == len(EXPECTED)
    for journal in journals:
        rows = [json.loads(line) for line in journal.read_text().splitlines()]
        assert len(rows) == 2 and all(row["answer"] for row in rows), journal

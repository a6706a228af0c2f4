"""`python -m lme rules`: the questions each question-text rule selects, with no model call."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lme.cli.rules import main
from lme.util.errors import LmeError
from shared_data import S_FILE, needs

# In the bundled sample, read by hand: the six preference questions ask for suggestions; the seven
# assistant questions ask what "you" said or recommended (so advice's exclusion drops "did you suggest").
ADVICE = ["38553ac8", "cfdef303", "a1645f58", "571aa4f6", "11fba56e", "c329870a"]
RECALL = ["961d8dcf", "961d8dcf_abs", "a8b56f85", "6e84f8ea", "dc66a27b", "b7626f49", "9bcfb1c4"]


def test_json_lists_each_question_rule_selection_and_counts_per_type(capsys):
    assert main(["+design=pipeline", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"advice": ADVICE, "recall": RECALL}
    assert "| advice | 6 | 0 | 0 | 6 |" in err and "| recall | 7 | 0 | 7 | 0 |" in err
    assert "decline" in err  # the answer rule is named, not listed


def test_markdown_table_and_the_same_overrides_as_a_run(capsys):
    assert main(["+design=pipeline", "question_types=[single-session-preference]"]) == 0
    out, _ = capsys.readouterr()
    assert "| rule | all | single-session-preference |" in out
    assert "| advice | 6 | 6 |" in out and "| recall | 0 | 0 |" in out
    assert "### advice (6)" in out and ", ".join(ADVICE) in out


def test_a_design_without_rules_selects_nothing_and_bad_rules_are_one_sentence(capsys):
    assert main(["+design=first_pass", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    with pytest.raises(LmeError, match=r"rules\.order\[0\]: rule 'advise' is not defined"):
        main(["+design=pipeline", "rules.order=[advise]"])


def test_the_command_is_registered_and_reports_errors_in_one_sentence():
    command = [sys.executable, "-m", "lme", "rules", "+design=pipeline", "rules.definitions.advice.view=attic"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "lme: error: rules.definitions.advice.view: 'attic' is not a view (known: first_pass, whole_sessions)."
    ]


@pytest.mark.slow
@needs(S_FILE)
def test_on_longmemeval_s_the_question_rules_select_by_wording_alone(capsys):
    assert main(["+design=pipeline", "--json", f"dataset.path={S_FILE}"]) == 0
    out, err = capsys.readouterr()
    selection = json.loads(out)
    assert list(selection) == ["advice", "recall"]
    assert len(selection["advice"]) == 30 and len(selection["recall"]) == 55
    assert "| advice | 30 | 0 | 0 | 30 | 0 | 0 | 0 |" in err
    assert "| recall | 55 | 0 | 54 | 0 | 0 | 1 | 0 |" in err

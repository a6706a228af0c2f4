"""The LongMemEval judge protocol, the offline stand-in that follows its shape, and Mem0's LoCoMo judge (J).

Protocol (SPEC, "The judge"): the template is chosen by `'_abs' in question_id`
first, else by question type; it is filled with `str.format(question, answer,
hypothesis)` and sent as the only (user) message, temperature 0, max_tokens 10;
the verdict is `'yes' in reply.strip().lower()` (`judge.verdict: contains_yes`; the reference study's
`exact_yes_no` reads only yes or no, see `parse_verdict`). A missing or failed answer is
wrong and costs no judge call. Judge calls are keyed without a seed, so
identical prompts share one verdict across seeds and designs.

LoCoMo's J (`judge=locomo_j`, `protocol: locomo_j`; its template, pin and reading in `lme.data.locomo_judge`): the
one template filled with `str.format(question=, gold_answer=, generated_answer=)` as the only user message, the
request's settings from the judge's YAML (Mem0's: gpt-4o-mini, temperature 0.0, JSON mode, nothing else); the
reply's JSON `label` must be CORRECT or WRONG (`judge.verdict: locomo_label`), anything else is a failed call.
An adversarial question (LoCoMo's category 5, which Mem0's evaluation leaves out) gets LoCoMo's own rule and no
call, its note saying so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from lme.data import locomo_judge
from lme.data.records import Question
from lme.util.errors import LmeError
from lme.data.judge_templates import (  # the protocol's templates; importable from here as before
    LONGMEMEVAL_TEMPLATE_SHA256,
    TEMPLATE_KEYS,
    load_templates,
    template_key,
)
from lme.util.hashing import sha256_text  # also imported from here by callers and tests
from lme.models.gateway import CallResult, Gateway, ModelSpec

PROTOCOLS: tuple[str, ...] = ("longmemeval", "locomo_j")  # `judge.protocol`: which template set, request and reading


def build_judge_prompt(templates: Mapping[str, str], question: Question, hypothesis: str) -> str:
    """The filled template for one answer: LongMemEval's by position; LoCoMo's J (a template set of its one key
    `locomo_j`) by name, with the question's reference answer as the gold answer (J sends none for an adversarial
    question: `Judge.judge`)."""
    if locomo_judge.LOCOMO_J_KEY in templates:
        return locomo_judge.fill_template(templates[locomo_judge.LOCOMO_J_KEY], question.question,
                                          str(question.answer), hypothesis)
    if question.benchmark == "longmemeval":
        key = template_key(question.question_id, question.question_type)
    else:  # another benchmark's categories: the template it names for each (lme.data.benchmark)
        from lme.data.benchmark import judge_template_key

        key = judge_template_key(question)
    template = templates[key]
    return template.format(question.question, question.answer, hypothesis)


VERDICT_RULES: tuple[str, ...] = ("contains_yes", "exact_yes_no", "locomo_label")
_EXACT_YES = re.compile(r"yes[.!]?")
_EXACT_NO = re.compile(r"no[.!]?")


def parse_verdict(reply: str, rule: str = "contains_yes") -> bool | None:
    """The verdict in a judge's reply, by `rule`:

    - `contains_yes`, LongMemEval's: `'yes' in reply.strip().lower()` (never None);
    - `exact_yes_no`, the reference study's: the reply stripped and lower-cased must be `yes` or `no`, a final
      `.` or `!` allowed; anything else ("Yes, it is", "The answer is correct", "") is None, no verdict:
      the judge call counts as failed (the answer as wrong), never silently as a no;
    - `locomo_label`, LoCoMo's J: the reply's JSON `label`, exactly CORRECT or WRONG; anything else is None
      (`lme.data.locomo_judge.read_label`).
    """
    if rule == "locomo_label":
        return locomo_judge.read_label(reply)[0]
    text = reply.strip().lower()
    if rule == "contains_yes":
        return "yes" in text
    if rule == "exact_yes_no":
        if _EXACT_YES.fullmatch(text):
            return True
        return False if _EXACT_NO.fullmatch(text) else None
    raise LmeError(f"judge.verdict {rule!r} is unknown (known: {', '.join(VERDICT_RULES)}).")


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reply: str | None  # None when no judge call was made or it failed
    call: CallResult | None
    note: str = ""

    @property
    def error(self) -> str | None:
        """Why the verdict is missing: its judge call failed (None when there is a verdict or no call was due)."""
        return self.call.error if self.call is not None and not self.call.ok else None


PROTOCOL_JUDGE_MODEL = "gpt-4o-2024-08-06"  # the model LongMemEval's evaluate_qa.py judges with
STUDY_JUDGE = ("longmemeval-study", "gpt-4o")  # the reference study's judge (judge=longmemeval_study): name, model


@dataclass(frozen=True)
class JudgeLabel:
    """Which judge made a run's verdicts, in words (`describe_judge`). `kind`: `longmemeval` (LongMemEval's templates
    on its protocol's model: the LongMemEval judge), `study` (the reference study's judge on the gpt-4o alias),
    `templates` (LongMemEval's templates on another model), `own` (other templates on a model), `locomo-j` (Mem0's
    LoCoMo judge, by its name `locomo-j`), `stand-in` (offline)."""

    name: str
    model: str | None  # the judge's model id as configured; None when the run did not record it
    kind: str
    text: str

    @property
    def official(self) -> bool:
        """LongMemEval's templates on the model its protocol (or the reference study's) names."""
        return self.kind in ("longmemeval", "study")


def describe_judge(name: str, official: bool, model: str | None, offline: bool) -> JudgeLabel:
    """A judge in words, from its name, whether it reads LongMemEval's own templates (`judge.official`), its model
    id and whether that model is an offline stand-in. Only LongMemEval's templates on `gpt-4o-2024-08-06` are the
    LongMemEval judge; the same templates on any other model are said to be judged by that model. `model` None
    (a run that did not record `judge.model`): the templates flag alone decides, as before models were told apart.
    Mem0's LoCoMo judge is known by its name (`locomo-j`) and described with its model (Mem0's was gpt-4o-mini)."""
    bare = model.removeprefix("openai/") if model else None
    if offline or (model is None and not official):
        kind, text = "stand-in", "an offline stand-in, NOT the LongMemEval judge"
    elif name == locomo_judge.LOCOMO_J_NAME:
        kind = "locomo-j"
        text = f"Mem0's LoCoMo judge (J) on {model}" if model else "Mem0's LoCoMo judge (J)"
        if bare is not None and bare != locomo_judge.MEM0_MODEL:
            text += f" (Mem0's evaluation used {locomo_judge.MEM0_MODEL})"
    elif not official:
        kind, text = "own", f"its own templates judged by {model}, NOT the LongMemEval judge"
    elif model is None or bare == PROTOCOL_JUDGE_MODEL:
        kind, text = "longmemeval", "the LongMemEval judge"
    elif (name, bare) == STUDY_JUDGE:
        kind, text = "study", "LongMemEval's templates on the gpt-4o alias: the reference study's protocol"
    else:
        kind, text = "templates", (f"LongMemEval's templates judged by {model}, not the official judge model "
                                   f"({PROTOCOL_JUDGE_MODEL})")
    return JudgeLabel(name=name, model=model, kind=kind, text=text)


def recorded_judge(name: str, official: bool, model: str | None) -> JudgeLabel:
    """A logged run's judge: its tags `lme.judge`, `lme.judge_official` and its param `judge.model` (None when the run
    did not log it)."""
    from lme.models.offline import OFFLINE_PROVIDER

    return describe_judge(name, official, model, offline=bool(model) and model.startswith(OFFLINE_PROVIDER + "/"))


@dataclass(frozen=True)
class Judge:
    """A judge: a model, a template set, and whether the templates are LongMemEval's (`official`; whether it is the
    LongMemEval judge depends on the model too: `label`)."""

    name: str
    official: bool
    model: ModelSpec
    templates: Mapping[str, str]
    verdict: str = "contains_yes"  # how the reply is read (`parse_verdict`)
    system_message: str | None = None  # a system message before the filled template (LongMemEval: none)
    protocol: str = "longmemeval"  # `locomo_j`: Mem0's LoCoMo judge (its one template, category 5 by rule)

    @property
    def label(self) -> JudgeLabel:
        return describe_judge(self.name, self.official, self.model.model, self.model.is_offline)

    @property
    def digests(self) -> dict[str, str]:
        return {key: sha256_text(text) for key, text in self.templates.items()}

    def calls_for(self, question: Question) -> bool:
        """Whether an answer to `question` is judged by a model call (not for LoCoMo's adversarial questions under
        `locomo_j`, which follow LoCoMo's rule): traces show a prompt and estimates count one only then."""
        return not (self.protocol == "locomo_j" and locomo_judge.is_adversarial(question.question_type))

    async def judge(self, gateway: Gateway, question: Question, answer: str | None) -> Verdict:
        if answer is None or not answer.strip():
            return Verdict(correct=False, reply=None, call=None, note="missing answer counts as wrong")
        if not self.calls_for(question):
            return Verdict(correct=locomo_judge.adversarial_correct(answer), reply=None, call=None,
                           note=locomo_judge.ADVERSARIAL_NOTE)
        prompt = build_judge_prompt(self.templates, question, answer)
        messages = [{"role": "user", "content": prompt}]
        if self.system_message:
            messages.insert(0, {"role": "system", "content": self.system_message})
        call = await gateway.complete(self.model, messages, seed=None)
        if call.ok and not (call.text or "").strip():  # no verdict in it: a failed call, never a silent "no"
            call = replace(call, text=None, error="EmptyVerdict: the judge's reply is empty")
        correct = parse_verdict(call.text or "", self.verdict) if call.ok else None
        if call.ok and correct is None:  # a reply that is neither yes nor no (or no CORRECT/WRONG label): no verdict
            if self.verdict == "locomo_label":
                reason = locomo_judge.read_label(call.text or "")[1]
            else:
                shown = " ".join((call.text or "").split())
                shown = shown if len(shown) <= 80 else shown[:77] + "..."
                reason = f"the judge replied {shown!r}, neither yes nor no"
            call = replace(call, text=None, error=f"UnparseableVerdict: {reason}")
        if not call.ok:
            return Verdict(correct=False, reply=None, call=call, note=f"judge call failed: {call.error}")
        return Verdict(correct=bool(correct), reply=call.text, call=call)


def make_judge(
    name: str,
    official: bool,
    model: ModelSpec,
    templates_path: str | None = None,
    templates: Mapping[str, str] | None = None,
    verdict: str = "contains_yes",
    system_message: str | None = None,
    protocol: str = "longmemeval",
) -> Judge:
    """Build a judge from config: the official one needs the pinned LongMemEval templates file; `verdict`
    names how its replies are read (`parse_verdict`); `system_message`, when given, is sent before the filled
    template (the reference study's judge; LongMemEval's sends the template alone). `protocol: locomo_j` is Mem0's
    LoCoMo judge: its template file (`templates_path`) verified against lme's pin, its labels read by
    `verdict: locomo_label`, no system message."""
    if verdict not in VERDICT_RULES:
        raise LmeError(f"judge {name}: judge.verdict {verdict!r} is unknown (known: {', '.join(VERDICT_RULES)}).")
    if protocol not in PROTOCOLS:
        raise LmeError(f"judge {name}: judge.protocol {protocol!r} is unknown (known: {', '.join(PROTOCOLS)}).")
    if (protocol == "locomo_j") != (verdict == "locomo_label"):
        raise LmeError(f"judge {name}: judge.verdict {verdict!r} does not go with judge.protocol {protocol!r} "
                       "(LoCoMo's J reads its replies by locomo_label, and only it does).")
    if protocol == "locomo_j":
        if system_message:
            raise LmeError(f"judge {name}: judge.system_message must be null for judge.protocol locomo_j "
                           "(Mem0's judge sends the filled template alone).")
        if not templates_path:
            raise LmeError(f"judge {name}: judge.templates_path must point to the LoCoMo judge template file "
                           "(or set LME_LOCOMO_JUDGE).")
        loaded_file = locomo_judge.load_locomo_judge(templates_path)
        return Judge(name=name, official=official, model=model, templates=loaded_file.templates, verdict=verdict,
                     protocol=protocol)
    if templates_path:
        loaded = load_templates(templates_path)
    elif official:
        raise LmeError(f"judge {name}: judge.templates_path must point to the LongMemEval templates file.")
    elif templates:
        loaded = {key: str(value) for key, value in templates.items()}
        missing = [key for key in TEMPLATE_KEYS if key not in loaded]
        if missing:
            raise LmeError(f"judge {name}: field judge.templates lacks {', '.join(missing)}.")
    else:
        raise LmeError(f"judge {name}: set judge.templates_path or judge.templates.")
    return Judge(name=name, official=official, model=model, templates=loaded, verdict=verdict,
                 system_message=system_message or None)


__all__ = [
    "LONGMEMEVAL_TEMPLATE_SHA256", "PROTOCOLS", "PROTOCOL_JUDGE_MODEL", "TEMPLATE_KEYS", "VERDICT_RULES", "Judge",
    "JudgeLabel",
    "Verdict", "describe_judge", "recorded_judge", "build_judge_prompt", "load_templates",
    "make_judge", "parse_verdict", "sha256_text", "template_key",
]

"""Write an `evaluate_qa.py` shaped like LongMemEval's, around templates given at test time.

No template text lives in the project: tests pass either made-up templates or
the real ones (`shared_data.TEMPLATES`, the real test data's judge_templates.json). The
layout follows LongMemEval's `get_anscheck_prompt(task, question, answer,
response, abstention=False)`: `if not abstention:` then an `if task in [...]` /
`elif task == ...` chain ending in `raise NotImplementedError`, `else:` the
abstention template, each followed by `prompt = template.format(...)`.

With `style="mixed"` the templates are written in the other ways Python allows
(`+` concatenation, adjacent literals, an f-string with doubled braces, an
f-string using a module-level constant) so the extractor is tested on all of
them; `style="plain"` writes one literal per template, as LongMemEval does.
"""

from __future__ import annotations

from collections.abc import Mapping

TEMPLATE_KEYS = ("abstention", "ssu_ssa_multisession", "temporal_reasoning", "knowledge_update",
                 "single_session_preference")


def _fstring(text: str, tail_name: str | None = None) -> str:
    literal = repr(text.replace("{", "{{").replace("}", "}}"))
    if tail_name is not None:
        literal = literal[:-1] + "{" + tail_name + "}" + literal[-1]
    return "f" + literal


def _split(text: str) -> tuple[str, str]:
    middle = len(text) // 2
    return text[:middle], text[middle:]


def build_evaluate_qa(templates: Mapping[str, str], style: str = "plain") -> str:
    t = {key: templates[key] for key in TEMPLATE_KEYS}
    preamble = ""
    if style == "plain":
        exprs = {key: repr(text) for key, text in t.items()}
    elif style == "mixed":
        head, tail = _split(t["temporal_reasoning"])
        first, second = _split(t["single_session_preference"])
        cut = t["abstention"].rfind("\n\n")
        abstention_head, abstention_tail = t["abstention"][:cut], t["abstention"][cut:]
        preamble = f"ABSTENTION_QUESTION = {abstention_tail!r}\n"
        exprs = {
            "ssu_ssa_multisession": repr(t["ssu_ssa_multisession"]),
            "temporal_reasoning": f"{head!r} + {tail!r}",
            "knowledge_update": _fstring(t["knowledge_update"]),
            "single_session_preference": f"({first!r}\n                        {second!r})",
            "abstention": _fstring(abstention_head, "ABSTENTION_QUESTION"),
        }
    else:
        raise ValueError(style)
    return f'''import os
import sys
import json
import openai  # never imported by lme: the file is parsed, not run

{preamble}
model_zoo = {{
    'gpt-4o': ('gpt-4o-2024-08-06', 'openai'),
}}


def get_anscheck_prompt(task, question, answer, response, abstention=False):
    if not abstention:
        if task in ['single-session-user', 'single-session-assistant', 'multi-session']:
            template = {exprs["ssu_ssa_multisession"]}
            prompt = template.format(question, answer, response)
        elif task == 'temporal-reasoning':
            template = {exprs["temporal_reasoning"]}
            prompt = template.format(question, answer, response)
        elif task == 'knowledge-update':
            template = {exprs["knowledge_update"]}
            prompt = template.format(question, answer, response)
        elif task == 'single-session-preference':
            template = {exprs["single_session_preference"]}
            prompt = template.format(question, answer, response)
        else:
            raise NotImplementedError
    else:
        template = {exprs["abstention"]}
        prompt = template.format(question, answer, response)
    return prompt


if __name__ == '__main__':
    print(get_anscheck_prompt(sys.argv[1], 'q', 'a', 'r'))
'''

"""`python -m lme audit [--all-designs] [--json] [overrides]`: the leakage audit (`lme.provenance.audit` scans).

Exit status: 1 when any hit is not a common word, else 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from lme.cli.parser import ArgumentParser, make_parser


def _parser() -> ArgumentParser:
    parser = make_parser(
        "python -m lme audit",
        "Look for every selected question's reference answer in the instruction, paragraph, rule and "
        "example texts of a design (no model call). Other arguments are config overrides, as for a run "
        "(+design=pipeline dataset.path=FILE). Exits 1 when a hit is not a common word.",
    )
    parser.add_argument("--all-designs", action="store_true",
                        help="audit the default config and every shipped design (conf/design/*.yaml); "
                        "a +design= override is dropped, the others apply to each")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    return parser


def main(argv: Sequence[str]) -> int:
    from lme.provenance.audit import audit_runs, format_hit, scan, summary_lines
    from lme.config.design import compose_design
    from lme.config.compose import split_overrides

    overrides, rest = split_overrides(argv)
    args = _parser().parse_args(rest)
    scans, hits = scan([(label, compose_design(design_overrides))
                        for label, design_overrides in audit_runs(overrides, args.all_designs)])
    if args.json:
        print(json.dumps({
            "designs": [{"design": s.design, "texts": len(s.texts), "questions": s.questions,
                         "abstention_skipped": s.abstention} for s in scans],
            "hits": [asdict(hit) for hit in hits],
        }, ensure_ascii=False, indent=2))
    else:
        for hit in hits:
            print(format_hit(hit))
        print("\n".join(summary_lines(scans, hits)))
    return 1 if any(not hit.common for hit in hits) else 0

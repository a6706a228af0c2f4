"""The bad-input corpus: every malformed file stops `lme data stats` with one sentence and exit 2.

`bad_inputs/expected.json` maps each file to what it breaks and to the parts its
message must hold: the file name, the question id when there is one, the field.
`bad_inputs/make_corpus.py` wrote the files.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parent / "bad_inputs"
MANIFEST: dict[str, dict] = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
REPO = Path(__file__).resolve().parents[2]


def test_manifest_covers_every_file_and_there_are_at_least_20() -> None:
    files = {p.name for p in CORPUS.iterdir() if p.is_file() and p.name not in ("expected.json", "make_corpus.py")}
    assert files == set(MANIFEST)
    assert len(files) >= 20
    for name, entry in MANIFEST.items():
        assert entry["expect"][0] == name and entry["what"]
        assert (CORPUS / name).stat().st_size < 4096


def test_generator_and_corpus_agree() -> None:
    """The committed files are what make_corpus.py writes (compressed ones compared after decoding)."""
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert {name: [name, *expect] for name, (_, _, expect) in module.CASES.items()} == {
        name: entry["expect"] for name, entry in MANIFEST.items()
    }
    for name, (content, _, _) in module.CASES.items():
        if not name.endswith((".xz", ".gz")) or name.startswith("not_"):
            assert (CORPUS / name).read_bytes() == content, name


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_bad_file_fails_with_one_sentence(name: str) -> None:
    path = CORPUS / name
    result = subprocess.run(
        [sys.executable, "-m", "lme", "data", "stats", f"dataset.path={path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith(f"lme: error: {path}: ")
    assert line.endswith(".")
    for part in MANIFEST[name]["expect"]:
        assert part in line, (part, line)

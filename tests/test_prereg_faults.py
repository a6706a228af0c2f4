"""Preregistration records under faults (issue 36): every damaged, hostile or resealed-with-wrong-types record
read by `prereg verify`, a run's check before Hydra, the job's check and the report is one sentence naming the
file, exit 2, no traceback, no hang, and the record is left as it was; `prereg freeze` refuses a design holding
a key as a run does and writes a record whole or not at all; property-based tests of the record's format."""

from __future__ import annotations

import copy
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from full_disk import file_size_limit
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from design_helpers import load_dataset
from lme.study.before_run import BeforeRun, check_before_run
from lme.cli import check_config_before_hydra, compose_config
from lme.cli import main as lme_main
from lme.config.design import design_from_config
from lme.util.errors import LmeError
from lme.provenance.prereg import check_run, dump_record, load_record, parse_record, record_digest, seal, write_record
from lme.util.secrets import find_secrets, holds_a_key

FAST = ["+design=bm25", "limit=4"]  # the bundled sample, BM25, four questions (as tests/test_prereg.py)
KEY = "sk-" + "proj-" + "Zq8wX2c4V6b8N0m1L3k5J7h9"  # key-shaped, not a key
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
              f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n" for i in range(8))
)


@pytest.fixture(scope="module")
def frozen(tmp_path_factory) -> dict[str, Any]:
    """A real record, frozen in-process by `python -m lme prereg freeze`, its bytes and its data."""
    path = tmp_path_factory.mktemp("frozen") / "rec.yaml"
    with pytest.raises(SystemExit) as done:
        lme_main(["prereg", "freeze", "--out", str(path), *FAST])
    assert done.value.code == 0
    return {"path": path, "bytes": path.read_bytes(), "record": load_record(path)}


def _resealed(record: dict[str, Any], **changes: Any) -> bytes:
    return dump_record(seal({**record, **changes})).encode("utf-8")


# ---------------------------------------------------------------- the fault matrix

_OTHER_TYPES: list[Any] = [None, True, 7, 1.5, "text", ["x"], {"k": "v"}]


def _type_class(value: Any) -> str:
    return "bool" if isinstance(value, bool) else "null" if value is None else type(value).__name__


def _wrong_types(record: dict[str, Any]) -> list[tuple[str, bytes]]:
    """Every top-level field but the digest replaced by a value of each other type, resealed with a valid
    digest; and nested fields a reader would trip on, likewise."""
    files = record["code"]["files"]  # a few of them: the same shape, and each case dumps in ~5 ms, not ~50
    record = {**record, "code": {**record["code"], "files": {key: files[key] for key in sorted(files)[:3]}}}
    cases = []
    for field, value in record.items():
        if field == "record_sha256":
            continue
        for other in _OTHER_TYPES:
            if _type_class(other) != _type_class(value) and not (field in ("name", "design_name") and other is None):
                cases.append((f"{field}={_type_class(other)}", _resealed(record, **{field: other})))
    nested = {
        "plan.seeds=[str]": ("plan", "seeds", ["1"]), "plan.seeds=[bool]": ("plan", "seeds", [True]),
        "plan.seeds=[]": ("plan", "seeds", []), "plan.seeds=repeated": ("plan", "seeds", [1, 1]),
        "plan.primary=unknown": ("plan", "primary", "nope"), "plan.primary=int": ("plan", "primary", 3),
        "plan.comparisons=[int]": ("plan", "comparisons", [1]), "plan.comparisons=no-colon": ("plan", "comparisons", ["ab"]),
        "data.question_ids=[int]": ("data", "question_ids", [1, 2]), "data.n_questions=str": ("data", "n_questions", "4"),
        "data.n_questions=wrong": ("data", "n_questions", 99), "data.file_sha256=short": ("data", "file_sha256", "ab"),
        "data.path=list": ("data", "path", ["x"]), "code.files=list": ("code", "files", ["x"]),
        "code.git_dirty=str": ("code", "git_dirty", "no"), "code.source_sha256=null": ("code", "source_sha256", None),
        "models.reader=str": ("models", "reader", "gpt"), "packages.lme=list": ("packages", "lme", [1]),
        "digests.x=int": ("digests", "x", 5), "judge_templates.x=upper": ("judge_templates", "x", "AB" * 32),
    }
    for name, (field, key, value) in nested.items():
        changed = copy.deepcopy(record)
        changed[field][key] = value
        cases.append((name, _resealed(changed)))
    missing = {k: v for k, v in record.items() if k != "plan"}
    cases += [
        ("created=not-a-time", _resealed(record, created="yesterday")),
        ("lme_prereg=2", _resealed(record, lme_prereg=2)),
        ("extra-field", _resealed(record, extra=1)),
        ("plan-missing", dump_record(seal(missing)).encode()),
        ("plan.primary-missing", _resealed(record, plan={"seeds": [1], "comparisons": []})),
        ("int-key", _resealed(record, design={1: "a"})),
        ("top-level-list", b"- 1\n- 2\n"),
        ("no-digest", dump_record({k: v for k, v in record.items() if k != "record_sha256"}).encode()),
        ("digest-int", b"record_sha256: 1234\nlme_prereg: 1\n"),
        ("date-value", _resealed(record).replace(b"created: '", b"created: 2024-01-01 #'")),
    ]
    return cases


def _byte_faults(data: bytes, record: dict[str, Any]) -> list[tuple[str, bytes]]:
    rng = random.Random(36)
    n = len(data)
    cases = [("empty", b""), ("header-only", data[: data.index(b"record_sha256")])]
    for offset in sorted({1, 60, 140, 170, n // 9, n // 4, n // 2, (3 * n) // 4, n - 40, n - 2}):
        cases.append((f"truncated-at-{offset}", data[:offset]))
    cases += [
        ("random-bytes", bytes(rng.randrange(256) for _ in range(4096))),
        ("random-text", "".join(rng.choice("ab:- \n[]{}'\"#&*!|>") for _ in range(2000)).encode()),
        ("not-utf8", data.replace(b"majority_correct_accuracy", b"majority_\xffcorrect")),
        ("alias-bomb", ALIAS_BOMB.encode()),
        ("deep-list", b"a: " + b"[" * 100 + b"]" * 100 + b"\n"),
        ("deeper-than-libyaml", b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n"),
        ("deep-mapping", "".join(f"{' ' * i}k{i}:\n" for i in range(200)).encode() + b" " * 200 + b"x\n"),
        ("edited-not-resealed", data.replace(b"majority_correct_accuracy", b"mean_accuracy")),
        ("nul-bytes", b"\x00" * 1000),
        ("too-big", b"# " + b"x" * (16 * 1024 * 1024 + 10) + b"\n"),
    ]
    return cases + _wrong_types(record)


def _place(path: Path, fault: str, data: bytes | None) -> None:
    """Put a fault at `path` (nothing there before)."""
    if fault == "missing":
        return
    if fault == "directory":
        path.mkdir()
        (path / "inside.yaml").write_text("x: 1\n")
    elif fault == "unreadable":  # reading /proc/self/mem at offset 0 gives EIO, as root too
        path.symlink_to("/proc/self/mem")
    elif fault == "fifo":  # would block a plain open() for ever
        os.mkfifo(path)
    else:
        path.write_bytes(data or b"")


def _state(path: Path) -> Any:
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_dir():
        return ("dir", sorted(p.name for p in path.iterdir()))
    if path.exists() and not path.is_file():
        return ("special", path.stat().st_mode)
    return ("file", path.read_bytes()) if path.exists() else ("absent",)


def _all_faults(frozen) -> list[tuple[str, str, bytes | None]]:
    special = [(name, name, None) for name in ("missing", "directory", "unreadable", "fifo")]
    return special + [(name, "bytes", data) for name, data in _byte_faults(frozen["bytes"], frozen["record"])]


def _one_sentence(err: str, path: Path) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith("lme: error: ") and str(path) in lines[0], lines[0]
    assert "Traceback" not in err and KEY not in err
    return lines[0]


def test_every_fault_through_prereg_verify_is_one_sentence_and_leaves_the_record(frozen, tmp_path, capsys):
    """Each fault: exit 2, one sentence naming the file, within a second, the record untouched."""
    outcomes: dict[str, str] = {}
    for index, (name, fault, data) in enumerate(_all_faults(frozen)):
        path = tmp_path / f"case{index}.yaml"
        _place(path, fault, data)
        before = _state(path)
        started = time.perf_counter()
        with pytest.raises(SystemExit) as stopped:
            lme_main(["prereg", "verify", str(path)])
        elapsed = time.perf_counter() - started
        captured = capsys.readouterr()
        assert stopped.value.code == 2, (name, captured.out[-2000:], captured.err[-2000:])
        assert captured.out == "", name
        outcomes[name] = _one_sentence(captured.err, path)
        assert elapsed < 1.0, (name, elapsed)
        assert _state(path) == before, name
    for name, sentence in outcomes.items():  # what each kind of fault is called
        if name.startswith("truncated") or name in ("edited-not-resealed", "header-only", "empty", "date-value"):
            assert "truncated or edited" in sentence or "no digest" in sentence, (name, sentence)
        if "=" in name and not name.startswith(("lme_prereg", "digest")):
            assert "edited and resealed" in sentence, (name, sentence)
    assert "alias" in outcomes["alias-bomb"] and "deeper than" in outcomes["deep-list"]
    assert "not found" in outcomes["missing"] and "directory" in outcomes["directory"]
    assert "not a regular file" in outcomes["fifo"]
    if Path("/proc/self/mem").exists():  # Linux
        assert "cannot be read (Input/output error)" in outcomes["unreadable"]
    assert "field plan.seeds[0] holds a text" in outcomes["plan.seeds=[str]"]
    assert "field data.n_questions" in outcomes["data.n_questions=wrong"]
    assert "field plan.primary is missing" in outcomes["plan.primary-missing"]


def test_the_record_cut_at_any_byte_is_refused_as_truncated(frozen):
    """The record cut at every byte of its first 260 (the header and the digest's line), at 100 offsets spread
    over the rest and next to 25 line ends: 'truncated or edited' or 'no digest', never anything else."""
    data = frozen["bytes"]
    rng = random.Random(len(data))
    ends = [index for index, byte in enumerate(data) if byte == 10]
    offsets = sorted(set(range(0, 260)) | set(range(260, len(data), max(1, len(data) // 100)))
                     | {end + delta for end in rng.sample(ends, min(25, len(ends))) for delta in (-1, 0, 1, 2)})
    for offset in (offset for offset in offsets if offset < len(data) - 1):  # the last byte: the final newline
        with pytest.raises(LmeError) as refused:
            parse_record(data[:offset].decode("utf-8", errors="ignore"), "rec.yaml")
        message = str(refused.value)
        assert message.startswith("rec.yaml: ") and "\n" not in message
        assert "truncated or edited" in message or "no digest" in message, (offset, message)


def test_the_runs_check_and_the_jobs_check_refuse_every_fault_in_one_sentence(frozen, tmp_path):
    """A run's check before Hydra (`lme.study.before_run`, as `python -m lme ... prereg=FILE` calls it) and the job's
    (`check_run`) on each fault, through one composed design whose record file is replaced case by case."""
    path = tmp_path / "rec.yaml"
    cfg = compose_config([*FAST, f"prereg={path}", "seed=1"])
    design = design_from_config(cfg, check=False)
    data_path, questions = load_dataset(cfg)
    firsts: dict[str, tuple[str, str, bytes | None]] = {}  # one case of each fault, one wrong type per field
    for name, fault, data in _all_faults(frozen):
        firsts.setdefault(name.split("=")[0].split("-at-")[0].split(".")[0], (name, fault, data))
    checks = BeforeRun()  # one for all cases, as for a sweep's jobs: models, judge and data checked once
    for name, fault, data in firsts.values():
        if path.is_dir() and not path.is_symlink():
            for child in path.iterdir():
                child.unlink()
            path.rmdir()
        elif path.exists() or path.is_symlink():
            path.unlink()
        _place(path, fault, data)
        before = _state(path)
        for check in (lambda: checks.check(design), lambda: check_run(design, data_path, questions)):
            with pytest.raises(LmeError) as refused:
                check()
            message = str(refused.value)
            assert str(path) in message and "\n" not in message and KEY not in message, (name, message)
        assert _state(path) == before, name
    assert len(firsts) > 25
    with pytest.raises(LmeError, match="truncated or edited"):  # the whole check too, for a fresh command
        check_before_run([design])


@pytest.mark.parametrize("fault", ["truncated", "resealed-wrong-type"])
def test_a_run_with_a_faulty_record_stops_before_hydra(frozen, tmp_path, capsys, fault):
    """`python -m lme +design=bm25 prereg=FILE`'s check before Hydra: exit 2, one sentence, nothing written."""
    path = tmp_path / "rec.yaml"
    data = {"truncated": frozen["bytes"][: len(frozen["bytes"]) // 2],
            "resealed-wrong-type": _resealed(frozen["record"], plan=["x"]),
            "alias-bomb": ALIAS_BOMB.encode()}[fault]
    path.write_bytes(data)
    with pytest.raises(SystemExit) as stopped:
        check_config_before_hydra([*FAST, f"prereg={path}", "seed=1", f"hydra.run.dir={tmp_path}/out"])
    assert stopped.value.code == 2
    _one_sentence(capsys.readouterr().err, path)
    assert path.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["rec.yaml"]


def test_the_report_refuses_a_faulty_record_given_with_prereg(frozen, tmp_path):
    from lme.cli.report import preregistrations
    from lme.tracking.report_source import Sources

    path = tmp_path / "rec.yaml"
    path.write_bytes(_resealed(frozen["record"], created=["x"]))
    with pytest.raises(LmeError, match=r"field created holds a list of 1 items") as refused:
        preregistrations(Sources(designs=[]), [path])
    assert str(path) in str(refused.value)
    facts = preregistrations(Sources(designs=[]), [frozen["path"]])
    assert facts[0].record_sha256 == frozen["record"]["record_sha256"] and facts[0].primary


# ---------------------------------------------------------------- freeze refuses what a run refuses


def _leaky_design(root: Path, value: str, field: str = "extra_headers:\n        X-Org") -> Path:
    (root / "design").mkdir(parents=True)
    (root / "design" / "leaky.yaml").write_text(
        f"# @package _global_\ndesign_name: leaky\nreader:\n  model:\n    params:\n      {field}: '{value}'\n")
    return root


@pytest.mark.parametrize("where", ["design-file", "secret-named", "override"])
def test_freeze_refuses_a_design_holding_a_key_as_a_run_does_and_writes_nothing(tmp_path, capsys, where):
    conf = _leaky_design(tmp_path / "conf", KEY if where != "secret-named" else "kumquat",
                         "extra_headers:\n        X-Org" if where != "secret-named" else "api_key")
    overrides = ["+design=leaky", f"hydra.searchpath=[file://{conf}]"]
    if where == "override":
        overrides = [*FAST, f"+notes=team {KEY}"]
    out = tmp_path / "records" / "rec.yaml"
    with pytest.raises(SystemExit) as run:
        check_config_before_hydra([*overrides, f"hydra.run.dir={tmp_path}/out"])
    run_err = capsys.readouterr().err
    with pytest.raises(SystemExit) as frozen_:
        lme_main(["prereg", "freeze", "--out", str(out), *overrides])
    freeze_err = capsys.readouterr().err
    assert run.value.code == frozen_.value.code == 2
    assert freeze_err.count("\n") == 1 and KEY not in freeze_err and "kumquat" not in freeze_err
    if where != "override":  # the command line's own refusal comes first there, for a run as for freeze
        assert freeze_err == run_err, (freeze_err, run_err)
    assert not (tmp_path / "records").exists()
    if where == "override":  # the subcommand called directly (past the command line's check): the same refusal
        from lme.cli.prereg import main as prereg_main

        with pytest.raises(LmeError, match=r"^config value notes looks like an API key"):
            prereg_main(["freeze", "--out", str(out), *overrides])
        assert not (tmp_path / "records").exists()


def test_a_url_credential_in_api_base_is_refused_by_freeze(tmp_path, capsys):
    out = tmp_path / "rec.yaml"
    for base in ("https://user:hunter2pass@llm.example.org/v1", "https://llm.example.org/v1?sig=Zq8wX2c4V6b8N0m1L3k5"):
        if not holds_a_key(base):  # a token in a query string: lme.util.secrets' rule as it stands
            continue
        with pytest.raises(SystemExit) as stopped:
            lme_main(["prereg", "freeze", "--out", str(out), *FAST, f"reader.model.api_base={base}"])
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and "hunter2pass" not in err and "Zq8wX2" not in err, err
        assert not out.exists()


def test_write_record_never_writes_a_secret_and_keeps_an_existing_record(frozen, tmp_path):
    path = tmp_path / "rec.yaml"
    path.write_bytes(frozen["bytes"])
    record = frozen["record"]
    for leaky in ({"packages": {**record["packages"], "lme": KEY}},
                  {"data": {**record["data"], "path": "https://u:s3cretpw9@host/data.json"}},
                  {"models": {**record["models"], "reader": {"api_key": "kumquat"}}}):
        sealed = seal({**record, **leaky})
        assert find_secrets(sealed)
        with pytest.raises(LmeError) as refused:
            write_record(sealed, path, force=True)
        assert "preregistration record" in str(refused.value) and KEY not in str(refused.value)
        assert path.read_bytes() == frozen["bytes"]
    with pytest.raises(LmeError, match="already exists"):
        write_record(record, path)
    assert path.read_bytes() == frozen["bytes"] and [p.name for p in tmp_path.iterdir()] == ["rec.yaml"]


def test_no_shipped_record_field_is_taken_for_a_secret(frozen):
    assert find_secrets(frozen["record"]) == []


# ---------------------------------------------------------------- a full disk


def test_a_full_disk_leaves_no_half_record_and_keeps_the_earlier_one(frozen, tmp_path):
    record = frozen["record"]
    fresh = tmp_path / "new" / "rec.yaml"
    with file_size_limit(2048), pytest.raises(LmeError) as refused:
        write_record(record, fresh)
    message = str(refused.value)
    assert str(fresh) in message and "File too large" in message and "\n" not in message
    assert list(fresh.parent.iterdir()) == []
    earlier = tmp_path / "earlier.yaml"
    earlier.write_text("# an earlier record\n")
    with file_size_limit(2048), pytest.raises(LmeError, match="could not be written"):
        write_record(record, earlier, force=True)
    assert earlier.read_text() == "# an earlier record\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier.yaml", "new"]  # no temporary file left
    write_record(record, earlier, force=True)  # room again: written whole, reads back
    assert load_record(earlier) == record


def test_freeze_into_a_directory_or_under_a_file_is_one_sentence(frozen, tmp_path, capsys):
    (tmp_path / "rec.yaml").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(SystemExit) as stopped:
        lme_main(["prereg", "freeze", "--force", "--out", str(tmp_path / "rec.yaml"), *FAST])
    assert stopped.value.code == 2
    _one_sentence(capsys.readouterr().err, tmp_path / "rec.yaml")
    for out in (tmp_path / "rec.yaml", tmp_path / "file" / "rec.yaml"):
        with pytest.raises(LmeError) as refused:
            write_record(frozen["record"], out, force=True)
        assert str(out) in str(refused.value) and "\n" not in str(refused.value)
    assert (tmp_path / "file").read_text() == "x" and not any((tmp_path / "rec.yaml").iterdir())


# ---------------------------------------------------------------- properties of the format

_TEXT = st.text(max_size=16)  # any Unicode but lone surrogates
_HEX = st.text("0123456789abcdef", min_size=64, max_size=64)
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), _TEXT,
                    st.floats(allow_nan=False, allow_infinity=False))
_JSON = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)


@st.composite
def records(draw) -> dict[str, Any]:
    from lme.util.hashing import sha256_json

    ids = draw(st.lists(_TEXT, max_size=5))
    seeds = draw(st.lists(st.integers(-2**40, 2**40), min_size=1, max_size=4, unique=True))
    primary = draw(st.sampled_from(["accuracy", "mean_accuracy", "majority_correct_accuracy",
                                    "accuracy.multi-session", "abstention_accuracy"]))
    names = st.text("abcdefghij_-0123456789", min_size=1, max_size=8)
    comparisons = draw(st.lists(st.tuples(names, names).filter(lambda pair: pair[0] != pair[1]), max_size=3))
    return seal({
        "lme_prereg": 1,
        "name": draw(st.one_of(st.none(), _TEXT)),
        "created": draw(st.datetimes(timezones=st.just(__import__("datetime").timezone.utc))
                        ).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "design_name": draw(st.one_of(st.none(), _TEXT)),
        "overrides": draw(st.lists(_TEXT, max_size=4)),
        "plan": {"seeds": seeds, "primary": primary, "comparisons": [f"{a}:{b}" for a, b in comparisons]},
        "design_sha256": draw(_HEX),
        "digests": draw(st.dictionaries(_TEXT, _HEX, max_size=4)),
        "judge_templates": draw(st.dictionaries(_TEXT, _HEX, max_size=3)),
        "models": draw(st.dictionaries(_TEXT, st.dictionaries(_TEXT, _JSON, max_size=3), max_size=2)),
        "data": {"name": draw(st.one_of(st.none(), _TEXT)), "path": draw(_TEXT), "file_sha256": draw(_HEX),
                 "n_questions": len(ids), "question_ids_sha256": sha256_json(ids), "question_ids": ids},
        "code": {"git_commit": draw(st.one_of(st.none(), _TEXT)), "git_dirty": draw(st.one_of(st.none(), st.booleans())),
                 "source_sha256": draw(_HEX), "files": draw(st.dictionaries(_TEXT, _HEX, max_size=4))},
        "packages": draw(st.dictionaries(_TEXT, st.one_of(st.none(), _TEXT), max_size=4)),
        "design": draw(st.dictionaries(_TEXT, _JSON, max_size=5)),
    })


FAST_PROPERTIES = settings(max_examples=80, deadline=None, database=None,  # nothing written outside tmp_path
                           suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@settings(FAST_PROPERTIES, max_examples=40)
@given(records())
def test_any_record_round_trips_through_its_text(record):
    assume(not find_secrets(record))
    text = dump_record(record)
    assert parse_record(text, "rec.yaml") == record
    assert record_digest(parse_record(text, "rec.yaml")) == record["record_sha256"]


@FAST_PROPERTIES
@given(st.text(max_size=400))
def test_any_text_is_a_record_or_one_sentence(text):
    try:
        parse_record(text, "rec.yaml")
    except LmeError as exc:
        assert str(exc).startswith("rec.yaml: ") and "\n" not in str(exc)


@settings(FAST_PROPERTIES, max_examples=50)
@given(st.data())
def test_any_edit_of_a_real_record_is_the_record_or_one_sentence(frozen, data):
    text = frozen["bytes"].decode("utf-8")
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    inserted = data.draw(st.text(max_size=8))
    edited = text[:start] + inserted + text[end:]
    try:
        assert parse_record(edited, "rec.yaml") == frozen["record"]  # an edit YAML ignores (a comment, spacing)
    except LmeError as exc:
        assert str(exc).startswith("rec.yaml: ") and "\n" not in str(exc)


@FAST_PROPERTIES
@given(st.binary(max_size=300))
def test_any_bytes_in_a_record_file_are_one_sentence(tmp_path_factory, data):
    path = tmp_path_factory.getbasetemp() / "bytes.yaml"
    path.write_bytes(data)
    try:
        load_record(path)
    except LmeError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)

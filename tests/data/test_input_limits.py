"""Limits beyond the format's shape (lme.data.validate) and data paths that are not readable files.

- every bad-input corpus file also fails in streaming mode (`dataset.stream=true`) through the CLI;
- lone UTF-16 surrogates, nesting, integer size and empty answers: both loaders, same sentence;
- `SurrogateGuard` against `json.loads` on every split of the input into reads;
- a file nested 100,000 deep is refused with bounded memory (ijson's `parse` needed GBs);
- `check_data_file`: missing, dangling link, symlink loop, directory, FIFO, device, socket, no permission.
"""

from __future__ import annotations

import copy
import io
import json
import lzma
import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lme.data.load import check_data_file, load_questions
from lme.data.stream import first_problem, iter_questions, scan_index
from lme.data.validate import MAX_NESTING, SurrogateGuard, text_problem
from lme.util.errors import DataError

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "bad_inputs"
MANIFEST: dict[str, dict] = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
REPO = HERE.parents[1]
# json.load reads NaN as a float ("found float"); ijson, like the JSON standard, rejects it as invalid JSON.
STREAM_DIFFERS = {"answer_nan.json": ["not valid JSON"]}


def record(question_id: str, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "Which tea did I order at the station cafe?",
        "answer": "Lapsang souchong",
        "question_date": "2024/06/01 (Sat) 08:30",
        "haystack_dates": ["2024/05/04 (Sat) 18:00"],
        "haystack_session_ids": ["answer_tea"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "At the station cafe I ordered a smoky lapsang souchong.", "has_answer": True},
                {"role": "assistant", "content": "A bold choice for a rainy platform."},
            ]
        ],
        "answer_session_ids": ["answer_tea"],
    }
    base.update(copy.deepcopy(changes))
    return base


def write(path: Path, records: Any) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def both(path: Path) -> tuple[str, str]:
    """The sentence of the normal loader and of the streaming reader (which must agree with scan_index)."""
    messages = []
    for read in (lambda: load_questions(path), lambda: list(iter_questions(path))):
        with pytest.raises(DataError) as caught:
            read()
        message = str(caught.value)
        assert "\n" not in message and message.endswith("."), message
        messages.append(message)
    try:  # the index pass reads no record's fields: it stops only on what stops the streaming parser
        scan_index(path)
    except DataError as exc:
        assert str(exc) == messages[1]
    return messages[0], messages[1]


# --- the corpus, streamed, through the CLI ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_corpus_file_fails_in_streaming_mode_with_one_sentence(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    from lme.cli import run_subcommand

    path = CORPUS / name
    status = run_subcommand("data", ["stats", f"dataset.path={path}", "dataset.stream=true"])
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    (line,) = lines
    assert line.startswith(f"lme: error: {path}: ") and line.endswith("."), line
    for part in STREAM_DIFFERS.get(name, MANIFEST[name]["expect"][1:]):
        assert part in line, (part, line)


def test_scan_index_says_what_iter_questions_says_on_every_corpus_file() -> None:
    """Stream mode selects on `scan_index` before reading questions: for JSON-level problems (and the
    limits) both give the same sentence; for record-level ones the scan passes and the questions fail."""
    for name in sorted(MANIFEST):
        path = CORPUS / name
        try:
            scan_index(path)
        except DataError as exc:
            with pytest.raises(DataError) as caught:
                list(iter_questions(path))
            assert str(exc) == str(caught.value), name


# --- lone surrogates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"question": "tea \ud800"}, "field question"),
        ({"answer": "\udfffLapsang"}, "field answer"),
        ({"question_type": "single-session-user\ud800"}, "field question_type"),
        ({"haystack_dates": ["2024/05/04 (Sat) 18:00\udc01"]}, "field haystack_dates[0]"),
        ({"answer_session_ids": ["answer_\ud801"]}, "field answer_session_ids[0]"),
        ({"extra": {"notes": ["fine", "bad \udc00"]}}, "field extra.notes[1]"),
    ],
)
def test_a_lone_surrogate_anywhere_is_refused_by_both_loaders(tmp_path: Path, changes: dict, field: str) -> None:
    path = write(tmp_path / "q.json", [record("q1"), record("q2", **changes)])
    loaded, streamed = both(path)
    assert loaded == streamed
    assert "question q2" in loaded and field in loaded and "lone UTF-16 surrogate" in loaded


def test_a_lone_surrogate_in_a_turn_role_and_a_record_key(tmp_path: Path) -> None:
    bad_role = record("q2")
    bad_role["haystack_sessions"][0][1]["role"] = "assistant\ud800"
    path = write(tmp_path / "role.json", [record("q1"), bad_role])
    loaded, streamed = both(path)
    assert loaded == streamed and "field haystack_sessions[0][1].role: holds a lone UTF-16 surrogate" in loaded
    bad_key = record("q2")
    bad_key["x\udc00"] = 1
    path = write(tmp_path / "key.json", [record("q1"), bad_key])
    loaded, streamed = both(path)
    assert loaded == streamed == f"{path}: question q2: a key holds a lone UTF-16 surrogate (\\udc00), " \
        "which is not text and cannot be encoded as UTF-8."


def test_valid_surrogate_pairs_and_escaped_backslashes_load(tmp_path: Path) -> None:
    """An emoji written as an escaped pair, and the text backslash-u-d-8-0-0 (an escaped backslash), are fine."""
    text = "Tea with a \U0001f375 and a literal \\ud800 in it"
    path = write(tmp_path / "ok.json", [record("q1", question=text)])  # json.dumps escapes both
    assert b"\\ud83c\\udf75" in path.read_bytes() and b"\\\\ud800" in path.read_bytes()
    assert load_questions(path)[0].question == text
    assert list(iter_questions(path)) == load_questions(path)
    assert first_problem(path) is None


CASES = [
    b'"plain"',
    b'"\\ud83d\\ude00"',  # a pair
    b'"\\\\ud800"',  # escaped backslash, then letters
    b'"\\\\\\ud83d\\ude00"',  # escaped backslash, then a pair
    b'"x\\ud800"',  # lone high at the end
    b'"\\udc00x"',  # lone low
    b'"\\ud800\\u0041"',  # high, then not a low
    b'"\\ud800\\\\udc00"',  # high, then an escaped backslash: lone
    b'"\\\\\\\\\\ud800"',  # two escaped backslashes, then a lone high
    b'"\\uD83D\\uDE00 \\uDBFF"',  # upper case: a pair, then a lone high
]


@pytest.mark.parametrize("value", CASES)
def test_surrogate_guard_agrees_with_json_on_every_split(value: bytes) -> None:
    data = b'[{"k": ' + value + b', "n": [1, 2]}, ' + value + b"]"
    decoded = json.loads(data)
    lone = any(text_problem(item) for item in (decoded[0]["k"], decoded[1]))
    rng = random.Random(7)
    for _ in range(200):
        guard = SurrogateGuard(_Trickle(data, rng))
        out = b""
        while chunk := guard.read(rng.randint(1, 9)):
            out += chunk
        if lone:
            assert guard.found is not None and out == data[: len(out)] and len(out) < len(data), value
        else:
            assert guard.found is None and out == data, value


class _Trickle(io.RawIOBase):
    """Hands out a few bytes per read, in random amounts."""

    def __init__(self, data: bytes, rng: random.Random) -> None:
        self.data, self.rng, self.at = data, rng, 0

    def read(self, size: int = -1) -> bytes:
        step = self.rng.randint(1, 7)
        chunk = self.data[self.at : self.at + step]
        self.at += len(chunk)
        return chunk


def test_surrogate_guard_keeps_a_long_run_of_backslashes_whole_across_reads() -> None:
    for run in (1, 2, 3, 4, 25, 26):
        data = b'["' + b"\\" * (run - 1) + b'\\ud800"]' if run % 2 else b'["' + b"\\" * run + b'ud800"]'
        lone = run % 2 == 1
        for size in range(1, 12):
            guard = SurrogateGuard(io.BytesIO(data))
            out = b""
            while chunk := guard.read(size):
                out += chunk
            assert (guard.found is not None) == lone, (run, size)
            assert (out == data) == (not lone)


# --- nesting ----------------------------------------------------------------------------------------


def nested_record(depth: int) -> str:
    """Two records; the second's extra field holds arrays nested so that the deepest is `depth` deep
    counting the file's array (the record is 2)."""
    inner = depth - 2
    text = json.dumps([record("q1"), record("q2", extra="@@")])
    return text.replace('"@@"', "[" * inner + "]" * inner)


def test_nesting_up_to_the_cap_loads_and_one_more_is_refused_by_both(tmp_path: Path) -> None:
    fine = tmp_path / "fine.json"
    fine.write_text(nested_record(MAX_NESTING), encoding="utf-8")
    assert len(load_questions(fine)) == 2 and len(list(iter_questions(fine))) == 2
    deep = tmp_path / "deep.json"
    deep.write_text(nested_record(MAX_NESTING + 1), encoding="utf-8")
    loaded, streamed = both(deep)
    assert loaded == streamed
    assert "question q2: field extra[0][0][0][0][0]...: arrays and objects nested more than 64 deep" in loaded


def test_a_file_100000_deep_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    """Before: `scan_index` (ijson's parse) of this file grew past 20 GB; json.load raised RecursionError."""
    path = tmp_path / "deep.json.xz"
    path.write_bytes(lzma.compress(nested_record(100_000).encode("ascii")))
    code = (
        "import resource, sys\n"
        "from lme.data.stream import scan_index, iter_questions\n"
        "from lme.data.load import load_questions\n"
        "from lme.util.errors import DataError\n"
        "for read in (scan_index, lambda p: list(iter_questions(p)), load_questions):\n"
        "    try:\n"
        "        read(sys.argv[1])\n"
        "    except DataError as exc:\n"
        "        print(exc)\n"
        "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "try:  # VmHWM starts afresh at exec; ru_maxrss keeps the forking test worker's size\n"
        "    status = open('/proc/self/status').read().splitlines()\n"
        "    peak = next(int(line.split()[1]) // 1024 for line in status if line.startswith('VmHWM:'))\n"
        "except (OSError, StopIteration):\n"
        "    pass\n"
        "print(peak)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 4, result.stderr[-2000:]
    assert all("question q2: field extra" in line and "nested more than 64 deep" in line for line in lines[:3])
    assert int(lines[3]) < 500, f"peak RSS {lines[3]} MiB"  # before: past 20 GB; measured 25 MiB (VmHWM)


# --- numbers and answers ----------------------------------------------------------------------------


def test_integers_of_15_digits_load_and_16_are_refused(tmp_path: Path) -> None:
    ok = write(tmp_path / "ok.json", [record("q1", answer=999_999_999_999_999), record("q2", answer=-5)])
    assert [q.answer for q in load_questions(ok)] == ["999999999999999", "-5"]
    assert list(iter_questions(ok)) == load_questions(ok)
    big = write(tmp_path / "big.json", [record("q1", answer=10**15)])
    loaded, streamed = both(big)
    assert loaded == streamed == (
        f"{big}: question q1: field answer: integer too large (integers in a LongMemEval file must have at most "
        "15 digits)."
    )


def test_a_huge_integer_in_an_extra_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "extra.json"
    path.write_text(json.dumps([record("q1", extra={"n": "@@"})]).replace('"@@"', "9" * 4500), encoding="utf-8")
    loaded, streamed = both(path)
    assert loaded == streamed and "question q1: field extra.n: integer too large" in loaded


def test_a_float_too_large_for_the_streaming_parser_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "float.json"
    path.write_text(json.dumps([record("q1", answer="@@")]).replace('"@@"', "1e999"), encoding="utf-8")
    with pytest.raises(DataError, match=r"question q1: field answer: number too large"):
        list(iter_questions(path))
    with pytest.raises(DataError, match=r"question q1: field answer: expected a string or an integer, found float"):
        load_questions(path)


@pytest.mark.parametrize("answer", ["", " ", "\n\t "])
def test_an_empty_answer_is_refused(tmp_path: Path, answer: str) -> None:
    path = write(tmp_path / "empty.json", [record("q1"), record("q2", answer=answer)])
    loaded, streamed = both(path)
    assert loaded == streamed == f"{path}: question q2: field answer: empty (a reference answer must hold text)."


def test_answers_zero_and_padded_text_are_kept(tmp_path: Path) -> None:
    path = write(tmp_path / "ok.json", [record("q1", answer=0), record("q2", answer=" 3 cups ")])
    assert [q.answer for q in load_questions(path)] == ["0", " 3 cups "]


# --- data paths -------------------------------------------------------------------------------------


def _refused(path: Path, *parts: str, what: str = "") -> str:
    with pytest.raises(DataError) as caught:
        check_data_file(path, what)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and message.endswith(".") and "\n" not in message, message
    for part in parts:
        assert part in message, (part, message)
    return message


def test_check_data_file_accepts_a_regular_file_and_a_link_to_one(tmp_path: Path) -> None:
    target = write(tmp_path / "q.json", [record("q1")])
    link = tmp_path / "link.json"
    link.symlink_to(target)
    check_data_file(target, "dataset x")
    check_data_file(link, "dataset x")


def test_check_data_file_refuses_what_is_not_a_readable_regular_file(tmp_path: Path) -> None:
    assert _refused(tmp_path / "absent.json") == f"{tmp_path / 'absent.json'}: file not found."
    _refused(tmp_path / "absent.json", "file not found (dataset s)", what="dataset s")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "gone.json")
    _refused(dangling, "symbolic link to", "gone.json", "does not exist")
    loop = tmp_path / "loop.json"
    loop.symlink_to(tmp_path / "loop2.json")
    (tmp_path / "loop2.json").symlink_to(loop)
    _refused(loop, "symbolic link loop", "cannot be resolved", "(dataset sample)", what="dataset sample")
    _refused(tmp_path, "is a directory, not a file")
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    _refused(fifo, "is a FIFO (named pipe), not a regular file")
    _refused(Path("/dev/null"), "is a character device, not a regular file")
    file = write(tmp_path / "q.json", [record("q1")])
    _refused(file / "inside.json", "file not found", "not a directory")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock.json"))
        _refused(tmp_path / "sock.json", "is a socket")


def _as_nobody(paths: list[Path]) -> list[str]:
    """`check_data_file` of each path as user nobody (root reads anything), in a forked child that
    imports nothing new; the sentences, or "accepted"."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(65534)
            os.setuid(65534)
            answers = []
            for path in paths:
                try:
                    check_data_file(path)
                    answers.append("accepted")
                except DataError as exc:
                    answers.append(str(exc))
            os.write(write_end, "\n".join(answers).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        answers = handle.read().decode().split("\n")
    os.waitpid(pid, 0)
    return answers


def test_a_file_without_read_permission_is_refused(tmp_path: Path) -> None:
    import shutil
    import tempfile

    open_dir = Path(tempfile.mkdtemp(prefix="lme-perm-"))  # in /tmp: every user may pass through
    try:
        open_dir.chmod(0o755)
        secret = write(open_dir / "secret.json", [record("q1")])
        secret.chmod(0)
        readable = write(open_dir / "readable.json", [record("q1")])
        behind = write(tmp_path / "behind.json", [record("q1")])  # tmp_path's parents are root's only
        if os.geteuid() != 0:
            _refused(secret, "cannot be read: permission denied")
            return
        assert _as_nobody([secret, readable, behind]) == [
            f"{secret}: cannot be read: permission denied.",
            "accepted",
            f"{behind}: cannot be reached: permission denied on a directory of the path.",
        ]
    finally:
        shutil.rmtree(open_dir)


@pytest.mark.parametrize("stream", ["false", "true"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_the_cli_refuses_a_fifo_and_a_directory_without_blocking(tmp_path: Path, kind: str, stream: str) -> None:
    path = tmp_path / "data.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "lme", "data", "stats", f"dataset.path={path}", f"dataset.stream={stream}"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    expected = "is a FIFO (named pipe), not a regular file" if kind == "fifo" else "is a directory, not a file"
    assert result.stderr.startswith(f"lme: error: {path}: ") and expected in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_loaders_refuse_a_symlink_loop_and_a_directory(tmp_path: Path) -> None:
    """(A FIFO is tried through the CLI above, in a child process: a regression would block.)"""
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    for path, sentence in (
        (loop, f"{loop}: is a symbolic link loop (or a chain of too many links) and cannot be resolved to a file."),
        (folder, f"{folder}: is a directory, not a file."),
    ):
        for read in (load_questions, lambda p: list(iter_questions(p)), scan_index):
            with pytest.raises(DataError) as caught:
                read(path)
            assert str(caught.value) == sentence

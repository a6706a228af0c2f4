"""The gate to the real test data (tests/shared_data.py): without the data the suite collects without error and
every test that needs it skips with one reason, counted in one line at the end (xdist too); with it they run;
and no test file finds the data folder on its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import shared_data
from shared_data import ENV, FILES, MINI, REASON, STUDY_INSTRUCTIONS, TEMPLATES, available, needs

TESTS = Path(__file__).resolve().parent
CHECKOUT = TESTS.parent
# One test of each way a test meets the gate (`@needs(...)`, a named `needs(...)` mark, a fixture calling
# `need(...)`), on files of both of the data's folders.
GATED = [
    "tests/memory/test_sessions.py::test_on_the_real_mini_set_views_fit_and_hold_whole_sessions",
    "tests/data/test_load.py::test_real_mini_file_loads_sorted",
    "tests/test_judge.py::test_shared_templates_file_verifies",
    "tests/test_study_instructions.py::test_the_base_alone_is_the_studys_baseline_reader",
]


def pytest_process(*args: str, data: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` in the checkout, as a fresh run would be (nothing of this run's pytest or xdist
    in its environment), with LME_TEST_DATA=`data`."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    env[ENV] = str(data)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=CHECKOUT, env=env,
                          capture_output=True, text=True, timeout=timeout)


# -- the suite without the data ---------------------------------------------------------------------------------


@pytest.mark.slow  # the whole suite's collection, ~15-25 s
def test_the_whole_suite_collects_without_error_when_there_is_no_data(tmp_path):
    """What CI checks for a fresh clone: with LME_TEST_DATA naming an empty folder no test module fails to import
    or to collect for want of the data (a module reading a data file at import would)."""
    done = pytest_process("--collect-only", "-q", data=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tail = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ tests collected in [\d.]+s", tail), tail  # "..., 1 error in" on an error
    assert int(tail.split()[0]) > 1000


@pytest.mark.slow  # two xdist runs of four tests, ~20 s
def test_gated_tests_skip_with_one_reason_counted_in_one_line_under_xdist(tmp_path):
    """Workers report their skips to xdist's controller, which prints the one count line."""
    done = pytest_process("-n", "2", "-q", "-rs", *GATED, data=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 skipped" in done.stdout.splitlines()[-1]
    reasons = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(reasons) == 4 and all(line.endswith(f": {REASON}") for line in reasons), reasons
    counted = [line for line in done.stdout.splitlines() if line.startswith("lme: ")]
    assert counted == [f"lme: 4 tests skipped: they need the real LongMemEval test data, which {ENV}={tmp_path} "
                       f"does not hold; set {ENV}=DIR to a folder like ../shared/data to run them."]


@pytest.mark.slow
@needs(MINI, TEMPLATES, STUDY_INSTRUCTIONS)
def test_gated_tests_run_when_the_data_is_there():
    done = pytest_process("-n", "2", "-q", *GATED, data=shared_data.ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout.splitlines()[-1]
    assert not [line for line in done.stdout.splitlines() if line.startswith("lme: ")]


# -- the gate itself --------------------------------------------------------------------------------------------


def test_the_data_folder_is_the_setting_alone_when_it_is_set(tmp_path):
    assert shared_data.data_root({ENV: str(tmp_path)}) == tmp_path
    assert shared_data.data_root({ENV: str(tmp_path / "none")}) == tmp_path / "none"  # not there: nothing found
    assert shared_data.data_root({}) == shared_data.data_root({ENV: ""}) == CHECKOUT.parent / "shared" / "data"


def test_an_empty_folder_skips_with_the_one_reason_naming_the_setting(tmp_path):
    empty = shared_data.data_root({ENV: str(tmp_path)})
    assert shared_data.missing(empty) == list(FILES.values())
    mark = needs(empty / FILES["MINI"], empty / FILES["TEMPLATES"])
    assert mark.args == (True,) and mark.kwargs == {"reason": REASON}
    assert f"set {ENV}=DIR" in REASON and REASON.count(". ") == 0  # one sentence naming the setting
    with pytest.raises(pytest.skip.Exception, match=re.escape(REASON)):
        shared_data.need(empty / FILES["ORACLE"])


def test_a_folder_with_the_files_is_found(tmp_path):
    for relative in FILES.values():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_bytes(b"")
    root = shared_data.data_root({ENV: str(tmp_path)})
    assert shared_data.missing(root) == []
    assert needs(root / FILES["MINI"], root / FILES["STUDY_INSTRUCTIONS"]).args == (False,)
    assert shared_data.need(root / FILES["MINI"]) == tmp_path / FILES["MINI"]


@needs(MINI, TEMPLATES, STUDY_INSTRUCTIONS)
def test_the_real_folder_is_found():
    assert available(MINI, TEMPLATES, STUDY_INSTRUCTIONS)
    assert MINI.parent.name == "longmemeval" and STUDY_INSTRUCTIONS.parent.name == "oh_study"


def test_the_summary_line_says_what_would_run_the_skipped_tests(tmp_path):
    beside = shared_data.data_root({})
    if not 0 < len(shared_data.missing(beside)) < len(FILES):  # not a developer's partial ../shared/data
        assert shared_data.summary(83, {ENV: ""}) == (
            f"lme: 83 tests skipped: they need the real LongMemEval test data; set {ENV}=DIR to run them.")
    assert shared_data.summary(1, {ENV: str(tmp_path)}) == (
        f"lme: 1 test skipped: they need the real LongMemEval test data, which {ENV}={tmp_path} does not hold; "
        f"set {ENV}=DIR to a folder like ../shared/data to run them.")
    (tmp_path / FILES["MINI"]).parent.mkdir(parents=True)
    (tmp_path / FILES["MINI"]).write_bytes(b"")
    partial = shared_data.summary(2, {ENV: str(tmp_path)})
    assert partial.startswith(f"lme: 2 tests skipped: they need the real LongMemEval test data, and {ENV}={tmp_path} "
                              f"lacks {FILES['S_FILE']}, ")
    assert FILES["MINI"] not in partial


def test_only_the_gates_skips_are_counted():
    def report(message: str) -> pytest.TestReport:
        return pytest.TestReport("t.py::t", ("t.py", 1, "t"), {}, "skipped", ("t.py", 2, message), "setup")

    assert shared_data.is_data_skip(report(f"Skipped: {REASON}"))
    assert not shared_data.is_data_skip(report("Skipped: Java is not installed"))
    assert not shared_data.is_data_skip(report(f"Skipped: {REASON} and more"))


# -- no way around the gate -------------------------------------------------------------------------------------

# Ways a test could name the real data folder itself: its path written out, a path built from the checkout's
# parent, the setting read directly. (Its subfolders' names are fine: lme's own data folder has them too.)
BYPASSES = [
    re.compile(r"shared[\\/]+data"),
    re.compile(r"\.\.[\\/]+shared\b"),
    re.compile(r"""["']shared["']\s*[/,]\s*["']data"""),
    re.compile(r"""parents?(\[\d+\])?\s*/\s*["']shared["']"""),
    re.compile(r"""joinpath\(\s*["']shared["']"""),
    re.compile(r"""["']LME_TEST_DATA["']"""),
]
GATE_FILES = {TESTS / "shared_data.py", Path(__file__).resolve()}


def bypasses(text: str) -> list[str]:
    return [match.group(0) for pattern in BYPASSES for match in pattern.finditer(text)]


@pytest.mark.parametrize("line", [
    'DATA_DIR = Path(__file__).resolve().parents[3] / "shared/data/longmemeval"',
    'SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval"',
    'STUDY_FILE = ROOT.parent / "shared" / "data" / "oh_study" / "study_instructions.json"',
    'MINI = ROOT.parent / "shared/data/longmemeval/longmemeval_s_cleaned_mini.json.xz"',
    'data = CHECKOUT.parent / "shared"',
    'data = CHECKOUT.parent.joinpath("shared", "data")',
    'data = os.path.join(ROOT, "..", "shared", "data")',
    'data = Path("../shared") / "data"',
    'data = Path(os.environ["LME_TEST_DATA"])',
    '# reads ../shared/data/longmemeval/judge_templates.json',
])
def test_the_scan_finds_each_way_round_the_gate(line):
    assert bypasses(line), line


def test_no_test_file_but_the_gate_names_the_data_folder():
    """A test needing the real data gets its path from shared_data (and so its skip, and its count)."""
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        if path.resolve() in GATE_FILES:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if bypasses(line):
                found[f"{path.relative_to(CHECKOUT)}:{number}"] = line.strip()
    assert not found, f"use tests/shared_data.py instead: {found}"
    # and the scan reads the files that use the gate
    assert bypasses("parents[3] / 'shared'") and (TESTS / "test_judge.py").is_file()


def test_ci_hands_the_data_beside_the_checkout_to_exactly_the_readmes_test_command():
    readme = (CHECKOUT / "README.md").read_text(encoding="utf-8")
    command = readme.split("Set up and run the tests:\n\n```bash\n", 1)[1].split("\n```", 1)[0]
    assert command.endswith("&& python -m pytest -n 2 -q") and "\n" not in command
    ci = (CHECKOUT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci.count(command) == 1  # the README's command, as written
    exported = ci.index(f"  export {ENV}")
    assert ci[exported - 2] == "if [ -d ../shared/data ]; then" and exported < ci.index(command)
    assert ci[exported - 1] == f'  {ENV}="$(cd ../shared/data && pwd)"'  # an absolute path: tests run anywhere

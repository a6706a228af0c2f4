"""lme.util.files: an output file is written whole or not at all, and a refusal by the disk is one sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
from full_disk import file_size_limit

from lme.util.errors import LmeError
from lme.util.files import write_text_atomic


def test_a_file_is_written_and_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.md"
    write_text_atomic(target, "first\n")
    write_text_atomic(target, "second é\n")
    assert target.read_text(encoding="utf-8") == "second é\n"
    assert [p.name for p in target.parent.iterdir()] == ["report.md"]


def test_a_full_disk_keeps_the_earlier_file_and_leaves_no_partial_file(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("earlier\n", encoding="utf-8")
    with file_size_limit(4096), pytest.raises(LmeError) as caught:
        write_text_atomic(target, "x" * 100_000)
    message = str(caught.value)
    assert str(target) in message and "File too large" in message and "\n" not in message
    assert target.read_text(encoding="utf-8") == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_directory_in_the_files_place_is_named(tmp_path: Path) -> None:
    target = tmp_path / "report.md"
    target.mkdir()
    with pytest.raises(LmeError, match="a directory where lme would write a file"):
        write_text_atomic(target, "text")
    assert target.is_dir() and not any(target.iterdir())


def test_a_new_file_gets_the_permissions_open_would_give_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    import os

    old = os.umask(0o027)
    try:
        write_text_atomic(tmp_path / "new.md", "x")
        (tmp_path / "kept.md").write_text("x")
        (tmp_path / "kept.md").chmod(0o604)
        write_text_atomic(tmp_path / "kept.md", "y")
    finally:
        os.umask(old)
    assert (tmp_path / "new.md").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "kept.md").stat().st_mode & 0o777 == 0o604

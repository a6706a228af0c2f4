"""lme.util.hashing: the one home of the SHA-256 helpers, and the names other modules still export."""

from __future__ import annotations

import hashlib

import pytest

import os

from lme.util.hashing import file_sha256, file_sha256_known, sha256_bytes, sha256_text

EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2's "abc"


def test_known_digests_of_text_and_bytes():
    assert sha256_text("") == sha256_bytes(b"") == EMPTY
    assert sha256_text("abc") == sha256_bytes(b"abc") == ABC
    assert sha256_text("café ✓") == hashlib.sha256("café ✓".encode()).hexdigest()  # UTF-8, not the locale


def test_a_file_digest_is_the_digest_of_its_bytes_also_past_one_chunk(tmp_path):
    small = tmp_path / "small.txt"
    small.write_bytes(b"abc")
    assert file_sha256(small) == file_sha256(str(small)) == ABC
    big = tmp_path / "big.bin"
    data = bytes(range(256)) * (5 * 4096 + 7)  # a little over 5 MiB: several chunks and a short last one
    big.write_bytes(data)
    assert file_sha256(big) == sha256_bytes(data)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_sha256(empty) == EMPTY
    with pytest.raises(FileNotFoundError):
        file_sha256(tmp_path / "missing")


def test_a_known_file_is_read_once_until_it_changes_in_any_way(tmp_path, monkeypatch):
    path = tmp_path / "data.json"
    path.write_bytes(b"abc")
    reads = []
    real_open = type(path).open

    def counting_open(self, mode="r", *args, **kwargs):
        if "r" in mode:
            reads.append(self.name)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(type(path), "open", counting_open)
    assert file_sha256_known(path) == file_sha256_known(str(path)) == ABC
    assert reads == ["data.json"]  # read once
    stat = path.stat()
    path.write_bytes(b"abd")  # same size; the modification time put back as it was: still a new digest
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_sha256_known(path) == sha256_bytes(b"abd")
    replaced = tmp_path / "other.json"
    replaced.write_bytes(b"abc")
    os.replace(replaced, path)  # another file under the same name
    assert file_sha256_known(path) == ABC
    assert len(reads) == 3
    with pytest.raises(FileNotFoundError):
        file_sha256_known(tmp_path / "missing")


def test_the_old_homes_export_the_same_function():
    import lme.judge
    import lme.provenance.prereg

    assert lme.judge.sha256_text is lme.provenance.prereg.sha256_text is sha256_text


def test_first_line_of_an_error():
    from lme.util.errors import first_line

    assert first_line(ValueError("  bad value.\n  Traceback line\n")) == "bad value."
    assert first_line(ValueError("")) == "ValueError"
    assert first_line(ValueError(""), fallback="") == ""
    assert first_line("\n one\ntwo") == "one" and first_line("  ") == ""

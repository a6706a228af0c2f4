"""lme.util.memo: a least-recently-used memo bounded by the size of what it keeps."""

from __future__ import annotations

import threading

import pytest

from lme.util.memo import TextMemo


def test_keeps_values_until_the_bound_then_drops_the_least_recently_used():
    memo: TextMemo[str] = TextMemo(10)
    memo.put("a", "A", 4)
    memo.put("b", "B", 4)
    assert memo.get("a") == "A"  # "a" is now the most recently used
    memo.put("c", "C", 4)  # 12 > 10: "b" goes
    assert memo.get("b") is None
    assert (memo.get("a"), memo.get("c")) == ("A", "C")
    assert memo.chars == 8 and len(memo) == 2


def test_replacing_a_key_counts_its_new_size_only_and_an_entry_larger_than_the_memo_is_not_kept():
    memo: TextMemo[str] = TextMemo(10)
    memo.put("a", "A", 6)
    memo.put("a", "A2", 3)
    assert memo.get("a") == "A2" and memo.chars == 3
    memo.put("huge", "H", 11)
    assert memo.get("huge") is None and memo.get("a") == "A2"
    with pytest.raises(ValueError):
        TextMemo(-1)


def test_threads_putting_and_getting_keep_the_bound():
    memo: TextMemo[int] = TextMemo(1_000)

    def work(offset: int) -> None:
        for number in range(2_000):
            memo.put((offset, number % 300), number, 7)
            memo.get((offset, (number * 7) % 300))

    threads = [threading.Thread(target=work, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert memo.chars <= 1_000 and memo.chars == 7 * len(memo)

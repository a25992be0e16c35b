"""The lesson guard: secrets refused, long copies refused, shorter copies flagged."""

from __future__ import annotations

import pytest

from expgit.errors import InvalidInputError
from expgit.train.lesson_guard import check_lesson, copied_words

CASE = ("Please summarise the quarterly report for the board and keep the tone formal "
        "while listing every open risk with its owner and due date")


def test_copied_words_counts_the_longest_shared_run() -> None:
    lesson = "When asked, summarise the quarterly report for the board briefly."
    assert copied_words(lesson, [CASE]) == 7
    assert copied_words("Nothing in common here at all", [CASE]) == 0


def test_a_long_copy_is_refused_and_a_shorter_one_flagged() -> None:
    copied = "Always " + " ".join(CASE.split()[:13]) + "."
    with pytest.raises(InvalidInputError, match="copies 13 consecutive words"):
        check_lesson(["name", copied], [CASE], max_words=12)
    note = check_lesson(["summarise the quarterly report for the board and keep"], [CASE],
                        max_words=12)
    assert note == "copies 9 consecutive words of its case or trajectory"
    assert check_lesson(["Write short, formal summaries."], [CASE], max_words=12) is None


def test_a_secret_in_a_lesson_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"holds a secret \(api_key\)"):
        check_lesson(["Use the key AKIAQWERTYUIOPASDF12 for S3."], [], max_words=12)

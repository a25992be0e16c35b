"""Experience files and commit-message trailers, as pure functions (no CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLE, git

from expgit.errors import InvalidInputError
from expgit.store.format import trailers as tr
from expgit.store.format.experience import (
    NAME_MAX,
    Experience,
    check_experience,
    check_name,
    decode_experience,
    estimate_tokens,
    new_experience,
    parse_experience,
)

EXAMPLE_FILES = sorted(p for p in EXAMPLE.rglob("*.md") if p.name != "README.md")
PATH = "experiences/sample-rule.md"
GOOD = "---\nname: sample-rule\nstatus: active\nsummary: A sample.\ntags: [a]\n---\n# Body\n"


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(EXAMPLE)) for p in paths]


def _stem(path: Path) -> str:
    """The experience name of a file: its folder's for a SKILL.md."""
    return path.parent.name if path.name == "SKILL.md" else path.stem


def test_example_files_were_found() -> None:
    assert len(EXAMPLE_FILES) >= 10
    assert {p.parent.parent.name if p.name == "SKILL.md" else p.parent.name
            for p in EXAMPLE_FILES} == {"skills", "demo"}


# ------------------------------------------------------------------ round trips
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_ids(EXAMPLE_FILES))
def test_example_file_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    exp = parse_experience(decode_experience(data, str(path)), str(path))
    assert exp.render().encode("utf-8") == data
    assert exp.name == _stem(path)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_ids(EXAMPLE_FILES))
def test_example_file_passes_every_per_file_rule(path: Path) -> None:
    exp = check_experience(path.read_text(), str(path), _stem(path), 800)
    assert exp.status in ("active", "draft", "deprecated")
    assert exp.front_matter.summary


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=_ids(EXAMPLE_FILES))
def test_with_fields_rerenders_and_parses_back(path: Path) -> None:
    exp = parse_experience(path.read_text(), str(path))
    metadata = {"owner": "me", "nested": {"n": 1, "l": [1, 2]}} if path.name != "SKILL.md" \
        else {"owner": "me", "nested": "n: 1"}  # a SKILL.md's metadata maps strings
    changed = exp.with_fields(
        status="deprecated", summary="New: summary with # hash, 'quotes' and: colons",
        tags=["x", "y z", "ünï"], metadata=metadata)
    text = changed.render()
    back = parse_experience(text, str(path))
    assert back.front_matter == changed.front_matter
    assert back.body == exp.body
    assert back.front_matter.status == "deprecated"
    assert back.front_matter.tags == ["x", "y z", "ünï"]
    assert back.front_matter.metadata == metadata
    # a re-rendered file is itself stable
    assert back.render() == text


def test_with_no_changes_keeps_the_fields() -> None:
    exp = parse_experience(GOOD, PATH)
    same = exp.with_fields()
    assert parse_experience(same.render(), PATH).front_matter == exp.front_matter
    assert same.body == exp.body


@pytest.mark.parametrize("fields", [{"status": "bogus"}, {"colour": "red"},
                                    {"name": "Not A Slug"}, {"tags": "not-a-list"}])
def test_with_fields_rejects_invalid_values_as_invalid_input(fields: dict[str, object]
                                                             ) -> None:
    exp = parse_experience(GOOD, PATH)
    with pytest.raises(InvalidInputError, match="sample-rule: invalid front matter"):
        exp.with_fields(**fields)


def test_file_ending_at_the_closing_fence_round_trips() -> None:
    text = "---\nname: sample-rule\n---"
    exp = parse_experience(text, PATH)
    assert exp.body == ""
    assert exp.render() == text


def test_body_containing_fence_lines_is_kept_verbatim() -> None:
    text = "---\nname: sample-rule\n---\nintro\n---\nafter a rule\n---\n"
    exp = parse_experience(text, PATH)
    assert exp.body == "intro\n---\nafter a rule\n---\n"
    assert exp.render() == text


def test_new_experience_renders_a_parsable_file() -> None:
    exp = new_experience("fresh-rule", "# Fresh\nno newline", summary="s", tags=["t"])
    text = exp.render()
    assert text.startswith("---\nname: fresh-rule\n")
    assert text.endswith("no newline\n")
    back = parse_experience(text, "experiences/fresh-rule.md")
    assert back.front_matter == exp.front_matter
    assert back.body == "# Fresh\nno newline\n"


def test_defaults_apply_for_omitted_fields() -> None:
    exp = parse_experience("---\nname: sample-rule\nsummary:\n---\nbody\n", PATH)
    assert exp.status == "active"
    assert exp.front_matter.summary == ""
    assert exp.front_matter.tags == []
    assert exp.front_matter.metadata == {}


# ------------------------------------------------------------------------ names
@pytest.mark.parametrize("name", ["a", "refund-method-rules", "v2-rules", "0", "a" * NAME_MAX])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(("name", "fragment"), [
    ("../x", "invalid experience name '../x'"),
    ("A B", "invalid experience name 'A B'"),
    ("a" * 200, "200 characters long, the limit is 80"),
    ("a" * (NAME_MAX + 1), f"{NAME_MAX + 1} characters long"),
    ("a--b", "invalid experience name 'a--b'"),
    ("", "experience name is empty"),
    ("-a", "invalid experience name"),
    ("a-", "invalid experience name"),
    ("a_b", "invalid experience name"),
    ("a/b", "invalid experience name"),
    ("a.md", "invalid experience name"),
    ("Upper", "invalid experience name"),
    ("café", "invalid experience name"),
])
def test_invalid_names_are_rejected(name: str, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        check_name(name)
    assert fragment in info.value.message
    assert "\n" not in info.value.message


def test_bad_name_in_front_matter_names_the_file() -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_experience("---\nname: ../x\n---\n", PATH)
    assert info.value.message.startswith(f"{PATH}: invalid front matter: name:")


# ------------------------------------------------------------- malformed files
_LAUGHS = "".join([  # "billion laughs": each anchor nine aliases of the one before
    "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    *(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 7))])
MALFORMED = {
    "missing front matter": ("# Just markdown\n", "missing front matter"),
    "empty file": ("", "missing front matter"),
    "fence not on first line": ("\n---\nname: sample-rule\n---\n", "missing front matter"),
    "unclosed": ("---\nname: sample-rule\nstatus: active\n# body\n", "not closed"),
    "closing fence with text": ("---\nname: sample-rule\n--- \nbody\n", "not closed"),
    "invalid yaml": ("---\nname: sample-rule\nsummary: [unclosed\n---\n", "not valid YAML"),
    "bad indentation": ("---\nname: sample-rule\n  status: x\n---\n", "not valid YAML"),
    "yaml list": ("---\n- name\n- sample-rule\n---\n", "must be a YAML mapping"),
    "yaml scalar": ("---\njust a string\n---\n", "must be a YAML mapping"),
    "empty front matter": ("---\n---\nbody\n", "must be a YAML mapping"),
    "unknown field": ("---\nname: sample-rule\ncolour: red\n---\n", "colour: Extra inputs"),
    "bad status": ("---\nname: sample-rule\nstatus: retired\n---\n", "status: Input should be"),
    "missing name": ("---\nstatus: active\n---\n", "name: Field required"),
    "name not a string": ("---\nname: 42\n---\n", "name: Input should be a valid string"),
    "tags not a list": ("---\nname: sample-rule\ntags: 3\n---\n", "tags:"),
    "metadata not a mapping": ("---\nname: sample-rule\nmetadata: [1]\n---\n", "metadata:"),
    "duplicate field": ("---\nname: sample-rule\nname: other-rule\n---\n", "duplicate field"),
    "python tag": ("---\nname: !!python/object:os.system x\n---\n", "not valid YAML"),
    "alias bomb": ("---\nname: sample-rule\nmetadata:\n"
                   + "".join(f"  {line}\n" for line in _LAUGHS.splitlines()) + "---\n",
                   "aliases expand the document"),
    "crlf": ("---\r\nname: sample-rule\r\n---\r\nbody\r\n", "CRLF"),
    "byte order mark": ("\ufeff---\nname: sample-rule\n---\n", "byte order mark"),
}


@pytest.mark.parametrize(("text", "fragment"), MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_file_raises_invalid_input_naming_the_file(text: str, fragment: str
                                                            ) -> None:
    with pytest.raises(InvalidInputError) as info:
        parse_experience(text, PATH)
    message = info.value.message
    assert message.startswith(f"{PATH}: "), message
    assert fragment in message
    assert "\n" not in message
    assert info.value.exit_code == 5


def test_yaml_error_reports_the_file_line() -> None:
    text = "---\nname: sample-rule\nstatus: active\nsummary: [oops\n---\n"
    with pytest.raises(InvalidInputError, match=r"\(line [45]\)"):
        parse_experience(text, PATH)


def test_non_utf8_bytes_are_refused_naming_the_file() -> None:
    data = b"---\nname: sample-rule\n---\ncaf" + b"\xe9\n"
    with pytest.raises(InvalidInputError) as info:
        decode_experience(data, PATH)
    assert info.value.message == f"{PATH}: not UTF-8 text (byte {len(data) - 2})"


def test_utf8_text_is_decoded() -> None:
    assert decode_experience("---\nname: x\n---\nünï\n".encode(), PATH).endswith("ünï\n")


def test_name_must_equal_the_file_stem() -> None:
    with pytest.raises(InvalidInputError) as info:
        check_experience(GOOD, "experiences/other-rule.md", "other-rule", 800)
    assert info.value.message.startswith("experiences/other-rule.md: front matter name "
                                         "'sample-rule' differs from the file name "
                                         "'other-rule'")
    assert info.value.hint and "sample-rule.md" in info.value.hint


def test_token_budget() -> None:
    body = "x" * 4000
    text = GOOD + body + "\n"
    assert estimate_tokens(text) == (len(text.encode()) + 3) // 4
    assert check_experience(text, PATH, "sample-rule", estimate_tokens(text)).body.endswith(
        "x\n")
    with pytest.raises(InvalidInputError) as info:
        check_experience(text, PATH, "sample-rule", estimate_tokens(text) - 1)
    assert info.value.message.startswith(f"{PATH}: about {estimate_tokens(text)} tokens, "
                                         "over the budget")


def test_token_estimate_counts_utf8_bytes() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("é" * 4) == 2  # 8 bytes


def test_parsed_experience_is_immutable() -> None:
    exp = parse_experience(GOOD, PATH)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        exp.body = "changed"
    assert isinstance(exp, Experience)


# --------------------------------------------------------------------- trailers
MESSAGES = [
    tr.Message("gradient: update refund-method-rules", "Why it helps.\n\nSecond paragraph.",
               ((tr.TARGET, "refund-method-rules"), (tr.BASE_VERSION, "3"),
                (tr.BASE_BLOB, "0" * 40), (tr.CONFIDENCE, "0.80"),
                (tr.EVIDENCE, "trajectory: 12 (a: b)"), (tr.EVIDENCE, "https://x.test/a?b=c"))),
    tr.Message("expgit: update 1 experience: x", "",
               ((tr.GRADIENT, "a" * 40), (tr.GRADIENT, "b" * 40))),
    tr.Message('Revert "something"', "This reverts commit " + "c" * 40 + ".",
               ((tr.REVERTS, "c" * 40),)),
    tr.Message("subject", "Body whose last paragraph\nlooks: like a trailer\nbut is not all",
               ((tr.KIND, "manual"),)),
    tr.Message("diff in body", "```diff\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n \n-old\n+new\n```",
               ((tr.REBASED_FROM, "d" * 40),)),
]


@pytest.mark.parametrize("message", MESSAGES, ids=[m.subject for m in MESSAGES])
def test_message_render_parse_round_trip(message: tr.Message) -> None:
    text = message.render()
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert tr.parse_message(text) == message
    assert tr.parse_message(text).render() == text


@pytest.mark.parametrize("message", MESSAGES, ids=[m.subject for m in MESSAGES])
def test_git_interpret_trailers_agrees(message: tr.Message, tmp_path: Path) -> None:
    text = message.render()
    # --no-divider: a diff's "---" line in a body must not end the message for git either
    parsed = git(tmp_path, "interpret-trailers", "--parse", "--no-divider", input=text)
    assert parsed.splitlines() == [f"{k}: {v}" for k, v in message.trailers]


@pytest.mark.parametrize("text", [
    "subject\nKey: value\n",  # the title paragraph is never trailers
    "subject\n\nbody\n\nKey: value\nnot a trailer\n",
    "subject only\n",
    "subject\n\nbody text\n",
])
def test_messages_without_trailers_agree_with_git(text: str, tmp_path: Path) -> None:
    assert tr.parse_message(text).trailers == ()
    assert git(tmp_path, "interpret-trailers", "--parse", input=text) == ""


def test_whitespace_only_line_separates_trailers_like_git(tmp_path: Path) -> None:
    text = "subject\n\nbody\n  \nKey-One: v1\nKey-Two:v2\n"
    msg = tr.parse_message(text)
    assert msg.trailers == (("Key-One", "v1"), ("Key-Two", "v2"))
    assert msg.body == "body"
    assert git(tmp_path, "interpret-trailers", "--parse", input=text).splitlines() == [
        "Key-One: v1", "Key-Two: v2"]


def test_message_lookup_is_case_insensitive_and_ordered() -> None:
    msg = tr.parse_message("s\n\nexpgit-evidence: one\nExpgit-Evidence: two\n")
    assert msg.values(tr.EVIDENCE) == ["one", "two"]
    assert msg.value(tr.EVIDENCE) == "one"
    assert msg.value(tr.TARGET) is None


def test_with_trailers_appends() -> None:
    msg = MESSAGES[1].with_trailers((tr.REBASED_FROM, "e" * 40))
    assert msg.trailers[-1] == (tr.REBASED_FROM, "e" * 40)
    assert tr.parse_message(msg.render()).value(tr.REBASED_FROM) == "e" * 40


@pytest.mark.parametrize("value", ["", "   ", "two\nlines", "cr\rhere"])
def test_single_line_refuses_what_would_break_a_trailer(value: str) -> None:
    with pytest.raises(InvalidInputError, match="evidence must be a single non-empty line"):
        tr.single_line(value, "evidence")


def test_single_line_strips() -> None:
    assert tr.single_line("  traj-1 ", "evidence") == "traj-1"


def test_reverted_commit_from_trailer_or_git_sentence() -> None:
    sha = "f" * 40
    assert tr.reverted_commit(MESSAGES[2]) == "c" * 40
    git_revert = tr.parse_message(f'Revert "x"\n\nThis reverts commit {sha}.\n')
    assert git_revert.trailers == ()
    assert tr.reverted_commit(git_revert) == sha
    assert tr.reverted_commit(tr.parse_message("plain\n\nno revert here\n")) is None

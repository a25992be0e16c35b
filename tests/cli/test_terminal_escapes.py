"""Terminal escapes from a model (issue 32 item 15): a rationale holding an OSC 8
hyperlink that disguises its target, a CSI that clears the screen, a window-title OSC,
BEL and 8-bit C1 controls is shown by ``review``, ``evidence``, ``gradients`` and ``log``
with its visible words and without one control byte; on a terminal, expgit's own colours
stay."""

from __future__ import annotations

from conftest import Driver, example_flat
from test_no_color import ANSI, on_a_terminal

from expgit.cli._terminal import terminal_text

NAME = "checked-baggage-allowance"
HOSTILE = ("Gold members \x1b]8;;http://evil.example/x\x1b\\click here\x1b]8;;\x1b\\ get "
           "\x1b[2J\x1b[1;1Hthree bags\x07 \x1b]0;pwned\x07free \x9b31mof charge\x9d0;t\x9c"
           " \x1bPdcs\x1b\\ok")
WORDS = ["Gold members", "click here", "three bags", "free", "of charge", "ok"]


def _assert_clean(text: str) -> None:
    for byte in ("\x1b", "\x07", "\x9b", "\x9d", "\x9c"):
        assert byte not in text, (byte, text)
    assert "evil.example" not in text and "pwned" not in text
    for word in WORDS:
        assert word in text, (word, text)


def test_terminal_text_keeps_words_newlines_and_tabs_only() -> None:
    assert terminal_text("a\tb\nc\rd\x00e\x7f\x85f") == "a\tb\ncdef"
    assert terminal_text("line \x1b]0;title\nnext") == "line \nnext"  # unterminated
    assert terminal_text("\x1b[1mbold\x1b[0m \x1b[8mhid\x1b[0m", keep_colours=True) == (
        "\x1b[1mbold\x1b[0m hid\x1b[0m")


def test_review_evidence_gradients_and_log_print_no_control_byte(driver: Driver) -> None:
    text = example_flat(NAME)
    gid = driver.propose(NAME, text + "\nCheck the fare class first.\n", rationale=HOSTILE)
    for args in (["review", gid], ["evidence", gid]):
        result = driver.ok(*args)
        _assert_clean(result.out + result.err)
    listed = driver.ok("gradients").out
    assert not any(byte in listed for byte in ("\x1b", "\x07", "\x9b"))
    pid = driver.merge(gid)
    for args in (["review", pid], ["evidence", pid]):
        _assert_clean(driver.ok(*args).out)
    driver.apply(pid)
    log = driver.ok("log").out
    assert "\x1b" not in log and "\x9b" not in log


def test_on_a_terminal_own_colours_stay_and_the_models_sequences_go(driver: Driver) -> None:
    text = example_flat(NAME)
    gid = driver.propose(NAME, text + "\nCheck the fare class first.\n", rationale=HOSTILE)
    shown, code = on_a_terminal(["-C", str(driver.path), "review", gid])
    assert code == 0, shown
    assert ANSI.search(shown)  # expgit's own diff colours
    without_colours = ANSI.sub("", shown)
    _assert_clean(without_colours)
    assert "\x1b[2J" not in shown and "\x1b[1;1H" not in shown

"""The whole workflow through the real CLI, checked with plain git."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CliResult, Driver, demo_flat, fsck, git, run_expgit

BAGS = "checked-baggage-allowance"
CANCEL = "cancellation-eligibility-rules"
MULTI = "handle-multiple-reservations"
TRANSFER = "when-to-transfer-to-human"
REFUND = "refund-method-rules"
ID_RE = re.compile(r"[0-9a-f]{12}")


def demo(name: str) -> str:
    return demo_flat(name)


def replaced(d: Driver, name: str, old: str, new: str) -> str:
    text = d.text(name)
    assert old in text, f"{old!r} not in {name}"
    return text.replace(old, new, 1)


def trailers(d: Driver, rev: str) -> list[str]:
    return d.git("log", "-1", "--format=%(trailers:only,unfold)", rev).strip().splitlines()


def changed_paths(d: Driver, old: str, new: str) -> list[str]:
    return d.git("diff", "--name-status", "--no-renames", old, new).strip().splitlines()


def clean(d: Driver) -> bool:
    return d.git("status", "--porcelain") == ""


def on_disk(d: Driver, name: str) -> Path:
    return d.path / "experiences" / f"{name}.md"


# ---------------------------------------------------------------------- propose
OPERATIONS = {
    "update": (BAGS, lambda: demo(BAGS), "M", "1"),
    "create": (MULTI, lambda: demo(MULTI), "A", "0"),
    "delete": (TRANSFER, lambda: None, "D", "1"),
}


@pytest.mark.parametrize(("name", "content", "status", "base_version"), OPERATIONS.values(),
                         ids=OPERATIONS.keys())
def test_propose_commits_one_file_on_its_own_branch(driver: Driver, name: str, content,  # type: ignore[no-untyped-def]
                                                    status: str, base_version: str) -> None:
    main = driver.rev()
    base_blob = (driver.git("rev-parse", f"main:experiences/{name}.md").strip()
                 if status != "A" else "none")
    gid = driver.propose(name, content(), rationale="Agents got this wrong.\n\nTwice.",
                         evidence=("traj/17", "session: 4"), confidence=0.8)
    assert ID_RE.fullmatch(gid)
    commit = driver.rev(f"refs/heads/expgit/gradients/{gid}")
    assert commit.startswith(gid)
    assert driver.git("rev-list", "--parents", "-n", "1", commit).split() == [commit, main]
    assert changed_paths(driver, main, commit) == [f"{status}\texperiences/{name}.md"]
    assert driver.git("log", "-1", "--format=%s", commit).strip() == \
        f"gradient: {dict(M='update', A='create', D='delete')[status]} {name}"
    assert trailers(driver, commit) == [
        f"Expgit-Target: {name}", f"Expgit-Base-Version: {base_version}",
        f"Expgit-Base-Blob: {base_blob}", "Expgit-Confidence: 0.80",
        "Expgit-Evidence: traj/17", "Expgit-Evidence: session: 4"]
    assert "Agents got this wrong.\n\nTwice." in driver.git("log", "-1", "--format=%b", commit)
    if content() is not None:
        assert driver.text(name, commit) == content()
    # main, the working tree and the other branches are untouched
    assert driver.rev() == main
    assert clean(driver)
    assert driver.git("branch", "--format=%(refname:short)").split() == [
        f"expgit/gradients/{gid}", "main"]


def test_propose_json_describes_the_gradient(driver: Driver) -> None:
    path = driver.file(demo(BAGS))
    out = driver.ok("propose", BAGS, "--content-file", path, "--rationale", "r",
                    "--evidence", "e1", "--json").out
    data = json.loads(out)
    assert data["target"] == BAGS and data["operation"] == "update"
    assert data["state"] == "open" and data["base_commit"] == driver.rev()
    assert data["branch"] == f"expgit/gradients/{data['id']}"
    assert data["evidence"] == ["e1"] and data["confidence"] == 0.5
    assert data["added"] > 0 and data["removed"] > 0
    fsck(driver.path)


def test_propose_reads_content_from_stdin(tmp_path: Path, seeded_repo) -> None:  # type: ignore[no-untyped-def]
    proc = run_expgit("-C", tmp_path / "repo", "propose", BAGS, "--content-file", "-",
                      "--rationale", "from stdin", input=demo(BAGS))
    assert proc.returncode == 0, proc.stderr
    gid = proc.stdout.strip()
    assert git(tmp_path / "repo", "show", f"expgit/gradients/{gid}:experiences/{BAGS}.md") \
        == demo(BAGS)


# ------------------------------------------------------------------------ merge
def test_merge_all_makes_a_proposal_with_description_and_pr_body(driver: Driver,
                                                                  tmp_path: Path) -> None:
    main = driver.rev()
    g1 = driver.propose(BAGS, demo(BAGS), rationale="Per passenger.", evidence=("t1",),
                        confidence=0.7)
    g2 = driver.propose(MULTI, demo(MULTI), rationale="Guessed the reservation.")
    g3 = driver.propose(TRANSFER, None, rationale="Obsolete | superseded.")
    body = tmp_path / "pr.md"
    pid = driver.ok("merge", "--all", "--pr-body", body).out.strip()
    fsck(driver.path)
    assert ID_RE.fullmatch(pid)
    commit = driver.rev(f"refs/heads/expgit/proposals/{pid}")
    assert driver.git("rev-list", "--parents", "-n", "1", commit).split() == [commit, main]
    assert changed_paths(driver, main, commit) == [
        f"M\texperiences/{BAGS}.md", f"A\texperiences/{MULTI}.md",
        f"D\texperiences/{TRANSFER}.md"]
    shas = {driver.rev(f"expgit/gradients/{g}") for g in (g1, g2, g3)}
    assert set(trailers(driver, commit)) == {f"Expgit-Gradient: {s}" for s in shas}
    message = driver.git("log", "-1", "--format=%B", commit)
    # no line of the description reads as a patch start ("--- a/..."): the trailers
    # survive `git interpret-trailers` and `git format-patch | git am` too
    assert not any(line.startswith("--- ") for line in message.splitlines())
    assert set(git(driver.path, "interpret-trailers", "--parse", input=message).splitlines()
               ) == {f"Expgit-Gradient: {s}" for s in shas}
    subject, _, description = message.partition("\n\n")
    assert subject.startswith("expgit: update 3 experiences: ")
    assert f"Base: `{main[:12]}` on `main`. Merged 3 gradients" in description
    assert "| experience | change | +/- | confidence | rationale | evidence |" in description
    assert re.search(rf"\| `{BAGS}` \| update \| \+\d+/-\d+ \| 0\.70 \| Per passenger\. \| t1 \|",
                     description)
    assert f"| `{MULTI}` | create | +{len(demo(MULTI).splitlines())}/-0 | 0.50 |" in description
    assert r"Obsolete \| superseded." in description  # a pipe cannot break the table
    assert f"### {BAGS} (update)\n\n```diff\n@@ -" in description
    assert f"### {MULTI} (create)\n\n```diff\n@@ -0,0 +1," in description
    assert f"### {TRANSFER} (delete)\n\n```diff\n@@ -1," in description
    # --pr-body: title line, blank line, the description (without the trailers)
    pr = body.read_text()
    assert pr.startswith(subject + "\n\n")
    review = json.loads(driver.ok("review", pid, "--json").out)
    assert pr.rstrip("\n") == f"{subject}\n\n{review['description']}"
    assert "Expgit-Gradient" not in pr
    # the gradients stay open until the proposal is applied; main has not moved
    assert driver.rev() == main
    assert len(json.loads(driver.ok("gradients", "--merged", "--json").out)["gradients"]) == 3


def test_merge_named_gradients_only(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS))
    g2 = driver.propose(MULTI, demo(MULTI))
    pid = driver.merge(g2)
    data = json.loads(driver.ok("review", pid, "--json").out)
    assert data["gradients"] == [g2]
    assert data["gradient_commits"] == [driver.rev(f"expgit/gradients/{g2}")]
    assert [c["experience"] for c in data["changes"]] == [MULTI]
    # merge --all takes only what is not in a proposal yet
    pid2 = driver.merge()
    data2 = json.loads(driver.ok("review", pid2, "--json").out)
    assert data2["gradients"] == [g1]
    assert data2["gradient_commits"] == [driver.rev(f"expgit/gradients/{g1}")]


def test_identical_edits_collapse_into_one_item(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS), rationale="first reason", evidence=("e1",),
                        confidence=0.6)
    g2 = driver.propose(BAGS, demo(BAGS), rationale="second reason", evidence=("e2", "e1"),
                        confidence=0.9)
    assert g1 != g2
    pid = driver.merge()
    commit = driver.rev(f"expgit/proposals/{pid}")
    assert changed_paths(driver, "main", commit) == [f"M\texperiences/{BAGS}.md"]
    assert sorted(trailers(driver, commit)) == sorted(
        f"Expgit-Gradient: {driver.rev(f'expgit/gradients/{g}')}" for g in (g1, g2))
    description = driver.git("log", "-1", "--format=%b", commit)
    assert description.count(f"| `{BAGS}` |") == 1
    # the most confident gradient leads: its rationale and evidence come first
    assert "| 0.90 | second reason / first reason | e2, e1 |" in description
    assert driver.text(BAGS, commit) == demo(BAGS)


def test_different_edits_of_one_experience_conflict(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS))
    g2 = driver.propose(BAGS, driver.text(BAGS) + "\nAnother lesson.\n")
    before = driver.state()
    result = driver.fails(3, "merge", "--all")
    assert result.out == ""
    line = result.err.strip()
    assert "\n" not in line and line.startswith("expgit: error: cannot merge: ")
    assert BAGS in line and g1 in line and g2 in line
    assert "different edits" in line
    assert driver.state() == before
    assert driver.git("for-each-ref", "refs/heads/expgit/proposals/") == ""
    fsck(driver.path)


def test_gradient_made_before_main_changed_its_file_is_stale(driver: Driver) -> None:
    stale = driver.propose(BAGS, demo(BAGS))
    fresh = driver.propose(BAGS, driver.text(BAGS) + "\nLesson.\n")
    driver.apply(driver.merge(fresh))
    before = driver.state()
    err = driver.fails(3, "merge", stale).err
    assert BAGS in err and stale in err and "edited on main since" in err
    assert driver.state() == before


def test_merging_a_gradient_twice_is_refused(driver: Driver) -> None:
    gid = driver.propose(BAGS, demo(BAGS))
    pid = driver.merge(gid)
    err = driver.fails(3, "merge", gid).err
    assert f"gradient {gid} is already in proposal {pid}" in err


# ------------------------------------------------------------------------ apply
def test_apply_fast_forwards_and_the_working_tree_follows(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS))
    g2 = driver.propose(MULTI, demo(MULTI))
    g3 = driver.propose(TRANSFER, None)
    pid = driver.merge()
    commit = driver.rev(f"expgit/proposals/{pid}")
    old = driver.rev()
    out = driver.apply(pid).out
    assert out.strip() == f"Applied proposal {pid}: main {old[:12]} -> {commit[:12]}"
    assert driver.rev() == commit
    assert on_disk(driver, BAGS).read_text() == demo(BAGS)
    assert on_disk(driver, MULTI).read_text() == demo(MULTI)
    assert not on_disk(driver, TRANSFER).exists()
    assert clean(driver)
    # bookkeeping: the branches are gone, the commits kept under refs/expgit/applied/
    assert driver.git("branch", "--format=%(refname:short)").split() == ["main"]
    assert driver.rev(f"refs/expgit/applied/proposals/{pid}") == commit
    for gid in (g1, g2, g3):
        assert driver.rev(f"refs/expgit/applied/gradients/{gid}").startswith(gid)
    reflog = driver.git("reflog", "show", "--format=%gs", "refs/heads/main")
    assert reflog.splitlines()[0] == f"expgit apply {pid}"


def test_apply_json(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, demo(BAGS)))
    old = driver.rev()
    data = json.loads(driver.ok("apply", pid, "--json").out)
    assert data == {"proposal": pid, "commit": driver.rev(), "previous": old,
                    "rebased": False, "remote": None, "attempts": 1, "warnings": []}


def test_apply_after_main_moved_on_another_file_rebuilds(driver: Driver) -> None:
    p1 = driver.merge(driver.propose(BAGS, demo(BAGS)))
    p2 = driver.merge(driver.propose(CANCEL, demo(CANCEL), evidence=("t9",)))
    p2_commit = driver.rev(f"expgit/proposals/{p2}")
    driver.apply(p1)
    moved = driver.rev()
    result = driver.apply(p2)
    assert "(rebuilt on the moved main)" in result.out
    new = driver.rev()
    assert new != p2_commit
    assert driver.git("rev-list", "--parents", "-n", "1", new).split() == [new, moved]
    assert driver.git("rev-list", "--merges", "main") == ""
    assert driver.git("rev-list", "--count", "main").strip() == "3"  # init, p1, p2
    tr = trailers(driver, new)
    assert f"Expgit-Rebased-From: {p2_commit}" in tr
    assert trailers(driver, p2_commit) == tr[:-1]
    # the message gains one trailer; the authorship is kept
    assert driver.git("log", "-1", "--format=%B", new) == driver.git(
        "log", "-1", "--format=%B", p2_commit).rstrip("\n") + \
        f"\nExpgit-Rebased-From: {p2_commit}\n\n"
    assert driver.git("log", "-1", "--format=%an %ae %at", new) == driver.git(
        "log", "-1", "--format=%an %ae %at", p2_commit)
    assert driver.text(BAGS) == demo(BAGS) and driver.text(CANCEL) == demo(CANCEL)
    assert changed_paths(driver, moved, new) == [f"M\texperiences/{CANCEL}.md"]
    assert on_disk(driver, CANCEL).read_text() == demo(CANCEL) and clean(driver)
    assert driver.rev(f"refs/expgit/applied/proposals/{p2}") == p2_commit
    # the log knows the rebuilt commit by its proposal id
    log = json.loads(driver.ok("log", "-n", "1", "--json").out)["updates"]
    assert log[0]["commit"] == new and log[0]["proposal"] == p2
    assert log[0]["gradients"][0]["evidence"] == ["t9"]


def test_apply_after_main_moved_on_the_same_file_conflicts(driver: Driver) -> None:
    p1 = driver.merge(driver.propose(BAGS, demo(BAGS)))
    p2 = driver.merge(driver.propose(BAGS, driver.text(BAGS) + "\nOther lesson.\n"))
    driver.apply(p1)
    main = driver.rev()
    before = driver.state()
    err = driver.fails(3, "apply", p2).err
    line = err.strip()
    assert "\n" not in line
    assert line.startswith(f"expgit: error: proposal {p2} conflicts with main: {BAGS} changed")
    assert driver.rev() == main
    assert driver.state() == before
    assert driver.rev(f"refs/heads/expgit/proposals/{p2}")  # still open
    assert clean(driver)


def test_apply_twice_is_a_conflict_and_changes_nothing(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, demo(BAGS)))
    driver.apply(pid)
    before = driver.state()
    err = driver.fails(3, "apply", pid).err
    assert f"proposal {pid} was already applied" in err
    assert driver.state() == before


# ----------------------------------------------------------------------- reject
def test_reject_proposal_moves_refs_and_records_the_reason(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS))
    g2 = driver.propose(MULTI, demo(MULTI))
    pid = driver.merge()
    commit = driver.rev(f"expgit/proposals/{pid}")
    main = driver.rev()
    out = driver.ok("reject", pid, "--reason", "Too broad; split it.").out
    fsck(driver.path)
    assert f"Rejected proposal {pid}" in out and g1 in out and g2 in out
    assert driver.git("branch", "--format=%(refname:short)").split() == ["main"]
    assert driver.rev(f"refs/expgit/rejected/proposals/{pid}") == commit
    for gid in (g1, g2):
        assert driver.rev(f"refs/expgit/rejected/gradients/{gid}").startswith(gid)
    note = driver.git("notes", "--ref", "expgit", "show", commit)
    assert note.startswith(f"Rejected proposal {pid} by Test Committer")
    assert "Reason: Too broad; split it." in note
    assert driver.rev() == main and clean(driver)
    before = driver.state()
    assert "already rejected" in driver.fails(3, "apply", pid).err
    assert driver.fails(3, "reject", pid, "--reason", "again").code == 3
    assert driver.state() == before
    review = json.loads(driver.ok("review", pid, "--json").out)
    assert review["state"] == "rejected" and "Too broad" in review["note"]
    assert "Too broad" in driver.ok("review", pid).out
    listed = json.loads(driver.ok("proposals", "--state", "rejected", "--json").out)
    assert [p["id"] for p in listed["proposals"]] == [pid]


def test_reject_gradient(driver: Driver) -> None:
    gid = driver.propose(BAGS, demo(BAGS))
    commit = driver.rev(f"expgit/gradients/{gid}")
    out = driver.ok("reject", gid, "--reason", "wrong lesson").out
    fsck(driver.path)
    assert out.strip() == f"Rejected gradient {gid} ({commit[:12]})"
    assert driver.git("for-each-ref", "refs/heads/expgit/") == ""
    assert driver.rev(f"refs/expgit/rejected/gradients/{gid}") == commit
    assert "Reason: wrong lesson" in driver.git("notes", "--ref", "expgit", "show", commit)
    assert json.loads(driver.ok("gradients", "--json").out)["gradients"] == []
    rejected = json.loads(driver.ok("gradients", "--state", "rejected", "--json").out)
    assert [(g["id"], g["state"]) for g in rejected["gradients"]] == [(gid, "rejected")]
    before = driver.state()
    assert "already rejected" in driver.fails(3, "merge", gid).err
    assert "already rejected" in driver.fails(3, "reject", gid, "--reason", "x").err
    assert driver.state() == before
    # the very same edit again (the same commit, as within one second): not reopened
    with_date = dict(os.environ, GIT_AUTHOR_DATE=driver.git("log", "-1", "--format=%ad",
                                                            "--date=raw", commit).strip(),
                     GIT_COMMITTER_DATE=driver.git("log", "-1", "--format=%cd",
                                                   "--date=raw", commit).strip())
    again = subprocess.run([sys.executable, "-m", "expgit", "-C", str(driver.path), "propose",
                            BAGS, "--rationale", "it helps", "--content-file",
                            str(driver.file(demo(BAGS)))],
                           capture_output=True, text=True, env=with_date)
    assert again.returncode == 5, again.stdout + again.stderr
    assert f"gradient {gid} (" in again.stderr and "already rejected" in again.stderr
    assert driver.state() == before


def test_rejecting_a_gradient_inside_an_open_proposal_is_refused(driver: Driver) -> None:
    gid = driver.propose(BAGS, demo(BAGS))
    pid = driver.merge(gid)
    before = driver.state()
    err = driver.fails(3, "reject", gid, "--reason", "no").err
    assert f"gradient {gid} is in open proposal {pid}" in err
    assert driver.state() == before


def test_two_rejections_keep_both_notes(driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS))
    g2 = driver.propose(MULTI, demo(MULTI))
    driver.ok("reject", g1, "--reason", "one")
    driver.ok("reject", g2, "--reason", "two")
    fsck(driver.path)
    assert "Reason: one" in driver.git("notes", "--ref", "expgit", "show", f"{g1}")
    assert "Reason: two" in driver.git("notes", "--ref", "expgit", "show", f"{g2}")
    assert len(driver.git("notes", "--ref", "expgit", "list").splitlines()) == 2


# ----------------------------------------------------------------------- review
def test_review_proposal_shows_description_and_diff(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, demo(BAGS), rationale="Count per passenger."))
    out = driver.ok("review", pid).out
    assert out.startswith(f"proposal {pid} (open): expgit: update 1 experience: {BAGS}")
    assert "## Changes" in out and "Count per passenger." in out
    assert f"--- a/experiences/{BAGS}.md" in out
    assert "+2. Multiply the per-passenger allowance" in out
    # each diff once: in its place under "## Diffs", coloured, not again after the text
    assert out.count("+2. Multiply the per-passenger allowance") == 1
    assert out.count(f"--- a/experiences/{BAGS}.md") == 1
    assert out.index("## Diffs") < out.index(f"--- a/experiences/{BAGS}.md")
    data = json.loads(driver.ok("review", pid, "--json").out)
    assert out.count("@@ ") == data["diffs"][BAGS].count("@@ ") > 0
    assert set(data["diffs"]) == {BAGS}
    assert data["diffs"][BAGS].startswith(f"--- a/experiences/{BAGS}.md\n+++ b/experiences/")
    hunks = data["diffs"][BAGS].split("\n", 2)[2]  # the description omits the file header
    assert hunks.startswith("@@ ") and hunks in data["description"]
    assert data["note"] is None and data["state"] == "open"


def test_review_gradient_shows_rationale_and_diff(driver: Driver) -> None:
    gid = driver.propose(MULTI, demo(MULTI), rationale="Ask which reservation.",
                         evidence=("traj-3",), confidence=0.65)
    out = driver.ok("review", gid).out
    assert out.startswith(f"gradient {gid} (open): create {MULTI}")
    assert "Ask which reservation." in out
    assert "confidence 0.65, base version 0, evidence: traj-3" in out
    assert f"+++ b/experiences/{MULTI}.md" in out
    assert out.count(f"+++ b/experiences/{MULTI}.md") == 1
    data = json.loads(driver.ok("review", gid[:6], "--json").out)
    assert data["id"] == gid
    assert data["diffs"][MULTI].startswith(f"--- /dev/null\n+++ b/experiences/{MULTI}.md\n")


# ---------------------------------------------------------------------- listing
def test_gradients_merged_into_an_open_proposal_are_listed_only_on_request(
        driver: Driver) -> None:
    g1 = driver.propose(BAGS, demo(BAGS), rationale="bags rationale")
    g2 = driver.propose(MULTI, demo(MULTI))
    g3 = driver.propose(REFUND, None)
    pid = driver.merge(g1, g2)
    result = driver.ok("gradients")
    assert [line.split()[0] for line in result.out.splitlines()] == [g3]
    assert result.err.strip() == "(2 more, merged into open proposals: --merged lists them)"
    merged = driver.ok("gradients", "--merged").out
    assert sorted(line.split()[0] for line in merged.splitlines()) == sorted([g1, g2, g3])
    assert re.search(rf"^{g1} .* in proposal {pid}$", merged, re.M)
    assert not re.search(rf"^{g3} .* in proposal", merged, re.M)
    data = json.loads(driver.ok("gradients", "--merged", "--json").out)
    assert {g["id"]: g["proposal"] for g in data["gradients"]} == {g1: pid, g2: pid, g3: None}
    assert data["hidden_merged"] == 0
    hidden = json.loads(driver.ok("gradients", "--json").out)
    assert [g["id"] for g in hidden["gradients"]] == [g3] and hidden["hidden_merged"] == 2
    driver.ok("reject", pid, "--reason", "not these")  # its gradients close with it
    [only] = json.loads(driver.ok("gradients", "--merged", "--json").out)["gradients"]
    assert only["id"] == g3


def test_gradients_and_proposals_listings(driver: Driver) -> None:
    assert driver.ok("gradients").out.strip() == "no open gradients"
    assert driver.ok("proposals").out.strip() == "no open proposals"
    g1 = driver.propose(BAGS, demo(BAGS), rationale="bags rationale", confidence=0.3)
    g2 = driver.propose(MULTI, demo(MULTI))
    g3 = driver.propose(REFUND, None)
    out = driver.ok("gradients").out
    assert sorted(line.split()[0] for line in out.splitlines()) == sorted([g1, g2, g3])
    assert re.search(rf"^{g1}\s+open\s+update\s+{BAGS}\s+\+\d+/-\d+\s+conf 0\.30\s+bags "
                     "rationale$", out, re.M)
    pid = driver.merge(g1, g2)
    driver.apply(pid)
    driver.ok("reject", g3, "--reason", "keep it")
    assert driver.ok("gradients").out.strip() == "no open gradients"
    everything = json.loads(driver.ok("gradients", "--state", "all", "--json").out
                            )["gradients"]
    assert {g["id"]: g["state"] for g in everything} == {
        g1: "applied", g2: "applied", g3: "rejected"}
    applied = json.loads(driver.ok("gradients", "--state", "applied", "--json").out
                         )["gradients"]
    assert {g["id"] for g in applied} == {g1, g2}
    assert driver.ok("proposals").out.strip() == "no open proposals"
    props = json.loads(driver.ok("proposals", "--state", "all", "--json").out)["proposals"]
    assert len(props) == 1 and props[0]["id"] == pid and props[0]["state"] == "applied"
    assert props[0]["branch"] == f"refs/expgit/applied/proposals/{pid}"
    assert {c["experience"] for c in props[0]["changes"]} == {BAGS, MULTI}
    human = driver.ok("proposals", "--state", "applied").out
    assert human.startswith(f"{pid}  applied ") and "2 gradient(s)" in human


def test_list_and_show_across_versions(driver: Driver) -> None:
    init = driver.rev()
    original = driver.text(BAGS)
    driver.apply(driver.merge(driver.propose(BAGS, demo(BAGS))))
    driver.apply(driver.merge(driver.propose(MULTI, demo(MULTI)),
                              driver.propose(TRANSFER, None)))
    listed = json.loads(driver.ok("list", "--json").out)
    assert listed["commit"] == driver.rev()
    rows = {r["name"]: r for r in listed["experiences"]}
    assert MULTI in rows and TRANSFER not in rows and len(rows) == 8
    assert rows[BAGS]["version"] == 2 and rows[CANCEL]["version"] == 1
    assert rows[MULTI]["version"] == 1 and rows[MULTI]["status"] == "active"
    assert rows["compensation-certificates"]["status"] == "draft"
    assert rows[BAGS]["last_commit"] == driver.rev("main~1")
    old = json.loads(driver.ok("list", "--at", init[:10], "--json").out)
    assert old["commit"] == init
    assert {r["name"] for r in old["experiences"]} == set(rows) - {MULTI} | {TRANSFER}
    assert all(r["version"] == 1 for r in old["experiences"])
    human = driver.ok("list").out
    assert re.search(rf"^{BAGS}\s+active\s+v2\s+Compute free checked bags", human, re.M)
    # show: current, by version, at a revision
    assert driver.ok("show", BAGS).out == demo(BAGS)
    assert driver.ok("show", BAGS, "--version", "1").out == original
    assert driver.ok("show", BAGS, "--version", "2").out == demo(BAGS)
    assert driver.ok("show", BAGS, "--at", init).out == original
    assert driver.ok("show", BAGS, "--at", "main~1").out == demo(BAGS)
    shown = json.loads(driver.ok("show", BAGS, "--version", "1", "--json").out)
    assert shown["version"] == 1 and shown["commit"] == init and shown["content"] == original
    assert "versions 1 to 2, not 3" in driver.fails(5, "show", BAGS, "--version", "3").err
    # a deleted experience: gone on main, there in history
    assert "no experience" in driver.fails(5, "show", TRANSFER).err
    assert driver.ok("show", TRANSFER, "--at", init).out.startswith("---\nname: " + TRANSFER)
    assert "deleted" in driver.fails(5, "show", TRANSFER, "--version", "2").err


# ------------------------------------------------------------------------- log
def test_log_understands_proposals_manual_commits_and_git_reverts(driver: Driver) -> None:
    gid = driver.propose(BAGS, demo(BAGS), rationale="Per passenger.\nSecond line.",
                         evidence=("traj/1", "traj/2"), confidence=0.8)
    pid = driver.merge()
    driver.apply(pid)
    proposal_commit = driver.rev()
    # a hand-made commit with plain git in the working tree, then a plain git revert
    path = on_disk(driver, REFUND)
    path.write_text(path.read_text() + "\nManual lesson.\n")
    driver.git("commit", "-q", "-am", "Manual: refund lesson")
    manual = driver.rev()
    driver.git("revert", "--no-edit", "HEAD")
    git_revert = driver.rev()
    fsck(driver.path)
    document = json.loads(driver.ok("log", "--json").out)
    assert document["commit"] == git_revert
    log = document["updates"]
    assert [(u["commit"], u["kind"]) for u in log] == [
        (git_revert, "revert"), (manual, "manual"), (proposal_commit, "proposal"),
        (driver.rev("main~3"), "init")]
    rev_u, manual_u, prop_u, init_u = log
    assert rev_u["reverts"] == manual and rev_u["subject"] == 'Revert "Manual: refund lesson"'
    assert manual_u["reverted_by"] == [git_revert]
    assert manual_u["changes"] == [{"experience": REFUND, "operation": "update", "added": 2,
                                    "removed": 0}]
    assert manual_u["author"] == "Test Author <author@example.com>"
    assert prop_u["proposal"] == pid and prop_u["reverted_by"] == []
    [g] = prop_u["gradients"]
    assert g["id"] == gid and g["evidence"] == ["traj/1", "traj/2"] and g["confidence"] == 0.8
    assert g["rationale"] == "Per passenger.\nSecond line." and g["state"] == "applied"
    assert len(init_u["changes"]) == 8
    human = driver.ok("log").out
    assert f"{proposal_commit[:12]} proposal" in human
    assert (f"gradient {gid}: update {BAGS}, confidence 0.80, evidence traj/1, traj/2"
            in human)
    assert f"{manual[:12]} manual" in human and f"reverted by {git_revert[:12]}" in human
    assert f"reverts {manual[:12]}" in human
    # filtered by experience and limited
    only = json.loads(driver.ok("log", BAGS, "--json").out)["updates"]
    assert [u["kind"] for u in only] == ["proposal", "init"]
    assert only[1]["changes"] == [{"experience": BAGS, "operation": "create", "added": 34,
                                   "removed": 0}]
    assert len(json.loads(driver.ok("log", "-n", "2", "--json").out)["updates"]) == 2


def test_log_links_an_expgit_revert_both_ways(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, demo(BAGS)))
    driver.apply(pid)
    driver.ok("revert", "main")
    log = json.loads(driver.ok("log", "--json").out)["updates"]
    assert [u["kind"] for u in log] == ["revert", "proposal", "init"]
    assert log[1]["reverted_by"] == [log[0]["commit"]]
    assert log[0]["reverts"] == log[1]["commit"]


# ----------------------------------------------------------------------- revert
def test_revert_applied_proposal_restores_everything(driver: Driver) -> None:
    init = driver.rev()
    originals = {n: driver.text(n) for n in (BAGS, TRANSFER)}
    driver.propose(BAGS, demo(BAGS))
    driver.propose(MULTI, demo(MULTI))
    driver.propose(TRANSFER, None)
    pid = driver.merge()
    driver.apply(pid)
    applied = driver.rev()
    result = json.loads(driver.ok("revert", pid, "--json").out)
    fsck(driver.path)
    new = driver.rev()
    assert result["reverted"] == applied and result["commit"] == new
    assert result["previous"] == applied and result["merged"] == []
    assert sorted(result["experiences"]) == sorted([BAGS, MULTI, TRANSFER])
    assert driver.git("rev-list", "--parents", "-n", "1", new).split() == [new, applied]
    assert driver.git("diff", "--stat", init, new) == ""  # content is back to the seed
    assert f"Expgit-Reverts: {applied}" in trailers(driver, new)
    assert driver.git("log", "-1", "--format=%s", new).strip().startswith('Revert "expgit:')
    for name, text in originals.items():
        assert on_disk(driver, name).read_text() == text
    assert not on_disk(driver, MULTI).exists()
    assert clean(driver)
    # reverting again: nothing left to undo
    before = driver.state()
    assert "already undone" in driver.fails(5, "revert", pid).err
    assert driver.state() == before


def test_revert_of_a_rebuilt_proposal_by_its_id(driver: Driver) -> None:
    p1 = driver.merge(driver.propose(BAGS, demo(BAGS)))
    p2 = driver.merge(driver.propose(CANCEL, demo(CANCEL)))
    driver.apply(p1)
    driver.apply(p2)  # rebuilt: the proposal commit itself is not on main
    original = driver.text(CANCEL, "main~2")
    out = driver.ok("revert", p2).out
    assert out.startswith(f"Reverted {driver.rev('main~1')[:12]} in {driver.rev()[:12]}: ")
    assert driver.text(CANCEL) == original and driver.text(BAGS) == demo(BAGS)


def test_revert_keeps_a_later_non_overlapping_edit(driver: Driver) -> None:
    original = driver.text(BAGS)
    first = replaced(driver, BAGS, "charge 50 USD per extra bag", "charge 60 USD per extra bag")
    driver.apply(driver.merge(driver.propose(BAGS, first)))
    target = driver.rev()
    later = first + "- Later lesson: check the passenger count.\n"
    driver.apply(driver.merge(driver.propose(BAGS, later)))
    result = json.loads(driver.ok("revert", target, "--json").out)
    fsck(driver.path)
    assert result["merged"] == [BAGS] and result["experiences"] == [BAGS]
    assert driver.text(BAGS) == original + "- Later lesson: check the passenger count.\n"
    assert on_disk(driver, BAGS).read_text() == driver.text(BAGS) and clean(driver)


def test_revert_with_a_conflicting_later_edit_writes_nothing(driver: Driver) -> None:
    first = replaced(driver, BAGS, "charge 50 USD per extra bag", "charge 60 USD per extra bag")
    driver.apply(driver.merge(driver.propose(BAGS, first)))
    target = driver.rev()
    second = first.replace("charge 60 USD per extra bag", "charge 70 USD per extra bag")
    driver.apply(driver.merge(driver.propose(BAGS, second)))
    before = driver.state()
    line = driver.fails(3, "revert", target).err.strip()
    assert "\n" not in line
    assert line.startswith(f"expgit: error: cannot revert {target[:12]}: {BAGS}: later edits "
                           "conflict with the revert")
    assert driver.state() == before
    assert driver.text(BAGS) == second and clean(driver)


def test_revert_of_a_manual_commit(driver: Driver) -> None:
    path = on_disk(driver, REFUND)
    original = path.read_text()
    path.write_text(original + "\nManual lesson.\n")
    driver.git("commit", "-q", "-am", "manual edit")
    driver.ok("revert", "HEAD")
    assert driver.text(REFUND) == original and path.read_text() == original and clean(driver)


# -------------------------------------------------------------- working trees
def test_dirty_working_tree_is_left_alone_with_a_warning(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, demo(BAGS)))
    commit = driver.rev(f"expgit/proposals/{pid}")
    mine = on_disk(driver, BAGS).read_text() + "\nmy uncommitted note\n"
    on_disk(driver, BAGS).write_text(mine)
    result = driver.ok("apply", pid)
    assert driver.rev() == commit  # main moved
    assert on_disk(driver, BAGS).read_text() == mine  # the user's edit is intact
    warning = result.err.strip()
    assert warning.startswith("expgit: warning: main moved to ")
    assert "has uncommitted changes" in warning and str(driver.path) in warning
    fsck(driver.path)


def test_working_tree_on_another_branch_is_not_touched(driver: Driver) -> None:
    driver.git("checkout", "-q", "-b", "side")
    pid = driver.merge(driver.propose(BAGS, demo(BAGS)))
    before = on_disk(driver, BAGS).read_text()
    result = driver.ok("apply", pid)
    assert result.err == ""
    assert on_disk(driver, BAGS).read_text() == before
    assert driver.git("symbolic-ref", "HEAD").strip() == "refs/heads/side"
    assert driver.text(BAGS) == demo(BAGS) and clean(driver)


# ------------------------------------------------------------------------- bare
def test_whole_flow_in_a_bare_repository(bare_repo, run_cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    server = tmp_path / "server.git"
    assert git(server, "rev-parse", "--is-bare-repository").strip() == "true"

    def ok(*args: str | Path) -> str:
        result: CliResult = run_cli("-C", "server.git", *args)
        assert result.code == 0, result.err
        fsck(server)
        return result.out.strip()

    init = git(server, "rev-parse", "main").strip()
    for name in (BAGS, MULTI):
        (tmp_path / f"{name}.md").write_text(demo(name))
    g1 = ok("propose", BAGS, "--content-file", tmp_path / f"{BAGS}.md", "--rationale", "bags")
    g2 = ok("propose", MULTI, "--content-file", tmp_path / f"{MULTI}.md", "--rationale",
            "multi")
    g3 = ok("propose", TRANSFER, "--delete", "--rationale", "gone")
    assert "expgit/gradients/" + g1 in git(server, "branch")
    pid = ok("merge", "--all")
    assert "## Changes" in ok("review", pid)
    assert ok("apply", pid).startswith(f"Applied proposal {pid}")
    main = git(server, "rev-parse", "main").strip()
    assert main == git(server, "rev-parse", f"refs/expgit/applied/proposals/{pid}").strip()
    assert git(server, "show", f"main:experiences/{MULTI}.md") == demo(MULTI)
    names = {r["name"] for r in json.loads(ok("list", "--json"))["experiences"]}
    assert MULTI in names and TRANSFER not in names
    log = json.loads(ok("log", "--json"))["updates"]
    assert log[0]["kind"] == "proposal"
    assert {g["id"] for g in log[0]["gradients"]} == {g1, g2, g3}
    ok("revert", pid)
    assert git(server, "diff", "--stat", init, "main") == ""
    assert json.loads(ok("log", "-n", "2", "--json"))["updates"][1]["reverted_by"] == [
        git(server, "rev-parse", "main").strip()]
    # a clone sees everything, including the closed refs and the notes
    g4 = ok("propose", REFUND, "--delete", "--rationale", "r")
    ok("reject", g4, "--reason", "keep")
    assert git(server, "rev-parse", f"refs/expgit/rejected/gradients/{g4}").startswith(g4)
    assert "Reason: keep" in git(server, "notes", "--ref", "expgit", "show", g4)
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(server), str(clone))
    assert (clone / "experiences" / f"{BAGS}.md").read_text() == git(
        server, "show", f"{init}:experiences/{BAGS}.md")


# -------------------------------------------------------------------- --json
@pytest.mark.parametrize("args", [
    ("list",), ("log",), ("gradients",), ("proposals",), ("validate",),
    ("show", BAGS), ("gradients", "--state", "all"), ("proposals", "--state", "all"),
])
def test_read_commands_print_json(driver: Driver, args: tuple[str, ...]) -> None:
    result = driver.ok(*args, "--json")
    json.loads(result.out)


def test_validate_reports_a_bad_file_committed_past_the_hook(driver: Driver) -> None:
    assert "all experiences valid" in driver.ok("validate").out
    on_disk(driver, BAGS).write_text("no front matter\n")
    driver.git("commit", "-q", "--no-verify", "-am", "broken")
    result = driver.fails(5, "validate", "--json")
    data = json.loads(result.out)
    assert data["valid"] is False
    assert data["problems"] == [f"experiences/{BAGS}.md: missing front matter: the file must "
                                "start with a '---' line, YAML fields, and a closing '---' "
                                "line"]
    assert result.err.startswith("expgit: error: experiences/")
    assert driver.ok("validate", "main~1").code == 0
    rows = {r["name"]: r for r in json.loads(driver.ok("list", "--json").out)["experiences"]}
    assert rows[BAGS]["status"] == "invalid" and "missing front matter" in rows[BAGS]["problem"]


def test_log_survives_a_hand_written_gradient_trailer(driver: Driver) -> None:
    init = driver.rev()
    path = on_disk(driver, REFUND)
    path.write_text(path.read_text() + "\nlesson\n")
    # a trailer naming a commit that is not a gradient, and one naming no commit at all
    driver.git("commit", "-q", "-am", "manual", "-m",
               f"Expgit-Gradient: {init}\nExpgit-Gradient: {'1' * 40}")
    log = json.loads(driver.ok("log", "-n", "1", "--json").out)["updates"]
    assert log[0]["gradients"] == []
    assert log[0]["missing_gradient_commits"] == [init, "1" * 40]
    assert "(not in the repository, or not a gradient)" in driver.ok("log", "-n", "1").out


def test_subject_continuation_is_not_a_trailer_block(driver: Driver) -> None:
    path = on_disk(driver, REFUND)
    path.write_text(path.read_text() + "\nlesson\n")
    driver.git("commit", "-q", "-am", f"manual\nExpgit-Gradient: {driver.rev()}")
    assert git(driver.path, "log", "-1", "--format=%(trailers)").strip() == ""
    log = json.loads(driver.ok("log", "-n", "1", "--json").out)["updates"]
    assert log[0]["kind"] == "manual" and log[0]["missing_gradient_commits"] == []


def test_custom_settings_nested_root_and_many_experiences(tmp_path: Path, run_cli  # type: ignore[no-untyped-def]
                                                          ) -> None:
    seed = tmp_path / "seed"
    (seed / "docs" / "exp").mkdir(parents=True)
    (seed / "expgit.toml").write_text(
        'experiences_root = "docs/exp"\nmain_branch = "trunk"\ntoken_budget = 900\n')
    for i in range(30):  # more than the 16 blobs read one by one: cat-file --batch
        (seed / "docs" / "exp" / f"rule-{i}.md").write_text(
            f"---\nname: rule-{i}\nsummary: Rule number {i}.\n---\nBody {i}, ünï.\n")
    (seed / "docs" / "exp" / ".gitkeep").write_text("")
    d = Driver(run_cli, tmp_path / "repo", tmp_path / "scratch")
    assert run_cli("init", d.path, "--from", seed, "--layout", "flat").code == 0
    assert d.git("symbolic-ref", "HEAD").strip() == "refs/heads/trunk"
    rows = json.loads(d.ok("list", "--json").out)["experiences"]
    assert len(rows) == 30
    assert {r["name"]: r["summary"] for r in rows}["rule-17"] == "Rule number 17."
    new = "---\nname: rule-new\n---\nFresh.\n"
    g1 = d.propose("rule-new", new)
    g2 = d.propose("rule-3", None)
    g3 = d.propose("rule-20", "---\nname: rule-20\nstatus: draft\n---\nChanged.\n")
    assert changed_paths(d, "trunk", f"expgit/gradients/{g1}") == ["A\tdocs/exp/rule-new.md"]
    pid = d.merge()
    assert len(json.loads(d.ok("review", pid, "--json").out)["gradients"]) == 3
    d.apply(pid)
    assert d.git("show", "trunk:docs/exp/rule-new.md") == new
    assert not (d.path / "docs" / "exp" / "rule-3.md").exists()
    assert (d.path / "docs" / "exp" / "rule-20.md").read_text().endswith("Changed.\n")
    assert clean(d)
    [update] = json.loads(d.ok("log", "-n", "1", "--json").out)["updates"]
    assert {g["id"] for g in update["gradients"]} == {g1, g2, g3}
    d.ok("revert", "trunk")
    assert len(json.loads(d.ok("list", "--json").out)["experiences"]) == 30
    assert d.ok("show", "rule-20", "--version", "2").out.endswith("Changed.\n")
    assert d.ok("show", "rule-20").out.endswith("Body 20, ünï.\n")
    fsck(d.path)


def test_description_fences_survive_code_blocks_and_multiline_rationales(driver: Driver
                                                                         ) -> None:
    content = driver.text(BAGS) + "\nExample:\n\n```python\nbags = 2\n```\n"
    pid = driver.merge(driver.propose(BAGS, content, rationale="Line one.\nLine two | pipe.",
                                      evidence=("a|b",)))
    description = json.loads(driver.ok("review", pid, "--json").out)["description"]
    assert "\n````diff\n" in description and description.rstrip().endswith("````")
    assert "+```python\n" in description
    assert r"| Line one. Line two \| pipe. | a\|b |" in description


def test_rejection_note_is_added_to_an_existing_note(driver: Driver) -> None:
    gid = driver.propose(BAGS, demo(BAGS))
    commit = driver.rev(f"expgit/gradients/{gid}")
    driver.git("notes", "--ref", "expgit", "add", "-m", "reviewer: looked at it", commit)
    driver.ok("reject", gid, "--reason", "no")
    fsck(driver.path)
    note = driver.git("notes", "--ref", "expgit", "show", commit)
    assert note.startswith("reviewer: looked at it\n\nRejected gradient")
    assert json.loads(driver.ok("review", gid, "--json").out)["note"] == note


def test_review_shows_the_diffs_a_template_of_our_own_leaves_out(driver: Driver) -> None:
    (driver.path / ".expgit" / "templates").mkdir(parents=True)
    (driver.path / ".expgit" / "templates" / "proposal.md.j2").write_text(
        "Our own description: {{ items|length }} change(s), diffs not included.\n")
    driver.git("add", "-A")
    driver.git("commit", "-q", "-m", "a proposal template of our own")
    pid = driver.merge(driver.propose(BAGS, demo(BAGS), rationale="Count per passenger."))
    out = driver.ok("review", pid).out
    assert "Our own description: 1 change(s), diffs not included." in out
    assert out.count(f"--- a/experiences/{BAGS}.md") == 1
    assert out.index("Our own description") < out.index(f"--- a/experiences/{BAGS}.md")

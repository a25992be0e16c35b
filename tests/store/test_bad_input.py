"""Bad input: one clear error line, the right exit code, and nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import EXAMPLE, Driver, RunCli, demo_flat, git, repo_state, run_expgit

from expgit.store.repository import ExperienceRepository

BAGS = "checked-baggage-allowance"
MULTI = "handle-multiple-reservations"
VALID = demo_flat(BAGS)


def refused(d: Driver, code: int, *args: str | Path) -> str:
    """Run a command that must fail with ``code``; return its one error line.

    Checks that stdout is empty, stderr is exactly one ``expgit: error: ...`` line, and
    that no ref moved and no object was written.
    """
    before = d.state()
    result = d.fails(code, *args)
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("expgit: error: "), result.err
    assert d.state() == before
    return lines[0]


def front(name: str, body: str = "# Body\n", extra: str = "") -> str:
    return f"---\nname: {name}\nstatus: active\nsummary: s\n{extra}---\n{body}"


# ------------------------------------------------------------------- propose
@pytest.mark.parametrize(("name", "fragment"), [
    ("../x", "invalid experience name '../x'"),
    ("A B", "invalid experience name 'A B'"),
    ("a" * 200, "experience name is 200 characters long, the limit is 80"),
    ("a--b", "invalid experience name 'a--b'"),
    ("experiences/x", "invalid experience name"),
    ("x.md", "invalid experience name"),
    ("evil\n", "invalid experience name 'evil\\n'"),  # re.match with $ let it through
    ("\nevil", "invalid experience name '\\nevil'"),
])
@pytest.mark.parametrize("how", ["edit", "delete"])
@pytest.mark.slow
def test_propose_with_a_bad_name(driver: Driver, name: str, fragment: str, how: str) -> None:
    args: list[str | Path] = (["--content-file", driver.file(front(name))] if how == "edit"
                              else ["--delete"])
    refs = driver.git("for-each-ref")
    line = refused(driver, 5, "propose", name, *args, "--rationale", "r")
    assert fragment in line
    assert not (driver.path / "x").exists()
    assert driver.git("for-each-ref") == refs  # no expgit/gradients/* branch was written


CONTENT = {
    "malformed front matter": (front(BAGS, extra="tags: [open\n"),
                               f"experiences/{BAGS}.md: front matter is not valid YAML"),
    "missing front matter": ("# Just a title\n\nNo fields.\n",
                             f"experiences/{BAGS}.md: missing front matter"),
    "unclosed front matter": (f"---\nname: {BAGS}\n# body\n",
                              f"experiences/{BAGS}.md: front matter is not closed"),
    "name differs from stem": (front("another-name"),
                               f"experiences/{BAGS}.md: front matter name 'another-name' "
                               f"differs from the file name '{BAGS}'"),
    "over budget": (front(BAGS, "word " * 1000),
                    f"experiences/{BAGS}.md: about 1"),
    "unknown field": (front(BAGS, extra="owner: me\n"), "owner: Extra inputs are not permitted"),
    "bad status": (front(BAGS).replace("status: active", "status: live"),
                   "status: Input should be 'active', 'draft' or 'deprecated'"),
    "not a mapping": ("---\n- a\n---\nbody\n", "front matter must be a YAML mapping"),
    "duplicate field": (front(BAGS, extra=f"name: {BAGS}\n"), "duplicate field 'name'"),
}


@pytest.mark.parametrize(("content", "fragment"), CONTENT.values(), ids=CONTENT.keys())
def test_propose_with_bad_content(driver: Driver, content: str, fragment: str) -> None:
    line = refused(driver, 5, "propose", BAGS, "--content-file", driver.file(content),
                   "--rationale", "r")
    assert fragment in line


def test_over_budget_message_gives_the_numbers_and_a_hint(driver: Driver) -> None:
    line = refused(driver, 5, "propose", BAGS, "--content-file",
                   driver.file(front(BAGS, "word " * 1000)), "--rationale", "r")
    assert "tokens, over the budget of 800 per experience" in line
    assert "token_budget in expgit.toml" in line


def test_propose_non_utf8_file(driver: Driver) -> None:
    path = driver.file(front(BAGS).encode() + b"caf\xe9\n")
    line = refused(driver, 5, "propose", BAGS, "--content-file", path, "--rationale", "r")
    assert line.startswith(f"expgit: error: {path}: not UTF-8 text (byte ")


def test_propose_delete_of_a_nonexistent_experience(driver: Driver) -> None:
    line = refused(driver, 5, "propose", "no-such-thing", "--delete", "--rationale", "r")
    assert "cannot delete 'no-such-thing': no such experience on main" in line


def test_propose_identical_content(driver: Driver) -> None:
    current = driver.file(driver.text(BAGS))
    line = refused(driver, 5, "propose", BAGS, "--content-file", current, "--rationale", "r")
    assert f"{BAGS}: the new content is identical to main; nothing to propose" in line


@pytest.mark.parametrize(("args", "fragment"), [
    (["--rationale", "r"], "give --content-file FILE for an edit, or --delete"),
    (["--delete", "--content-file", "CONTENT", "--rationale", "r"],
     "give --content-file FILE for an edit, or --delete"),
    (["--delete", "--rationale", "   "], "a gradient needs a rationale"),
    (["--delete", "--rationale", "r", "--evidence", "two\nlines"],
     "evidence must be a single non-empty line"),
    (["--delete", "--rationale", "r", "--evidence", " "],
     "evidence must be a single non-empty line"),
])
def test_propose_with_bad_options(driver: Driver, args: list[str], fragment: str) -> None:
    args = [str(driver.file(VALID)) if a == "CONTENT" else a for a in args]
    assert fragment in refused(driver, 5, "propose", BAGS, *args)


@pytest.mark.parametrize("value", ["1.5", "-0.1", "high", "nan"])
def test_propose_confidence_out_of_range_is_a_usage_error(driver: Driver, value: str) -> None:
    before = driver.state()
    result = driver.fails(2, "propose", BAGS, "--delete", "--rationale", "r",
                          "--confidence", value)
    assert "Invalid value for '--confidence'" in result.err
    assert result.out == ""
    assert driver.state() == before


def test_missing_content_file_is_a_usage_error(driver: Driver) -> None:
    result = driver.fails(2, "propose", BAGS, "--content-file", driver.path / "nope.md",
                          "--rationale", "r")
    assert "nope.md" in result.err


# ---------------------------------------------------------------- unknown ids
@pytest.mark.parametrize(("args", "fragment"), [
    (["apply", "deadbeef"], "no proposal 'deadbeef'"),
    (["review", "deadbeef"], "no proposal or gradient 'deadbeef'"),
    (["reject", "deadbeef", "--reason", "r"], "no proposal or gradient 'deadbeef'"),
    (["merge", "deadbeef"], "no gradient 'deadbeef'"),
])
def test_unknown_ids(driver: Driver, args: list[str], fragment: str) -> None:
    driver.propose(BAGS, VALID)  # something exists, just not this id
    line = refused(driver, 5, *args)
    assert fragment in line
    assert "(list them with `expgit" in line


@pytest.mark.parametrize("bad", ["zzzz", "abc", "dead-beef", "", "g1234567"])
@pytest.mark.parametrize("command", [["apply"], ["review"], ["merge"],
                                     ["reject", "--reason", "r"]])
@pytest.mark.slow
def test_non_hex_ids(driver: Driver, command: list[str], bad: str) -> None:
    args = [command[0], bad, *command[1:]]
    line = refused(driver, 5, *args)
    assert f"{bad!r} is not a" in line and "id (at least 4 hex digits)" in line


def test_a_gradient_id_is_not_a_proposal_id(driver: Driver) -> None:
    gid = driver.propose(BAGS, VALID)
    assert f"no proposal {gid!r}" in refused(driver, 5, "apply", gid)


def test_proposal_id_is_not_a_gradient_id(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, VALID))
    assert f"no gradient {pid!r}" in refused(driver, 5, "merge", pid)


# ------------------------------------------------------------- unknown revisions
@pytest.mark.parametrize("args", [
    ["show", BAGS, "--at", "nope"], ["list", "--at", "nope"], ["revert", "nope"],
    ["validate", "nope"], ["list", "--at", "--help-me"], ["show", BAGS, "--at", "0" * 40],
])
def test_unknown_revision(driver: Driver, args: list[str]) -> None:
    line = refused(driver, 5, *args)
    assert "unknown revision" in line


def test_revert_of_a_commit_not_on_main(driver: Driver) -> None:
    gid = driver.propose(BAGS, VALID)
    line = refused(driver, 5, "revert", gid)
    assert f"{gid} is not in the history of main; nothing to revert" in line


def test_revert_of_a_commit_that_changed_no_experience(driver: Driver) -> None:
    (driver.path / "README.md").write_text("notes\n")
    driver.git("add", "README.md")
    driver.git("commit", "-q", "-m", "readme")
    line = refused(driver, 5, "revert", "HEAD")
    assert "HEAD changed no experience; nothing to revert" in line


@pytest.mark.parametrize(("args", "fragment"), [
    (["show", "no-such-thing"], "no experience 'no-such-thing' at main"),
    (["show", "../x"], "invalid experience name '../x'"),
    (["log", "A B"], "invalid experience name 'A B'"),
])
def test_show_and_log_with_bad_names(driver: Driver, args: list[str], fragment: str) -> None:
    assert fragment in refused(driver, 5, *args)


# ------------------------------------------------------- closed objects, merge
def test_apply_of_an_applied_proposal(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, VALID))
    driver.apply(pid)
    assert f"proposal {pid} was already applied" in refused(driver, 3, "apply", pid)


def test_apply_of_a_rejected_proposal(driver: Driver) -> None:
    pid = driver.merge(driver.propose(BAGS, VALID))
    driver.ok("reject", pid, "--reason", "no")
    assert f"proposal {pid} was already rejected" in refused(driver, 3, "apply", pid)


def test_reject_without_a_reason(driver: Driver) -> None:
    gid = driver.propose(BAGS, VALID)
    assert "give a --reason" in refused(driver, 5, "reject", gid, "--reason", "  ")
    assert driver.fails(2, "reject", gid).code == 2  # --reason is required


def test_merge_with_nothing_to_merge(driver: Driver) -> None:
    assert "no open gradients to merge" in refused(driver, 5, "merge", "--all")
    assert "name the gradients to merge, or use --all" in refused(driver, 5, "merge")


def test_merge_all_when_every_gradient_is_in_a_proposal(driver: Driver) -> None:
    driver.merge(driver.propose(BAGS, VALID))
    assert "no open gradients to merge" in refused(driver, 5, "merge", "--all")


def test_merge_with_both_ids_and_all(driver: Driver) -> None:
    gid = driver.propose(BAGS, VALID)
    assert "or use --all" in refused(driver, 5, "merge", "--all", gid)


# ------------------------------------------------------------ repository, init
def test_list_outside_a_git_repository(tmp_path: Path, run_cli: RunCli,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "plain"
    outside.mkdir()
    monkeypatch.chdir(outside)
    result = run_cli("list")
    assert result.code == 2
    assert result.out == ""
    assert result.err.strip() == (
        f"expgit: error: not a git repository: {outside} (run inside an experience "
        "repository, pass -C DIR, or `expgit init`)")
    assert list(outside.iterdir()) == []


def test_list_outside_a_git_repository_as_a_process(tmp_path: Path) -> None:
    proc = run_expgit("list", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("expgit: error: not a git repository")
    assert "expgit init" in proc.stderr


def test_dash_c_to_a_missing_directory(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli("-C", tmp_path / "missing", "list")
    assert result.code == 2
    assert result.err == (f"expgit: error: cannot change to {tmp_path / 'missing'}: No such "
                          "file or directory (-C takes an existing folder)\n")
    assert not (tmp_path / "missing").exists()
    assert run_cli("-C", tmp_path / "missing", "init").code == 2  # as git -C: no folder made
    assert not (tmp_path / "missing").exists()


def test_dash_c_resolves_every_relative_path_against_its_folder(
        tmp_path: Path, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    """As git's -C: relative paths in options and arguments are relative to DIR, and the
    caller's own folder (and environment) is as it was afterwards."""
    monkeypatch.chdir(tmp_path)
    assert run_cli("init", "repo", "--from", EXAMPLE).code == 0
    new = (Path("repo") / "skills" / BAGS / "SKILL.md").read_text() + "One more line.\n"
    Path("repo", "new.md").write_text(new)
    proposed = run_cli("-C", "repo", "propose", BAGS, "--content-file", "new.md",
                       "--rationale", "r")
    assert proposed.code == 0, proposed.err
    assert run_cli("-C", "repo", "merge", "--all", "--pr-body", "pr.md").code == 0
    assert Path("repo", "pr.md").read_text().startswith("expgit: update 1 experience")
    assert not Path("pr.md").exists()
    assert Path.cwd() == tmp_path
    assert run_cli("-C", "repo", "init", "nested").code == 0
    assert (tmp_path / "repo" / "nested" / ".git").is_dir()
    assert not (tmp_path / "nested").exists()


def test_init_into_a_non_empty_directory(tmp_path: Path, run_cli: RunCli) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    result = run_cli("init", target, "--from", EXAMPLE)
    assert result.code == 2
    assert result.err.strip() == (
        f"expgit: error: {target} exists and is not empty (choose a new folder (expgit init "
        "creates the repository), or the top folder of a git repository with commits)")
    assert [p.name for p in target.iterdir()] == ["notes.txt"]


def test_init_over_an_existing_repository(seeded_repo: ExperienceRepository, tmp_path: Path,
                                          run_cli: RunCli) -> None:
    before = repo_state(tmp_path / "repo")
    assert run_cli("init", tmp_path / "repo").code == 2
    assert repo_state(tmp_path / "repo") == before


def _seed(tmp_path: Path, files: dict[str, str | bytes]) -> Path:
    seed = tmp_path / "seed"
    for rel, data in files.items():
        path = seed / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    return seed


SEEDS = {
    "malformed experience": ({"experiences/good-one.md": front("good-one"),
                              "experiences/bad-one.md": "no front matter\n"},
                             "bad-one.md: missing front matter"),
    "name differs from stem": ({"experiences/some-name.md": front("other-name")},
                               "front matter name 'other-name' differs"),
    "non-utf8": ({"experiences/bin.md": b"---\nname: bin\n---\n\xff\n"}, "not UTF-8"),
    "sub-folder": ({"experiences/deep/x.md": front("x")}, "not an experience file"),
    "not markdown": ({"experiences/notes.txt": "hello\n"}, "not an experience file"),
    "bad settings": ({"expgit.toml": "token_budget = -1\n"}, "expgit.toml: token_budget"),
    "settings not toml": ({"expgit.toml": "this is = = not toml\n"}, "not valid TOML"),
    "main among expgit's branches": ({"expgit.toml": 'main_branch = "expgit/main"\n'},
                                     "must not be under expgit/"),
    "over budget for its settings": ({"expgit.toml": "token_budget = 5\n",
                                      "experiences/long-one.md": front("long-one")},
                                     "over the budget of 5"),
}


@pytest.mark.parametrize(("files", "fragment"), SEEDS.values(), ids=SEEDS.keys())
def test_init_from_an_invalid_seed_creates_nothing(tmp_path: Path, run_cli: RunCli,
                                                   files: dict[str, str | bytes],
                                                   fragment: str) -> None:
    seed = _seed(tmp_path, files)
    target = tmp_path / "new"
    result = run_cli("init", target, "--from", seed)
    assert result.code == 5, result.err
    assert result.out == ""
    assert len(result.err.splitlines()) == 1
    assert result.err.startswith("expgit: error: ")
    assert fragment in result.err
    assert not target.exists()


def test_init_from_a_missing_seed(tmp_path: Path, run_cli: RunCli) -> None:
    result = run_cli("init", tmp_path / "new", "--from", tmp_path / "nowhere")
    assert result.code == 5
    assert "seed folder" in result.err and "does not exist" in result.err
    assert not (tmp_path / "new").exists()


def test_several_seed_problems_are_listed_together(tmp_path: Path, run_cli: RunCli
                                                   ) -> None:
    seed = _seed(tmp_path, {"experiences/a-one.md": "x\n", "experiences/b-two.md": "y\n"})
    result = run_cli("init", tmp_path / "new", "--from", seed)
    assert result.code == 5
    assert "2 problems" in result.err and "a-one.md" in result.err and "b-two.md" in result.err


# ----------------------------------------------------------- usage, processes
@pytest.mark.parametrize("args", [["frobnicate"], ["list", "--bogus"], ["show"],
                                  ["gradients", "--state", "weird"],
                                  ["show", BAGS, "--version", "0"]])
def test_usage_errors_exit_2(driver: Driver, args: list[str]) -> None:
    before = driver.state()
    result = driver.fails(2, *args)
    assert result.out == ""
    assert len(result.err.splitlines()) == 1
    assert result.err.startswith("expgit: error: ") and "--help`)" in result.err
    assert driver.state() == before


@pytest.mark.parametrize(("args", "says"), [
    (["propose", BAGS, "--delete", "--rationale", "r", "--confidence", "1.5"],
     "Invalid value for '--confidence': 1.5 is not in the range 0<=x<=1. "
     "(see `expgit propose --help`)"),
    (["eval", "--cases", "c.yaml", "--llm", "gpt4"],
     "Invalid value for '--llm': 'gpt4' is not one of"),
    (["frobnicate"], "No such command 'frobnicate'. (see `expgit --help`)"),
])
def test_a_usage_error_is_one_line_saying_what_and_where_help_is(
        driver: Driver, args: list[str], says: str) -> None:
    result = driver.fails(2, *args)
    assert result.err.count("\n") == 1 and says in result.err, result.err


@pytest.mark.slow
def test_process_exit_codes_and_one_line_errors(seeded_repo: ExperienceRepository,
                                                tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    before = repo_state(repo)
    proc = run_expgit("-C", repo, "propose", "../x", "--delete", "--rationale", "r")
    assert (proc.returncode, proc.stdout) == (5, "")
    assert proc.stderr.splitlines() == [
        "expgit: error: invalid experience name '../x': use lowercase letters, digits and "
        "single hyphens (a slug such as 'refund-method-rules')"]
    proc = run_expgit("-C", repo, "propose", BAGS, "--delete", "--rationale", "r",
                      "--confidence", "1.5")
    assert proc.returncode == 2 and "1.5 is not in the range" in proc.stderr
    proc = run_expgit("-C", repo, "apply", "deadbeef", "--json")
    assert proc.returncode == 5 and json.loads(proc.stdout)["exit_code"] == 5
    assert proc.stderr.startswith("expgit: error: no proposal 'deadbeef'")
    assert repo_state(repo) == before
    assert git(repo, "status", "--porcelain") == ""


def test_json_mode_reports_errors_on_stderr_and_as_an_object(driver: Driver) -> None:
    result = driver.fails(5, "review", "deadbeef", "--json")
    assert result.err.startswith("expgit: error: ") and result.err.count("\n") == 1
    assert json.loads(result.out) == {
        "error": "no proposal or gradient 'deadbeef'",
        "hint": "list them with `expgit proposals` and `expgit gradients`", "exit_code": 5}
    usage = driver.fails(2, "gradients", "--state", "weird", "--json")
    assert json.loads(usage.out)["exit_code"] == 2 and "--state" in usage.err
    assert json.loads(usage.out)["error"] == usage.err.removeprefix("expgit: error: ").strip()
    ok = driver.ok("gradients", "--json")
    assert json.loads(ok.out) == {"gradients": [], "hidden_merged": 0, "skipped": []}
    assert ok.err == ""


NOT_EXPGIT = ("is not an expgit repository: no expgit.toml is committed on main "
              "(create one with `expgit init`, or `expgit init --from DIR` to seed it)")
EVERY_REPOSITORY_COMMAND = (
    ["list"], ["show", BAGS], ["log"], ["validate"], ["gradients"], ["proposals"],
    ["review", "deadbeef"], ["propose", BAGS, "--delete", "--rationale", "r"],
    ["merge", "--all"], ["apply", "deadbeef"], ["revert", "HEAD"],
    ["reject", "deadbeef", "--reason", "r"],
    ["hooks", "install"], ["outcomes", "list"], ["eval", "--cases", "c.yaml"],
    ["sessions", "status"])


def test_git_repository_without_main(tmp_path: Path, run_cli: RunCli) -> None:
    plain = tmp_path / "plain"
    git(tmp_path, "init", "-q", str(plain))
    for args in (["list"], ["log"], ["propose", BAGS, "--delete", "--rationale", "r"],
                 ["validate"]):
        result = run_cli("-C", plain, *args)
        assert result.code == 2, args
        assert result.err.strip() == f"expgit: error: {plain} {NOT_EXPGIT}"
    assert git(plain, "for-each-ref") == ""
    assert git(plain, "count-objects").startswith("0 objects")


def test_a_plain_project_repository_is_refused_except_by_init(tmp_path: Path, run_cli: RunCli
                                                              ) -> None:
    plain = tmp_path / "project"
    git(tmp_path, "init", "-q", "-b", "main", str(plain))
    (plain / "README.md").write_text("a project, not an experience repository\n")
    git(plain, "add", "-A")
    git(plain, "commit", "-q", "-m", "project")
    before = repo_state(plain)
    for args in EVERY_REPOSITORY_COMMAND:
        result = run_cli("-C", plain, *args)
        assert (result.code, result.out) == (2, ""), args
        assert result.err.strip() == f"expgit: error: {plain} {NOT_EXPGIT}", args
    assert repo_state(plain) == before
    assert not (plain / ".git" / "hooks" / "pre-commit").exists()
    fresh = tmp_path / "fresh"
    assert run_cli("init", fresh).code == 0
    assert run_cli("-C", fresh, "list").code == 0


# --------------------------------------------------------- names git quotes (-z)
@pytest.mark.parametrize("stem", ["ev\til", 'ev"il', "ev\nil"], ids=["tab", "quote", "newline"])
def test_validate_reports_an_invalid_file_whose_name_git_quotes(driver: Driver,
                                                                stem: str) -> None:
    """Plain git output quotes such a path: validate reads ``-z`` listings, so it sees
    the file, and names it as git shows it (quoted: one line, no raw control byte)."""
    (driver.path / "experiences" / f"{stem}.md").write_text("no front matter\n")
    driver.git("add", "-A")
    driver.git("commit", "-q", "--no-verify", "-m", "odd name")
    result = driver.fails(5, "validate")
    shown = '"experiences/' + stem.translate({9: "\\t", 10: "\\n", 34: '\\"'}) + '.md"'
    assert result.out.startswith(f"{shown}: ") and len(result.out.splitlines()) == 1
    assert "\t" not in result.out
    assert json.loads(driver.fails(5, "validate", "--json").out)["problems"][0].startswith(
        f"{shown}: ")


# ------------------------------------------------------------ option injection
@pytest.mark.parametrize("command", ["apply", "pr"])
def test_a_remote_that_git_would_read_as_an_option_is_refused(driver: Driver,
                                                              command: str) -> None:
    pid = driver.merge(driver.propose(BAGS, VALID + "\n- One more rule.\n"))
    pwned = driver.scratch / "PWNED"
    driver.scratch.mkdir(parents=True, exist_ok=True)
    line = refused(driver, 5, command, pid, "--remote", f"--upload-pack=touch {pwned}")
    assert "--remote '--upload-pack=touch" in line and "starts with '-'" in line
    assert not pwned.exists()
    assert list(driver.path.rglob("PWNED")) == []


@pytest.mark.parametrize("args", [
    ["show", BAGS, "--at", "--output=x"], ["list", "--at", "--output=x"],
    ["context", "--at", "--output=x", "refund"], ["validate", "--", "--output=x"],
    ["revert", "--", "--output=x"], ["review", "--", "--output=x"],
    ["log", "--", "--output=x"],
])
def test_a_revision_that_git_would_read_as_an_option_is_refused(driver: Driver,
                                                                args: list[str]) -> None:
    """``git log --output=x`` would write the file x: such a value never reaches git."""
    refused(driver, 5, *args)
    assert list(driver.path.rglob("x")) == [] and not (Path.cwd() / "x").exists()

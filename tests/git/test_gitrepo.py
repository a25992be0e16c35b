"""The git facade on real repositories: which repository git runs on, threads sharing one
GitRepo, and the shortcuts it takes checked against git itself (edited trees against
git's index, refs read from files against ``rev-parse``/``for-each-ref``, incremental
snapshots of random histories against fresh ones)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import EXAMPLE, RunCli, fsck, git, repo_state

from expgit.errors import GitError
from expgit.git.objects import tree_sort_key
from expgit.git.refs import FilesRefs
from expgit.git.repo import EMPTY_TREE, GitRepo, RefUpdate, TreeEntry
from expgit.init import init_repository
from expgit.store.derived.snapshot import Snapshot, SnapshotLoader
from expgit.store.refnames import GRADIENT_STATES


def entry_of(pair: tuple[TreeEntry | None, TreeEntry | None]) -> TreeEntry:
    """The entry a diff pair sorts by: the old one, or else the new one."""
    entry = pair[0] or pair[1]
    assert entry is not None
    return entry

def git_env(cwd: Path, *args: str, env: dict[str, str], input: bytes | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, input=input, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def fast_import(path: Path, stream: list[bytes]) -> dict[str, str]:
    """Run ``git fast-import`` on ``path``; ``{mark: commit}`` of the marks it set."""
    marks = path / "marks"
    proc = subprocess.run(["git", "fast-import", "--quiet", f"--export-marks={marks}"],
                          cwd=path, input=b"".join(stream), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return dict(line.split() for line in marks.read_text().splitlines())


def fast_commit(mark: int, files: dict[str, tuple[str, bytes]], parents: list[int],
                ref: str = "refs/heads/main") -> list[bytes]:
    """A fast-import commit holding exactly ``files`` (``{path: (mode, content)}``)."""
    out = [f"commit {ref}\nmark :{mark}\n".encode(),
           b"committer T <t@example.com> 1700000000 +0000\ndata 2\nm\n"]
    out += [f"{'from' if i == 0 else 'merge'} :{p}\n".encode() for i, p in enumerate(parents)]
    out.append(b"deleteall\n")
    for path, (mode, data) in files.items():
        quoted = '"' + path.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '"'
        out += [f"M {mode} inline {quoted}\ndata {len(data)}\n".encode(), data, b"\n"]
    return out


# ----------------------------------------------------------------- environment
FOREIGN = {"GIT_DIR": ".git", "GIT_WORK_TREE": ".", "GIT_INDEX_FILE": ".git/index",
           "GIT_OBJECT_DIRECTORY": ".git/objects", "GIT_COMMON_DIR": ".git"}


@pytest.mark.parametrize("variables", [["GIT_DIR"], list(FOREIGN)], ids=["git-dir", "all"])
@pytest.mark.parametrize("bare", [False, True], ids=["worktree", "bare"])
def test_another_repositorys_variables_do_not_redirect_c(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: RunCli, variables: list[str],
        bare: bool) -> None:
    """``GIT_DIR=A expgit -C B``: B's refs and B's objects, nothing written to A."""
    other = tmp_path / "other"
    init_repository(other)  # no experiences at all
    path = tmp_path / ("repo.git" if bare else "repo")
    init_repository(path, bare=bare, seed=EXAMPLE, layout="flat")
    before = repo_state(other)
    content = tmp_path / "new.md"
    content.write_text("---\nname: new-rule\nsummary: a new rule\n---\nDo it.\n")
    monkeypatch.chdir(tmp_path)
    for name in variables:  # relative, as git sets them in hooks: resolved from the cwd
        monkeypatch.setenv(name, str(Path("other") / FOREIGN[name]))

    listed = run_cli("-C", path, "list", "--json")
    proposed = run_cli("-C", path, "propose", "new-rule", "--rationale", "needed",
                       "--content-file", content)

    for name in variables:
        monkeypatch.delenv(name)
    assert listed.code == 0, listed.err
    assert '"cancellation-eligibility-rules"' in listed.out
    assert proposed.code == 0, proposed.err
    gid = proposed.out.strip()
    assert git(path, "rev-parse", GRADIENT_STATES["open"] + gid).strip().startswith(gid)
    assert repo_state(other) == before
    fsck(path)


@pytest.mark.parametrize("kind", ["worktree", "bare", "linked", "linked-of-bare"])
def test_the_layout_is_the_same_with_another_repositorys_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    other = tmp_path / "other"
    git(tmp_path, "init", "-q", str(other))
    main = tmp_path / ("main.git" if "bare" in kind else "main")
    git(tmp_path, "init", "-q", *(["--bare"] if "bare" in kind else []), str(main))
    blob = git(main, "hash-object", "-w", "--stdin", input="x\n").strip()
    tree = git(main, "mktree", input=f"100644 blob {blob}\tx\n").strip()
    commit = git(main, "commit-tree", "-m", "m", tree).strip()
    git(main, "update-ref", "refs/heads/side", commit)
    path = main
    if kind.startswith("linked"):
        path = tmp_path / "linked"
        git(main, "worktree", "add", "-q", str(path), "side")
    plain = GitRepo.discover(path)
    for name, value in {"GIT_DIR": other / ".git", "GIT_WORK_TREE": other,
                        "GIT_COMMON_DIR": other / ".git"}.items():
        monkeypatch.setenv(name, str(value))

    seen = GitRepo.discover(path)

    assert (seen.git_dir, seen.common_dir, seen.work_tree, seen.is_bare) == (
        plain.git_dir, plain.common_dir, plain.work_tree, plain.is_bare)
    assert seen.read_commit(commit).tree == tree
    assert seen.ref("refs/heads/side") == commit
    assert seen.out("rev-parse", "--absolute-git-dir").strip() == str(plain.git_dir)
    plain.close()
    seen.close()


def test_c_with_another_git_dir_in_a_separate_process(tmp_path: Path) -> None:
    other, path = tmp_path / "other", tmp_path / "repo"
    init_repository(other)
    init_repository(path, seed=EXAMPLE, layout="flat")
    env = {**os.environ, "GIT_DIR": str(other / ".git"),
           "GIT_WORK_TREE": str(other)}
    proc = subprocess.run([sys.executable, "-m", "expgit", "-C", str(path),
                           "list"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "8 experiences" in proc.stderr and "cancellation-eligibility-rules" in proc.stdout


@pytest.mark.parametrize("with_git_dir", [False, True], ids=["index-only", "git-dir"])
def test_a_hook_environment_of_the_same_repository_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_git_dir: bool) -> None:
    """A pre-commit hook sees the index being committed (``GIT_INDEX_FILE``, relative,
    ``GIT_DIR`` set in a linked worktree only); the same variables are dropped for
    another repository opened in that environment."""
    path, other = tmp_path / "repo", tmp_path / "other"
    init_repository(path, seed=EXAMPLE, layout="flat")
    init_repository(other, seed=EXAMPLE, layout="flat")
    shutil.copy(path / ".git" / "index", path / ".git" / "next-index")
    blob = git(path, "hash-object", "-w", "--stdin", input="a staged file\n").strip()
    git_env(path, "update-index", "--add", "--cacheinfo", f"100644,{blob},experiences/x.md",
            env={**os.environ, "GIT_INDEX_FILE": ".git/next-index"})
    monkeypatch.chdir(path)
    monkeypatch.setenv("GIT_INDEX_FILE", ".git/next-index")
    if with_git_dir:
        monkeypatch.setenv("GIT_DIR", ".git")

    here, there = GitRepo.discover("."), GitRepo.discover(other)

    assert here.out("diff", "--cached", "--name-only") == "experiences/x.md\n"
    assert there.out("diff", "--cached", "--name-only") == ""
    assert there.out("status", "--porcelain") == ""


def test_a_push_quarantine_is_read_and_written_by_the_same_repository(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pre-receive hook the pushed objects are in a quarantine directory: the
    persistent cat-file process reads them, new objects go there too."""
    server, other = tmp_path / "server.git", tmp_path / "other.git"
    init_repository(server, bare=True, seed=EXAMPLE, layout="flat")
    init_repository(other, bare=True)
    quarantine = server / "objects" / "tmp_objdir-incoming-test"
    quarantine.mkdir()
    hook_env = {"GIT_DIR": ".", "GIT_OBJECT_DIRECTORY": str(quarantine),
                "GIT_QUARANTINE_PATH": str(quarantine),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(server / "objects")}
    pushed = git_env(server, "hash-object", "-w", "--stdin", input=b"pushed\n",
                     env={**os.environ, **hook_env}).strip()
    monkeypatch.chdir(server)
    for name, value in hook_env.items():
        monkeypatch.setenv(name, value)

    repo, elsewhere = GitRepo.discover("."), GitRepo.discover(other)

    assert repo.read_blob(pushed) == b"pushed\n"
    written = repo.write_blob(b"written in the hook\n")
    assert (quarantine / written[:2] / written[2:]).is_file()
    assert not (server / "objects" / written[:2] / written[2:]).exists()
    with pytest.raises(GitError):
        elsewhere.read_blob(pushed)
    mine = elsewhere.write_blob(b"not quarantined\n")
    assert (other / "objects" / mine[:2] / mine[2:]).is_file()


# --------------------------------------------------------------------- threads
def test_threads_share_one_gitrepo(tmp_path: Path) -> None:
    """Eight threads read commits, trees and blobs (uncached: the persistent cat-file
    process) and write blobs, trees and commits on one GitRepo at the same time."""
    path = tmp_path / "repo.git"
    GitRepo.init(path, bare=True, branch="main").close()
    stream: list[bytes] = []
    for t in range(8):  # per thread a branch of 15 commits, each changing 3 files
        files: dict[str, tuple[str, bytes]] = {}
        for c in range(15):
            mark = t * 100 + c + 1
            files |= {f"d{c % 3}/f{k}": ("100644", f"{t} {c} {k}\n".encode())
                      for k in range(c % 4, c % 4 + 3)}
            stream += fast_commit(mark, dict(files), [mark - 1] if c else [],
                                  ref=f"refs/heads/t{t}")
    marks = fast_import(path, stream)
    repo = GitRepo.discover(path)
    start = threading.Barrier(8)

    def work(t: int) -> list[str]:
        start.wait()
        made, parent = [], None
        for c in range(15):
            commit = marks[f":{t * 100 + c + 1}"]
            info = repo.read_commit(commit)
            assert info.parents == ((marks[f":{t * 100 + c}"],) if c else ())
            entry = repo.path_entry(info.tree, f"d{c % 3}/f{c % 4}")
            assert entry is not None and repo.read_blob(entry.sha) == f"{t} {c} {c % 4}\n".encode()
            assert repo.resolve(commit) == commit
            blob = repo.write_blob(f"thread {t} step {c}\n".encode())
            tree = repo.edit_tree(info.tree, {f"new/t{t}": blob, "d0/f0": None})
            assert repo.read_blob(blob) == f"thread {t} step {c}\n".encode()
            parent = repo.write_commit(tree, [parent] if parent else [], f"t{t} c{c}\n")
            made.append(parent)
        return made

    results: dict[int, list[str] | BaseException] = {}

    def run(t: int) -> None:
        try:
            results[t] = work(t)
        except BaseException as exc:  # reported below
            results[t] = exc

    # daemon threads: a deadlocked cat-file exchange fails the test instead of hanging it
    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert sorted(results) == list(range(8)), "a thread is stuck"
    for outcome in results.values():
        if isinstance(outcome, BaseException):
            raise outcome
    made_by = {t: made for t, made in results.items() if isinstance(made, list)}
    repo.update_refs([RefUpdate(f"refs/heads/made{t}", made[-1], None)
                      for t, made in made_by.items()], "test")
    for t, made in made_by.items():
        assert git(path, "rev-list", "--reverse", f"made{t}").split() == made
        assert git(path, "show", f"made{t}:new/t{t}") == f"thread {t} step 14\n"
    fsck(path)
    repo.close()


# ----------------------------------------------------------------- equivalence
def index_edit(path: Path, tree: str, changes: dict[str, str | None]) -> str:
    """``changes`` made to ``tree`` through a scratch index, by git alone."""
    env = {**os.environ, "GIT_INDEX_FILE": str(path / "scratch-index")}
    git_env(path, "read-tree", tree, env=env)
    lines = "".join(f"100644 {blob}\t{p}\n" if blob else f"0 {'0' * 40}\t{p}\n"
                    for p, blob in changes.items())
    git_env(path, "update-index", "--add", "--replace", "--index-info",
            input=lines.encode(), env=env)
    return git_env(path, "write-tree", env=env).strip()


def ls_tree(path: Path, tree: str) -> list[TreeEntry]:
    out = git(path, "ls-tree", "-z", tree)
    return [TreeEntry(meta.split()[0].lstrip("0"), name, meta.split()[2])
            for meta, _, name in (item.partition("\t") for item in out.split("\0") if item)]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.slow
def test_edit_tree_and_diff_trees_match_git(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "repo.git"
    repo = GitRepo.init(path, bare=True, branch="main")
    blobs = [repo.write_blob(f"blob {i}\n".encode()) for i in range(5)]
    names = ["a", "a.md", "a-b", "a0", "a.b", "b", "é", "z z"]  # "a" sorts around "a/"
    tree = EMPTY_TREE
    for _ in range(40):
        files = git(path, "ls-tree", "-r", "--name-only", "-z", tree).split("\0")[:-1]
        changes: dict[str, str | None] = {}
        for _ in range(rng.randint(1, 5)):
            roll = rng.random()
            if roll < 0.3 and files:
                target, blob = rng.choice(files), None  # a file removed
            else:
                target = "/".join(rng.choice(names) for _ in range(rng.randint(1, 3)))
                blob = None if roll < 0.4 else rng.choice(blobs)  # removed if a file: no-op
                if blob is None and target not in files:
                    target += "/missing"
            if not any(p == target or p.startswith(target + "/") or target.startswith(p + "/")
                       for p in changes):
                changes[target] = blob
        new = repo.edit_tree(tree, changes)
        assert new == index_edit(path, tree, changes), changes
        assert repo.read_tree(new) == ls_tree(path, new)  # the spliced cache
        fresh = GitRepo.discover(path)
        fresh.read_tree(tree)
        pairs = fresh.diff_trees(tree, new)  # parsed by comparison with `tree`
        assert fresh.read_tree(new) == ls_tree(path, new)
        before = {e.name: e for e in ls_tree(path, tree)}
        after = {e.name: e for e in ls_tree(path, new)}
        expected: list[tuple[TreeEntry | None, TreeEntry | None]] = []
        for name in sorted(before.keys() | after.keys()):
            b, a = before.get(name), after.get(name)
            if b != a:
                expected += ([(b, a)] if b and a and b.is_tree == a.is_tree
                             else [p for p in ((b, None), (None, a)) if p != (None, None)])
        expected.sort(key=lambda p: tree_sort_key(entry_of(p)))
        assert pairs == expected
        fresh.close()
        tree = new
    fsck(path)


def test_refs_read_from_files_match_git(tmp_path: Path) -> None:
    path = tmp_path / "repo.git"
    repo = GitRepo.init(path, bare=True, branch="main")
    commits = [repo.write_commit(repo.edit_tree(None, {"f": repo.write_blob(b"%d" % i)}),
                                 [], f"c{i}") for i in range(4)]
    rng = random.Random(7)
    names = [f"refs/heads/expgit/gradients/{i:012x}" for i in range(30)]
    names += ["refs/heads/main", "refs/heads/a/b/c", "refs/heads/é", "refs/notes/expgit"]
    git(path, "update-ref", "--stdin", input="".join(
        f"create {name} {rng.choice(commits)}\n" for name in names))
    git(path, "-c", "user.name=T", "-c", "user.email=t@e", "tag", "-a", "-m", "t", "v1",
        commits[0])
    git(path, "pack-refs", "--all")  # packed, with a peeled line for the tag
    git(path, "update-ref", "--stdin", input="".join(  # loose over packed, deleted, new
        f"update {name} {rng.choice(commits)}\n" for name in names[::3])
        + "".join(f"delete {name}\n" for name in names[2::6])
        + f"create refs/heads/expgit/gradients/new {commits[1]}\n")
    git(path, "symbolic-ref", "refs/heads/sym", "refs/heads/main")
    git(path, "symbolic-ref", "refs/heads/dangling", "refs/heads/nothing")
    git(path, "symbolic-ref", "refs/weird/to-head", "HEAD")
    (path / "refs" / "heads" / "stale.lock").write_text(commits[0] + "\n")
    files = FilesRefs(path)
    fresh = GitRepo.discover(path)

    for prefix in ["refs/", "refs/heads/", "refs/heads/expgit/gradients/", "refs/tags/",
                   "refs/heads/a/", "refs/heads/nothing/", "refs/weird/"]:
        listed = git(path, "for-each-ref", "--format=%(objectname) %(refname)", prefix)
        expected = {name: sha for sha, name in (line.split(" ", 1)
                                                for line in listed.splitlines())}
        assert fresh.refs(prefix) == expected, prefix
        if prefix != "refs/" and prefix != "refs/weird/":  # those need git (HEAD)
            assert files.listing(prefix) == expected, prefix
    asked = [*names, "refs/heads/sym", "refs/heads/dangling", "refs/weird/to-head",
             "refs/tags/v1", "refs/heads/stale.lock", "refs/heads/expgit", "refs/nope"]
    expected = {}
    for name in asked:
        proc = subprocess.run(["git", "rev-parse", "--verify", "--quiet", name], cwd=path,
                              capture_output=True, text=True)
        assert fresh.ref(name) == (proc.stdout.strip() or None), name
        if proc.stdout.strip():
            expected[name] = proc.stdout.strip()
    assert fresh.refs_named(asked) == expected  # some of them need git
    plain = [name for name in asked if files.readable(name) and "weird" not in name]
    assert files.read_many(plain) == {n: expected[n] for n in plain if n in expected}
    for head in ["refs/heads/a/b/c", commits[2]]:
        git(path, *(["symbolic-ref", "HEAD", head] if head.startswith("refs/")
                    else ["update-ref", "--no-deref", "HEAD", head]))
        proc = subprocess.run(["git", "symbolic-ref", "-q", "HEAD"], cwd=path,
                              capture_output=True, text=True)
        assert fresh.head_symref() == (proc.stdout.strip() or None)
    fresh.close()
    repo.close()


def _history(path: Path, rng: random.Random, steps: int, merges: float) -> list[str]:
    """A random history under experiences/ (edits, deletions, sub-folders, symlinks,
    executables, hidden files, strays, file/folder swaps, empty commits, merges, evil
    merges), written by one fast-import; its commits in the order made."""
    names = [f"n{i}" for i in range(9)] + ["é", 'q"x', "t\tb"]

    def blob(text: str) -> bytes:
        return f"---\nname: {text}\n---\nbody {rng.random()}\n".encode()

    def mutate(files: dict[str, tuple[str, bytes]]) -> dict[str, tuple[str, bytes]]:
        files = dict(files)
        for _ in range(rng.randint(1, 3)):
            op, n = rng.random(), rng.choice(names)
            p = f"experiences/{n}.md"
            if op < 0.45:
                files[p] = ("100644", blob(n))
            elif op < 0.55:
                files.pop(p, None)
            elif op < 0.62:
                files[f"experiences/sub/{n}.md"] = ("100644", blob(n))
            elif op < 0.66:
                files = {k: v for k, v in files.items() if not k.startswith("experiences/sub/")}
            elif op < 0.70:
                files[p] = ("120000", b"target")
            elif op < 0.74:
                files[f"experiences/.hidden{n}"] = ("100644", blob(n))
            elif op < 0.78:
                files[f"experiences/{n}.txt"] = ("100644", blob(n))
            elif op < 0.82 and p in files:
                files[p] = ("100755", files[p][1])
            elif op < 0.85:
                files[f"other/{n}"] = ("100644", blob(n))
            elif op < 0.90:  # a file becomes a folder, or back
                files = {k: v for k, v in files.items()
                         if not k.startswith(f"experiences/{n}/") and k != f"experiences/{n}"}
                files[f"experiences/{n}" + ("/x.md" if op < 0.87 else "")] = ("100644", b"f")
        return {k: v for k, v in files.items() if not any(k.startswith(q + "/") for q in files)}

    state = {f"experiences/{n}.md": ("100644", blob(n)) for n in names[:6]}
    state["expgit.toml"] = ("100644", b"x = 1\n")
    stream, trees, order, head = fast_commit(1, state, []), {1: state}, [1], 1
    for _ in range(steps):
        mark = len(order) + 1
        if rng.random() < merges and len(order) > 3:
            base = rng.choice(order[-6:])
            trees[mark] = mutate(trees[base])
            stream += fast_commit(mark, trees[mark], [base], ref="refs/heads/side")
            merged = rng.choice([trees[head], trees[mark], mutate(trees[head])])
            trees[mark + 1] = merged
            stream += fast_commit(mark + 1, merged, [head, mark])
            order += [mark, mark + 1]
            head = mark + 1
        else:
            trees[mark] = trees[head] if rng.random() < 0.1 else mutate(trees[head])
            stream += fast_commit(mark, trees[mark], [head])
            order.append(mark)
            head = mark
    marks = fast_import(path, stream)
    return [marks[f":{m}"] for m in order]


def _dump(snapshot: Snapshot) -> tuple[object, ...]:
    return (snapshot.id, snapshot.strays, [(e.name, e.path, e.blob, e.data, e.version,
                                            e.last_commit) for e in snapshot.entries.values()])


@pytest.mark.parametrize(("seed", "merges", "jumps"), [
    (1, 0.12, [1, 1, 1, 2, 3]), (2, 0.12, [1, 1, 1, 2, 3]), (3, 0.03, [1, 9, 10, 12])])
@pytest.mark.slow
def test_incremental_snapshots_equal_fresh_ones(tmp_path: Path, seed: int, merges: float,
                                                jumps: list[int]) -> None:
    """One loader walking a random history (mostly forward, some jumps back and repeats)
    gives exactly what a fresh loader (fresh caches, one ``git log`` pass) gives."""
    rng = random.Random(seed)
    path = tmp_path / "repo.git"
    GitRepo.init(path, bare=True, branch="main").close()
    commits = _history(path, rng, 50, merges)
    order, i = [], 0
    while i < len(commits):
        order.append(commits[i])
        if rng.random() < 0.1:
            order.append(rng.choice(commits[: i + 1]))
        i += rng.choice(jumps)
    loader = SnapshotLoader(GitRepo.discover(path), "experiences", 800)
    for commit in order:
        fresh_git = GitRepo.discover(path)
        fresh = SnapshotLoader(fresh_git, "experiences", 800).load(commit)
        assert _dump(loader.load(commit)) == _dump(fresh), commit
        fresh_git.close()

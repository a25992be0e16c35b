"""The expgit writer lock (:class:`expgit.store.lock.RepoLock`) on a real git directory.

Other processes are real processes: a holder that is alive, one that has exited, one that
was killed while holding the lock, and several writers racing for the same lock.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, git

from expgit.errors import EXIT_LOCKED, LockHeldError, UsageError
from expgit.store.lock import LOCK_NAME, RepoLock, describe

HOST = socket.gethostname()

# A child that takes the lock on GIT_DIR, says "locked", then waits for a line on stdin
# (or for ever) before releasing it.
HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from expgit.store.lock import RepoLock
    lock = RepoLock(Path(sys.argv[1]), wait_seconds=30, stale_seconds=600,
                    purpose="test holder")
    lock.acquire()
    print("locked", flush=True)
    sys.stdin.readline()
    lock.release()
    print("released", flush=True)
""")


@pytest.fixture
def git_dir(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "repo")
    return tmp_path / "repo" / ".git"


def make_lock(git_dir: Path, wait: float = 0.0, stale: float = 600.0) -> RepoLock:
    return RepoLock(git_dir, wait_seconds=wait, stale_seconds=stale, purpose="pytest")


def child_env() -> dict[str, str]:
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_holder(git_dir: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(git_dir)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line == "locked\n", proc.stderr.read() if proc.stderr else line
    return proc


def releasing_after(holder: subprocess.Popen[str], seconds: float) -> threading.Thread:
    """A thread (not started) that tells ``holder`` to release the lock after ``seconds``."""
    assert holder.stdin is not None

    def let_go() -> None:
        time.sleep(seconds)
        holder.stdin.write("go\n")  # type: ignore[union-attr]
        holder.stdin.flush()  # type: ignore[union-attr]

    return threading.Thread(target=let_go)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def write_record(git_dir: Path, **fields: object) -> Path:
    record = {"pid": 424242, "host": HOST, "time": time.time(), "token": "someone-else",
              "purpose": "expgit apply 0123456789ab"}
    record.update(fields)
    path = git_dir / LOCK_NAME
    path.write_text(json.dumps(record))
    return path


# ------------------------------------------------------------------------- basics
def test_acquire_writes_holder_record_and_release_removes_it(git_dir: Path) -> None:
    lock = make_lock(git_dir)
    lock.acquire()
    record = json.loads((git_dir / LOCK_NAME).read_text())
    assert record["pid"] == os.getpid()
    assert record["host"] == HOST
    assert record["purpose"] == "pytest"
    assert "pidns" in record
    assert abs(record["time"] - time.time()) < 60
    assert len(record["token"]) >= 16
    assert lock.holder() == record
    lock.release()
    assert not (git_dir / LOCK_NAME).exists()
    assert lock.holder() is None
    # no temporary files are left behind, and the lock can be taken again
    assert {p.name for p in git_dir.glob(LOCK_NAME + "*")} <= {LOCK_NAME + ".guard"}
    with lock.held():
        assert (git_dir / LOCK_NAME).exists()
    assert not (git_dir / LOCK_NAME).exists()


def test_held_releases_on_error(git_dir: Path) -> None:
    lock = make_lock(git_dir)
    with pytest.raises(RuntimeError), lock.held():
        raise RuntimeError("boom")
    assert not (git_dir / LOCK_NAME).exists()
    make_lock(git_dir).acquire()


def test_second_acquirer_without_wait_is_refused_naming_the_holder(git_dir: Path) -> None:
    first = make_lock(git_dir)
    first.acquire()
    second = make_lock(git_dir)
    started = time.monotonic()
    with pytest.raises(LockHeldError) as info:
        second.acquire()
    assert time.monotonic() - started < 5
    message = str(info.value)
    assert f"pid {os.getpid()}" in message
    assert HOST in message
    assert "pytest" in message  # the holder's purpose
    assert info.value.exit_code == EXIT_LOCKED
    assert info.value.hint and str(git_dir / LOCK_NAME) in info.value.hint
    # the refused acquirer did not disturb the holder's record
    assert json.loads((git_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    first.release()
    second.acquire()
    second.release()


def test_waiting_acquirer_gives_up_after_wait_seconds(git_dir: Path) -> None:
    make_lock(git_dir).acquire()
    started = time.monotonic()
    with pytest.raises(LockHeldError):
        make_lock(git_dir, wait=0.4).acquire()
    elapsed = time.monotonic() - started
    assert 0.35 <= elapsed < 5


# -------------------------------------------------------------------- staleness
def test_lock_of_a_dead_process_is_recovered_with_a_warning(
        git_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pid = dead_pid()
    write_record(git_dir, pid=pid)
    lock = make_lock(git_dir)
    lock.acquire()
    err = capsys.readouterr().err
    assert "warning" in err and "stale lock" in err
    assert f"pid {pid}" in err and HOST in err
    assert json.loads((git_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_lock_of_an_unreaped_dead_process_is_recovered(git_dir: Path) -> None:
    """A holder that was killed but not yet waited for by its parent is a zombie: it
    still answers ``kill(pid, 0)``, yet it can never release the lock."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "child did not exit"
            time.sleep(0.01)
        write_record(git_dir, pid=proc.pid)
        lock = make_lock(git_dir)
        lock.acquire()
        lock.release()
    finally:
        proc.wait()


def test_lock_killed_while_held_is_recovered(git_dir: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    holder = start_holder(git_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert json.loads((git_dir / LOCK_NAME).read_text())["pid"] == holder.pid
    with make_lock(git_dir).held():
        pass
    assert f"pid {holder.pid}" in capsys.readouterr().err


def test_lock_older_than_stale_seconds_is_recovered(
        git_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the holder's pid is alive (our own), but the record is too old to trust
    write_record(git_dir, pid=os.getpid(), time=time.time() - 100)
    lock = make_lock(git_dir, stale=10)
    lock.acquire()
    assert "stale lock" in capsys.readouterr().err
    lock.release()


def test_fresh_lock_of_another_host_is_respected(git_dir: Path) -> None:
    """A pid on another host cannot be checked: only age makes such a lock stale."""
    write_record(git_dir, host="some-other-host.example", pid=dead_pid())
    with pytest.raises(LockHeldError) as info:
        make_lock(git_dir).acquire()
    assert "some-other-host.example" in str(info.value)
    assert (git_dir / LOCK_NAME).exists()
    write_record(git_dir, host="some-other-host.example", time=time.time() - 1000)
    with make_lock(git_dir, stale=10).held():
        pass


def test_pid_of_another_pid_namespace_is_not_checked(git_dir: Path) -> None:
    """Containers can share a host name; a pid from another pid namespace cannot be
    checked here, so only age makes such a lock stale."""
    write_record(git_dir, pid=dead_pid(), pidns="pid:[1]")
    with pytest.raises(LockHeldError):
        make_lock(git_dir).acquire()
    for same in (None, os.readlink("/proc/self/ns/pid") if Path("/proc/self/ns/pid").exists()
                 else None):
        write_record(git_dir, pid=dead_pid(), pidns=same)
        with make_lock(git_dir).held():  # ours, or none recorded: the pid is checked
            pass


def test_live_holder_on_this_host_is_not_stale(git_dir: Path) -> None:
    holder = start_holder(git_dir)
    try:
        with pytest.raises(LockHeldError) as info:
            make_lock(git_dir, wait=0.2).acquire()
        assert f"pid {holder.pid}" in str(info.value)
        assert "test holder" in str(info.value)
    finally:
        holder.kill()
        holder.wait()


# ------------------------------------------------------------------ corrupt files
@pytest.mark.parametrize("content", [
    "", "not json {", "[1, 2]", '"a string"', "42", "null",
    '{"pid": "x", "host": 7, "time": "yesterday"}', '{"pid": 1}',
])
def test_corrupt_lock_file_blocks_until_stale_then_is_recovered(
        git_dir: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = git_dir / LOCK_NAME
    path.write_text(content)
    lock = make_lock(git_dir, stale=60)
    holder = lock.holder()
    assert holder is not None and holder.get("corrupt")
    # fresh: somebody may be in the middle of something; refuse, and say what we saw
    with pytest.raises(LockHeldError) as info:
        lock.acquire()
    assert "unreadable" in str(info.value)
    assert path.read_text() == content
    # old: recovered like any stale lock
    past = time.time() - 120
    os.utime(path, (past, past))
    lock.acquire()
    assert "stale lock" in capsys.readouterr().err
    assert json.loads(path.read_text())["pid"] == os.getpid()
    lock.release()


def test_describe_never_fails_on_odd_records() -> None:
    assert "unreadable" in describe({"corrupt": True, "time": 0})
    assert "pid 12 on h" in describe({"pid": 12, "host": "h", "time": "not a number"})
    assert "pid 12 on h" in describe({"pid": 12, "host": "h", "time": 1e300})


def test_out_of_range_pid_and_time_do_not_crash(git_dir: Path) -> None:
    write_record(git_dir, pid=2**70, time=1e300, host="elsewhere.example")
    with pytest.raises(LockHeldError) as info:  # not stale by age; pid not checkable
        make_lock(git_dir).acquire()
    assert "elsewhere.example" in str(info.value)
    write_record(git_dir, pid=2**70)  # no such process here: stale
    with make_lock(git_dir).held():
        pass


# ------------------------------------------------------------------------ release
def test_release_does_not_delete_someone_elses_lock(git_dir: Path) -> None:
    mine = make_lock(git_dir)
    mine.acquire()
    # our lock was judged stale and another writer now holds the lock
    path = write_record(git_dir, pid=os.getpid(), token="the-other-writer")
    mine.release()
    assert path.exists()
    assert json.loads(path.read_text())["token"] == "the-other-writer"
    # releasing a lock never acquired does nothing either
    make_lock(git_dir).release()
    assert path.exists()


def test_release_twice_is_harmless(git_dir: Path) -> None:
    lock = make_lock(git_dir)
    lock.acquire()
    lock.release()
    other = make_lock(git_dir)
    other.acquire()
    lock.release()
    holder = other.holder()
    assert holder is not None
    assert json.loads((git_dir / LOCK_NAME).read_text())["token"] == holder["token"]
    assert (git_dir / LOCK_NAME).exists()
    other.release()


# ------------------------------------------------------------ other processes
@pytest.mark.slow
def test_live_holder_blocks_a_waiting_acquirer_until_released(git_dir: Path) -> None:
    holder = start_holder(git_dir)
    assert holder.stdin is not None and holder.stdout is not None
    thread = releasing_after(holder, 0.6)
    started = time.monotonic()
    thread.start()
    try:
        lock = make_lock(git_dir, wait=20)
        lock.acquire()
        waited = time.monotonic() - started
    finally:
        thread.join()
    assert holder.stdout.readline() == "released\n"
    assert holder.wait(timeout=30) == 0
    assert waited >= 0.5
    assert json.loads((git_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


WORKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from expgit.store.lock import RepoLock
    git_dir, rounds = Path(sys.argv[1]), int(sys.argv[2])
    inside, counter = git_dir / "inside", git_dir / "counter"
    for _ in range(rounds):
        with RepoLock(git_dir, wait_seconds=60, stale_seconds=600).held():
            fd = os.open(inside, os.O_CREAT | os.O_EXCL | os.O_WRONLY)  # fails on overlap
            value = int(counter.read_text())
            time.sleep(0.002)
            counter.write_text(str(value + 1))
            os.close(fd)
            os.unlink(inside)
""")


@pytest.mark.parametrize("start_stale", [False, True], ids=["free", "stale-at-start"])
@pytest.mark.slow
def test_racing_processes_are_mutually_excluded(git_dir: Path, start_stale: bool) -> None:
    """Writers racing for the lock (and, at the start, to recover a stale one) never
    overlap, and every one of them gets through."""
    (git_dir / "counter").write_text("0")
    if start_stale:
        write_record(git_dir, pid=dead_pid())
    workers, rounds = 6, 15
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(git_dir), str(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=child_env()) for _ in range(workers)]
    results = [(p.wait(timeout=300), p.communicate()) for p in procs]
    for code, (_out, err) in results:
        assert code == 0, err
    assert int((git_dir / "counter").read_text()) == workers * rounds
    assert not (git_dir / LOCK_NAME).exists()
    warnings = sum(err.count("removing stale lock") for _code, (_out, err) in results)
    assert warnings == (1 if start_stale else 0)


# ------------------------------------------------------------------ file systems
def test_lock_works_where_hard_links_are_not_supported(
        git_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    first = make_lock(git_dir)
    first.acquire()
    assert json.loads((git_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
    with pytest.raises(LockHeldError):
        make_lock(git_dir).acquire()
    first.release()
    assert not (git_dir / LOCK_NAME).exists()
    assert {p.name for p in git_dir.glob(LOCK_NAME + "*")} <= {LOCK_NAME + ".guard"}


def test_lock_in_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        make_lock(tmp_path / "nowhere").acquire()
    assert "cannot create the lock file" in str(info.value)


@pytest.mark.slow
def test_a_long_wait_says_once_who_holds_the_lock(git_dir: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    holder = start_holder(git_dir)
    thread = releasing_after(holder, 1.5)
    thread.start()
    try:
        lock = make_lock(git_dir, wait=20)
        lock.acquire()
    finally:
        thread.join()
    lock.release()
    assert holder.wait(timeout=30) == 0
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("expgit: waiting for the repository lock, held by ")
    assert f"pid {holder.pid}" in lines[0] and "test holder" in lines[0]
    assert lines[0].endswith(" more seconds)")
    # a free lock is taken without a word
    make_lock(git_dir).acquire()
    assert capsys.readouterr().err == ""

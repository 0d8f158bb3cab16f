"""What ``otpmem`` says when it cannot do what was asked: one line naming the problem in
the command's own words, exit status 2 (1 only for a run that failed), never a
traceback; damaged stores, wrong paths, nonsense numbers and a closed pipe."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import plyvel
import pytest

from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from tests.cli_support import OTPMEM, fails_with, make_store, no_traceback, otpmem, simulate_args

DOCUMENT = (
    '{"format": "otpmem.export", "version": 1, "conversations": [{"user_id": "sim", '
    '"conversation_id": "new", "messages": [{"role": "user", "content": "hi"}]}]}'
)


def compacted(path: Path) -> Path:
    """``path``'s store with its log written into a table file (as any reopen does)."""
    plyvel.DB(os.fspath(path)).close()
    assert any(p.suffix == ".ldb" for p in path.iterdir()), sorted(os.listdir(path))
    return path


def the_table(path: Path) -> Path:
    return next(p for p in sorted(path.iterdir()) if p.suffix == ".ldb")


def random_bytes(path: Path) -> None:
    table = the_table(path)
    table.write_bytes(os.urandom(table.stat().st_size))


def text(path: Path) -> None:
    the_table(path).write_text("this is not a table\n" * 20, encoding="utf-8")


def flipped_bit(path: Path) -> None:
    # One bit in the first data block: LevelDB's plain reads (no checksums) would return
    # garbage or quietly stop; only a checked read sees it.
    table = the_table(path)
    data = bytearray(table.read_bytes())
    data[40] ^= 0x10
    table.write_bytes(bytes(data))


def garbage_current(path: Path) -> None:
    (path / "CURRENT").write_text("MANIFEST-999999\n", encoding="utf-8")


def garbage_manifest(path: Path) -> None:
    manifest = next(path.glob("MANIFEST-*"))
    manifest.write_bytes(b"\x00garbage" * 10)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "ldb-random-bytes": random_bytes,
    "ldb-text": text,
    "ldb-flipped-bit": flipped_bit,
    "current-garbage": garbage_current,
    "manifest-garbage": garbage_manifest,
}


@pytest.fixture(scope="module")
def damaged_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small simulation run, compacted, then damaged in each way of DAMAGE."""
    base = tmp_path_factory.mktemp("damage")
    run = base / "run"
    first = otpmem(*simulate_args(run, 2, 3, "--no-progress"))
    assert first.returncode == 0, str(first)
    compacted(run)
    damaged = {}
    for name, damage in DAMAGE.items():
        copy = base / name
        shutil.copytree(run, copy)
        damage(copy)
        damaged[name] = copy
    return damaged


@pytest.mark.parametrize("damage", list(DAMAGE))
@pytest.mark.parametrize(
    "command",
    [
        ["inspect", "STORE"],
        ["inspect", "STORE", "sim-0", "--user", "sim"],
        ["export", "STORE", "--all"],
        ["search", "STORE", "answer", "--user", "sim"],
        ["import", "STORE", "-", "--into-run"],  # a run: the corruption, not the run, refuses
        ["simulate", "--data", "STORE", "--resume", "--no-progress"],
    ],
    ids=["inspect", "inspect-conv", "export", "search", "import", "simulate-resume"],
)
def test_a_damaged_store_gets_one_clean_message_naming_its_path(
    damaged_runs: dict[str, Path], tmp_path: Path, damage: str, command: list[str]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(damaged_runs[damage], store)
    args = [str(store) if a == "STORE" else a for a in command]

    result = otpmem(*args, stdin=DOCUMENT if command[0] == "import" else None)

    fails_with(
        result,
        2,
        f"the LevelDB store at {str(store)!r} is corrupt (",
        f"then try plyvel.repair_db({str(store)!r})",
    )
    assert "otpmem-snapshot" not in result.stderr  # the user's path, not the snapshot's
    assert result.stderr.count("\n") == 1


def test_import_names_the_file_it_cannot_read(tmp_path: Path) -> None:
    target = tmp_path / "new"
    fails_with(otpmem("import", target, tmp_path), 2, f"{tmp_path} is a directory")
    fails_with(otpmem("import", target, tmp_path / "nope.json"), 2, "nope.json does not exist")
    (tmp_path / "latin1.json").write_bytes(b"\xff\xfe{}")
    fails_with(otpmem("import", target, tmp_path / "latin1.json"), 2, "is not JSON")
    fails_with(otpmem("import", target, "-", stdin='{"format": '), 2, "stdin is not JSON")
    assert not target.exists()


def test_export_to_a_directory_or_a_missing_one_is_refused(store_dir: Path, tmp_path: Path) -> None:
    fails_with(otpmem("export", store_dir, "--all", "-o", tmp_path), 2, "is a directory")
    fails_with(
        otpmem("export", store_dir, "--all", "-o", tmp_path / "no" / "x.json"),
        2,
        "No such file or directory",
    )
    assert sorted(os.listdir(tmp_path)) == ["store"]


def test_a_closed_pipe_ends_the_output_quietly(tmp_path: Path) -> None:
    store = LevelDBStore.start_link(tmp_path / "big")
    try:
        store.add(Conv("u", "c"), [{"role": "user", "content": "x" * 200}] * 3000)
    finally:
        store.stop()
    # `otpmem inspect big c --user u | head -1`
    proc = subprocess.Popen(
        [str(OTPMEM), "inspect", tmp_path / "big", "c", "--user", "u"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.readline().startswith(b'{"role": "user"')
        proc.stdout.close()  # the reader is done, with 600 KB still to come
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--agents", "0", "Invalid value for '--agents': 0 is not in the range x>=1"),
        ("--turns", "-1", "Invalid value for '--turns': -1 is not in the range x>=1"),
        ("--workers", "0", "Invalid value for '--workers': 0 is not in the range x>=1"),
        ("--workers", "-1", "Invalid value for '--workers': -1 is not in the range x>=1"),
        ("--kill-self-after", "0", "'--kill-self-after': 0 is not in the range x>=1"),
        ("--kill-self-after", "-1", "'--kill-self-after': -1 is not in the range x>=1"),
        ("--chaos", "2.0", "Invalid value for '--chaos': 2.0 is not in the range 0.0<=x<=1.0"),
        ("--chaos", "-0.5", "'--chaos': -0.5 is not in the range 0.0<=x<=1.0"),
        ("--model", "gpt", "Invalid value for '--model': 'gpt' is not one of"),
        ("--agents", "many", "Invalid value for '--agents': 'many' is not a valid integer"),
    ],
)
def test_simulate_refuses_nonsense_naming_the_allowed_range(
    tmp_path: Path, option: str, value: str, message: str
) -> None:
    data = tmp_path / "run"
    result = otpmem(*simulate_args(data, 2, 2, "--no-progress", option, value))

    text = fails_with(result, 2, message, "see 'otpmem simulate --help'")
    assert "Usage:" not in text
    assert not data.exists()


def test_simulate_data_that_is_a_file_is_refused_in_the_commands_words(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine\n", encoding="utf-8")

    text = fails_with(otpmem("simulate", "--data", afile), 2, f"--data {afile} is a file")
    assert "Errno" not in text
    assert afile.read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "MISSING"], "MISSING does not exist"),
        (["inspect", "FILE"], "FILE is a file, not a store's directory"),
        (["search", "EMPTY", "x"], "there is no LevelDB store at 'EMPTY'"),
        (["inspect", "STORE", "--lst", "3"], "No such option '--lst'. (Did you mean one of:"),
        (["inspect"], "name the store: DATA (a store's or a run's directory) or --dsn DSN"),
    ],
)
def test_wrong_paths_and_arguments_exit_2_and_create_nothing(
    store_dir: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "FILE").write_text("x", encoding="utf-8")
    (tmp_path / "EMPTY").mkdir()
    before = sorted(os.listdir(tmp_path))
    paths = {
        "MISSING": tmp_path / "MISSING",
        "FILE": tmp_path / "FILE",
        "EMPTY": tmp_path / "EMPTY",
        "STORE": store_dir,
    }
    argv = [str(paths.get(a, a)) for a in args]
    expected = message
    for name, path in paths.items():
        expected = expected.replace(name, str(path)) if name in message else expected

    result = otpmem(*argv)

    no_traceback(result)
    fails_with(result, 2, expected)
    assert sorted(os.listdir(tmp_path)) == before
    assert list((tmp_path / "EMPTY").iterdir()) == []


def test_an_unknown_command_is_named() -> None:
    result = otpmem("frobnicate")
    no_traceback(result)
    assert result.returncode == 2, str(result)
    assert result.stderr.startswith("otpmem: No such command 'frobnicate'."), str(result)


def test_export_reads_the_same_before_and_after_the_log_is_compacted(tmp_path: Path) -> None:
    # The snapshot copies the log (000003.log) in one case, hard-links a table in the other.
    store = make_store(tmp_path / "s")
    before = otpmem("export", store, "--all")
    compacted(store)
    after = otpmem("export", store, "--all")
    assert before.returncode == after.returncode == 0
    assert before.stdout == after.stdout

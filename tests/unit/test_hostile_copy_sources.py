"""`copy: {src: ...}` sources on this machine (issue 19): a literal src that is a FIFO, a
device, a directory or larger than MAX_COPY_SOURCE_BYTES is refused when the playbook
loads (`ascendctl play --list-tasks`: exit 2, `playbook:line: field: file: reason`,
nothing contacted); a templated src is read the same bounded way when the task runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from ascendctl.playbook.modules import ModuleError
from ascendctl.playbook.modules.files import MAX_COPY_SOURCE_BYTES
from tests.unit.hostile_files import (
    GOOD, Cost, cli, fifo, hang_guard, measure_startup, refused, sparse,
)
from tests.unit.test_playbook_modules import run_module

BOOK = """\
- name: copy a file
  hosts: all
  tasks:
    - name: the file
      copy:
        src: "{src}"
        dest: /tmp/ascendctl-copy-test
"""


@pytest.fixture(scope="module")
def startup(tmp_path_factory) -> Cost:
    return measure_startup(tmp_path_factory.mktemp("startup"))


def files_dir(tmp_path: Path) -> Path:
    (tmp_path / "files").mkdir(exist_ok=True)
    return tmp_path / "files"


def playbook(tmp_path: Path, src: str) -> Path:
    path = tmp_path / "book.yaml"
    path.write_text(BOOK.format(src=src))
    return path


CASES = {   # case: (make the source in files/ and give src, phrase)
    "a FIFO": (lambda files: fifo(files / "data.txt").name, "a FIFO, not a regular file"),
    "a device": (lambda files: "/dev/zero", "a device, not a regular file"),
    "a directory": (lambda files: (files / "conf.d").mkdir() or "conf.d",
                    "a directory, not a regular file"),
    "too large": (lambda files: sparse(files / "big.bin", MAX_COPY_SOURCE_BYTES + 1).name,
                  f"too large for a copy source (limit {MAX_COPY_SOURCE_BYTES})"),
    "missing": (lambda files: "absent.txt", "file not found"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_hostile_literal_copy_source_is_refused_at_load(tmp_path, startup, case):
    make, phrase = CASES[case]
    src = make(files_dir(tmp_path))
    book = playbook(tmp_path, src)
    line = refused(cli(tmp_path, "play", book, "-i", GOOD, "--list-tasks"), startup,
                   prefix=f"error: {book}:6: plays[0].tasks[0].copy.src: ", phrase=phrase)
    assert src.rsplit("/", 1)[-1] in line


def test_the_real_process_refuses_a_fifo_source(tmp_path):
    """The same through `python -m ascendctl`: the exit code through the interpreter."""
    fifo(files_dir(tmp_path) / "data.txt")
    book = playbook(tmp_path, "data.txt")
    refused(cli(tmp_path, "play", book, "-i", GOOD, "--list-tasks", process=True), None,
            prefix=f"error: {book}:6: plays[0].tasks[0].copy.src: ",
            phrase="a FIFO, not a regular file")


@pytest.mark.parametrize("src", ["data.txt", "{{ demo_file }}"])
def test_a_valid_or_templated_source_loads(tmp_path, src):
    (files_dir(tmp_path) / "data.txt").write_text("hello\n")
    done, _ = cli(tmp_path, "play", playbook(tmp_path, src), "-i", GOOD, "--list-tasks")
    assert done.returncode == 0, done.stderr
    assert "the file" in done.stdout


def test_a_templated_source_that_is_a_fifo_fails_the_task_without_blocking(tmp_path):
    pipe = fifo(files_dir(tmp_path) / "data.txt")
    with hang_guard(), pytest.raises(ModuleError, match="a FIFO, not a regular file") as err:
        run_module("copy", {"src": "data.txt", "dest": str(tmp_path / "out")},
                   tmp_path=tmp_path)
    assert str(pipe) in str(err.value) and not (tmp_path / "out").exists()


def test_a_regular_source_is_copied(tmp_path):
    (files_dir(tmp_path) / "data.txt").write_bytes(b"x" * MAX_COPY_SOURCE_BYTES)
    res, _ = run_module("copy", {"src": "data.txt", "dest": str(tmp_path / "out")},
                        tmp_path=tmp_path)
    assert res.changed and (tmp_path / "out").read_bytes() == b"x" * MAX_COPY_SOURCE_BYTES

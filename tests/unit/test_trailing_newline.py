"""Names that reach a path, a unit or a command refuse a trailing newline (`$` in
`re.match` accepts "value\\n"; these use fullmatch)."""

from __future__ import annotations

import pytest

from ascendctl.errors import InputError


def test_lab_name():
    from ascendctl_lab.registry import validate_name

    assert validate_name("lab1") == "lab1"
    with pytest.raises(InputError):
        validate_name("lab1\n")


def test_file_owner():
    from ascendctl.transport.files import FileError, check_owner

    assert check_owner("root") == "root"
    with pytest.raises(FileError):
        check_owner("root\n")


def test_release_dir_on_the_node():
    from ascendctl_runtime.bench_node import _release_dir

    assert _release_dir("/r", "r-0123456789ab").endswith("/releases/r-0123456789ab")
    with pytest.raises(ValueError):
        _release_dir("/r", "r-0123456789ab\n")


def test_playbook_register_name(tmp_path):
    from ascendctl.playbook.loader import load_playbook

    book = tmp_path / "p.yaml"
    book.write_text('- hosts: all\n  tasks:\n    - command: [true]\n      register: "out\\n"\n')
    with pytest.raises(InputError, match="register"):
        load_playbook(book)

"""Command lines built from hostile values stay literal: proven by a real local shell."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ascendctl.transport import quoting

HOSTILE = [
    "/tmp/x$(touch {canary})",
    "/tmp/x`touch {canary}`",
    "a; touch {canary}",
    "a && touch {canary} || true",
    "'; touch {canary}; echo '",
    '"; touch {canary}; echo "',
    "with space and\ttab",
    "line1\nline2; touch {canary}",
    "$HOME ${PATH} $((1+1)) !! *",
    "-n",
    "",
]


def _sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=10)


@pytest.mark.parametrize("template", HOSTILE)
def test_join_argv_passes_each_value_as_one_literal_word(template, tmp_path):
    canary = tmp_path / "CANARY"
    value = template.replace("{canary}", str(canary))
    proc = _sh(quoting.join_argv(["printf", "%s\\0", value, "second"]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\0")[:2] == [value, "second"]
    assert not canary.exists()


@pytest.mark.parametrize("template", HOSTILE)
def test_sh_c_keeps_values_out_of_the_script(template, tmp_path):
    canary = tmp_path / "CANARY"
    value = template.replace("{canary}", str(canary))
    command = quoting.sh_c('printf "%s|%s" "$1" "$#"', [value])
    proc = _sh(command)
    assert proc.stdout == f"{value}|1"
    assert not canary.exists()


def test_sh_s_reads_the_script_from_stdin_with_literal_args(tmp_path):
    canary = tmp_path / "CANARY"
    value = f"x$(touch {canary})"
    proc = subprocess.run(["sh", "-c", quoting.sh_s([value, "b c"])],
                          input='printf "%s/%s/%s" "$1" "$2" "$#"', capture_output=True,
                          text=True, timeout=10)
    assert proc.stdout == f"{value}/b c/2"
    assert not canary.exists()


def test_become_wraps_in_non_interactive_sudo_without_reinterpreting():
    inner = quoting.join_argv(["cat", "/etc/x y$(id)"])
    wrapped = quoting.become(inner, sudo=True)
    argv = shlex.split(wrapped)
    assert argv[:4] == ["sudo", "-n", "-H", "--"]
    assert argv[4:6] == ["sh", "-c"]
    assert shlex.split(argv[6]) == ["cat", "/etc/x y$(id)"]
    assert quoting.become(inner, sudo=False) == inner


def test_with_env_prefixes_env_and_rejects_bad_names(tmp_path):
    canary = tmp_path / "CANARY"
    argv = quoting.with_env({"A": f"v$(touch {canary})"}, ["sh", "-c", 'printf %s "$A"'])
    proc = _sh(quoting.join_argv(argv))
    assert proc.stdout == f"v$(touch {canary})"
    assert not canary.exists()
    with pytest.raises(ValueError):
        quoting.with_env({"A;B": "x"}, ["true"])


@pytest.mark.parametrize("bad", [True, None, b"bytes", ["list"]])
def test_non_text_arguments_are_refused(bad):
    with pytest.raises(TypeError):
        quoting.join_argv(["echo", bad])


def test_nul_bytes_and_empty_commands_are_refused():
    with pytest.raises(ValueError):
        quoting.join_argv(["echo", "a\x00b"])
    with pytest.raises(ValueError):
        quoting.join_argv([])
    with pytest.raises(TypeError):
        quoting.join_argv("echo hi")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\x00",
                                               blacklist_categories=("Cs",)),
                        max_size=20), min_size=1, max_size=5))
def test_join_argv_round_trips_through_shlex(argv):
    assert shlex.split(quoting.join_argv(argv)) == argv


def test_names_with_a_trailing_newline_are_refused():
    """`$` matches before a final newline; these patterns end with \\Z."""
    from ascendctl.render.files import RELEASE_ID_RE
    from ascendctl.render.systemd import _SAFE
    from ascendctl.transport.quoting import ENV_NAME_RE

    for pattern, good in ((ENV_NAME_RE, "VLLM_HOST_IP"), (RELEASE_ID_RE, "r1"),
                          (_SAFE, "/var/lib/x")):
        assert pattern.match(good) and not pattern.match(good + "\n")

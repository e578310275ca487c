"""Values YAML reads differently from what was meant, and error messages that stay short:
numbers only in plain decimal, versions as text that parses as a version, device IPs
that are no subnet's network or broadcast address, the nearest release set by version
order, and at most a bounded excerpt of any bad value in a message."""

from __future__ import annotations

import time

import pytest
import yaml

from ascendctl.releases.sets import check_versions, match_versions
from ascendctl.errors import InputError
from ascendctl.load import load_inventory
from ascendctl.inventory.excerpt import EXCERPT_CHARS, excerpt
from ascendctl.inventory.model import VersionsSpec
from tests.unit.test_plan_inventories import example_data

BASE_TEXT = yaml.safe_dump(example_data(), sort_keys=False)
PORT = "      port: 8000\n"


def write(tmp_path, text: str):
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    return path


def refused(path) -> InputError:
    with pytest.raises(InputError) as caught:
        load_inventory(path, check_files=False)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    return caught.value


def with_line(old: str, new: str) -> str:
    assert BASE_TEXT.count(old) == 1, old
    return BASE_TEXT.replace(old, new)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# -- numbers -----------------------------------------------------------------------------

@pytest.mark.parametrize("written,words", [
    ("017500", "'017500' is an octal number (YAML 1.1 reads a leading 0 as octal), 8000 in "
               "decimal"),
    ("0x1F40", "'0x1F40' is a hexadecimal number, 8000 in decimal"),
    ("0b1111101000000", "is a binary number, 8000 in decimal"),
    ("8_000", "'8_000' is read by YAML 1.1 as 8000: write numbers without '_'"),
    ("2:13:20", "is a base-60 number (YAML 1.1 reads digits with ':' as minutes:seconds), "
                "8000 in decimal"),
    ("0o17500", "YAML 1.1 reads 0o… as text, not octal: write the decimal port: 8000"),
])
def test_misreadable_number_forms_are_refused(tmp_path, written, words):
    text = with_line(PORT, f"      port: {written}\n")
    error = refused(write(tmp_path, text))
    assert error.field == "all.vars.serving.port"
    assert error.line == line_of(text, f"port: {written}")
    assert words in str(error)


def test_float_forms_with_underscores_or_colons_are_refused(tmp_path):
    text = with_line("      gpu_memory_utilization: 0.9\n",
                     "      gpu_memory_utilization: 0:0.9\n")
    error = refused(write(tmp_path, text))
    assert "'0:0.9' is read by YAML 1.1 as 0.9" in str(error)


def test_plain_decimal_and_quoted_text_load(tmp_path):
    text = with_line(PORT, "      port: +8000\n").replace("name: qwen35-a2", "name: '017500'")
    inv = load_inventory(write(tmp_path, text), check_files=False)
    assert inv.serving.port == 8000 and inv.cluster.name == "017500"


def test_a_quoted_number_for_a_number_field_says_to_drop_the_quotes(tmp_path):
    error = refused(write(tmp_path, with_line(PORT, "      port: '8000'\n")))
    assert "(quotes make it text: write port: 8000)" in str(error)


def test_a_hexadecimal_integer_too_large_to_print_is_refused_quickly(tmp_path):
    """Before: 0x + 200 000 hex digits passed the digit count (letters are no digits) and
    the error path's repr raised ValueError (Python's int-to-str limit): a traceback."""
    text = with_line("          rank: 0\n", "          rank: 0x" + "f" * 200_000 + "\n")
    started = time.perf_counter()
    error = refused(write(tmp_path, text))
    assert time.perf_counter() - started < 5.0         # 0.13 s measured
    assert "integer of more than 30 digits" in str(error) and len(str(error)) < 300


# -- bounded excerpts --------------------------------------------------------------------

@pytest.mark.parametrize("value,shown", [
    ("a" * 1000, "'" + "a" * EXCERPT_CHARS + "…'"),
    (10 ** 4999, "an integer of about 5000 digits"),
    (10 ** 30, "1" + "0" * 30),
    ({"a": 1, "b": 2}, "a mapping of 2 keys"),
    ([1] * 7, "a list of 7 items"),
    (3.1, "3.1"), (True, "True"), (None, "None"),
], ids=lambda v: excerpt(v, 12) if not isinstance(v, str) or len(v) > 12 else v)
def test_excerpts(value, shown):
    assert excerpt(value) == shown


def test_a_megabyte_value_is_shown_as_a_short_excerpt(tmp_path):
    text = with_line("          ip: 198.18.100.10\n", "          ip: '" + "1" * 1_000_000 + "'\n")
    started = time.perf_counter()
    error = refused(write(tmp_path, text))
    assert time.perf_counter() - started < 10.0        # 0.7 s measured (the YAML parse)
    assert "is not an IPv4 address" in str(error) and len(str(error)) < 300


def test_a_long_key_is_shown_as_a_short_excerpt(tmp_path):
    key = "k" * 100_000          # an explicit key: PyYAML limits implicit ones to 1024
    text = with_line("      max_num_seqs: 16\n", f"      max_num_seqs: 16\n      ? {key}\n"
                                                  "      : 1\n")
    error = refused(write(tmp_path, text))
    assert "unknown key 'kkkk" in str(error) and "k" * (EXCERPT_CHARS + 1) not in str(error)
    assert error.field == "all.vars.serving['" + "k" * EXCERPT_CHARS + "…']"


# -- versions ----------------------------------------------------------------------------

@pytest.mark.parametrize("version", [
    # the shapes of tests/fixtures/version_info_*.txt and the release sets
    "23.0.7", "24.1.rc2.2", "24.1.rc3", "7.1.0.11.220", "7.5.0.1.129", "7.0.T10", "8.0.RC3",
    "25.3.rc1.b020", "2.9.0.post1+git4c901a4", "v0.17.0rc1", "3.11", "26.0.RC1",
])
def test_real_version_shapes_are_accepted(version):
    assert VersionsSpec.model_validate({"driver": version}).driver == version


@pytest.mark.parametrize("value", ["banana", "latest", "x1.0", "1.0.banana", "9" * 80])
def test_words_that_are_no_version_are_refused(tmp_path, value):
    text = with_line("      driver: 26.0.rc1\n", f"      driver: '{value}'\n")
    error = refused(write(tmp_path, text))
    assert error.field == "all.vars.versions.driver" and "not a version" in str(error)


def test_an_unquoted_version_read_as_a_float_says_how_to_quote_it(tmp_path):
    text = with_line("      python: '3.11'\n", "      python: 3.10\n")
    error = refused(write(tmp_path, text))
    assert error.field == "all.vars.versions.python"
    assert error.line == line_of(text, "python: 3.10")
    assert "YAML reads an unquoted 3.10 as a number: write python: '3.10'" in str(error)
    text = with_line("      python: '3.11'\n", "      python: '3.10'\n")
    assert load_inventory(write(tmp_path, text), check_files=False).versions.python == "3.10"


# -- device IPs and the RoCE netmask -------------------------------------------------------

@pytest.mark.parametrize("address,what", [("198.19.100.0", "network"),
                                          ("198.19.100.255", "broadcast")])
def test_a_device_ip_that_is_its_subnets_network_or_broadcast_is_refused(tmp_path, address,
                                                                         what):
    data = example_data()
    data["all"]["children"]["ascend"]["hosts"]["node0"]["device_ips"][3] = address
    error = refused(write(tmp_path, yaml.safe_dump(data, sort_keys=False)))
    assert error.field == "all.children.ascend.hosts.node0.device_ips[3]"
    assert f"is the {what} address of its subnet 198.19.100.0/24" in str(error)


def test_the_subnet_is_the_one_cluster_roce_netmask_gives(tmp_path):
    data = example_data()
    data["all"]["vars"]["cluster"]["roce"]["netmask"] = "255.255.0.0"
    data["all"]["children"]["ascend"]["hosts"]["node0"]["device_ips"][3] = "198.19.100.0"
    inv = load_inventory(write(tmp_path, yaml.safe_dump(data, sort_keys=False)),
                         check_files=False)
    assert inv.hosts[0].device_ips[3] == "198.19.100.0"


# -- the nearest release set ---------------------------------------------------------------

STACK_0_17 = {"vllm": "0.17.0", "cann": "8.5.1", "torch_npu": "2.9.0", "python": "3.11"}


def test_a_future_release_is_compared_with_the_newest_known():
    """Before: v0.17.0rc1 was named (fewest differences with the rest of the stack)."""
    result = match_versions({"vllm_ascend": "0.31.0", **STACK_0_17})
    assert result.nearest.tag == "v0.30.0rc2"
    assert "newer than any known release" in result.unknown_release
    with pytest.raises(ValueError) as caught:
        check_versions({"vllm_ascend": "0.31.0", **STACK_0_17},
                       lambda message, component: ValueError(f"{component}: {message}"))
    assert str(caught.value).startswith("vllm_ascend: ")
    assert "newer than any known release" in str(caught.value)
    assert "nearest is v0.30.0rc2" in str(caught.value)


@pytest.mark.parametrize("pinned,nearest,words", [
    ("0.24.0", "v0.24.0rc1", "is no known release"),
    ("0.23.5", "v0.23.0.post1", "is no known release"),
    ("0.10.0", "v0.17.0rc1", "older than any known release"),
])
def test_an_unknown_release_is_placed_by_version_order(pinned, nearest, words):
    result = match_versions({"vllm_ascend": pinned})
    assert result.nearest.tag == nearest and words in result.unknown_release


def test_a_known_release_keeps_the_fewest_differences_rule():
    result = match_versions({"vllm_ascend": "0.18.0", "python": "3.12"})
    assert result.nearest.tag == "v0.18.0" and result.unknown_release is None

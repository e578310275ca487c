"""The simulator's default versions are a coherent set by the documented rules, and the
version faults break exactly the rule they are named after."""

from __future__ import annotations

import re

from ascendctl_lab import faults
from ascendctl_lab.sim import state as st


def _nums(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def fw_in_driver_range(driver: dict, firmware: dict) -> bool:
    ranges = re.findall(r"\[([^,\]]+),([^\]]+)\]", driver["compatible_version_fw"])
    fw = _nums(firmware["Version"])
    return any(_nums(lo) <= fw[:len(_nums(lo))] and fw[:len(_nums(hi))] <= _nums(hi)
               for lo, hi in ranges)


def driver_in_fw_list(driver: dict, firmware: dict) -> bool:
    prefixes = re.findall(r"\[([^,\]]+),[^\]]+\]", firmware["compatible_version_drv"])
    return any(driver["Version"].startswith(prefix) for prefix in prefixes)


def cann_lists_driver(driver: dict, toolkit: dict) -> bool:
    code = re.match(r"(V\d+R\d+C\d+)", driver["Innerversion"]).group(1)
    return f"[{code}]" in toolkit["compatible_version"]


def test_default_set_is_coherent():
    assert fw_in_driver_range(st.DEFAULT_DRIVER, st.DEFAULT_FIRMWARE)
    assert driver_in_fw_list(st.DEFAULT_DRIVER, st.DEFAULT_FIRMWARE)
    assert cann_lists_driver(st.DEFAULT_DRIVER, st.DEFAULT_TOOLKIT)
    assert st.DEFAULT_FIRMWARE["package_version"] == st.DEFAULT_DRIVER["Version"]
    assert st.default_state()["npu_smi_version"] == st.DEFAULT_DRIVER["Version"]


def test_firmware_fault_is_outside_the_driver_range():
    assert not fw_in_driver_range(st.DEFAULT_DRIVER, faults.FIRMWARE_OLD)
    assert not driver_in_fw_list(st.DEFAULT_DRIVER, faults.FIRMWARE_OLD)


def test_cann_fault_does_not_list_the_driver():
    assert not cann_lists_driver(st.DEFAULT_DRIVER, faults.TOOLKIT_OLD)


def test_the_rules_catch_a_real_mismatch():
    # FORMATS.md §4: driver 24.1.rc2 ([7.0.0,7.2.99]) with firmware 7.3.0.1.231 failed.
    driver = {"compatible_version_fw": "[7.0.0,7.2.99]"}
    assert not fw_in_driver_range(driver, {"Version": "7.3.0.1.231"})
    assert fw_in_driver_range(driver, {"Version": "7.2.0.1.100"})


def test_every_fault_kind_is_described():
    assert len(faults.FAULT_KINDS) >= 20
    for kind, text in faults.FAULT_KINDS.items():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", kind)
        assert text and "\n" not in text


def test_node_states_differ_per_node_but_are_deterministic():
    a, b = st.default_state(node="node0"), st.default_state(node="node1")
    assert a["npus"][0]["serial"] != b["npus"][0]["serial"]
    assert a == st.default_state(node="node0")
    assert st.default_state(chip="910B4")["npus"][0]["hbm_total"] == 32768

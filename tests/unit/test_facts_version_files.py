"""Driver / firmware / toolkit version files beyond the captures of tests/facts/driver,
firmware, toolkit, toolkit_cfg: which versions go together, read from the files themselves."""

from pathlib import Path

from ascendctl.facts.version_files import (
    parse_driver_version_info,
    parse_firmware_version_info,
    parse_install_status,
    parse_key_values,
    parse_toolkit_install_info,
    parse_version_cfg,
)
from ascendctl.facts.versions import InnerCode, parse_version

FACTS = Path(__file__).resolve().parents[1] / "facts"


def case(fact: str, name: str) -> str:
    return (FACTS / fact / f"{name}.txt").read_text(encoding="utf-8").split("\n", 1)[1]


def test_910a_host_driver_firmware_toolkit():
    drv = parse_driver_version_info(case("driver", "910A_host_23.0.7"))
    fw = parse_firmware_version_info(case("firmware", "910A_host_7.1.0.11"))
    assert drv.inner_code == InnerCode(100, 1, 15)
    assert drv.compatible_fw[0].contains(fw.parsed)          # 7.1.0.11.220 in [7.0.0,7.1.99]
    # the toolkit lists C29, C30, C13, R003C10, R003C11: not this driver's C15
    assert not parse_toolkit_install_info(case("toolkit", "910A_host_7.0.T10")).accepts_driver(drv.inner_code)
    nnae = parse_toolkit_install_info(case("toolkit", "910A_host_nnae_8.0.RC3"))
    assert nnae.accepts_driver(drv.inner_code)                # [C13,C19] range


def test_cann_version_of_version_cfg():
    assert parse_version_cfg(case("toolkit_cfg", "910B_8.0.0_cat_n")).cann_version == "8.0.0"
    assert parse_version_cfg(case("toolkit_cfg", "910B_8.0.T63")).cann_version == "8.0.T63"


def test_driver_rc_4_parts_against_the_real_incompatibility_log():
    drv = parse_driver_version_info(case("driver", "910B_24.1.rc2.2"))
    # the real incompatibility log: this driver generation with firmware 7.3.0.1.231
    assert not drv.compatible_fw[0].contains(parse_version("7.3.0.1.231"))


def test_driver_firmware_pair_c():
    drv = parse_driver_version_info(case("driver", "910B_24.1.rc3"))
    fw = parse_firmware_version_info(case("firmware", "910B_7.5.0.1.129"))
    assert drv.compatible_fw[0].contains(fw.parsed)
    assert any(r.contains(drv.parsed) for r in fw.compatible_drv)   # [24.1,24.1.] holds 24.1.rc3


def test_indented_25_3_driver_lists_its_own_code():
    drv = parse_driver_version_info(case("driver", "910B_25.3.rc1_indented"))
    assert drv.compatible_inner[-1].contains(InnerCode(100, 1, 23))


def test_idle_capture_cann_block_accepts_drivers():
    tk = parse_toolkit_install_info(case("toolkit", "910B3_idle_8.1.RC1"))
    assert tk.accepts_driver(InnerCode(100, 1, 19)) and not tk.accepts_driver(InnerCode(100, 1, 23))


def test_missing_or_foreign_files():
    assert parse_toolkit_install_info("") is None
    assert parse_version_cfg("# version: 1.0\n") is None
    assert parse_install_status("UserName=HwHiAiUser\n") is None
    assert parse_key_values("     3  aicpu_version=1.0")["aicpu_version"] == "1.0"

"""Driver / firmware / toolkit version files from the captures."""

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

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def load(name: str) -> str:
    text = (FIX / name).read_text(encoding="utf-8")
    assert text.startswith("# source:")
    return text.split("\n", 1)[1]


def cut(text: str, start: str, end: str | None = None) -> str:
    i = text.index(start)
    return text[i:text.index(end, i + 1) if end else len(text)]


def test_910a_host_files():
    text = load("version_info_files_910A_host.txt")
    drv = parse_driver_version_info(cut(text, "cat /usr/local/Ascend/driver", "cat /usr/local/Ascend/firmware"))
    assert (drv.version, drv.inner_version, drv.package_version) == ("23.0.7", "V100R001C15SPC012B220", "23.0.7")
    assert drv.inner_code == InnerCode(100, 1, 15)
    assert [str(c) for c in drv.compatible_inner] == ["[V100R001C29]", "[V100R001C30]", "[V100R001C13]",
                                                      "[V100R001C15]"]
    assert [str(r) for r in drv.compatible_fw] == ["[7.0.0,7.1.99]"]
    fw = parse_firmware_version_info(cut(text, "cat /usr/local/Ascend/firmware", "cat /usr/local/Ascend/ascend-toolkit"))
    assert (fw.version, fw.package_version) == ("7.1.0.11.220", "23.0.7")
    assert [str(r) for r in fw.compatible_drv] == ["[23.0.rc3,23.0.rc3.]", "[23.0.0,23.0.0.]"]
    assert drv.compatible_fw[0].contains(fw.parsed)          # 7.1.0.11.220 in [7.0.0,7.1.99]
    tk = parse_toolkit_install_info(cut(text, "cat /usr/local/Ascend/ascend-toolkit", "cat /usr/local/Ascend/nnae"))
    assert (tk.package_name, tk.version, tk.inner_version, tk.arch) == (
        "Ascend-cann-toolkit", "7.0.T10", "V100R001C13B222", "aarch64")
    assert tk.path == "/usr/local/Ascend/ascend-toolkit/7.0.T10/aarch64-linux"
    # the toolkit lists C29, C30, C13, R003C10, R003C11: not this driver's C15
    assert not tk.accepts_driver(drv.inner_code)
    nnae = parse_toolkit_install_info(cut(text, "cat /usr/local/Ascend/nnae", "pip list"))
    assert nnae.version == "8.0.RC3" and nnae.accepts_driver(drv.inner_code)   # [C13,C19] range


def test_910b_capture_with_cat_n_numbers():
    text = load("version_info_files_910B_hosts.txt")
    drv = parse_driver_version_info(cut(text, "driver version.info", "ascend-toolkit version.info"))
    assert (drv.version, str(drv.inner_code)) == ("24.1.rc3", "V100R001C19")
    assert [str(r) for r in drv.compatible_fw] == ["[7.0.0,7.5.99]"]
    cfg = parse_version_cfg(cut(text, "ascend-toolkit version.info", "atb version.info"))
    assert cfg.cann_version == "8.0.0" and ("runtime_running_version", "7.6.0.1.220", "8.0.0") in cfg.entries
    assert len(cfg.entries) == 24


def test_910b_t_build_version_cfg_and_driver_rc_4_parts():
    text = load("version_info_files_910B_hosts.txt")
    cfg = parse_version_cfg(cut(text, "# cat /usr/local/Ascend/ascend-toolkit/latest/version.cfg", "[root@gx4"))
    assert cfg.cann_version == "8.0.T63"
    drv = parse_driver_version_info(cut(text, "# cat /usr/local/Ascend/driver/version.info", "# cat /usr/local/Ascend/atb"))
    assert drv.version == "24.1.rc2.2" and [str(r) for r in drv.compatible_fw] == ["[7.0.0,7.2.99]"]
    # the real incompatibility log: this driver generation with firmware 7.3.0.1.231
    assert not drv.compatible_fw[0].contains(parse_version("7.3.0.1.231"))


def test_driver_firmware_pair_c():
    text = load("version_info_files_910B_hosts.txt")
    block = cut(text, "# ==== (C)", "# ==== (D)")
    drv = parse_driver_version_info(cut(block, "/usr/local/Ascend/driver#", "/usr/local/Ascend/firmware#"))
    fw = parse_firmware_version_info(cut(block, "/usr/local/Ascend/firmware#"))
    assert (drv.version, fw.version) == ("24.1.rc3", "7.5.0.1.129")
    assert drv.compatible_fw[0].contains(fw.parsed)
    assert any(r.contains(drv.parsed) for r in fw.compatible_drv)   # [24.1,24.1.] holds 24.1.rc3


def test_indented_25_3_driver():
    text = load("version_info_files_910B_hosts.txt")
    drv = parse_driver_version_info(cut(text, "/usr/local/Ascend/driver/version.info\n    Version=25.3.rc1",
                                        "/usr/local/Ascend/ascend-toolkit/latest/opp"))
    assert (drv.version, str(drv.inner_code)) == ("25.3.rc1", "V100R001C23")
    assert [str(r) for r in drv.compatible_fw] == ["[7.0.0,8.9.9]"]
    assert drv.compatible_inner[-1].contains(InnerCode(100, 1, 23))


def test_idle_capture_cann_block():
    text = load("npu-smi_info_910B3_8npu_idle.txt")
    tk = parse_toolkit_install_info(text[text.index("CANN:"):])
    assert (tk.version, tk.inner_version) == ("8.1.RC1", "V100R001C21SPC001B238")
    assert tk.accepts_driver(InnerCode(100, 1, 19)) and not tk.accepts_driver(InnerCode(100, 1, 23))


def test_set_env_capture_driver_24_1_0():
    text = load("ascend-toolkit_set_env_sh_and_layout.txt")
    drv = parse_driver_version_info(cut(text, "  Version=24.1.0", "# Author"))
    assert drv.version == "24.1.0" and [str(r) for r in drv.compatible_fw] == ["[7.0.0,7.6.99]"]


def test_missing_or_foreign_files():
    assert parse_driver_version_info("cat: /usr/local/Ascend/driver/version.info: No such file") is None
    assert parse_toolkit_install_info("") is None
    assert parse_version_cfg("# version: 1.0\n") is None
    assert parse_install_status("Driver_Install_Status=complete\nUserName=HwHiAiUser\n") == "complete"
    assert parse_key_values("     3  aicpu_version=1.0")["aicpu_version"] == "1.0"

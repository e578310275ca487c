"""The files a real Ascend node has, rendered from the node state: version files,
install info, toolkit layout and the /dev/davinci* device nodes. `sync` makes the node's
filesystem match the state (run at boot and after every fault or heal)."""

from __future__ import annotations

import os
import shutil
import stat
import sys

from . import state as st

ASCEND = "/usr/local/Ascend"
TOOLKIT_ROOT = f"{ASCEND}/ascend-toolkit"
DRIVER_VERSION = f"{ASCEND}/driver/version.info"
FIRMWARE_VERSION = f"{ASCEND}/firmware/version.info"
INSTALL_INFO = "/etc/ascend_install.info"
DAVINCI_MAJOR = 236   # hisi_hdc 237 and devmm_svm 238 are from a real `ls -l /dev`
VERSION_CFG_KEYS = ("runtime", "compiler", "hccl", "opp", "toolkit", "aoe", "ncs", "opp_kernel")

INSTALL_INFO_TEXT = """UserName=HwHiAiUser
UserGroup=HwHiAiUser
Firmware_Install_Type=full
Firmware_Install_Path_Param=/usr/local/Ascend
Driver_Install_Type=full
Driver_Install_Path_Param=/usr/local/Ascend
Driver_Install_For_All=no
Driver_Install_Mode=normal
Driver_Install_Status=complete
"""

SET_ENV = """export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64/common:/usr/local/Ascend/driver/lib64/driver:$LD_LIBRARY_PATH
export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest
export LD_LIBRARY_PATH=${ASCEND_TOOLKIT_HOME}/lib64:${ASCEND_TOOLKIT_HOME}/lib64/plugin/opskernel:${ASCEND_TOOLKIT_HOME}/lib64/plugin/nnengine:$LD_LIBRARY_PATH
export PYTHONPATH=${ASCEND_TOOLKIT_HOME}/python/site-packages:${ASCEND_TOOLKIT_HOME}/opp/built-in/op_impl/ai_core/tbe:$PYTHONPATH
export PATH=${ASCEND_TOOLKIT_HOME}/bin:${ASCEND_TOOLKIT_HOME}/compiler/ccec_compiler/bin:$PATH
export ASCEND_AICPU_PATH=${ASCEND_TOOLKIT_HOME}
export ASCEND_OPP_PATH=${ASCEND_TOOLKIT_HOME}/opp
export TOOLCHAIN_HOME=${ASCEND_TOOLKIT_HOME}/toolkit
export ASCEND_HOME_PATH=${ASCEND_TOOLKIT_HOME}
"""


def key_values(data: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in data.items())


def version_cfg(running: str) -> str:
    lines = ["# version: 1.0"]
    for phase in ("running", "upgrade", "installed"):
        lines += [f"{key}_{phase}_version=[{running}]" for key in VERSION_CFG_KEYS]
    return "\n".join(lines) + "\n"


def render(state: dict) -> dict[str, str]:
    """path -> content of every version/config file the state implies."""
    files = {DRIVER_VERSION: key_values(state["driver"]),
             FIRMWARE_VERSION: key_values(state["firmware"])}
    if state.get("install_info", True):
        files[INSTALL_INFO] = INSTALL_INFO_TEXT
    toolkit = state.get("toolkit")
    if toolkit:
        version, arch = toolkit["version"], toolkit["arch"]
        base = f"{TOOLKIT_ROOT}/{version}"
        files[f"{base}/{arch}-linux/ascend_toolkit_install.info"] = key_values(toolkit)
        inner = state.get("toolkit_running", "").split(":")[0] or version
        files[f"{base}/opp/version.info"] = (f"Version={inner}\nversion_dir={version}\n")
        files[f"{base}/version.cfg"] = version_cfg(state.get("toolkit_running", version))
        files[f"{TOOLKIT_ROOT}/set_env.sh"] = SET_ENV
    return files


def _write(path: str, content: str, root: str) -> None:
    target = root.rstrip("/") + path
    os.makedirs(os.path.dirname(target), exist_ok=True)
    tmp = target + ".sim-tmp"
    with open(tmp, "w") as handle:
        handle.write(content)
    os.replace(tmp, target)


def _link(target: str, link: str) -> None:
    if os.path.islink(link) and os.readlink(link) == target:
        return
    if os.path.lexists(link):
        if os.path.isdir(link) and not os.path.islink(link):
            shutil.rmtree(link)
        else:
            os.unlink(link)
    os.symlink(target, link)


def sync_files(state: dict, root: str = "/") -> None:
    files = render(state)
    toolkit_dir = root.rstrip("/") + TOOLKIT_ROOT
    if os.path.isdir(toolkit_dir):
        shutil.rmtree(toolkit_dir)
    for path, content in files.items():
        _write(path, content, root)
    install_info = root.rstrip("/") + INSTALL_INFO
    if INSTALL_INFO not in files and os.path.exists(install_info):
        os.unlink(install_info)
    toolkit = state.get("toolkit")
    if toolkit:
        version, arch = toolkit["version"], toolkit["arch"]
        latest = f"{toolkit_dir}/latest"
        os.makedirs(latest, exist_ok=True)
        _link(f"../{version}/{arch}-linux", f"{latest}/{arch}-linux")
        if arch == "aarch64":
            _link("aarch64-linux", f"{latest}/arm64-linux")
        _link(f"../{version}/opp", f"{latest}/opp")
        shutil.copy(f"{toolkit_dir}/{version}/version.cfg", f"{latest}/version.cfg")


def _mknod(path: str, major: int, minor: int) -> None:
    try:
        current = os.stat(path)
        if stat.S_ISCHR(current.st_mode) and os.major(current.st_rdev) == major and \
                os.minor(current.st_rdev) == minor:
            return
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(major, minor))


def sync_devices(state: dict, dev: str = "/dev") -> None:
    visible = {n["id"] for n in st.visible(state)}
    for npu in state["npus"]:
        path = f"{dev}/davinci{npu['id']}"
        if npu["id"] in visible:
            _mknod(path, DAVINCI_MAJOR, npu["id"])
        elif os.path.lexists(path):
            os.unlink(path)
    for name, major, minor in (("davinci_manager", DAVINCI_MAJOR, 255), ("hisi_hdc", 237, 0),
                               ("devmm_svm", 238, 0)):
        _mknod(f"{dev}/{name}", major, minor)


def sync(state: dict, root: str = "/") -> None:
    sync_files(state, root)
    sync_devices(state, root.rstrip("/") + "/dev")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["sync"]:
        sys.stderr.write("usage: ascend-sim sync\n")
        return 2
    sync(st.load())
    return 0


if __name__ == "__main__":
    sys.exit(main())

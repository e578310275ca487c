"""Version checks: driver/firmware/CANN compatibility, the Python stack against the
compatibility matrix, the inventory's pins, and the same versions on every node."""

from __future__ import annotations

from collections import Counter
from typing import Mapping

from ascendctl.checks.compat import load_matrix
from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import cluster_check, node_check
from ascendctl.facts.node import NodeFacts
from ascendctl.facts.versions import Version, try_parse_version

COMPONENTS = ("driver", "firmware", "cann", "torch", "torch_npu", "vllm", "vllm_ascend", "python")
_PIP_NAMES = {"torch": "torch", "torch_npu": "torch-npu", "vllm": "vllm", "vllm_ascend": "vllm-ascend"}


def component_versions(facts: NodeFacts) -> dict[str, str | None]:
    out: dict[str, str | None] = dict.fromkeys(COMPONENTS)
    if facts.driver and facts.driver.version:
        out["driver"] = facts.driver.version
    elif facts.npu_smi and facts.npu_smi.driver_version:
        out["driver"] = facts.npu_smi.driver_version
    if facts.firmware:
        out["firmware"] = facts.firmware.version
    out["cann"] = cann_version(facts)
    if facts.python:
        out["python"] = facts.python.python_version
        for name in ("torch", "torch_npu", "vllm", "vllm_ascend"):
            out[name] = facts.python.version_of(name)
    return out


IN_IMAGE = ("cann", "torch", "torch_npu", "vllm", "vllm_ascend", "python")


def engine_packages(facts: NodeFacts, exp: Expectations) -> dict[str, str | None]:
    """The engine's Python packages: the node's Python, or the ones the engine's kind
    names (a venv: its wheelhouse)."""
    if exp.engine.packages is not None:
        return {name: exp.engine.packages.versions.get(name) for name in _PIP_NAMES}
    return {name: facts.python.version_of(name) if facts.python else None for name in _PIP_NAMES}


def _in_image(exp: Expectations, what: str) -> Outcome | None:
    """Skip when the engine brings its own CANN toolkit and Python stack (a container's
    image): the node's are not the engine's."""
    if exp.engine.stack_from is not None:
        return Outcome.skip(f"engine.kind {exp.engine.kind}: the {what} is the "
                            f"{exp.engine.stack_from}'s (see engine.image_cann)")
    return None


def cann_version(facts: NodeFacts) -> str | None:
    if facts.toolkit and facts.toolkit.version:
        return facts.toolkit.version
    if facts.toolkit_cfg:
        return facts.toolkit_cfg.cann_version
    return None


def matches_pin(installed: str, pin: str) -> bool:
    """`24.1` pins the 24.1 series; local tags (`+cpu`) are ignored; rc/RC case ignored."""
    iv, pv = try_parse_version(installed), try_parse_version(pin)
    if iv is None or pv is None:
        return installed.strip().lower() == pin.strip().lower()
    return iv == pv or iv.startswith(pv)


@node_check(
    "versions.driver_firmware", category="versions", severity=Severity.FAIL,
    title="firmware within the driver's compatible range",
    catches="driver and firmware packages that do not match: the firmware `Version` outside the "
            "driver's `compatible_version_fw` ranges (e.g. driver 24.1.rc2 [7.0.0,7.2.99] with "
            "firmware 7.3.0.1.231), or a missing driver/firmware version file",
    remediation="Install the firmware that matches the driver (or the driver that matches the "
                "firmware) from the same HDK release, then reboot",
)
def driver_firmware(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if facts.driver is None:
        return Outcome(Status.FAIL, "driver version.info not found (" +
                       (facts.problem("version:driver") or "not gathered") + ")",
                       "Install the Ascend driver: ./Ascend-hdk-<chip>-npu-driver_<ver>_linux-<arch>.run --full")
    if facts.firmware is None:
        return Outcome(Status.FAIL, "firmware version.info not found (" +
                       (facts.problem("version:firmware") or "not gathered") + ")",
                       "Install the NPU firmware: ./Ascend-hdk-<chip>-npu-firmware_<ver>.run --full, then reboot")
    fw = facts.firmware.parsed
    ranges = facts.driver.compatible_fw
    if fw is None or not ranges:
        return Outcome(Status.WARN, f"cannot compare: firmware {facts.firmware.version}, driver ranges "
                       f"{','.join(map(str, ranges)) or 'missing'}",
                       "Check the versions by hand against the HDK release notes")
    text = ",".join(map(str, ranges))
    if not any(r.contains(fw) for r in ranges):
        return Outcome(Status.FAIL,
                       f"firmware {facts.firmware.version} is outside driver {facts.driver.version}'s "
                       f"compatible_version_fw {text}",
                       f"Install a firmware in {text} (./Ascend-hdk-<chip>-npu-firmware_<ver>.run --full) "
                       f"or a driver whose compatible_version_fw holds {facts.firmware.version}; then reboot")
    return Outcome.ok(f"firmware {facts.firmware.version} within driver {facts.driver.version}'s {text}")


@node_check(
    "versions.cann_present", category="versions", severity=Severity.FAIL,
    title="CANN toolkit installed",
    catches="no CANN toolkit (`ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info` and "
            "`version.cfg` missing)",
    remediation="Install the CANN toolkit (./Ascend-cann-toolkit_<ver>_linux-<arch>.run --install) "
                "and kernels, then `source /usr/local/Ascend/ascend-toolkit/set_env.sh`",
)
def cann_present(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _in_image(exp, "CANN toolkit")) is not None:
        return skip
    version = cann_version(facts)
    if version is None:
        return Outcome(Status.FAIL, "CANN toolkit not found (" +
                       (facts.problem("version:toolkit") or "no install info") + ")",
                       "./Ascend-cann-toolkit_<ver>_linux-<arch>.run --install && "
                       "source /usr/local/Ascend/ascend-toolkit/set_env.sh")
    return Outcome.ok(f"CANN {version}" + (f" at {facts.toolkit.path}" if facts.toolkit and facts.toolkit.path else ""))


@node_check(
    "versions.cann_driver", category="versions", severity=Severity.FAIL,
    title="CANN toolkit compatible with the driver",
    catches="a toolkit whose `compatible_version` list does not contain the driver's Innerversion "
            "code (e.g. driver V100R001C15 with a toolkit listing only C29/C30/C13)",
    remediation="Install the CANN release made for this driver, or upgrade the driver to one the "
                "toolkit lists",
)
def cann_driver(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _in_image(exp, "CANN toolkit")) is not None:
        return skip
    if facts.toolkit is None:
        return Outcome.skip("no toolkit install info (see versions.cann_present)")
    if facts.driver is None or facts.driver.inner_code is None:
        return Outcome.skip("no driver Innerversion (see versions.driver_firmware)")
    code = facts.driver.inner_code
    listed = ",".join(map(str, facts.toolkit.compatible_inner))
    if not facts.toolkit.compatible_inner:
        return Outcome(Status.WARN, f"toolkit {facts.toolkit.version} lists no compatible_version",
                       "Check the CANN release notes for driver compatibility")
    if not facts.toolkit.accepts_driver(code):
        return Outcome(Status.FAIL,
                       f"CANN {facts.toolkit.version} does not list driver {facts.driver.version} "
                       f"({code}); it accepts {listed}",
                       f"Install a CANN toolkit whose compatible_version contains {code}, or a driver "
                       f"whose Innerversion is in {listed}")
    return Outcome.ok(f"CANN {facts.toolkit.version} accepts driver {facts.driver.version} ({code})")


@node_check(
    "versions.python_stack", category="versions", severity=Severity.FAIL,
    title="Python stack installed and consistent with the matrix",
    catches="torch, torch_npu, vllm or vllm-ascend missing, or versions that do not go together "
            "(vllm-ascend <-> vLLM <-> CANN <-> torch/torch_npu, from the shipped compatibility matrix)",
    remediation="Install the set the matrix names for your vllm-ascend (or use the image "
                "quay.io/ascend/vllm-ascend:<version>)",
)
def python_stack(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _in_image(exp, "Python stack")) is not None:
        return skip
    source = exp.engine.packages
    if source is not None and source.error:
        return Outcome(Status.FAIL, source.error, source.error_fix)
    if facts.python is None and source is None:
        return Outcome(Status.FAIL, "could not read the Python environment (" +
                       (facts.problem("python") or "not gathered") + ")",
                       "Check that the inventory's python path exists on the node")
    installed = component_versions(facts)
    packages = engine_packages(facts, exp)
    installed.update(packages)
    missing = [n for n in exp.required_packages if not packages.get(n)]
    if missing:
        names = " ".join(_PIP_NAMES.get(n, n) for n in missing)
        if source is not None:
            return Outcome(Status.FAIL, source.missing + names.replace(" ", ", "),
                           f"{source.install} {names}{source.install_into}  # versions from the matrix")
        return Outcome(Status.FAIL, "not installed: " + names.replace(" ", ", "),
                       f"{facts.python.executable or 'python3'} -m pip install "
                       + names + "  # versions from the matrix")
    va = try_parse_version(packages.get("vllm_ascend"))
    if va is None:
        return Outcome.ok("required packages installed (no vllm-ascend: matrix not applicable)",
                          *(f"{k} {v}" for k, v in installed.items() if v))
    matrix = load_matrix()
    row = matrix.release_for(va)
    if row is None:
        known = ", ".join(r.vllm_ascend.text for r in matrix.releases)
        return Outcome(Status.WARN, f"vllm-ascend {va} is not in compatibility matrix {matrix.matrix_version} "
                       f"(knows {known})", "Use a vllm-ascend release the matrix knows, or update the matrix")
    wrong = []
    for name, want in (("vllm", row.vllm), ("torch", row.torch), ("torch_npu", row.torch_npu)):
        text = packages.get(name)
        have = try_parse_version(text.split("+", 1)[0]) if text else None
        if have is not None and have != want:
            wrong.append(f"{_PIP_NAMES[name]} {text} (needs {want})")
    cann = try_parse_version(installed["cann"])
    if cann is not None and not (cann == row.cann or cann.startswith(row.cann)):
        wrong.append(f"CANN {installed['cann']} (needs {row.cann})")
    if wrong:
        pins = " ".join(f"{_PIP_NAMES[n]}=={v.text}" for n, v in
                        (("vllm", row.vllm), ("torch", row.torch), ("torch_npu", row.torch_npu)))
        where = source.install if source is not None else \
            f"{facts.python.executable or 'python3'} -m pip install"
        return Outcome(Status.FAIL, f"vllm-ascend {va} needs: " + "; ".join(wrong),
                       f"{where} {pins}"
                       + (f"  # and CANN {row.cann}" if any(w.startswith("CANN") for w in wrong) else ""))
    return Outcome.ok(f"vllm-ascend {va} with vllm {row.vllm}, torch_npu {row.torch_npu}, CANN {row.cann}")


@node_check(
    "versions.python", category="versions", severity=Severity.FAIL,
    title="Python version supported",
    catches="a Python outside what the installed vllm-ascend supports (3.10-3.11 for v0.17/v0.18)",
    remediation="Create the serving venv with a supported Python (e.g. `python3.11 -m venv ...`)",
)
def python_version(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if (skip := _in_image(exp, "Python")) is not None:
        return skip
    if facts.python is None or facts.python.python_version is None:
        return Outcome.skip("no Python facts (see versions.python_stack)")
    py = try_parse_version(facts.python.python_version)
    if py is None:
        return Outcome(Status.WARN, f"unreadable Python version {facts.python.python_version!r}")
    matrix = load_matrix()
    va = try_parse_version(engine_packages(facts, exp).get("vllm_ascend"))
    row = matrix.release_for(va) if va else None
    if row is not None:
        if not row.python_ok(py):
            return Outcome(Status.FAIL, f"Python {py} but vllm-ascend {va} supports {row.python_text}",
                           f"Recreate the venv with Python {row.python_text.split('-')[-1]}")
        return Outcome.ok(f"Python {py} (vllm-ascend {va} supports {row.python_text})")
    lo, hi = matrix.python_range()
    if not (lo <= py.release[:2] <= hi):
        return Outcome(Status.FAIL, f"Python {py} is outside {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}",
                       f"Recreate the venv with Python {hi[0]}.{hi[1]}")
    return Outcome.ok(f"Python {py}")


@node_check(
    "versions.pinned", category="versions", severity=Severity.FAIL,
    title="versions the inventory pins",
    catches="an installed driver, firmware, CANN, torch, torch_npu, vllm, vllm-ascend or Python "
            "other than the inventory pins (prefix match: `24.1` pins 24.1.x)",
    remediation="Install the pinned version, or change the pin in the inventory",
)
def pinned(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    pins = exp.versions.items()
    stack = exp.engine.stack_from
    if stack is not None:
        # the image's versions: its CANN is engine.image_cann's, the rest is in the image
        pins = tuple((n, p) for n, p in pins if n not in IN_IMAGE)
    if not pins:
        return Outcome.skip("the inventory pins no versions" if not exp.versions.items() else
                            f"engine.kind {exp.engine.kind}: the pinned versions are the "
                            f"{stack}'s")
    installed = component_versions(facts)
    if exp.engine.packages is not None:
        installed.update(engine_packages(facts, exp))
    wrong, absent = [], []
    for name, pin in pins:
        have = installed.get(name)
        if have is None and _presence_check(name, facts, exp):
            absent.append(f"{name} ({_presence_check(name, facts, exp)})")
        elif have is None or not matches_pin(have, pin):
            wrong.append((name, have, pin))
    if wrong:
        return Outcome(Status.FAIL,
                       "; ".join(f"{n} {h or 'missing'} (pinned {p})" for n, h, p in wrong),
                       "; ".join(_pin_fix(n, p, facts) for n, _, p in wrong))
    if absent:
        return Outcome.skip("not installed, reported by its presence check: " + ", ".join(absent))
    return Outcome.ok("all pinned versions installed: " + ", ".join(f"{n} {p}" for n, p in pins))


def _presence_check(name: str, facts: NodeFacts, exp: Expectations) -> str | None:
    """The check that reports `name` missing (one fault = one finding), if any."""
    if name == "cann":
        return "see versions.cann_present"
    if name in ("driver", "firmware"):
        return "see versions.driver_firmware"
    if name == "python" and facts.python is None:
        return "see versions.python_stack"
    if name in exp.required_packages:
        return "see versions.python_stack"
    return None


def _pin_fix(name: str, pin: str, facts: NodeFacts) -> str:
    py = (facts.python.executable if facts.python else None) or "python3"
    if name in _PIP_NAMES:
        return f"{py} -m pip install {_PIP_NAMES[name]}=={pin}"
    return {"driver": f"install driver {pin} (./Ascend-hdk-<chip>-npu-driver_{pin}_linux-<arch>.run --full)",
            "firmware": f"install firmware {pin} (./Ascend-hdk-<chip>-npu-firmware_{pin}.run --full) and reboot",
            "cann": f"install CANN {pin} (./Ascend-cann-toolkit_{pin}_linux-<arch>.run --install)",
            "python": f"recreate the venv with Python {pin}"}[name]


@cluster_check(
    "versions.uniform", category="versions", severity=Severity.FAIL,
    title="same versions on every node",
    catches="nodes running different driver, firmware, CANN, torch, torch_npu, vllm, vllm-ascend or "
            "Python versions (components the inventory does not pin; pinned ones are versions.pinned's)",
    remediation="Install the cluster's version on the odd node (or pin the versions in the inventory)",
)
def uniform(facts: Mapping[str, NodeFacts], exp: Expectations) -> dict[str, Outcome]:
    if len(facts) < 2:
        return {n: Outcome.skip("single node") for n in facts}
    pinned_names = {n for n, _ in exp.versions.items()}
    per_node = {n: component_versions(f) for n, f in facts.items()}
    refs: dict[str, tuple[str, str]] = {}    # component -> (key, display)
    for comp in COMPONENTS:
        if comp in pinned_names:
            continue
        keys = {n: _key(v[comp]) for n, v in per_node.items() if v[comp]}
        counts = Counter(keys.values())
        if len(counts) < 2:
            continue
        ranked = counts.most_common()
        ref_key = ranked[0][0]
        if ranked[0][1] == ranked[1][1]:
            ref_node = exp.head if exp.head in keys else sorted(keys)[0]
            ref_key = keys[ref_node]
        display = next(per_node[n][comp] for n in sorted(keys) if keys[n] == ref_key)
        refs[comp] = (ref_key, display or "")
    out: dict[str, Outcome] = {}
    for node, versions in per_node.items():
        odd = [(c, versions[c], disp) for c, (key, disp) in refs.items()
               if versions[c] and _key(versions[c]) != key]
        if odd:
            out[node] = Outcome(Status.FAIL,
                                "; ".join(f"{c} {have} (cluster: {ref})" for c, have, ref in odd),
                                "; ".join(_pin_fix(c, ref, facts[node]) for c, _, ref in odd))
        else:
            out[node] = Outcome.ok("versions identical to the rest of the cluster")
    return out


def _key(version: str | None) -> str:
    """Comparable form: rc/RC and trailing `.0` differences do not count as different."""
    v: Version | None = try_parse_version(version)
    if v is None:
        return (version or "").strip().lower()
    key = list(v.key)
    while key and key[-1] == (3, 0):
        key.pop()
    return ",".join(f"{r}:{n}" for r, n in key)

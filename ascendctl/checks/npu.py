"""NPU checks: npu-smi works, the chip, count, health, error codes, HBM, processes."""

from __future__ import annotations

from ascendctl.checks.expectations import Expectations
from ascendctl.checks.model import Outcome, Severity, Status
from ascendctl.checks.registry import node_check
from ascendctl.facts.chip import ChipFamily
from ascendctl.facts.node import NodeFacts


def npu_table_usable(facts: NodeFacts) -> bool:
    return facts.npu_smi is not None and facts.npu_smi.ok


@node_check(
    "npu.smi", category="npu", severity=Severity.FAIL,
    title="npu-smi reports the NPUs",
    catches="npu-smi missing, printing nothing, or `dcmi module initialize failed. ret is -8005` "
            "(driver/firmware upgraded without a reboot, or no access to /dev/davinci*)",
    remediation="Reboot after a driver/firmware upgrade; check `ls -l /dev/davinci*` and run as root "
                "or a member of HwHiAiUser; reinstall the driver if npu-smi is missing",
)
def npu_smi(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if facts.npu_smi is None:
        why = facts.problem("npu_smi_info") or "npu-smi info was not run"
        return Outcome(Status.FAIL, f"npu-smi unavailable ({why})",
                       "Install the Ascend driver (npu-smi ships with it) and rerun preflight")
    info = facts.npu_smi
    if info.error_code == -8005:
        return Outcome(Status.FAIL, f"npu-smi: {info.error}",
                       "The device did not start: reboot the node (required after a driver or "
                       "firmware upgrade) and check `ls -l /dev/davinci*` permissions")
    if info.error:
        return Outcome(Status.FAIL, f"npu-smi: {info.error}",
                       "Run `npu-smi info` on the node; if it prints nothing, reinstall the driver "
                       "(`./Ascend-hdk-*-npu-driver_*.run --full`) and reboot")
    return Outcome.ok(f"npu-smi {info.tool_version} sees {len(info.npu_ids)} NPU(s), "
                      f"{len(info.chips)} chip(s)")


@node_check(
    "npu.driver_install", category="npu", severity=Severity.WARN,
    title="driver package completely installed",
    catches="npu-smi's trailing `[WARNING]The driver package may not be completely installed` "
            "(/etc/ascend_install.info lacks Driver_Install_Status=complete)",
    remediation="Reinstall the driver package: `./Ascend-hdk-*-npu-driver_*.run --full --install-for-all`",
)
def driver_install(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    status = facts.driver_install_status
    warned = facts.npu_smi is not None and facts.npu_smi.driver_incomplete_warning
    if warned or (status is not None and status.lower() != "complete"):
        return Outcome(Status.FAIL,
                       "driver package may not be completely installed"
                       + (f" (Driver_Install_Status={status})" if status else ""),
                       "Reinstall the driver: `./Ascend-hdk-<chip>-npu-driver_<ver>_linux-<arch>.run "
                       "--full --install-for-all`, then reboot")
    if facts.npu_smi is None:
        return Outcome.skip("npu-smi unavailable (see npu.smi)")
    return Outcome.ok("driver install status complete" if status else "no install warning from npu-smi")


def _family_matches(expected: str, facts: NodeFacts) -> bool:
    chip = facts.chip
    if chip is None:
        return False
    aliases = {"a2": ChipFamily.A2_910B, "910b": ChipFamily.A2_910B, "a3": ChipFamily.A3_910_93,
               "910_93": ChipFamily.A3_910_93, "910c": ChipFamily.A3_910_93}
    fam = aliases.get(expected.lower())
    if fam is not None:
        return chip.family == fam
    return (chip.model or "").lower().replace("ascend", "").strip() == expected.lower().replace("ascend", "")


@node_check(
    "npu.chip", category="npu", severity=Severity.FAIL,
    title="supported NPU model",
    catches="first-generation Ascend 910 (also prints `910B`, but has on-card DDR and PCI id d801), "
            "310/310P inference cards, 950, or a model other than the inventory's",
    remediation="Use Atlas A2 (910B) or A3 (910_93) servers, or correct `chip` in the inventory",
)
def chip(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts) or facts.chip is None:
        return Outcome.skip("no NPU table (see npu.smi)")
    ident = facts.chip
    evidence = tuple(ident.evidence)
    if not ident.family.supported:
        label = {ChipFamily.GEN1_910: "first-generation Ascend 910 (not the A2 910B)",
                 ChipFamily.INFERENCE_310: "an Ascend 310/310P inference card",
                 ChipFamily.GEN_950: "an Ascend 950", ChipFamily.UNKNOWN: "an unrecognised NPU"}[ident.family]
        return Outcome(Status.FAIL, f"NPU {ident.model} is {label}; vllm-ascend needs 910B (A2) or 910_93 (A3)",
                       "Deploy on Atlas 800T/800I A2 or Atlas 800 A3 servers", evidence)
    if exp.chip and not _family_matches(exp.chip, facts):
        return Outcome(Status.FAIL, f"NPU model {ident.model} ({ident.family.value}), inventory expects {exp.chip}",
                       f"Correct `chip: {ident.model}` in the inventory or use the intended servers", evidence)
    return Outcome.ok(f"{ident.model} ({ident.family.value})", *evidence)


@node_check(
    "npu.count", category="npu", severity=Severity.FAIL,
    title="expected number of NPUs",
    catches="fewer NPUs than the inventory expects (a card not detected, a dead NPU, lspci sees more "
            "devices than npu-smi)",
    remediation="Reseat or replace the missing card; check `lspci -d 19e5:` and `npu-smi info -l`",
)
def count(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts):
        return Outcome.skip("no NPU table (see npu.smi)")
    info = facts.npu_smi
    assert info is not None
    npus = len(info.npu_ids)
    chips = len(info.chips)
    details = []
    pci_npus = len(facts.pci.npus()) if facts.pci is not None else None
    if pci_npus is not None:
        details.append(f"lspci shows {pci_npus} Huawei NPU function(s)")
    expected_chips = exp.npus_per_node * exp.chips_per_npu
    if npus < exp.npus_per_node or chips < expected_chips:
        return Outcome(Status.FAIL,
                       f"npu-smi shows {npus} NPU(s) / {chips} chip(s), inventory expects "
                       f"{exp.npus_per_node} / {expected_chips}",
                       "Check `lspci -d 19e5:` and `npu-smi info -l`; reseat or replace the missing "
                       "card, or correct `npus_per_node` in the inventory", tuple(details))
    if pci_npus is not None and pci_npus > chips:
        return Outcome(Status.FAIL,
                       f"lspci shows {pci_npus} NPU function(s) but npu-smi sees only {chips} chip(s)",
                       "A device is on the bus but not up: check `dmesg | grep -i davinci`, reboot; "
                       "replace the card if it stays missing", tuple(details))
    return Outcome.ok(f"{npus} NPU(s), {chips} chip(s)", *details)


@node_check(
    "npu.health", category="npu", severity=Severity.FAIL,
    title="NPU health OK",
    catches="an NPU whose health is Warning/Alarm/Critical/UNKNOWN (with its error codes)",
    remediation="Read the error codes with `npu-smi info -t health -i N -c C`; reset the NPU "
                "(`npu-smi set -t reset -i N -c C`) or reboot; replace hardware that stays unhealthy",
)
def health(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts):
        return Outcome.skip("no NPU table (see npu.smi)")
    bad = []
    for c in facts.npu_smi.chips:
        h = facts.health_of(c.npu_id, c.chip_id)
        status = c.health
        if h is not None and h.status and h.status != "OK":
            status = h.status
        if status != "OK":
            codes = " ".join(h.error_codes) if h and h.error_codes else "no error code"
            bad.append((c.npu_id, c.chip_id, status, codes, h.error_information if h else ()))
    if bad:
        first = bad[0]
        details = tuple(f"NPU {n} chip {c}: {s} ({codes})" + (f": {info[0]}" if info else "")
                        for n, c, s, codes, info in bad)
        return Outcome(Status.FAIL,
                       f"{len(bad)} chip(s) not healthy: " + ", ".join(f"NPU {n}/{c} {s}" for n, c, s, _, _ in bad),
                       f"npu-smi info -t health -i {first[0]} -c {first[1]}  # read the codes; then "
                       f"`npu-smi set -t reset -i {first[0]} -c {first[1]}` or reboot", details)
    return Outcome.ok(f"all {len(facts.npu_smi.chips)} chip(s) OK")


@node_check(
    "npu.error_codes", category="npu", severity=Severity.WARN,
    title="no error codes on healthy NPUs",
    catches="error codes reported by `npu-smi info -t health` while the health is still OK",
    remediation="Read them with `npu-smi info -t health -i N -c C` and watch the NPU",
)
def error_codes(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts):
        return Outcome.skip("no NPU table (see npu.smi)")
    if not facts.health:
        return Outcome.skip("npu-smi -t health was not gathered")
    noisy = [(n, c, h) for n, c, h in facts.health if h.status == "OK" and h.error_codes]
    if noisy:
        n, c, _ = noisy[0]
        return Outcome(Status.FAIL,
                       "error codes on healthy NPUs: " + "; ".join(
                           f"NPU {n}/{c}: {' '.join(h.error_codes)}" for n, c, h in noisy),
                       f"npu-smi info -t health -i {n} -c {c}")
    return Outcome.ok("no error codes")


@node_check(
    "npu.processes", category="npu", severity=Severity.FAIL,
    title="no leftover processes on the NPUs",
    catches="processes from a previous run holding NPUs and their HBM (npu-smi process table)",
    remediation="Stop the old service or kill the listed PIDs, then check `npu-smi info` again",
)
def processes(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts):
        return Outcome.skip("no NPU table (see npu.smi)")
    procs = [p for p in facts.npu_smi.processes if p.pid not in exp.allowed_npu_pids]
    if procs:
        pids = sorted({p.pid for p in procs})
        held = sum(p.memory_mb for p in procs)
        details = tuple(f"NPU {p.npu_id}" + (f"/{p.chip_id}" if p.chip_id is not None else "")
                        + f": pid {p.pid} {p.name or '(name hidden)'} {p.memory_mb} MB" for p in procs)
        return Outcome(Status.FAIL,
                       f"{len(pids)} process(es) hold NPUs ({held} MB HBM): pids {' '.join(map(str, pids))}",
                       f"ps -o pid,user,cmd -p {','.join(map(str, pids))}; kill {' '.join(map(str, pids))}",
                       details)
    return Outcome.ok("no processes on the NPUs")


@node_check(
    "npu.hbm_free", category="npu", severity=Severity.FAIL,
    title="HBM free on every NPU",
    catches="HBM in use on an NPU that shows no process (held from another container or a leaked "
            "context), or less free HBM than the layout needs",
    remediation="Find the holder (`npu-smi info`, containers using /dev/davinci*), stop it or reset "
                "the NPU; or choose a layout that needs less HBM per card",
)
def hbm_free(node: str, facts: NodeFacts, exp: Expectations) -> Outcome:
    if not npu_table_usable(facts):
        return Outcome.skip("no NPU table (see npu.smi)")
    info = facts.npu_smi
    assert info is not None
    busy = {p.npu_id for p in info.processes}   # explained by npu.processes
    short = []
    checked = 0
    for c in info.chips:
        if c.hbm_total_mb is None or c.hbm_used_mb is None or c.npu_id in busy:
            continue
        checked += 1
        need = exp.min_free_hbm_mb if exp.min_free_hbm_mb is not None else c.hbm_total_mb - exp.hbm_idle_used_mb
        if c.hbm_free_mb is not None and c.hbm_free_mb < need:
            short.append((c, need))
    if short:
        c0 = short[0][0]
        return Outcome(Status.FAIL,
                       "HBM short: " + ", ".join(f"NPU {c.npu_id}/{c.chip_id} {c.hbm_free_mb} MB free "
                                                 f"(need {need})" for c, need in short),
                       f"Find what holds NPU {c0.npu_id} (`npu-smi info`; "
                       f"`docker ps` for containers mapping /dev/davinci{c0.npu_id}); stop it or "
                       f"`npu-smi set -t reset -i {c0.npu_id} -c {c0.chip_id}`")
    if checked == 0:
        return Outcome.skip("no HBM figures (no HBM column, or every NPU is held by a process)")
    return Outcome.ok(f"HBM free on {checked} chip(s)")

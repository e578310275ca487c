"""The fault policy table: the shipped defaults against MindCluster's own files, the site
file merged over them, and the loader's `file:line: field: message` problems."""

from __future__ import annotations

import json

import pytest

from ascendctl_runtime.faults.policy import (
    ACTIONS, PolicyError, load_policy, merge, parse_policy, table_from_dict, table_to_json,
)
from ascendctl_runtime.faults.signals import SIGNALS
from tests.unit.faults_fixtures import body

LEVELS = {  # MindCluster level -> the action ascendctl takes (docs/faults.md)
    "NotHandleFaultCodes": "ignore", "SubHealthFaultCodes": "alert", "RestartRequestCodes": "alert",
    "FreeRestartNPUCodes": "alert", "RestartBusinessCodes": "restart", "RestartNPUCodes": "drain",
    "SeparateNPUCodes": "isolate", "PreSeparateNPUCodes": "drain",
}


@pytest.fixture(scope="module")
def table():
    return load_policy()


def first_reading_actions(table, code):
    return {r.action for r in table.rules_for(code) if r.persistence.readings == 1
            and r.persistence.window_s is None and r.persistence.for_s is None}


def test_every_mindcluster_code_gets_its_levels_action_or_a_more_severe_one(table):
    levels = json.loads(body("mindcluster_faultCode.json.txt"))
    assert set(levels) == set(LEVELS)
    strongest: dict[str, str] = {}
    for level, codes in levels.items():
        for code in codes:
            action = LEVELS[level]
            if ACTIONS.index(action) > ACTIONS.index(strongest.get(code.upper(), "ignore")):
                strongest[code.upper()] = action
            strongest.setdefault(code.upper(), action)
    for code, action in strongest.items():
        assert first_reading_actions(table, code) == {action}, code


def test_every_mindcluster_frequency_rule_is_an_isolate_escalation(table):
    custom = json.loads(body("mindcluster_faultCustomization.json.txt"))
    for rule in custom["FaultFrequency"]:
        assert rule["FaultHandling"] == "ManuallySeparateNPU"
        for code in rule["EventId"]:
            windows = [(r.persistence.readings, r.persistence.window_s)
                       for r in table.rules_for(code) if r.action == "isolate"]
            assert (rule["Times"], float(rule["TimeWindow"])) in windows, code
    (duration,) = custom["FaultDuration"]
    (held,) = [r for r in table.rules_for(duration["EventId"][0]) if r.persistence.for_s is not None]
    assert (held.action, held.persistence.for_s) == ("drain", float(duration["FaultTimeout"]))


def test_hbm_multi_bit_ecc_event_ids_as_the_cann_guide_names_them(table):
    # troubleshooting_0009: 0x80E01809 patrol (the system isolates the address: NotHandle),
    # 0x80E01801 on access (wrong data returned: RestartBusiness, isolate when it comes back)
    assert {r.action for r in table.rules_for("80E01809")} == {"ignore"}
    assert {(r.action, r.persistence.describe()) for r in table.rules_for("80E01801")} == {
        ("restart", "first reading"), ("isolate", "2 within 86400 s")}


def test_every_signal_has_a_rule_and_every_rule_a_source(table):
    for signal in SIGNALS:
        assert table.rules_for(signal), signal
    for rule in table.rules:
        assert rule.source.strip() and rule.where.startswith("policy_defaults.json:")
    assert first_reading_actions(table, "ecc.multi_bit") == {"drain"}
    assert not [r for r in table.rules_for("ecc.single_bit") if r.action != "alert"]
    assert [r.persistence.readings for r in table.rules_for("temp.high")] == [3]


def test_unknown_code_alerts(table):
    (rule,) = table.rules_for("ABCD1234")
    assert rule.action == "alert"


def defaults():
    from ascendctl_runtime.faults.policy import DEFAULTS_PATH
    return parse_policy(DEFAULTS_PATH.read_text(encoding="utf-8"), "policy_defaults.json", site=False)


def test_site_file_moves_a_code_as_mindclusters_guide_does():
    # MindCluster's guide: take 80E21007 out of NotHandleFaultCodes and put it in RestartNPUCodes
    site = parse_policy('{"format": "ascendctl-faults/1",\n "drain": [{"codes": ["80e21007"]}]}\n', "site.json")
    table = merge(defaults(), site)
    (rule,) = table.rules_for("80E21007")
    assert (rule.action, rule.source, rule.where) == ("drain", "site file site.json", "site.json:2")


def test_site_file_can_silence_a_default_escalation():
    site = parse_policy('{"format": "ascendctl-faults/1", "alert": [{"codes": ["80E01801"], '
                        '"persistence": {"readings": 2}}], "temp_high_c": 100}', "site.json")
    table = merge(defaults(), site)
    assert [r.action for r in table.rules_for("80E01801")] == ["alert"]
    assert table.temp_high_c == 100
    assert [r.action for r in table.rules_for("80E01809")] == ["ignore"]     # untouched


def test_load_policy_reads_the_site_file(tmp_path):
    path = tmp_path / "faults.json"
    path.write_text('{"format": "ascendctl-faults/1", "clear_after_readings": 5}\n', encoding="utf-8")
    assert load_policy(str(path)).clear_after_readings == 5


SITE = """{
  "format": "ascendctl-faults/1",
  "drain": [
    {"codes": ["80E21007", "xyz", 7]},
    {"codes": ["link.flap"], "persistence": {"readings": 0}},
    {"codes": ["80E21007"], "persistence": {"for_s": 5, "readings": 2}}
  ],
  "reboot": [],
  "isolate": [{"codes": ["health.alarm"], "persistence": {"readings": 2, "window": 60}, "why": "x"}],
  "unknown_code": {"action": "panic"},
  "temp_high_c": 500
}
"""


def test_site_file_problems_all_at_once_with_file_line_and_field():
    with pytest.raises(PolicyError) as caught:
        parse_policy(SITE, "site.json")
    assert caught.value.problems == [
        "site.json:4: drain[0].codes[1]: 'xyz' is neither a fault code (8 hex digits), a CANN error code "
        "(E + letter + 4 digits) nor a signal (" + ", ".join(SIGNALS) + ")",
        "site.json:4: drain[0].codes[2]: 7 is neither a fault code (8 hex digits), a CANN error code "
        "(E + letter + 4 digits) nor a signal (" + ", ".join(SIGNALS) + ")",
        "site.json:5: drain[1].persistence.readings: must be a whole number in [1, 100000]",
        "site.json:6: drain[2].persistence: for_s stands alone (no readings or window_s with it)",
        "site.json:6: drain[2].codes: 80E21007 is already under drain (line 4)",
        "site.json:8: reboot: unknown key (format, ignore, alert, restart, drain, isolate, clear_after_readings, "
        "temp_high_c, unknown_code)",
        "site.json:9: isolate[0].why: unknown key (codes, persistence, source, note, where)",
        "site.json:9: isolate[0].persistence.window: unknown key (readings, window_s, for_s)",
        "site.json:10: unknown_code.action: must be one of ignore, alert, restart, drain, isolate",
        "site.json:11: temp_high_c: must be whole degrees C in [40, 150]",
    ]
    assert str(caught.value).splitlines()[0].startswith("site.json:4: drain[0].codes[1]:")


@pytest.mark.parametrize("text,problem", [
    ('{"format": "ascendctl-faults/1",\n "alert": [],\n "alert": []}', "site.json:3: json: key 'alert' twice"),
    ('{"format": "ascendctl-faults/1"}\n{}', "site.json:2: json: extra data after the document"),
    ('{"format": "ascendctl-faults/1", "alert": [\n  {"codes": ["80E21007"],}\n]}', "site.json:2: json: expected a key in double quotes"),
    ('{"format": "ascendctl-faults/1", "temp_high_c": NaN}', "site.json:1: json: expected a value"),
    ('[' * 40 + ']' * 40, "site.json:1: json: nested deeper than 32"),
    ('{"format": "ascendctl-faults/2"}', "site.json:1: format: must be 'ascendctl-faults/1'"),
    ('{"alert": [{"codes": []}]}', "site.json:1: format: must be 'ascendctl-faults/1'"),
    ('"just text"', "site.json:1: document: must be an object"),
    ('{"format": "ascendctl-faults/1", "alert": [{"codes": ["E1"]}]', "site.json:1: json: expected ',' or '}'"),
])
def test_site_file_json_problems(text, problem):
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "site.json")
    assert caught.value.problems[0] == problem


def test_defaults_need_sources_and_settings():
    with pytest.raises(PolicyError) as caught:
        parse_policy('{"format": "ascendctl-faults/1", "alert": [{"codes": ["temp.high"]}]}', "d.json", site=False)
    assert caught.value.problems == [
        "d.json:1: alert[0].source: must say where this default comes from",
        "d.json:1: clear_after_readings: the defaults must set it",
        "d.json:1: temp_high_c: the defaults must set it",
        "d.json:1: unknown_code: the defaults must set it",
    ]


# -- the merged table as one file (the node's faults.json carries it) ---------------------

MERGED_SITE = ('{"format": "ascendctl-faults/1",\n "drain": [{"codes": ["80E21007", "temp.high"], "persistence": {"for_s": 30}}],\n'
        ' "isolate": [{"codes": ["EI0013"], "persistence": {"readings": 5, "window_s": 600}, "note": "n"}],\n'
        ' "unknown_code": {"action": "ignore"}, "clear_after_readings": 4}\n')


@pytest.mark.parametrize("site", [None, MERGED_SITE], ids=["defaults", "site merge"])
def test_a_table_written_as_one_file_reads_back_equal(site):
    table = merge(defaults(), None if site is None else parse_policy(site, "site.json"))
    text = table_to_json(table)
    again = merge(parse_policy(text, "faults.json", site=False))
    assert again == table
    assert table_from_dict(json.loads(text), "faults.json") == table
    # every rule still names the line it was written on, not the rendered file's
    assert {r.where.split(":")[0] for r in again.rules} == ({"policy_defaults.json"} if site is None
                                                             else {"policy_defaults.json", "site.json"})


def test_the_merged_table_lists_each_action_together_mildest_first():
    table = merge(defaults(), parse_policy(MERGED_SITE, "site.json"))
    order = [ACTIONS.index(r.action) for r in table.rules]
    assert order == sorted(order)
    assert [(r.action, r.where) for r in table.rules_for("EI0013")] == [("isolate", "site.json:3")]


def test_a_where_that_is_no_place_is_refused():
    with pytest.raises(PolicyError) as caught:
        parse_policy('{"format": "ascendctl-faults/1", "alert": [{"codes": ["EI0013"], "where": 3}]}', "s.json")
    assert caught.value.problems == ["s.json:1: alert[0].where: must be file:line, at most 300 characters"]

"""Issue 21, acceptance 1: `plan` sizes the KV cache as the target vllm-ascend release
allocates (ascendctl.plan.pagerules), from the chip's usable HBM total (ascendctl.plan.hbm),
and says which rule and total it used. Expected figures are the published ones:
vllm-ascend#7393 (Qwen3.5-35B TP8: attn_block_size=512 ssm_block_page_size=262144
conv_block_page_size=12288) and the v0.17.0rc1 release notes ("with tp 2, the block_size
is adjusted to 2048")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ascendctl.releases.sets import load_matrix
from ascendctl.plan import plan_inventory
from ascendctl.plan.hbm import CHIP_TOTALS, GIB, usable_total
from ascendctl.plan.kvcache import pages
from ascendctl.plan.layout import Layout
from ascendctl.plan.modelcfg import load_model_config
from ascendctl.plan.pagerules import ASCEND_RULES, UPSTREAM, rule_for
from tests.unit.test_plan_inventories import make_inventory, model, serving, set_nodes

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/models/qwen3.5-35b-a3b/config.json"


# The release the published figures come from (#7393 and the v0.17.0rc1 release notes)
V0_17 = {"driver": "24.1.0", "cann": "8.5.1", "python": "3.11", "torch_npu": "2.9.0",
         "vllm": "0.17.0", "vllm_ascend": "0.17.0rc1"}


def qwen35_35b(tp: int, *, versions: dict | None = None, spec: int = 3, edit_config=None):
    def edit(data):
        set_nodes(data, 1)
        model(data).update(quantization="none", config=str(FIXTURE), builtin_config=None)
        serving(data).update(tensor_parallel_size=tp, data_parallel_size=1,
                             data_parallel_size_local=1, enable_expert_parallel=False,
                             api_server_count=None,
                             speculative_config={"method": "qwen3_5_mtp",
                                                 "num_speculative_tokens": spec})
        if versions is not None:
            data["all"]["vars"]["versions"] = versions
    return edit


def first_stage(tmp_path, edit, name="inventory.yaml"):
    plan = plan_inventory(make_inventory(tmp_path, edit, name=name))
    return plan, plan.requested.as_dict()["stages"][0]


def test_qwen35_35b_tp8_mtp3_gives_the_pages_of_issue_7393(tmp_path):
    plan, stage = first_stage(tmp_path, qwen35_35b(8, versions=V0_17))
    assert plan.workload.page_rule.release == "0.17.0rc1"
    assert stage["kv_block_size"] == 512                    # attn_block_size=512
    assert stage["ssm_state_bytes"] == 262_144              # ssm_block_page_size=262144
    assert stage["conv_state_bytes"] == 12_288              # conv_block_page_size=12288
    # #7393: "attn_page_size ... 524288"; the padded page is that + the conv page
    assert stage["kv_attention_page_bytes"] == 524_288
    assert stage["kv_page_bytes"] == 524_288 + 12_288


def test_qwen35_35b_tp2_block_is_2048_as_the_release_notes_say(tmp_path):
    _, stage = first_stage(tmp_path, qwen35_35b(2, versions=V0_17))
    assert stage["kv_block_size"] == 2048


def test_the_block_does_not_depend_on_the_speculative_tokens(tmp_path):
    """The conv page grows with MTP tokens (3 + n rows); the block follows the SSM page."""
    _, none = first_stage(tmp_path, qwen35_35b(8, spec=1), name="one.yaml")
    # conv 8192 / 8 channels x (4 - 1 + 1) x 2 B = 8,192 B
    assert (none["kv_block_size"], none["conv_state_bytes"]) == (512, 8_192)


def test_plain_vllm_keeps_upstreams_rule(tmp_path):
    """No vllm_ascend nor torch_npu pinned (the lab's CPU build): upstream vLLM pads the
    whole state (262,144 + 12,288 = 274,432 B) to 16 x cdiv(274432, 16 x 1024) = 272-token
    blocks of K+V."""
    plan, stage = first_stage(tmp_path, qwen35_35b(8, versions={}))
    assert plan.workload.page_rule.rule is UPSTREAM
    assert (stage["kv_block_size"], stage["kv_page_bytes"]) == (272, 272 * 1024)


# Qwen3.5-35B at TP8 + MTP 3. Up to v0.29.x the block follows the K page (#7393's 512);
# v0.30.0rc1 leaves it to vLLM's hook: 128 x cdiv(12,288 + 262,144, 128 x 1,024) = 384
# (tests/unit/test_plan_vllm_ascend_releases.py transcribes both).
@pytest.mark.parametrize("release, rule_name, block", [
    ("0.17.0rc1", "vllm-ascend-k-page", 512),
    ("0.18.0", "vllm-ascend-k-page", 512),
    ("0.23.0", "vllm-ascend-k-page-mla", 512),
    ("0.23.0.post1", "vllm-ascend-k-page-mla", 512),
    ("0.26.0rc1", "vllm-ascend-k-page-mla", 512),
    ("0.27.1rc1", "vllm-ascend-k-page-mla", 512),
    ("0.28.0rc1", "vllm-ascend-k-page-kpool", 512),
    ("0.29.0rc1", "vllm-ascend-k-page-kpool", 512),
    ("0.30.0rc1", "vllm-ascend-vllm-aligned", 384),
    ("0.30.0rc2", "vllm-ascend-vllm-aligned", 384),
])
def test_each_release_gets_its_rule(tmp_path, release, rule_name, block):
    plan, stage = first_stage(tmp_path, qwen35_35b(8, versions={"vllm_ascend": release}))
    choice = plan.workload.page_rule
    assert (choice.rule.name, choice.release, choice.checked, choice.note) == \
        (rule_name, release, True, "")
    assert stage["kv_block_size"] == block


def test_releases_before_the_k_page_rule_padded_the_whole_state():
    """v0.14.0rc1-v0.15.x (no release set of ascendctl pins them, so through the table):
    128 x cdiv(274432, 128 x 1024) = 384-token K+V blocks, the state padded to 384 KiB."""
    choice = rule_for("0.15.0rc1")
    assert choice.rule.name == "vllm-ascend-whole-page-128" and choice.checked
    page = pages(load_model_config(FIXTURE), Layout("mp", 1, 8), kv_bytes=2, dtype_bytes=2,
                 num_spec=3, rule=choice.rule)
    assert (page.block_size, page.page_bytes) == (384, 384 * 1024)


def test_a_future_release_says_it_uses_the_newest_rule():
    choice = rule_for("0.31.0rc1")
    assert choice.rule is ASCEND_RULES[-1] and not choice.checked
    assert "newer than every release checked (newest: v0.30.0rc2)" in choice.note
    between = rule_for("0.28.1")
    assert between.rule.name == "vllm-ascend-k-page-kpool" and "not read" in between.note
    assert "older than every release checked" in rule_for("0.13.0").note


def test_every_release_in_the_matrix_was_read():
    """Each vllm-ascend release of releases/data/release_sets.yaml has its rule from its own
    code, with no note."""
    for row in load_matrix().releases:
        choice = rule_for(row.vllm_ascend)
        assert choice.checked and not choice.note, row.vllm_ascend


def test_torch_npu_without_vllm_ascend_is_an_npu_stack():
    choice = rule_for(None, npu_stack=True)
    assert choice.engine == "vllm-ascend" and choice.rule is ASCEND_RULES[-1]
    assert "not pinned" in choice.note


def test_the_rule_table_has_no_gaps_or_overlaps():
    for before, after in zip(ASCEND_RULES, ASCEND_RULES[1:]):
        assert before.until == after.first
    assert ASCEND_RULES[-1].until is None
    assert all(rule.sources for rule in ASCEND_RULES)


def test_a_state_no_k_block_can_match_is_refused(tmp_path):
    """vllm-ascend asserts that 128-token multiples of K equal the SSM page: 3 KV heads x
    256 x 2 B = 1,536 B of K per token at TP1, SSM 32 x 128 x 128 x 4 = 2,097,152 B;
    128 x cdiv(2097152, 128 x 1536) = 1408 tokens, 1408 x 1536 = 2,162,688 != 2,097,152."""
    config = json.loads(FIXTURE.read_text())
    config["text_config"]["num_key_value_heads"] = 3
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))

    def edit(data):
        qwen35_35b(1)(data)
        model(data)["config"] = str(path)

    plan, stage = first_stage(tmp_path, edit)
    assert stage["kv_block_size"] == 1408
    assert any("Cannot align ssm_page_size and attn_page_size." in p
               for p in plan.requested.problems)


def test_prefix_caching_on_a_hybrid_model_is_warned(tmp_path):
    def edit(data):
        serving(data)["enable_prefix_caching"] = True

    warnings = plan_inventory(make_inventory(tmp_path, edit)).requested.warnings
    assert any("mamba_cache_mode to 'align'" in w for w in warnings)
    plain = plan_inventory(make_inventory(tmp_path, name="off.yaml")).requested.warnings
    assert not any("mamba_cache_mode" in w for w in plain)


def test_budget_starts_from_mem_get_info_total(tmp_path):
    """vllm-ascend#8621: "(0.9, 54.86 GiB)" on a 64 GB 910B."""
    plan = plan_inventory(make_inventory(tmp_path))
    assert plan.workload.hbm.total_bytes == 65_452_113_920
    assert round(plan.requested.stages[0].budget / GIB, 2) == 54.86


def test_chip_table_marks_what_is_derived():
    assert usable_total("910B1") == usable_total("910B3") == CHIP_TOTALS["910B2C"]
    assert usable_total("910B3").verified
    b4 = usable_total("910B4")
    assert not b4.verified and "derived" in b4.source
    # 32 GiB minus the 64 GiB - 60.957 GiB a 64 GB 910B does not report
    assert b4.total_bytes == 32 * GIB - (64 * GIB - 65_452_113_920) == 31_092_375_552
    a3 = usable_total("Ascend910_93")
    assert not a3.verified and "sglang#29838" in a3.source
    assert round(a3.total_bytes / GIB, 2) == 61.26
    # the chip's own size is the chip's row; another size is derived from it
    assert usable_total("910B3", 64) is CHIP_TOTALS["910B3"]
    other = usable_total("910B3", 48)
    assert other.total_bytes == 48 * GIB - (64 * GIB - 65_452_113_920) and not other.verified


def test_plan_says_which_rule_and_total_it_used(tmp_path):
    make_inventory(tmp_path, qwen35_35b(8, versions=V0_17))
    argv = [sys.executable, "-m", "ascendctl", "plan", "-i", str(tmp_path / "inventory.yaml")]
    env = {"ASCENDCTL_PLAIN": "1", "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    text = subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout
    assert "HBM total: 60.96 GiB of 64 GiB HBM per NPU" in text and "#8621" in text
    assert "KV cache rule: vllm-ascend 0.17.0rc1:" in text
    assert "patch_mamba_config.py @ v0.16.0rc1, v0.17.0rc1" in text
    assert ("blocks of 512 tokens, page 536,576 B (attention 524,288 B; state: SSM "
            "262,144 B + conv 12,288 B)") in text
    data = json.loads(subprocess.run(argv + ["--json"], capture_output=True, text=True,
                                     env=env, check=True).stdout)
    assert data["kv_cache_rule"]["engine"] == "vllm-ascend"
    assert data["kv_cache_rule"]["release"] == "0.17.0rc1"
    assert data["kv_cache_rule"]["rule"] == "vllm-ascend-k-page"
    assert any("patch_mamba_config.py" in s for s in data["kv_cache_rule"]["sources"])
    assert data["hardware"]["hbm_total_bytes"] == 65_452_113_920
    assert data["hardware"]["hbm_per_npu_bytes"] == 64 * GIB
    assert "#8621" in data["hardware"]["hbm_total_source"]

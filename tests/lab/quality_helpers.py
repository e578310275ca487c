"""What the quality-gate lab tests build: the prompt sets (the built-in set plus chat
prompts, prompt sets expecting what a release really answered) and a structurally valid
checkpoint with one tensor altered."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import yaml

SCALED_TENSOR = "model.layers.1.mlp.down_proj.weight"
SCALE = 8.0
CHAT_PROMPTS = [
    {"id": "chat-hello", "messages": [{"role": "user", "content": "Hello, how are you?"}]},
    {"id": "chat-system", "messages": [
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "What does the operator check before a deploy?"}]},
]


def agreement_prompt_file(directory: Path) -> Path:
    """The built-in prompt set plus two chat prompts (both endpoints, real engine)."""
    from ascendctl.paths import package_data

    builtin = yaml.safe_load((package_data("ascendctl.inventory") / "data" /
                              "agreement_prompts.yaml").read_text())
    path = directory / "agree.yaml"
    path.write_text(yaml.safe_dump(builtin + CHAT_PROMPTS, sort_keys=False,
                                   allow_unicode=True))
    return path


def real_answer_prompts(directory: Path, agree_prompts: Path, answered: list[dict],
                        wrong: str | None = None) -> Path:
    """Three prompts of the set, each expecting what a release really answered (exact
    text, a substring of it, a regular expression of its start), and one chat prompt;
    with WRONG, the second expects that substring instead."""
    answers = {p["id"]: p for p in answered}
    source = {e["id"]: e for e in yaml.safe_load(agree_prompts.read_text())}
    capital, python, story = answers["capital"], answers["python"], answers["story"]
    chat = answers["chat-hello"]
    assert capital["text"] and python["text"] and story["text"]
    entries = [
        {"id": "capital", "prompt": source["capital"]["prompt"], "exact": capital["text"]},
        {"id": "python", "prompt": source["python"]["prompt"],
         "contains": python["text"][2:8] or python["text"]},
        {"id": "story", "prompt": source["story"]["prompt"],
         "regex": "^" + re.escape(story["text"][:6])},
        {"id": "chat-hello", "messages": source["chat-hello"]["messages"],
         "exact": chat["text"]},
    ]
    if wrong is not None:
        entries[1]["contains"] = wrong
    # JSONL: JSON escapes every character a random model may answer with (YAML writers
    # leave some, such as U+0085, that YAML readers take for line breaks)
    path = directory / ("wrong.jsonl" if wrong else "right.jsonl")
    path.write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    return path


def scaled_copy(source: Path, target: Path, tensor: str, factor: float) -> None:
    """The lab's model with one BF16 tensor multiplied by FACTOR: the same files, names,
    shapes and dtypes (structurally valid), other numbers."""
    import numpy as np
    from safetensors import safe_open

    from ascendctl_lab.model import to_bf16_bytes

    shutil.copytree(source, target)
    index = json.loads((target / "model.safetensors.index.json").read_text())
    path = target / index["weight_map"][tensor]
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    start, end = header[tensor]["data_offsets"]
    begin = 8 + size
    bits = np.frombuffer(raw[begin + start:begin + end], dtype="<u2").astype(np.uint32) << 16
    scaled = to_bf16_bytes(bits.view(np.float32) * np.float32(factor))
    assert len(scaled) == end - start
    path.write_bytes(raw[:begin + start] + scaled + raw[begin + end:])
    with safe_open(str(path), framework="numpy") as handle:   # still a valid checkpoint
        assert tensor in handle.keys()

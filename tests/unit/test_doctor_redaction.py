"""Doctor redaction when the controller does NOT know the key: every common way a secret
is written in a log, an argv, an env dump or a config is redacted (each format its own
case), and near-misses that only look like secrets are kept."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from urllib.parse import quote

import pytest

from ascendctl.doctor.bundle import write_bundle
from ascendctl.doctor.collect import NodeCollection
from ascendctl.load import load_inventory
from ascendctl_runtime.doctor_node import REDACTED, redact

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
K = "Zq7v9Lm2Xc4Rt8Wb"          # the secret: never given to the redactor

# (case id, text holding the secret K)
FORMATS = [
    ("flag-space", f"vllm serve /m --api-key {K} --port 8000"),
    ("flag-double-quoted", f'vllm serve /m --api-key "{K}" --port 8000'),
    ("flag-single-quoted", f"vllm serve /m --api-key '{K}' --port 8000"),
    ("flag-equals", f"vllm serve /m --api-key={K} --port 8000"),
    ("flag-in-json-argv", f'{{"argv": ["vllm", "serve", "--api-key", "{K}", "--port", "8000"]}}'),
    ("flag-in-python-argv", f"argv=['vllm', 'serve', '--api-key', '{K}']"),
    ("snake-equals", f"settings api_key={K} loaded"),
    ("kebab-colon", f"api-key: {K}"),
    ("json-pair", f'{{"api_key": "{K}", "port": 8000}}'),
    ("python-dict-pair", f"non-default args: {{'api_key': '{K}', 'port': 8000}}"),
    ("authorization-bearer-header", f"Authorization: Bearer {K}"),
    ("authorization-json", f'{{"Authorization": "Bearer {K}"}}'),
    ("authorization-basic", f"authorization: Basic {K}"),
    ("proxy-authorization", f"Proxy-Authorization: Bearer {K}"),
    ("x-api-key-header", f"x-api-key: {K}"),
    ("x-api-key-equals", f"X-Api-Key={K}"),
    ("x-api-key-json", f'"headers": {{"x-api-key": "{K}"}}'),
    ("vllm-env", f"VLLM_API_KEY={K}"),
    ("export-quoted", f'export VLLM_API_KEY="{K}"'),
    ("openai-env", f"OPENAI_API_KEY={K} python bench.py"),
    ("token-equals", f"token={K}"),
    ("password-equals", f"password={K}"),
    ("secret-colon", f"secret: {K}"),
    ("json-token", f'{{"token": "{K}"}}'),
    ("dict-password", f"{{'password': '{K}'}}"),
    ("url-userinfo", f"fetching https://user:{K}@models.example/v1"),
    ("sk-anywhere", f"key in use: sk-{K}"),
    ("bearer-anywhere", f"retrying with Bearer {K} after 401"),
    ("environ-dump", f"PATH=/usr/bin\x00VLLM_API_KEY={K}\x00HOME=/root"),
    ("ps-argv", f"root  4242  python3 -m vllm.entrypoints.openai.api_server --api-key {K} --port 8000"),
    ("hf-token-flag", f"--hf-token {K}"),
    ("hf-token-env", f"HF_TOKEN={K}"),
    ("query-string", f"GET /v1/models?api_key={K}&x=1"),
    ("yaml-nested", f"serving:\n  auth:\n    secret_key: {K}\n"),
    ("camel-case", f"apiKey={K}"),
    ("access-key", f"AWS_SECRET_ACCESS_KEY={K}"),
    ("client-secret-json", f'{{"client_secret": "{K}"}}'),
    ("passphrase", f"passphrase: '{K}'"),
    # the header, in every case and spelling
    ("authorization-lowercase-bearer", f"authorization: bearer {K}"),
    ("authorization-basic-json-lowercase", f'{{"authorization": "basic {K}"}}'),
    ("authorization-no-scheme", f"Authorization: {K}"),
    ("authorization-token-scheme", f"Authorization: Token {K}"),
    ("proxy-authorization-basic", f"Proxy-Authorization: Basic {K}"),
    ("authorization-python-repr", f"headers={{'Authorization': 'Bearer {K}', 'Accept': '*/*'}}"),
    ("authorization-bytes-repr", f"{{b'Authorization': b'Bearer {K}'}}"),
    ("authorization-form-encoded", f"Authorization=Bearer+{K}"),
    ("authorization-url-encoded", f"h=authorization%3A%20Bearer%20{K}"),
    ("bearer-lowercase-anywhere", f"retrying with bearer {K} after 401"),
    ("basic-anywhere", f"sent Basic {K} to the proxy"),
    ("cookie", f"Cookie: session={K}"),
    ("cookie-among-others", f"Cookie: theme=dark; sessionid={K}; lang=en"),
    ("set-cookie", f"Set-Cookie: session={K}; Path=/; HttpOnly"),
    # flags the way vLLM's parser reads them (and the spellings it refuses after logging)
    ("flag-underscore", f"vllm serve /m --api_key {K}"),
    ("flag-unique-prefix", f"vllm serve /m --api-k {K}"),
    ("flag-prefix-equals", f"vllm serve /m --api-ke={K}"),
    ("flag-uppercase", f"vllm serve /m --API-KEY {K}"),
    ("flag-hf-token-prefix", f"vllm serve /m --hf_t {K}"),
    ("flag-dotted-json-key", f"vllm serve /m --hf-overrides.token {K}"),
    ("flag-python-tuple", f'("--api-key", "{K}")'),
    ("docker-env-flag", f"docker run -e VLLM_API_KEY={K} vllm"),
    # names, in the formats logs and dumps use
    ("camel-json", f'{{"apiKey": "{K}"}}'),
    ("token-then-ampersand", f"GET /stream?token={K}&page=2"),
    ("access-token-query", f"GET /v1/models?access_token={K}"),
    ("export-single-quoted", f"export VLLM_API_KEY='{K}'"),
    ("json-escaped-in-json", f'{{"body": "{{\\"api_key\\": \\"{K}\\"}}"}}'),
    ("url-encoded-equals", f"body=api_key%3D{K}%26model%3Dtiny"),
    ("url-encoded-json", f"q=%7B%22api_key%22%3A%22{K}%22%7D"),
    ("aws-credentials-file", f"[default]\naws_secret_access_key = {K}\n"),
    ("vllm-non-default-args-list", f"non-default args: {{'model_tag': '/m', 'api_key': ['{K}', '{K}2'], 'port': 8000}}"),
    ("xml-element", f"<api_key>{K}</api_key>"),
    ("ruby-hash-rocket", f"{{:api_key => '{K}'}}"),
    ("glued-name", f"PGPASSWORD={K} psql -h db"),
    ("tab-aligned", f"api_key\t=\t{K}"),
    ("url-userinfo-token-only", f"git clone https://{K}@git.example/org/repo"),
    ("private-key-block", f"-----BEGIN RSA PRIVATE KEY-----\nMIIEow{K}\n{K}AQAB\n"
                          "-----END RSA PRIVATE KEY-----\n"),
    ("private-key-json-escaped", f'"key": "-----BEGIN PRIVATE KEY-----\\nMII{K}\\n'
                                 '-----END PRIVATE KEY-----"'),
    ("github-fine-grained-token", f"github_pat_{K}{K}"),
]

# shapes recognised by their form alone: (case id, text, the secret it holds)
SHAPES = [
    ("aws-access-key-id", "AWS_ACCESS_KEY=AKIAZQ7V9LM2XC4RT8WB in env", "AKIAZQ7V9LM2XC4RT8WB"),
    ("slack-token", "posting with xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("gitlab-token", "glpat-Zq7v9Lm2Xc4Rt8WbAbCd used", "glpat-Zq7v9Lm2Xc4Rt8WbAbCd"),
]

# near-misses: must come out unchanged
KEPT = [
    "max_tokens=128 temperature=0",
    "vllm serve /m --max-num-batched-tokens 4096 --max-model-len 32768",
    '{"usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}}',
    "speculative_config: {method: qwen3_5_mtp, num_speculative_tokens: 3}",
    "tokenizer: /var/lib/ascendctl/current/model",
    "password_file=/run/secrets/db api_key_env=ASCENDCTL_API_KEY",
    "GET https://head:8000/v1/models 200",
    "risk-assessment-0123456789 task-0123456789abcdef disk-0123456789abcdef",
    "Avg prompt throughput: 12.3 tokens/s, Avg generation throughput: 45.6 tokens/s",
    "the bearer of this note; no secrets were found",
    "HCCL_CONNECT_TIMEOUT=600 HCCL_EXEC_TIMEOUT=1836",
    "api_key: [REDACTED]",
    "Basic usage: 2 NPUs per rank",
    "author: jane; authority=local; authentication disabled",
    "vllm serve /m --hf-token --port 8000",
    "vllm serve /m --dbo-decode-token-threshold 32 --max-num-batched-tokens=4096",
    "GET https://head:8000/v1/models?limit=10 200",
    "mailto:ops@example.com; ssh root@198.18.250.11",
    "serving: {'api_key': {'env': 'ASCENDCTL_API_KEY'}}",
    "2 cookies set; tokens=12 in 0.3 s",
]


def test_the_table_is_large_enough():
    assert len(FORMATS) >= 24


@pytest.mark.parametrize("text", [t for _, t in FORMATS], ids=[i for i, _ in FORMATS])
def test_secret_is_redacted_without_knowing_it(text):
    out = redact(text, [])
    assert K not in out, out
    assert REDACTED in out
    assert redact(out, []) == out            # idempotent: node and controller both redact


@pytest.mark.parametrize("text,secret", [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_shape_is_redacted_without_knowing_it(text, secret):
    out = redact(text, [])
    assert secret not in out and REDACTED in out
    assert redact(out, []) == out


@pytest.mark.parametrize("text", KEPT)
def test_near_miss_is_kept(text):
    assert redact(text, []) == text


def test_bundle_is_redacted_when_the_controller_does_not_know_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", "a-different-key-the-controller-knows")
    inv = load_inventory(FIXTURES / "inventories" / "good.yaml", check_files=False)
    files = {f"logs/{case}.log": text + "\n" for case, text in FORMATS}
    files["logs/kept.log"] = "\n".join(KEPT) + "\n"
    collection = NodeCollection(node="node0", address="198.18.250.11", rank=0, ok=True,
                                hostname="node0", seconds=0.1, files=files)
    out = tmp_path / "doctor.tar.gz"
    manifest = write_bundle(out, inv, [collection], [], since_s=60)
    with tarfile.open(out) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert not [name for name, blob in members.items() if K.encode() in blob]
    root = manifest["root"]
    for case, _ in FORMATS:
        assert REDACTED.encode() in members[f"{root}/node0/logs/{case}.log"], case
    assert members[f"{root}/node0/logs/kept.log"].decode() == "\n".join(KEPT) + "\n"


def test_a_known_secret_is_removed_in_every_encoding():
    """The node knows every release's key (secrets.env), the controller the one it
    resolves: the literal key goes, also JSON-escaped and URL-encoded, whatever surrounds
    it."""
    key = 'p@ss/w+rd="Zq7v"\\9'
    forms = [key, json.dumps(key)[1:-1], quote(key, safe="")]
    assert len(set(forms)) == 3
    text = "".join(f"seen {form} here\n" for form in forms)
    assert redact(text, [key]) == f"seen {REDACTED} here\n" * 3

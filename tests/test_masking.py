"""Credential masking in text agents read (docs/tasks.md#read_task_output): one row per format,
and ordinary output that must stay as it is."""

from __future__ import annotations

import pytest

from oar.background.masking import mask

# (format, a line of output holding it, the secret that must not show). The first 19 were
# masked before the maintained set came in; the other 22 were not.
FORMATS = [
    ("OpenAI project key", "export OPENAI_API_KEY=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
     "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
    ("Anthropic key", "calling with sk-ant-api03-Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE", "Zx9yW8vU7tS6rQ5pO4nM3lK2jI1hG0fE"),
    ("OpenRouter key", "key sk-or-v1-0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    ("GitHub classic token in a clone URL", "git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r",
     "16C7e42F292c6912E7710c838347Ae178B4a"),
    ("GitHub OAuth token", "token gho_16C7e42F292c6912E7710c838347Ae178B4b", "16C7e42F292c6912E7710c838347Ae178B4b"),
    ("GitHub fine-grained token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOP",
     "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"),
    ("Slack bot token", "slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "AbCdEfGhIjKlMnOpQrStUvWx"),
    ("AWS access key id", "aws AKIAIOSFODNN7EXAMPLE", "IOSFODNN7EXAMPLE"),
    ("Google API key", "maps AIzaSyA1234567890abcdefghijklmnopqrstu", "SyA1234567890abcdefghijklmnopqrstu"),
    ("Bearer header", 'curl -H "Authorization: Bearer abc.def-123_456~789" https://api', "abc.def-123_456~789"),
    ("Basic header", "Authorization: Basic dXNlcjpodW50ZXIyaHVudGVy", "dXNlcjpodW50ZXIyaHVudGVy"),
    ("password=value", "password=hunter2-very-secret", "hunter2-very-secret"),
    ("YAML api_key: value", "  api_key: 9f8e7d6c5b4a39281706f5e4", "9f8e7d6c5b4a39281706f5e4"),
    ("password in a database URL", "connecting to postgresql://app:s3cr3t-db-pass@db:5432/app", "s3cr3t-db-pass"),
    ("PEM private key", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
     "-----END PRIVATE KEY-----", "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"),
    ("OpenSSH private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB\n"
     "-----END OPENSSH PRIVATE KEY-----", "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAAB"),
    (".npmrc auth token", "//registry.npmjs.org/:_authToken=00000000-1111-2222-3333-444444444444",
     "00000000-1111-2222-3333-444444444444"),
    ("AWS secret access key", 'aws_secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("x-api-key header", "x-api-key: 5a1f0c9e-example-key-value", "5a1f0c9e-example-key-value"),
    # Not masked before:
    ("the relay's session token", "OAR_TOKEN oar_s_Qm9vJt3X0wz1l2L6dYp8s7Vf5Hq4Rk9aZc3Ee1Uu0Ti",
     "Qm9vJt3X0wz1l2L6dYp8s7Vf5Hq4Rk9aZc3Ee1Uu0Ti"),
    ("the relay's owner token", "owner oar_o_Zx8-Wv7_Ut6Sr5Qp4On3Ml2Kj1Ih0Gf9Ed8Cb7Aa6Yy5",
     "Zx8-Wv7_Ut6Sr5Qp4On3Ml2Kj1Ih0Gf9Ed8Cb7Aa6Yy5"),
    ("JSON password", '{"user": "ann", "password": "correct horse battery"}', "correct horse battery"),
    ("JSON client_secret without spaces", '{"client_secret":"Xy7Qw3Er5Ty1Ui9Op"}', "Xy7Qw3Er5Ty1Ui9Op"),
    ("PGP private key block", "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGVx1a0BCADJ3x7b8vXo2Q9pQwErTy\n=AbCd\n"
     "-----END PGP PRIVATE KEY BLOCK-----", "lQOYBGVx1a0BCADJ3x7b8vXo2Q9pQwErTy"),
    ("Stripe live key", "STRIPE sk_live_51HqLyjWDarjtT1zdp7dcXb2Xk9aQwErTyUiOpAsDfGhJkL",
     "51HqLyjWDarjtT1zdp7dcXb2Xk9aQwErTyUiOpAsDfGhJkL"),
    ("Stripe restricted key", "rk_live_4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc"),
    ("GitLab personal token", "glpat-xYz12AbC34dEf56GhI78jK", "xYz12AbC34dEf56GhI78jK"),
    ("Hugging Face token", "HF hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    ("npm token", "publish with npm_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    ("bare JWT", "id eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl", "eyJzdWIiOiIxIn0.c2lnbmF0dXJlLXZhbHVl"),
    ("curl -u user:password", "curl -u admin:Tr0ub4dor3 https://example.org/api", "Tr0ub4dor3"),
    ("curl --user=user:password", "curl --user='deploy:pa55-w0rd!' https://example.org", "pa55-w0rd!"),
    ("password-only Redis URL", "REDIS_URL=redis://:r3d1s-pa55@cache:6379/0", "r3d1s-pa55"),
    ("SendGrid key", "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",
     "TwL2iGABf9DHoTf-09kqeF8tAmbihYzrnopKc-1s5cr"),
    ("Twilio API key", "twilio SK0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"),
    ("Telegram bot token", "bot 123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"),
    ("Slack webhook", "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
     "XXXXXXXXXXXXXXXXXXXXXXXX"),
    ("Azure storage account key", "DefaultEndpointsProtocol=https;AccountName=x;AccountKey="
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
     "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq"),
    ("PyPI token", "pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlszLCJhYmNkZWYiXQ",
     "CJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAACKlszLCJhYmNkZWYiXQ"),
    ("--password flag", "mysqladmin --password Sup3rS3cret status", "Sup3rS3cret"),
    ("PuTTY key file", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 1\n"
     "AAAAIGb3Rf9example0private0key0bytesAAAA\nPrivate-MAC: 0123abcd", "AAAAIGb3Rf9example0private0key0bytesAAAA"),
]


@pytest.mark.parametrize(("line", "secret"), [row[1:] for row in FORMATS], ids=[row[0] for row in FORMATS])
def test_every_format_is_masked(line: str, secret: str) -> None:
    shown = mask(f"before\n{line}\nafter")
    assert secret not in shown and secret[-10:] not in shown, shown
    assert "****" in shown or "[private key masked]" in shown
    assert shown.startswith("before\n") and shown.endswith("\nafter")


def test_the_table_covers_at_least_the_31_formats_of_the_issue() -> None:
    assert len({row[0] for row in FORMATS}) >= 31


def test_masks_keep_what_says_which_credential_it_was() -> None:
    assert mask('{"password": "x y z"}') == '{"password": "****"}'
    assert mask("curl -u admin:Tr0ub4dor3 https://e.org") == "curl -u admin:**** https://e.org"
    assert mask("oar_s_Qm9vJt3X0wz1l2L6dYp8s7Vf5Hq4Rk9aZc") == "oar_s_****"
    assert mask("glpat-xYz12AbC34dEf56GhI78jK") == "glpat-****"
    assert mask("redis://:pw@cache") == "redis://:****@cache"


ORDINARY = [
    "collected 12 items",
    "commit 3f9c2a1e7b04d5c6a8b9e0f1a2b3c4d5e6f7a8b9",
    "Merge: 3f9c2a1 e7b04d5",
    "request 550e8400-e29b-41d4-a716-446655440000 done in 12 ms",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Enter password:",
    "docker run -u 1000:1000 image",
    "usage: max_tokens: 4096, total_tokens=5120",
    "see https://example.org/docs/page?id=7 and git@github.com:o/r.git",
    "tests/test_api.py::test_it_works PASSED",
    "The token bucket refills every second; a secret handshake is no secret.",
    "SELECT * FROM users WHERE id = 42;",
    "building task-runner-task-scheduler-task-queue",
    "  File \"/srv/app/views.py\", line 88, in handler",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_output_is_left_alone(line: str) -> None:
    assert mask(line) == line


def test_a_prompt_for_a_password_does_not_mask_the_next_line() -> None:
    assert mask("Password:\nok, logged in") == "Password:\nok, logged in"


def test_a_secret_named_in_a_key_nested_on_its_line_is_masked_whole() -> None:
    """`yaml_secret: client_secret: abc…` was `**** abc…`: the nested key was taken for the value."""
    assert mask("yaml_secret: client_secret: abc123secretvalue") == "yaml_secret: client_secret: ****"
    assert mask("token: password: 'hunter2 hunter2'") == "token: password: '****'"
    assert mask("password: abc:def") == "password: ****"

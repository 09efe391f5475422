"""Credentials in text an agent reads, replaced by `****` (docs/tasks.md#read_task_output).

Two sources of patterns, applied in this order:

1. our own: the relay's own tokens, private key blocks (PEM, OpenSSH, PGP, PuTTY), JWTs,
   `curl -u user:password`, passwords in URLs, bearer/basic tokens, `name=value`,
   `name: value` and JSON `"name": "value"` pairs whose name says secret, and provider keys
   the maintained set lacks or cuts short (Anthropic, OpenAI, Hugging Face, npm, Stripe);
2. the maintained set: the regex detectors of Yelp's detect-secrets (Apache-2.0, pinned in
   requirements.txt), read from its plugin classes, so new provider formats come with an
   upgrade (docs/decisions.md#masking-credentials).

Masking runs over the whole tail window (up to 4 MiB) on every read, so every pattern is linear
(no unbounded repetition before a literal that a failed match would rescan), and a pattern runs
only over text that holds one of its literals.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MASK = "****"

# Private key blocks ----------------------------------------------------------------------

_KEY_KIND = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?"
_KEY_BLOCK = re.compile(rf"-----BEGIN ({_KEY_KIND})-----.*?(?:-----END \1-----|\Z)", re.DOTALL)
# The end of a block whose beginning lies before the window.
_KEY_BLOCK_END = re.compile(rf"\A(?:(?!-----BEGIN ).)*?-----END ({_KEY_KIND})-----", re.DOTALL)
# PuTTY's .ppk: a header line, then the key lines up to its MAC.
_PUTTY_KEY = re.compile(r"(PuTTY-User-Key-File-\d+: [^\n]*).*?(?:Private-MAC: [^\n]*|\Z)", re.DOTALL)

# Our own patterns ------------------------------------------------------------------------

# Lower-cases ASCII only, so offsets in the lowered text are the text's (str.lower may change
# lengths).
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

_Replacement = Callable[[re.Match[str]], str]


@dataclass(frozen=True)
class _Rule:
    """A pattern and the literals one of which any match holds (`gate`): a pattern runs only over
    text holding one, so output without the literal costs a substring search, not a regex pass."""

    gate: tuple[str, ...]
    pattern: re.Pattern[str]
    replacement: _Replacement


_OWN_RULES: list[_Rule] = [
    # URLs with user:password (or just :password, as redis://:pw@host) → keep the user.
    _Rule(("://",), re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]{0,30}://[^/\s:@]{0,256}):[^/\s@]{1,256}@"),
          lambda m: f"{m[1]}:{MASK}@"),
    # curl -u user:password, --user=user:password, -uuser:password; not `docker run -u 1000:1000`.
    _Rule(("-u",), re.compile(r"""((?:^|\s)(?:-u|--user)(?:[ \t]+|=)?(["']?)(?!\d+:\d+\b)[^\s:"']{1,256}:)[^\s"']+"""),
          lambda m: f"{m[1]}{MASK}"),
    # The relay's own bearer tokens (oar_s_…, oar_o_…; oar/core/ids.py).
    _Rule(("oar_",), re.compile(r"\b(oar_[a-z]{1,8}_)[A-Za-z0-9_-]{16,}"), lambda m: m[1] + MASK),
    # JWTs: header.payload.signature, each base64url; the header always starts `{"` → `eyJ`.
    _Rule(("eyJ",), re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), lambda m: "eyJ" + MASK),
    # Provider API keys the maintained set lacks, or matches only in part.
    _Rule(("sk-ant-",), re.compile(r"\bsk-ant-[A-Za-z0-9_-]{8,}"), lambda m: "sk-ant-" + MASK),
    _Rule(("sk-",), re.compile(r"\bsk-(?:proj-|svcacct-|or-v1-)?[A-Za-z0-9_-]{16,}"), lambda m: "sk-" + MASK),
    _Rule(("_live_", "_test_", "whsec_"), re.compile(r"\b((?:sk|rk|pk)_(?:live|test)_|whsec_)[A-Za-z0-9]{10,}"),
          lambda m: m[1] + MASK),
    _Rule(("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}"), lambda m: "hf_" + MASK),
    _Rule(("npm_",), re.compile(r"\bnpm_[A-Za-z0-9]{30,}"), lambda m: "npm_" + MASK),
    _Rule(("gh",), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{16,}"), lambda m: m[0][:4] + MASK),
    _Rule(("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"), lambda m: "github_pat_" + MASK),
    _Rule(("xox",), re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{8,}"), lambda m: m[0][:5] + MASK),
    _Rule(("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"),
          re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{16}\b"), lambda m: m[0][:4] + MASK),
    _Rule(("AIza",), re.compile(r"\bAIza[A-Za-z0-9_-]{30,}"), lambda m: "AIza" + MASK),
    # Bearer tokens (headers, curl lines); gates are matched in lower case.
    _Rule(("bearer", "token", "basic"),
          re.compile(r"\b(Bearer|Token|Basic)([ \t]+)[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE),
          lambda m: f"{m[1]}{m[2]}{MASK}"),
]

# name=value, name: value, "name": "value", where the name says secret. Found from the word in
# the name outward (`_mask_named_values`): a regex that starts at the name's first character
# rescans every hyphenated run from each word boundary in it. `token` but not `tokens`:
# `max_tokens: 4096` is a count. The separator stays on its line: `Password:` at the end of a
# prompt does not mask the next line.
_SECRET_WORD = re.compile(
    r"password|passwd|pwd|secret|token(?!s)|api[_-]?key|access[_-]?key|private[_-]?key|auth[_-]?key"
    r"|credential|accountkey"
)  # searched in the ASCII-lowered text: a case-insensitive search is three times slower
# After the separator, YAML-style keys nested on the same line (`yaml_secret: client_secret: abc`):
# the secret is the value after the last of them, not the next key's name.
_NAMED_VALUE = re.compile(
    r"""[a-zA-Z0-9_.-]{0,40}?(["']?[ \t]*[=:][ \t]*(?:[a-zA-Z0-9_.-]{1,40}:[ \t]+)*)("[^"\n]*"|'[^'\n]*'|[^\s,;&"']+)"""
)
# --password value, --api-key value.
_SECRET_FLAG = re.compile(
    r"(?i)(--[a-z0-9-]{0,40}?(?:password|passwd|secret|token|api-?key)[ \t]+)(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'-][^\s\"']*)"
)


def _mask_named_values(text: str) -> str:
    parts: list[str] = []
    last = 0
    for word in _SECRET_WORD.finditer(text.translate(_ASCII_LOWER)):
        if word.start() < last:
            continue
        value = _NAMED_VALUE.match(text, word.end())
        if value is None:
            continue
        parts += [text[last:value.start(2)], _quoted_mask(value[2])]
        last = value.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _quoted_mask(value: str) -> str:
    """A quoted value keeps its quotes, so JSON and shell lines still read as such."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{MASK}{value[0]}"
    return MASK


# The maintained set ----------------------------------------------------------------------

# detect-secrets' regex detectors, each with the literals (lower case) one of which its
# matches hold. Left out: private key (it finds only the header line; the blocks above mask the
# whole key), basic auth (the URL rule above keeps the user), public IP (an address is not a
# credential), npm (its `.+` rescans a line from every `//`; `_authToken=` is a secret name and
# `npm_…` has its own rule), OpenAI (the `sk-` rule), Artifactory (its `AP[0-9A-F]…` password
# matches upper-case words), and Cloudant, IBM Cloud IAM, IBM COS HMAC and SoftLayer: their
# `name = value` forms are secret names above, and their patterns, which start with optional
# groups, cost a full pass of about a second over 4 MiB each.
# By name (module.Class in detect_secrets.plugins), imported at the first mask: detect-secrets
# loads ~20 MB of modules that a process which never masks (a web worker that serves no task
# output, the clock) need not hold (docs/limits.md#memory).
_DETECTORS: dict[str, tuple[str, ...]] = {
    "aws.AWSKeyDetector": ("a3t", "abia", "acca", "akia", "asia", "aws"),
    "azure_storage_key.AzureStorageKeyDetector": ("accountkey=",),
    "discord.DiscordBotTokenDetector": (".",),
    "github_token.GitHubTokenDetector": ("gh",),
    "gitlab_token.GitLabTokenDetector": ("gl", "gr1348941"),
    "jwt.JwtTokenDetector": ("eyj",),
    "mailchimp.MailchimpDetector": ("-us",),
    "pypi_token.PypiTokenDetector": ("pypi-",),
    "sendgrid.SendGridDetector": ("sg.",),
    "slack.SlackDetector": ("xox", "hooks.slack.com"),
    "square_oauth.SquareOAuthDetector": ("sq0csp-",),
    "stripe.StripeDetector": ("k_live_",),
    "telegram_token.TelegramBotTokenDetector": (":",),
    "twilio.TwilioKeyDetector": ("ac", "sk"),
}
# A readable kind prefix a masked token may keep: `glpat-`, `sk_live_`, `SG.`, `pypi-`.
_KIND_PREFIX = re.compile(r"[A-Za-z]{2,5}(?:[_-][a-z]{2,5})?[_.-]")
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]*")
_LEAD = " \t\r\n=:\"'"
_TRAIL = " \t\r\n\"'"


@functools.cache
def _maintained_rules() -> list[tuple[tuple[str, ...], re.Pattern[str]]]:
    """The maintained set's patterns, each with its gate, read from the detectors' classes once."""
    rules: list[tuple[tuple[str, ...], re.Pattern[str]]] = []
    for name, gate in _DETECTORS.items():
        module, _, detector = name.rpartition(".")
        detector_class = getattr(importlib.import_module(f"detect_secrets.plugins.{module}"), detector)
        rules += [(gate, pattern) for pattern in detector_class.denylist]
    return rules


def _secret_spans(pattern: re.Pattern[str], text: str) -> Iterator[tuple[int, int]]:
    """Where a maintained pattern's secret lies: its last matched group when that group holds a
    credential (8+ characters), else the whole match without the delimiters some patterns
    include, stretched to the end of the token (Stripe's pattern matches 24 characters of a
    longer key)."""
    for match in pattern.finditer(text):
        group = next((g for g in range(pattern.groups, 0, -1) if match.group(g) is not None), 0)
        if group and len(match.group(group)) >= 8:
            yield match.span(group)
            continue
        start, end = match.span()
        while start < end and text[start] in _LEAD:
            start += 1
        while end > start and text[end - 1] in _TRAIL:
            end -= 1
        if end - start >= 8:
            tail = _TOKEN_TAIL.match(text, end)
            yield start, tail.end() if tail else end


def _mask_maintained(pattern: re.Pattern[str], text: str) -> str:
    spans = [span for span in _secret_spans(pattern, text) if MASK not in text[span[0]:span[1]]]
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for start, end in spans:
        if start < last:
            continue
        prefix = _KIND_PREFIX.match(text, start, end)
        parts += [text[last:start], prefix[0] if prefix else "", MASK]
        last = end
    parts.append(text[last:])
    return "".join(parts)


def _opens(gate: tuple[str, ...], text: str, lowered: str) -> bool:
    return any(literal in text or literal in lowered for literal in gate)


def mask(text: str) -> str:
    """Credentials replaced by `****` (docs/tasks.md#read_task_output, docs/operations.md#durability-and-recovery),
    private key blocks by one line, also when the window starts inside one or a block is still
    being written. Linear in the text's length: every pattern is bounded, and runs only over
    text that holds one of its literals."""
    if "PRIVATE KEY" in text:
        text = _KEY_BLOCK_END.sub(lambda m: f"[private key masked] -----END {m[1]}-----", text, count=1)
        text = _KEY_BLOCK.sub(lambda m: f"-----BEGIN {m[1]}----- [private key masked]", text)
    if "PuTTY-User-Key-File-" in text:
        text = _PUTTY_KEY.sub(lambda m: f"{m[1]} [private key masked]", text)
    # Masking only shortens secrets to `****`, so literals found once stay a superset.
    lowered = text.translate(_ASCII_LOWER)
    for rule in _OWN_RULES:
        if _opens(rule.gate, text, lowered):
            text = rule.pattern.sub(rule.replacement, text)
    text = _mask_named_values(text)
    if "--" in text:
        text = _SECRET_FLAG.sub(lambda m: f"{m[1]}{_quoted_mask(m[2])}", text)
    for gate, pattern in _maintained_rules():
        if _opens(gate, text, lowered):
            text = _mask_maintained(pattern, text)
    return text

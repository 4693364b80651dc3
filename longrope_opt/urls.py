"""Storage URLs as they may be shown: the password and every secret-looking query value masked.

A storage URL can hold a database password (``postgresql://user:pw@host/db``) or a token in its
query (``?password=…``, ``?sslpassword=…``, ``?token=…``). Error lines, logs, results files and
study records end up in CI logs, job-scheduler logs and issue reports, so nothing the package
prints, logs or writes holds one: it shows `redact_url`'s form (SQLAlchemy's ``***``), and
`scrub` removes what a driver's own message may repeat.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl
from urllib.parse import unquote
from urllib.parse import urlsplit


MASK = "***"
#: The environment variable a storage URL may come from (`longrope_opt.studies`).
ENV_STORAGE = "LONGROPE_OPT_STORAGE"
#: Query parameters whose value is a secret (matched case-insensitively, as substrings).
SECRET_PARAMS = ("password", "passwd", "pwd", "token", "secret", "key", "auth", "credential")


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_PARAMS)


def url_secrets(url: str) -> list[str]:
    """The secrets a URL holds: its password and its secret query values (raw and decoded)."""
    try:
        parts = urlsplit(str(url))
    except ValueError:
        return []
    found: list[str] = []
    if parts.password:
        found += [parts.password, unquote(parts.password)]
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if _secret_param(name) and value:
            found.append(value)
    raw_query = parts.query
    for piece in raw_query.split("&"):  # the raw (still quoted) form, as a message may echo it
        name, _, value = piece.partition("=")
        if _secret_param(name) and value:
            found.append(value)
    return sorted({s for s in found if s}, key=len, reverse=True)


def redact_url(url: str) -> str:
    """`url` with its password and secret query values replaced by ``***``.

    Example:
        >>> redact_url("postgresql://u:s3cret@db/x?sslpassword=k&sslmode=require")
        'postgresql://u:***@db/x?sslpassword=***&sslmode=require'
    """
    text = str(url)
    try:
        parts = urlsplit(text)
    except ValueError:
        return scrub(text, [])
    if not url_secrets(text):
        return text  # nothing to hide: the URL exactly as given
    netloc = parts.netloc
    if parts.password is not None:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{host}"
    query = "&".join(
        f"{name}={MASK}" if _secret_param(name) and value else piece
        for piece in parts.query.split("&") if piece
        for name, _, value in [piece.partition("=")]
    )  # fmt: skip
    out = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else netloc + parts.path
    if query:
        out += f"?{query}"
    if parts.fragment:
        out += f"#{parts.fragment}"
    return out


def scrub(text: str, urls: Iterable[str | None]) -> str:
    """`text` with every secret of `urls` (`url_secrets`) replaced by ``***``, and any
    ``scheme://user:password@`` left in it masked too (a driver may echo another form of it)."""
    out = str(text)
    for url in urls:
        if url:
            for secret in url_secrets(url):
                out = out.replace(secret, MASK)
    return re.sub(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:)[^@\s'\"/]+@", rf"\1{MASK}@", out)

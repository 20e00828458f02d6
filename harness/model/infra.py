"""Infrastructure or code? The signature of an infrastructure failure, and the run's finding.

An *infrastructure signature* names what failed outside the code under test: the classified
failure plus its normalized target, the same on every attempt and every case that hit it::

    HTTP 403 https://files.example.org/simple/pkg/pkg-1.0-py3-none-any.whl
    DNS name-not-resolved pypi.example.org
    connection-refused 127.0.0.1:8080
    device missing cuda:1

The classifier is one table, :data:`SHAPES`: each row is a failure's wording (pip's, requests',
urllib's, curl's, a runtime's "no device"), the kind it is, and a real message of that shape
that the tests run through it. The first row that matches gives the kind; the kind's target
reader gives the target. Query strings, fragments and credentials are stripped from URLs,
hosts lower-cased; a message with no known shape keeps its type and first line with
timestamps, addresses, pids and paths blanked. Which attempts are infrastructure at all is the
retry policy's call (:func:`harness.execution.retry.retry_class`, which reads
:func:`looks_like_infrastructure`), which records the signature on the attempt
(``Attempt.infra``); this module only reads it back.

A run-level *finding* is a signature seen on attempts of two or more cases, or on every attempt
(at least two) of one case: the run then reads "infrastructure: HTTP 403 on <url> (4 cases,
9 attempts); not a code failure", and exits 3 unless some case failed for another reason.

>>> infra_signature("HTTPError", "HTTP error 403 while getting https://h.org/a/b.whl?sig=x")
'HTTP 403 https://h.org/a/b.whl'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from harness.model.counting import failed_tries, ran
from harness.model.vocab import FAILING

if TYPE_CHECKING:  # records reads the findings of its cases from here
    from harness.model.records import CaseResult

# Infrastructure, i.e. nothing to do with the code under test: HTTP 403, 408, 429 and 5xx
# (never 404: a missing file is a bug), refused/reset connections, name resolution, network
# timeouts, a device the runner lacks. The README states this same list.
INFRA_HTTP_CODES: tuple[str, ...] = ("403", "408", "429", "5xx")

Kind = Literal["http", "dns", "refused", "reset", "timeout", "device"]


@dataclass(frozen=True)
class Shape:
    """One row of the classifier: how a tool words one kind of infrastructure failure."""

    kind: Kind
    pattern: re.Pattern[str]
    example: str  # a real message of this shape (tests/core/test_infra.py runs every one)


def _p(text: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(text, flags)


_STATUS_NAMES = (
    r"Forbidden|Too Many Requests|Bad Gateway|Service Unavailable|Gateway Timeout"
    r"|Request Timeout|Internal Server Error"
)
SHAPES: tuple[Shape, ...] = (
    # -- HTTP status: the code in group "code", the URL in group "url" when the shape has one
    Shape(
        "http",
        _p(r"HTTP error (?P<code>[1-5]\d\d) while getting (?P<url>\S+)", re.I),
        "ERROR: HTTP error 403 while getting https://h.org/t/triton_ascend-3.2.2.whl",  # pip
    ),
    Shape(
        "http",
        _p(r"\b(?P<code>[1-5]\d\d) (?:Client|Server) Error: .*? for url: (?P<url>\S+)"),
        "403 Client Error: Forbidden for url: https://h.org/a.whl",  # requests
    ),
    Shape(
        "http",
        _p(r"too many (?P<code>[1-5]\d\d) error responses"),
        "HTTPSConnectionPool(host='h.org', port=443): Max retries exceeded with url: /a.whl "
        "(Caused by ResponseError('too many 503 error responses'))",  # urllib3 retries
    ),
    Shape(
        "http",
        _p(r"The requested URL returned error: (?P<code>[1-5]\d\d)"),
        "curl: (22) The requested URL returned error: 403",  # curl -f
    ),
    Shape(
        "http",
        _p(r"\bHTTP(?:/\d(?:\.\d)?)?(?: Error| error|:)? ?(?P<code>[1-5]\d\d)\b"),
        "urllib.error.HTTPError: HTTP Error 429: Too Many Requests",  # urllib, "HTTP 503"
    ),
    Shape(
        "http",
        _p(rf"\b(?P<code>[1-5]\d\d):? (?:{_STATUS_NAMES})\b"),
        "ERROR 403: Forbidden.",  # wget
    ),
    # -- a host that does not resolve
    Shape(
        "dns",
        _p(
            r"Temporary failure in name resolution|Name or service not known"
            r"|nodename nor servname|getaddrinfo failed|Failed to resolve"
            r"|No address associated with hostname|Could not resolve host|Name does not resolve",
            re.I,
        ),
        "curl: (6) Could not resolve host: pypi.example.org",
    ),
    # -- connections refused, reset, timed out
    Shape(
        "refused",
        _p(r"Connection refused|ECONNREFUSED", re.I),
        "curl: (7) Failed to connect to 10.0.0.5 port 3128: Connection refused",
    ),
    Shape(
        "reset",
        _p(r"Connection (?:reset|aborted)|ECONNRESET|RemoteDisconnected", re.I),
        "ConnectionResetError: [Errno 104] Connection reset by peer",
    ),
    Shape(
        "timeout",
        _p(r"Read timed out|Connect(?:ion)? timed out|ConnectTimeout", re.I),
        "HTTPSConnectionPool(host='h.org', port=443): Read timed out. (read timeout=15)",
    ),
    # -- a device the runner should have and does not (CUDA, HIP, Ascend NPU)
    Shape(
        "device",
        _p(
            r"invalid device ordinal|no (?:CUDA|HIP) GPUs are available"
            r"|no (?:CUDA|ROCm)-capable device is detected|Found no NVIDIA driver"
            r"|(?:cuda|hip)ErrorNoDevice|The device is unavailable|no valid device"
            r"|device not found|no such device|device (?:is )?(?:missing|absent|not available)"
            r"|promised but absent",
            re.I,
        ),
        "RuntimeError: init: NPU function error: aclrtGetDeviceCount(&device_count), error code "
        "is 207004\n[Error]: The device is unavailable.",  # torch_npu
    ),
)
# What an error's type alone says, when its message has no known shape (socket.gaierror
# "[Errno -3] ...", a bare ConnectionRefusedError).
TYPE_KINDS: Mapping[str, Kind] = {
    "gaierror": "dns",
    "ConnectionRefusedError": "refused",
    "ConnectionResetError": "reset",
    "ConnectionAbortedError": "reset",
    "ReadTimeout": "timeout",
    "ConnectTimeout": "timeout",
}
_INFRA_CODE = re.compile(r"403|408|429|5\d\d")


def _matches(etype: str, message: str) -> Iterator[tuple[Kind, re.Match[str] | None]]:
    """Every row of :data:`SHAPES` that matches, in table order (an HTTP status below 400, a
    log's ``HTTP/1.1 200``, is no failure and skipped), then what the error's type says."""
    for shape in SHAPES:
        for m in shape.pattern.finditer(message):
            if shape.kind != "http" or int(m.group("code")) >= 400:
                yield shape.kind, m
                break
    kind = TYPE_KINDS.get(etype)
    if kind is not None:
        yield kind, None


def looks_like_infrastructure(text: str) -> bool:
    """``text`` (an error message, a command's output) names an infrastructure failure by
    one of :data:`SHAPES` (an HTTP status only when it is one of :data:`INFRA_HTTP_CODES`): a
    command case that exits non-zero with it is an infrastructure error (retried as such, with
    its signature), not a failed case.

    >>> looks_like_infrastructure("curl: (6) Could not resolve host: h.org")
    True
    >>> looks_like_infrastructure("ERROR: HTTP error 404 while getting https://h.org/x")
    False
    """
    return any(
        kind != "http" or (m is not None and bool(_INFRA_CODE.fullmatch(m.group("code"))))
        for kind, m in _matches("", text)
    )


_URL = re.compile(r"\b(?:https?|ftp)://[^\s'\"<>()\[\]{}]+", re.I)
_TRAILING = ".,;:!?'\"`"
_DEVICE_NAME = re.compile(r"\b(?:cuda|hip|npu|xpu|mps|rocm):\d+\b", re.I)
_DEVICE_FAMILY = re.compile(r"\b(CUDA|NVIDIA|HIP|ROCm|NPU|Ascend|acl\w*|XPU)\b", re.I)
_FAMILY = {"nvidia": "cuda", "rocm": "hip", "ascend": "npu"}
_NETWORK = {
    "refused": "connection-refused",
    "reset": "connection-reset",
    "timeout": "network-timeout",
}


_POOL = re.compile(
    r"(?P<scheme>HTTPS?)ConnectionPool\(host='(?P<host>[^']+)', port=(?P<port>\d+)\)"
    r"(?:: Max retries exceeded with url: (?P<path>\S+))?"
)
_HOST_SHAPES: tuple[re.Pattern[str], ...] = (
    re.compile(r"Failed to resolve '(?P<host>[^']+)'"),
    re.compile(r"Could not resolve host: (?P<host>[\w.-]+)"),
    re.compile(r"host='(?P<host>[^']+)'"),
    re.compile(r"(?:connect to|getaddrinfo for) (?P<host>[\w.-]+)(?: port (?P<port>\d+))?"),
    re.compile(r"\b(?P<host>\d{1,3}(?:\.\d{1,3}){3}):(?P<port>\d{1,5})\b"),
)


def normalize_url(url: str) -> str:
    """``url`` without its query string, fragment and credentials, scheme and host lower-cased.

    >>> normalize_url("HTTPS://user:tok@Files.Example.org:8443/a/b.whl?X-Amz-Signature=1#sha")
    'https://files.example.org:8443/a/b.whl'
    """
    url = url.rstrip(_TRAILING)
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return url.split("?", 1)[0].split("#", 1)[0]
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, "", ""))


def _first_url(message: str) -> str | None:
    m = _URL.search(message)
    if m is not None:
        return normalize_url(m.group(0))
    pool = _POOL.search(message)
    if pool is not None and pool.group("path"):
        scheme = pool.group("scheme").lower()
        default = "443" if scheme == "https" else "80"
        port = "" if pool.group("port") == default else f":{pool.group('port')}"
        return normalize_url(f"{scheme}://{pool.group('host')}{port}{pool.group('path')}")
    return None


def _host_port(message: str, *, with_port: bool) -> str:
    """The host (and port) a network failure names, '' when it names none."""
    pool = _POOL.search(message)
    if pool is not None:
        host = pool.group("host").lower()
        return f"{host}:{pool.group('port')}" if with_port else host
    for shape in _HOST_SHAPES:
        m = shape.search(message)
        if m is not None:
            host = m.group("host").lower()
            port = m.groupdict().get("port")
            return f"{host}:{port}" if with_port and port else host
    m = _URL.search(message)
    if m is not None:
        try:
            parts = urlsplit(m.group(0).rstrip(_TRAILING))
            host = (parts.hostname or "").lower()
            port = parts.port or {"https": 443, "http": 80}.get(parts.scheme.lower())
        except ValueError:
            return ""
        return f"{host}:{port}" if with_port and port else host
    return ""


def _blank(line: str) -> str:
    """A first line with what varies between attempts blanked (times, addresses, pids, paths)."""
    line = re.sub(r"\d{4}-\d\d-\d\d[T ][\d:.]+(?:Z|[+-]\d\d:?\d\d)?", "<time>", line)
    line = re.sub(r"0x[0-9a-fA-F]+", "0x?", line)
    line = re.sub(r"\bpid[ =:]*\d+", "pid ?", line, flags=re.I)
    line = re.sub(r"(?<![\w:])(?:/[^\s:'\"]+)+", "<path>", line)
    line = re.sub(r"\b\d{3,}\b", "N", line)  # pids, ports of the moment, counters
    return re.sub(r"\s+", " ", line).strip()[:160]


def _join(kind: str, target: str) -> str:
    return f"{kind} {target}" if target else kind


def _device(message: str) -> str:
    """The device a "no device" message names (``cuda:1``), else its family (``npu``)."""
    m = _DEVICE_NAME.search(message)
    if m is not None:
        return m.group(0).lower().replace("rocm", "hip")
    fam = _DEVICE_FAMILY.search(message)
    if fam is None:
        return ""
    word = fam.group(1).lower()
    return "npu" if word.startswith("acl") else _FAMILY.get(word, word)


def _target(kind: Kind, m: re.Match[str] | None, message: str) -> str:
    if kind == "http":
        assert m is not None  # an HTTP status is only ever read from a shape
        given = m.groupdict().get("url")
        url = normalize_url(given) if given else _first_url(message)
        return _join(f"HTTP {m.group('code')}", url or "")
    if kind == "dns":
        return _join("DNS name-not-resolved", _host_port(message, with_port=False))
    if kind == "device":
        return _join("device missing", _device(message))
    return _join(_NETWORK[kind], _host_port(message, with_port=True))


def classify(etype: str, message: str) -> str | None:
    """The infrastructure signature :data:`SHAPES` (or the error's type) give ``message``, or
    None when neither knows it.

    >>> classify("RuntimeError", "No CUDA GPUs are available")
    'device missing cuda'
    >>> classify("ValueError", "bad shape 3 vs 4") is None
    True
    """
    found = next(_matches(etype, message), None)
    return None if found is None else _target(found[0], found[1], message)


def infra_signature(etype: str, message: str) -> str:
    """The infrastructure signature of a failure already classified as infrastructure: the
    classifier's (:func:`classify`), else the type and the first line with what varies blanked.

    >>> infra_signature("gaierror", "[Errno -3] Temporary failure in name resolution")
    'DNS name-not-resolved'
    >>> infra_signature("ConnectionRefusedError", "[Errno 111] Connection refused (127.0.0.1:8)")
    'connection-refused 127.0.0.1:8'
    """
    known = classify(etype, message)
    if known is not None:
        return known
    first = next((line for line in message.splitlines() if line.strip()), "")
    return _join(etype, _blank(first))


def describe(signature: str) -> str:
    """A signature as a phrase: ``HTTP 403 on https://...``, ``connection-refused on host:1``.

    >>> describe("HTTP 403 https://h/a.whl"), describe("DNS name-not-resolved")
    ('HTTP 403 on https://h/a.whl', 'DNS name-not-resolved')
    """
    m = re.fullmatch(
        r"(HTTP \d{3}|DNS name-not-resolved|connection-refused|connection-reset"
        r"|network-timeout) (\S+)",
        signature,
    )
    return f"{m.group(1)} on {m.group(2)}" if m is not None else signature


@dataclass(frozen=True)
class InfraFinding:
    """One infrastructure signature seen across cases or on every attempt of one."""

    signature: str
    cases: tuple[str, ...]  # display names, in report order
    attempts: int

    def line(self) -> str:
        """``infrastructure: HTTP 403 on <url> (4 cases, 9 attempts); not a code failure``."""
        n = len(self.cases)
        return (
            f"infrastructure: {describe(self.signature)} ({n} case{'s' * (n != 1)}, "
            f"{self.attempts} attempt{'s' * (self.attempts != 1)}); not a code failure"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "text": self.line(),
            "cases": list(self.cases),
            "attempts": self.attempts,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InfraFinding:
        return cls(str(d["signature"]), tuple(d.get("cases", [])), int(d.get("attempts", 0)))


def infrastructure_findings(cases: Iterable[CaseResult]) -> tuple[InfraFinding, ...]:
    """The run's infrastructure findings, most attempts first: each signature seen on attempts
    of two or more cases, or on every attempt (at least two) of one case. Attempts are those
    that ran (:func:`harness.model.counting.ran`), warm-ups and replaced tries included."""
    seen: dict[str, dict[str, int]] = {}
    every: set[str] = set()
    for c in cases:
        tries = ran(c.attempts)
        per: dict[str, int] = {}
        for a in tries:
            if a.infra:
                per[a.infra] = per.get(a.infra, 0) + 1
        for sig, n in per.items():
            seen.setdefault(sig, {})[c.name] = n
            if n == len(tries) and n >= 2:
                every.add(sig)
    out = [
        InfraFinding(sig, tuple(by_case), sum(by_case.values()))
        for sig, by_case in seen.items()
        if len(by_case) >= 2 or sig in every
    ]
    return tuple(sorted(out, key=lambda f: (-f.attempts, f.signature)))


def infra_only(case: CaseResult, findings: Iterable[InfraFinding]) -> bool:
    """A failing case whose every failed attempt carries a finding's signature and no check of
    which failed: not a code failure."""
    sigs = {f.signature for f in findings}
    failed = failed_tries(case.attempts)
    return (
        case.status in FAILING
        and bool(failed)
        and all(a.infra in sigs for a in failed)
        and not any(c.blocking for c in case.checks)
    )


__all__ = [
    "INFRA_HTTP_CODES",
    "SHAPES",
    "InfraFinding",
    "Shape",
    "classify",
    "describe",
    "infra_only",
    "infra_signature",
    "infrastructure_findings",
    "looks_like_infrastructure",
    "normalize_url",
]

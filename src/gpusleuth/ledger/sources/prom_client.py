"""A client for any server with Prometheus's HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics).

httpx does the HTTP (connection reuse, TLS verification on by default, timeouts, basic auth); what is ours
is the API's shape: POSTed form queries (a regex of 100 GPU UUIDs does not fit in a URL), the JSON
envelope decoded with msgspec straight into typed structs, and every failure turned into one sentence
naming the server and what to do (unreachable, credentials refused, TLS not verified, a query the server
rejects). Credentials come from an environment variable or a file, never from the command line, where
``ps`` would show them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpusleuth.errors import InputError

TOKEN_ENV = "GPUSLEUTH_PROMETHEUS_TOKEN"  # a bearer token
BASIC_ENV = "GPUSLEUTH_PROMETHEUS_BASIC_AUTH"  # "user:password"


class PromSeries(msgspec.Struct):
    """One series of a range query: its labels and its points, left as raw JSON until ``points``."""

    metric: dict[str, str]
    values: msgspec.Raw = msgspec.Raw(b"[]")

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(epoch seconds, values) as numpy: ``[[t,"v"],…]`` parsed in C, not as a Python pair per point.
        Values are Go's float strings ("1", "0.25", "NaN", "+Inf"), which strtod reads as they are."""
        raw = bytes(self.values).translate(None, b'[]"')
        if not raw.strip():
            return np.empty(0), np.empty(0)
        flat = np.array(raw.decode("ascii").split(","), dtype=np.float64)
        return flat[0::2], flat[1::2]


class _Data(msgspec.Struct):
    resultType: str = ""
    result: list[PromSeries] = []


class _Envelope(msgspec.Struct):
    status: str
    data: Any = None
    errorType: str = ""
    error: str = ""
    warnings: list[str] = []


class _RangeEnvelope(msgspec.Struct):
    status: str
    data: _Data | None = None
    errorType: str = ""
    error: str = ""


@dataclass
class Auth:
    """How to authenticate: a bearer token, or basic auth (user, password); where it came from, for messages."""

    token: str | None = None
    basic: tuple[str, str] | None = None
    source: str = "none"


class TooManySamples(Exception):
    """The server refused a query for its size: the caller splits it and asks again."""


def read_auth(token_file: Path | None = None, basic_auth_file: Path | None = None) -> Auth:
    """Credentials from ``--bearer-token-file``/``--basic-auth-file`` or, without them, the environment."""
    if token_file is not None:
        return Auth(token=_read_secret(token_file, "bearer token"), source=str(token_file))
    if basic_auth_file is not None:
        return Auth(basic=_split_basic(_read_secret(basic_auth_file, "user:password"), str(basic_auth_file)),
                    source=str(basic_auth_file))
    if os.environ.get(TOKEN_ENV):
        return Auth(token=os.environ[TOKEN_ENV].strip(), source=f"${TOKEN_ENV}")
    if os.environ.get(BASIC_ENV):
        return Auth(basic=_split_basic(os.environ[BASIC_ENV].strip(), f"${BASIC_ENV}"), source=f"${BASIC_ENV}")
    return Auth()


def _read_secret(path: Path, what: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InputError(path, f"cannot read the {what} file ({exc.strerror})") from None
    if not text:
        raise InputError(path, f"the {what} file is empty")
    return text


def _split_basic(text: str, where: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise InputError(where, "basic auth is one line 'user:password'")
    return user, password


class PrometheusClient:
    """Queries one server; each method returns plain data or raises InputError with a sentence."""

    def __init__(self, url: str, auth: Auth | None = None, ca_file: Path | None = None,
                 verify: bool = True, timeout_s: float = 120.0):
        import httpx

        self.url = url.rstrip("/")
        if not self.url.startswith(("http://", "https://")):
            raise InputError(url, "--prometheus wants the server's base URL, e.g. http://prometheus:9090")
        self.auth = auth or Auth()
        headers = {"Authorization": f"Bearer {self.auth.token}"} if self.auth.token else {}
        verify_with: Any = verify
        if verify and ca_file is not None:
            import ssl

            try:
                verify_with = ssl.create_default_context(cafile=str(ca_file))
            except (OSError, ssl.SSLError) as exc:
                raise InputError(ca_file, f"not a readable CA bundle ({exc})") from None
        self._http = httpx.Client(base_url=self.url, headers=headers, auth=self.auth.basic, verify=verify_with,
                                  timeout=httpx.Timeout(timeout_s, connect=10.0), follow_redirects=True)
        self._httpx = httpx

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "PrometheusClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the API calls we use -------------------------------------------------------------------------
    def query_range(self, query: str, start_s: float, end_s: float, step_s: float) -> list[PromSeries]:
        data = self._call("/api/v1/query_range",
                          {"query": query, "start": _num(start_s), "end": _num(end_s), "step": _num(step_s)},
                          shape=_RangeEnvelope)
        return data.result if data is not None else []

    def label_values(self, label: str, match: str, start_s: float, end_s: float) -> list[str]:
        data = self._call(f"/api/v1/label/{label}/values",
                          {"match[]": match, "start": _num(start_s), "end": _num(end_s)}, method="GET")
        return [str(v) for v in data or []]

    def series(self, match: str, start_s: float, end_s: float) -> list[dict[str, str]]:
        data = self._call("/api/v1/series", {"match[]": match, "start": _num(start_s), "end": _num(end_s)})
        return [dict(d) for d in data or []]

    # --- one request, every failure a sentence -------------------------------------------------------------
    def _call(self, path: str, params: dict[str, str], method: str = "POST", shape: type = _Envelope) -> Any:
        httpx = self._httpx
        try:
            if method == "POST":
                resp = self._http.post(path, data=params)
            else:
                resp = self._http.get(path, params=params)
        except httpx.ConnectError as exc:
            if "CERTIFICATE_VERIFY_FAILED" in str(exc) or "certificate verify failed" in str(exc):
                raise InputError(self.url, "the server's TLS certificate could not be verified "
                                 f"({_short(exc)}); give its CA with --ca-file CA.pem (verification stays on)") from None
            raise InputError(self.url, f"cannot reach the Prometheus server ({_short(exc)}): check the URL and "
                             "that the server is up and reachable from here") from None
        except httpx.TimeoutException:
            raise InputError(self.url, f"the Prometheus server did not answer {path} in time: try a shorter "
                             "--chunk or fewer GPUs per query (--gpus-per-query)") from None
        except httpx.HTTPError as exc:
            raise InputError(self.url, f"HTTP request to the Prometheus server failed ({_short(exc)})") from None
        if resp.status_code in (401, 403):
            how = (f"the credentials from {self.auth.source}" if self.auth.source != "none"
                   else "no credentials (none were given)")
            raise InputError(self.url, f"the server refused the request (HTTP {resp.status_code}) with {how}: give "
                             f"a bearer token (${TOKEN_ENV} or --bearer-token-file) or basic auth "
                             f"(${BASIC_ENV}='user:password' or --basic-auth-file) that it accepts")
        if resp.status_code == 404:
            raise InputError(self.url, f"no Prometheus HTTP API at this URL ({path} answered 404): give the base "
                             "URL the API lives under, e.g. http://prometheus:9090 or a Thanos/Mimir prefix")
        try:
            env: Any = msgspec.json.decode(resp.content, type=shape)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise InputError(self.url, f"{path} answered HTTP {resp.status_code} with something that is not a "
                             f"Prometheus API response ({resp.headers.get('content-type', 'no content type')})") from None
        if env.status != "success":
            if "too many samples" in env.error or "exceeded" in env.error and "limit" in env.error:
                raise TooManySamples(env.error)
            raise InputError(self.url, f"the server rejected a query ({env.errorType or resp.status_code}: "
                             f"{env.error[:300]})")
        return env.data


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _short(exc: Exception) -> str:
    text = str(exc) or exc.__class__.__name__
    return text if len(text) < 200 else text[:200] + "…"

"""One HTTP session with an OpenBao (the vault; HashiCorp Vault speaks the same API), over httpx.

:class:`Bao` sends requests to ``/v1/...`` with a token, over TLS verified against one CA file
only (never the system's store) or over a Unix socket, and turns OpenBao's answers into typed
outcomes: the JSON body of a success, :class:`BaoError` naming the method, the path, the status
and OpenBao's own error text for anything else. A secret passed in a request body is never part
of an error's text; OpenBao's errors are scrubbed of it all the same.
"""

from __future__ import annotations

import ssl
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from meshtui import cafile
from meshtui.errors import ProvisionError
from meshtui.freeform import ForeignJson
from meshtui.kinds.openbao.server_config import APPROLE_MOUNT as APPROLE_MOUNT
from meshtui.model import KV_MOUNT as KV_MOUNT  # its home is the core (status names it)

TIMEOUT_S = 10.0
KEEPALIVE_S = 5.0
"""How long an idle connection is kept for the session's next request (httpx's default)."""
SEALED = 503
REFUSED_TEXT = "invalid role or secret ID"
"""What OpenBao answers (400) to an AppRole login whose role_id or secret_id it does not hold."""


class BaoError(ProvisionError):
    """OpenBao answered a request with an error (or could not be reached: ``status`` 0)."""

    def __init__(self, message: str, *, status: int, errors: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.errors = tuple(errors)


def tls_context(ca: str) -> ssl.SSLContext:
    """A client TLS context trusting ``ca`` alone (host names checked), read as root reads a
    credential file (:func:`meshtui.cafile.context`); OSError/SSLError when it cannot be used."""
    return cafile.context(ca)


def _errors(response: httpx.Response) -> list[str]:
    try:
        body = response.json()
    except ValueError:
        return []
    found = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(found, list):
        return []
    return [" ".join(str(e).split()) for e in found]


def scrub(text: str, secrets: Sequence[str]) -> str:
    """``text`` without any of ``secrets``, on one line, at most 300 characters."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:299] + "…"


class Bao:
    """A session with one OpenBao: a base address, the CA its certificate is checked against
    (None over a Unix socket) and the token sent with every request (None: unauthenticated)."""

    def __init__(
        self,
        address: str,
        *,
        ca: str | None,
        token: str | None = None,
        uds: str | None = None,
        timeout: float = TIMEOUT_S,
        keepalive: float = KEEPALIVE_S,
    ) -> None:
        self.address = address.rstrip("/")
        self._token = token
        if uds is not None:
            transport = httpx.HTTPTransport(uds=uds, retries=0, limits=_limits(keepalive))
            verify: ssl.SSLContext | bool = False
        else:
            if not self.address.startswith("https://"):
                raise ProvisionError(
                    f"the OpenBao address {self.address!r} is not https://; meshtui speaks to "
                    'OpenBao over TLS only (write address = "https://HOST:8200")'
                )
            if not ca:
                raise ProvisionError("no CA file to verify OpenBao's certificate (set ca = ...)")
            try:
                verify = tls_context(ca)
            except (OSError, ssl.SSLError) as exc:
                raise ProvisionError(
                    f"the CA file {ca} cannot be used: {type(exc).__name__}: {exc}"
                ) from None
            transport = httpx.HTTPTransport(verify=verify, retries=0, limits=_limits(keepalive))
        self.client = httpx.Client(
            base_url=self.address, transport=transport, timeout=timeout, trust_env=False
        )

    def close(self) -> None:
        """Close the session's connections."""
        self.client.close()

    def __enter__(self) -> Bao:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        secrets: Sequence[str] = (),
    ) -> httpx.Response:
        """One request, as it came back; BaoError (status 0) when OpenBao could not be reached."""
        headers = {}
        use = token if token is not None else self._token
        if use:
            headers["X-Vault-Token"] = use
        try:
            return self.client.request(method, f"/v1/{path}", json=body, headers=headers)
        except httpx.HTTPError as exc:
            why = scrub(f"{type(exc).__name__}: {exc}", [*secrets, use or ""])
            raise BaoError(f"cannot reach OpenBao at {self.address}: {why}", status=0) from None

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        secrets: Sequence[str] = (),
        missing_ok: bool = False,
    ) -> ForeignJson | None:
        """The JSON body of a success (None for 204, or for 404 when ``missing_ok``); else
        BaoError naming the request, the status and what OpenBao said."""
        response = self.send(method, path, body, token=token, secrets=secrets)
        if response.status_code == 204 or (missing_ok and response.status_code == 404):
            return None
        if 200 <= response.status_code < 300:
            try:
                data = response.json()
            except ValueError:
                data = None
            return data if isinstance(data, dict) else {}
        errors = [scrub(e, [*secrets, token or self._token or ""]) for e in _errors(response)]
        said = "; ".join(errors) or response.reason_phrase
        raise BaoError(
            f"OpenBao refused {method} /v1/{path}: {response.status_code} {said}"
            + _hint(response.status_code, path),
            status=response.status_code,
            errors=errors,
        )

    def data(self, method: str, path: str, body: Mapping[str, Any] | None = None, **kw: Any) -> Any:
        """The ``data`` field of :meth:`call`'s answer (None when absent)."""
        answer = self.call(method, path, body, **kw)
        return None if answer is None else answer.get("data")

    def keys(self, path: str) -> list[str]:
        """A LIST's keys ([] when there is nothing: OpenBao answers 404)."""
        answer = self.call("LIST", path, missing_ok=True)
        found = (answer or {}).get("data", {}).get("keys") or []
        return [str(k) for k in found]


def _limits(keepalive: float) -> httpx.Limits:
    """httpx's default pool limits, an idle connection kept ``keepalive`` seconds."""
    return httpx.Limits(
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=keepalive
    )


def _hint(status: int, path: str) -> str:
    """What to do about a refusal, where there is something to say."""
    if status == SEALED:
        return " (OpenBao is sealed: unseal it; nothing was changed)"
    if status == 403:
        return (
            f" (the admin token lacks a capability on {path}, or has expired: grant it in the "
            "provisioner's policy, see docs/openbao.md)"
        )
    return ""


def read_admin(text: str) -> dict[str, str]:
    """The admin file's fields (its text is never shown in an error)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raise ProvisionError(
            "the admin file is not TOML (its text is not shown); write address = "
            '"https://HOST:8200", ca = "/path/ca.pem", token = "..."'
        ) from None
    return {k: str(v) for k, v in data.items()}

"""Which server URLs the check may call, and the URLs it derives from the one a user gives.

Run locally, any http(s) URL. In public mode (sources.public_mode: on a Space) a typed URL would make the Space
call any address for a visitor, so the server source is off unless the Space's owner lists base URLs in
SPECDEC_SERVER_ALLOWLIST (comma-separated), and even a listed URL is refused when its host resolves to a loopback,
link-local, private or otherwise non-public address.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..sources import public_mode
from .errors import ServerError

ALLOWLIST_VARIABLE = "SPECDEC_SERVER_ALLOWLIST"
PUBLIC_RULE = (
    "This public demo calls only the servers its owner listed in "
    f"{ALLOWLIST_VARIABLE}, and never loopback, link-local or private addresses. "
    "Run the app on your own machine to check any server."
)


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """A server's root URL (scheme, host, port, path prefix) with no trailing /v1 or slash."""

    root: str

    @property
    def api_base(self) -> str:
        return self.root + "/v1"

    @property
    def metrics_url(self) -> str:
        return self.root + "/metrics"


def server_address(url: str) -> ServerAddress:
    """The address a user typed, checked: http(s), a host, and in public mode the allowlist and a public IP."""
    root = normalized(url)
    if public_mode():
        if root not in allowlist():
            raise ServerError(PUBLIC_RULE)
        refuse_non_public(urlsplit(root).hostname or "")
    return ServerAddress(root)


def normalized(url: str) -> str:
    """http(s)://host[:port][/prefix], without a trailing slash or /v1; a one-line error for anything else."""
    if not isinstance(url, str) or not url.strip():
        raise ServerError("No server URL given: type the base URL of an OpenAI-compatible server.")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerError("The server URL must start with http:// or https:// and name a host.")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ServerError("The server URL must hold no user name, password, query or fragment.")
    path = parts.path.rstrip("/").removesuffix("/v1").rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path}"


def allowlist() -> frozenset[str]:
    """The owner's listed base URLs, normalized; an entry that is no http(s) URL lists nothing."""
    listed = set()
    for url in os.environ.get(ALLOWLIST_VARIABLE, "").split(","):
        with contextlib.suppress(ServerError):
            listed.add(normalized(url))
    return frozenset(listed)


def refuse_non_public(host: str) -> None:
    """Raises unless every address the host resolves to is a public one."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (socket.gaierror, UnicodeError):
        raise ServerError(f"The server's host '{host}' does not resolve.") from None
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if not ip.is_global or ip.is_multicast:  # is_global is False for loopback, link-local, private, reserved
            raise ServerError(PUBLIC_RULE)

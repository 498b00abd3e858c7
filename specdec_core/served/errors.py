"""The one error a served-model check raises: a one-line message a visitor can act on."""

from __future__ import annotations

from ..errors import SpecDecError


class ServerError(SpecDecError):
    """The server could not be used: unreachable, refused, too slow, or not speaking the OpenAI API."""

"""Exceptions of the broker's trio edge that handlers may raise (see dispatch.py's handler contract)."""

from __future__ import annotations

__all__ = ["CloseConnection"]


class CloseConnection(Exception):
    """Close this connection without answering the request; the message says why (logged at info)."""

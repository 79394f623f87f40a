"""Sealed fields: one stored value of run content, encrypted on its own.

A run's content sits in Redis hashes and streams next to the ids, statuses and times that
routing, the indexes, the Lua scripts and the sweeper read. Each content value is sealed
where it is written and opened where it is read, at the edge of the durable layer:

    sealed:v1:<base64 of a key-ring envelope (crypto.KeyRing.encrypt_field)>

The envelope is the checkpoints' (AES-256-GCM, the first key of the ring), and its associated
data names the run, the record (a request id, a call id, or the run id for the run's own
fields) and the field, so a value copied to another field, request or run fails to open.
An empty value stays empty (it says nothing a status does not). A value without the prefix
was written before fields were sealed: it is read as it is, and `keys rotate` seals it.

A value that cannot be opened is never passed on as garbage: `open` raises SealedFieldError
for code that needs the value to go on, and `open_or_mark` gives "[unreadable: <why>]" for
code that only shows it.
"""

from __future__ import annotations

import base64
import binascii

from agent_host.durable.crypto import KeyRing, kid_of
from agent_host.errors import CheckpointDecryptError, SealedFieldError

__all__ = ["PREFIX", "FieldSealer", "is_sealed", "unreadable"]

PREFIX = "sealed:v1:"


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX)


def unreadable(reason: str) -> str:
    """How a value that cannot be opened is shown, wherever it would have been."""
    return f"[unreadable: {reason}]"


class FieldSealer:
    """Seals and opens field values with the key ring of the checkpoints."""

    def __init__(self, keyring: KeyRing) -> None:
        self.keyring = keyring

    def seal(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
        if not value:
            return value
        blob = self.keyring.encrypt_field(
            value.encode(), run_id=run_id, record_id=record_id, field=field
        )
        return PREFIX + base64.b64encode(blob).decode("ascii")

    def open(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
        """The plaintext (a value without the prefix is plaintext already), or
        SealedFieldError."""
        if not is_sealed(value):
            return value
        plain = self.keyring.decrypt_field(
            _envelope(value), run_id=run_id, record_id=record_id, field=field
        )
        try:
            return plain.decode()
        except UnicodeDecodeError:  # authenticated, so only a writer with the key did this
            raise SealedFieldError("the sealed value is not text") from None

    def open_or_mark(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
        try:
            return self.open(value, run_id=run_id, record_id=record_id, field=field)
        except SealedFieldError as exc:
            return unreadable(str(exc))

    def needs_resealing(self, value: str) -> bool:
        """True for a value written before sealing, or sealed under another key than the
        active one; False for an empty value. A damaged value needs it too: `reseal` then
        says what is wrong."""
        if not value:
            return False
        if not is_sealed(value):
            return True
        try:
            return kid_of(_envelope(value)) != self.keyring.active_kid
        except CheckpointDecryptError:
            return True

    def reseal(self, value: str, *, run_id: str, record_id: str, field: str) -> str:
        """The same plaintext sealed under the active key (a rotation step), or
        SealedFieldError if it cannot be opened."""
        plain = self.open(value, run_id=run_id, record_id=record_id, field=field)
        return self.seal(plain, run_id=run_id, record_id=record_id, field=field)


def _envelope(value: str) -> bytes:
    try:
        return base64.b64decode(value[len(PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        raise SealedFieldError("the sealed value is not valid base64") from None

"""Encryption at rest of run checkpoints and sealed fields: AES-256-GCM under a rotating
key ring.

Keys come from ``COUNTERSIGN_ENCRYPTION_KEYS``: comma-separated ``kid:base64(32 bytes)``
entries. The first key encrypts; every key decrypts, so a key is rotated without downtime
by putting a new key first and keeping the old one until no blob needs it
(:meth:`KeyRing.needs_rotation`, :meth:`KeyRing.reencrypt`).

Envelope (version 1)::

    0x01 | len(kid) (1 byte) | kid (ASCII) | nonce (12 bytes) | ciphertext + tag (16 bytes)

Version 2 is the same envelope around a zlib-compressed plaintext: a checkpoint (or other
blob sealed with `encrypt`) of more than COMPRESS_ABOVE bytes is compressed before it is
encrypted (its JSON shrinks to about a third). The version byte is part of the associated
data, so it cannot be flipped to make one kind pass for the other; the run and request ids
bound in are unchanged. Sealed fields (`encrypt_field`) stay version 1.

The associated data covers the envelope header (version and kid) and the run and request
ids, so a blob copied to another run or request fails to decrypt instead of resuming there.
A sealed field (`sealed_fields`) uses the same envelope with associated data of its own
domain naming its run, its record and its field, so neither kind can pass for the other.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from agent_host.errors import (
    CheckpointDecryptError,
    ConfigurationError,
    MissingFieldKeyError,
    MissingKeyError,
    SealedFieldError,
)

__all__ = ["ENV_VAR", "HEADER_BYTES", "KeyRing", "generate_key", "kid_in_header", "kid_of"]

ENV_VAR = "COUNTERSIGN_ENCRYPTION_KEYS"
VERSION = 1
COMPRESSED = 2  # the envelope of a compressed plaintext
COMPRESS_ABOVE = 512  # bytes of plaintext; smaller blobs gain little from zlib
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_KID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_AAD_PREFIX = b"countersign/checkpoint\x00"
_FIELD_AAD_PREFIX = b"countersign/field\x00"
_GENERATE = 'python -c "from agent_host.durable.crypto import generate_key; print(generate_key())"'


def generate_key(kid: str | None = None) -> str:
    """A new ``kid:base64`` entry for COUNTERSIGN_ENCRYPTION_KEYS (kid e.g. ``k20250101a1b2``)."""
    kid = kid if kid is not None else f"k{datetime.now(UTC):%Y%m%d}{secrets.token_hex(2)}"
    _check_kid(kid, ConfigurationError)
    return f"{kid}:{base64.b64encode(os.urandom(KEY_BYTES)).decode('ascii')}"


def kid_of(blob: bytes) -> str:
    """The id of the key a blob was encrypted under (no key needed)."""
    return _split(blob)[0]


HEADER_BYTES = 2 + 255  # the most an envelope's header can take: version, length, key id


def kid_in_header(start: bytes) -> str | None:
    """The key id in an envelope's first HEADER_BYTES (or all of it), or None if they are
    not an envelope's header."""
    end = 2 + start[1] if len(start) >= 2 else 0
    if not end or start[0] not in (VERSION, COMPRESSED) or len(start) < end:
        return None
    try:
        return start[2:end].decode("ascii")
    except UnicodeDecodeError:
        return None


class KeyRing:
    """AES-GCM keys by kid; the first one encrypts, all of them decrypt."""

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise ConfigurationError(f"{ENV_VAR} holds no key: set it to `$({_GENERATE})`.")
        for kid, key in keys.items():
            _check_kid(kid, ConfigurationError)
            if len(key) != KEY_BYTES:
                raise ConfigurationError(
                    f"{ENV_VAR}: key {kid!r} is {len(key)} bytes, AES-256-GCM needs "
                    f"{KEY_BYTES}: generate one with `{_GENERATE}`."
                )
        self._aead = {kid: AESGCM(key) for kid, key in keys.items()}
        self.active_kid: str = next(iter(keys))

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """Parse ``kid:base64,kid:base64,...`` (the COUNTERSIGN_ENCRYPTION_KEYS format)."""
        keys: dict[str, bytes] = {}
        for n, raw in enumerate(text.split(","), start=1):
            entry = raw.strip()
            if not entry:
                if text.strip():
                    raise ConfigurationError(
                        f"{ENV_VAR}: entry {n} is empty: remove the stray comma."
                    )
                raise ConfigurationError(f"{ENV_VAR} is empty: set it to `$({_GENERATE})`.")
            kid, colon, b64 = entry.partition(":")
            kid, b64 = kid.strip(), b64.strip()
            if not colon:
                raise ConfigurationError(
                    f"{ENV_VAR}: entry {n} has no ':' — each entry is kid:base64(32 bytes)."
                )
            _check_kid(kid, ConfigurationError)
            if kid in keys:
                raise ConfigurationError(
                    f"{ENV_VAR}: key id {kid!r} appears twice: give each key its own id."
                )
            try:
                keys[kid] = base64.b64decode(b64.replace("-", "+").replace("_", "/"), validate=True)
            except (binascii.Error, ValueError):
                raise ConfigurationError(
                    f"{ENV_VAR}: key {kid!r} is not valid base64: copy it again "
                    f"or generate one with `{_GENERATE}`."
                ) from None
        return cls(keys)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> KeyRing:
        """From a mapping of environment variables (the caller's: this reads no
        environment itself)."""
        return cls.parse(environ.get(ENV_VAR, ""))

    @property
    def kids(self) -> tuple[str, ...]:
        return tuple(self._aead)

    def __repr__(self) -> str:  # never the key bytes
        return f"KeyRing(kids={self.kids!r})"

    def encrypt(self, plaintext: bytes, *, run_id: str, request_id: str) -> bytes:
        if len(plaintext) > COMPRESS_ABOVE:
            packed = zlib.compress(plaintext)
            return self._encrypt(packed, _AAD_PREFIX, run_id, request_id, version=COMPRESSED)
        return self._encrypt(plaintext, _AAD_PREFIX, run_id, request_id)

    def encrypt_field(self, plaintext: bytes, *, run_id: str, record_id: str, field: str) -> bytes:
        """One stored field's value, bound to its run, its record (a request, a call, the
        run itself) and its name."""
        return self._encrypt(plaintext, _FIELD_AAD_PREFIX, run_id, record_id, field)

    def decrypt_field(self, blob: bytes, *, run_id: str, record_id: str, field: str) -> bytes:
        """The value `encrypt_field` sealed to exactly this run, record and field, or
        SealedFieldError saying why not (in a few words: it is shown where the value was)."""
        kid, header, nonce, sealed = _split(blob, "sealed field", SealedFieldError)
        if header[0] != VERSION:  # fields are never compressed
            raise SealedFieldError(f"sealed with envelope version {header[0]}, not {VERSION}")
        aead = self._aead.get(kid)
        if aead is None:
            raise MissingFieldKeyError(f"sealed under key {kid!r}, which is not in {ENV_VAR}")
        try:
            return aead.decrypt(
                nonce, sealed, _aad(_FIELD_AAD_PREFIX, header, run_id, record_id, field)
            )
        except InvalidTag:
            raise SealedFieldError(
                f"failed authentication under key {kid!r}: altered, or copied from another "
                "field, request or run"
            ) from None

    def _encrypt(
        self, plaintext: bytes, domain: bytes, *context: str, version: int = VERSION
    ) -> bytes:
        kid = self.active_kid.encode("ascii")
        header = bytes([version, len(kid)]) + kid
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead[self.active_kid].encrypt(
            nonce, plaintext, _aad(domain, header, *context)
        )
        return header + nonce + sealed

    def decrypt(self, blob: bytes, *, run_id: str, request_id: str) -> bytes:
        kid, header, nonce, sealed = _split(blob)
        aead = self._aead.get(kid)
        if aead is None:
            raise MissingKeyError(
                f"key {kid!r} is not in {ENV_VAR}: add it back to decrypt the checkpoint of "
                f"run {run_id!r} (keys present: {', '.join(self.kids)})."
            )
        try:
            plain = aead.decrypt(nonce, sealed, _aad(_AAD_PREFIX, header, run_id, request_id))
        except InvalidTag:
            raise CheckpointDecryptError(
                f"checkpoint of run {run_id!r} (request {request_id!r}) failed authentication "
                f"under key {kid!r}: it was tampered with, truncated, or belongs to another "
                "run or request. Do not resume it; restore it from a backup or cancel the run."
            ) from None
        if header[0] != COMPRESSED:
            return plain
        try:
            return zlib.decompress(plain)
        except zlib.error:  # authenticated, so only a writer with the key did this
            raise CheckpointDecryptError(
                f"checkpoint of run {run_id!r} does not decompress: restore it from a backup"
            ) from None

    def needs_rotation(self, blob: bytes) -> bool:
        """True when the blob is not under the active (first) key."""
        return kid_of(blob) != self.active_kid

    def reencrypt(self, blob: bytes, *, run_id: str, request_id: str) -> bytes:
        """The same plaintext under the active key (a rotation step)."""
        plain = self.decrypt(blob, run_id=run_id, request_id=request_id)
        return self.encrypt(plain, run_id=run_id, request_id=request_id)


def _check_kid(kid: str, error: type[Exception]) -> None:
    if not _KID.fullmatch(kid):
        raise error(
            f"{ENV_VAR}: key id {kid!r} is invalid: use 1-64 characters from A-Z a-z 0-9 . _ -"
        )


def _aad(domain: bytes, header: bytes, *context: str) -> bytes:
    """Domain, envelope header, then each context string length-prefixed (for a checkpoint:
    run id, request id — the bytes every stored checkpoint was sealed with)."""
    parts = [domain, header]
    for text in context:
        raw = text.encode()
        parts += [len(raw).to_bytes(4, "big"), raw]
    return b"".join(parts)


def _split(
    blob: bytes,
    what: str = "encrypted checkpoint",
    error: type[CheckpointDecryptError] = CheckpointDecryptError,
) -> tuple[str, bytes, bytes, bytes]:
    """(kid, header, nonce, ciphertext+tag) of an envelope, or `error` saying what is wrong."""
    if len(blob) < 2:
        raise error(f"{what} is truncated ({len(blob)} bytes): restore it from a backup.")
    if blob[0] not in (VERSION, COMPRESSED):
        raise error(
            f"{what} has envelope version {blob[0]}, this countersign reads "
            f"{VERSION} and {COMPRESSED}: upgrade countersign, or the data was not written "
            "by countersign."
        )
    end = 2 + blob[1]
    if len(blob) < end + NONCE_BYTES + TAG_BYTES:
        raise error(f"{what} is truncated ({len(blob)} bytes): restore it from a backup.")
    try:
        kid = blob[2:end].decode("ascii")
    except UnicodeDecodeError:
        raise error(f"{what} has a corrupt key id: restore it from a backup.") from None
    return kid, blob[:end], blob[end : end + NONCE_BYTES], blob[end + NONCE_BYTES :]

"""AES-GCM checkpoint envelopes: round trip, rotation, tamper/move detection, key-ring parsing."""

from __future__ import annotations

import base64
import json
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_host.durable.crypto import HEADER_BYTES, KeyRing, generate_key, kid_in_header, kid_of
from agent_host.errors import CheckpointDecryptError, ConfigurationError

OLD = generate_key("old")
NEW = generate_key("new")
IDS = {"run_id": "run-1", "request_id": "req-1"}


def b64(n: int) -> str:
    return base64.b64encode(os.urandom(n)).decode()


def test_round_trip_and_envelope() -> None:
    ring = KeyRing.parse(OLD)
    blob = ring.encrypt(b"checkpoint", **IDS)
    assert b"checkpoint" not in blob
    assert ring.decrypt(blob, **IDS) == b"checkpoint"
    assert kid_of(blob) == "old" and not ring.needs_rotation(blob)
    assert ring.encrypt(b"checkpoint", **IDS) != blob  # fresh nonce every time
    assert len(blob) == 1 + 1 + 3 + 12 + len(b"checkpoint") + 16


def test_first_key_encrypts_every_key_decrypts() -> None:
    old_ring = KeyRing.parse(OLD)
    rotated = KeyRing.parse(f"{NEW}, {OLD}")
    assert rotated.active_kid == "new" and rotated.kids == ("new", "old")
    legacy = old_ring.encrypt(b"state", **IDS)
    assert rotated.decrypt(legacy, **IDS) == b"state"
    assert rotated.needs_rotation(legacy)
    fresh = rotated.reencrypt(legacy, **IDS)
    assert kid_of(fresh) == "new" and not rotated.needs_rotation(fresh)
    assert rotated.decrypt(fresh, **IDS) == b"state"
    with pytest.raises(CheckpointDecryptError, match="'new' is not in COUNTERSIGN_ENCRYPTION_KEYS"):
        old_ring.decrypt(fresh, **IDS)


def test_tampered_byte_fails() -> None:
    ring = KeyRing.parse(OLD)
    blob = ring.encrypt(b"x" * 40, **IDS)
    for index in (6, len(blob) // 2, len(blob) - 1):  # nonce, ciphertext, tag
        tampered = bytearray(blob)
        tampered[index] ^= 0x01
        with pytest.raises(CheckpointDecryptError, match="tampered"):
            ring.decrypt(bytes(tampered), **IDS)


def test_truncated_blob_fails() -> None:
    ring = KeyRing.parse(OLD)
    blob = ring.encrypt(b"x" * 40, **IDS)
    for cut in (0, 1, 4, 20, len(blob) - 41, len(blob) - 1):
        with pytest.raises(CheckpointDecryptError, match=r"truncated|tampered"):
            ring.decrypt(blob[:cut], **IDS)


def test_blob_moved_to_another_run_or_request_fails() -> None:
    ring = KeyRing.parse(OLD)
    blob = ring.encrypt(b"state", **IDS)
    with pytest.raises(CheckpointDecryptError, match="another run or request"):
        ring.decrypt(blob, run_id="run-2", request_id="req-1")
    with pytest.raises(CheckpointDecryptError, match="another run or request"):
        ring.decrypt(blob, run_id="run-1", request_id="req-2")
    # the length prefixes keep ("run-1", "req-1") distinct from ("run-1r", "eq-1")
    with pytest.raises(CheckpointDecryptError):
        ring.decrypt(blob, run_id="run-1r", request_id="eq-1")


def test_unknown_kid_and_kid_swap_fail() -> None:
    ring = KeyRing.parse(OLD)
    other = KeyRing.parse(generate_key("k1"))
    blob = other.encrypt(b"state", **IDS)
    with pytest.raises(CheckpointDecryptError, match="'k1' is not in COUNTERSIGN_ENCRYPTION_KEYS"):
        ring.decrypt(blob, **IDS)
    # relabel a blob with another kid of the same length: the kid is authenticated
    both = KeyRing.parse(f"{generate_key('aaa')},{OLD}")
    sealed = both.encrypt(b"state", **IDS)
    relabelled = sealed[:2] + b"old" + sealed[5:]
    with pytest.raises(CheckpointDecryptError, match="tampered"):
        both.decrypt(relabelled, **IDS)


def test_unknown_envelope_version_fails() -> None:
    ring = KeyRing.parse(OLD)
    blob = ring.encrypt(b"state", **IDS)
    with pytest.raises(CheckpointDecryptError, match="envelope version 3"):
        ring.decrypt(b"\x03" + blob[1:], **IDS)


def test_a_large_checkpoint_is_compressed_before_it_is_encrypted() -> None:
    ring = KeyRing.parse(OLD)
    plain = json.dumps({"transcript": ["the same words again"] * 200}).encode()
    blob = ring.encrypt(plain, **IDS)
    assert blob[0] == 2 and len(blob) < len(plain) / 4
    assert ring.decrypt(blob, **IDS) == plain
    small = ring.encrypt(b"state", **IDS)  # below the threshold: as before
    assert small[0] == 1 and ring.decrypt(small, **IDS) == b"state"
    # The version is authenticated: neither kind passes for the other, nor moves runs.
    for forged in (b"\x01" + blob[1:], b"\x02" + small[1:]):
        with pytest.raises(CheckpointDecryptError, match="tampered"):
            ring.decrypt(forged, **IDS)
    with pytest.raises(CheckpointDecryptError, match="tampered"):
        ring.decrypt(blob, run_id="run_other", request_id=IDS["request_id"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        (f"{OLD},", "entry 2 is empty"),
        ("k1" + b64(32), "has no ':'"),
        ("k1:not*base64!", "not valid base64"),
        ("k1:abc", "not valid base64"),
        (f"k1:{b64(16)}", "16 bytes"),
        (f"k1:{b64(33)}", "33 bytes"),
        (f"k1:{b64(32)},k1:{b64(32)}", "appears twice"),
        (f":{b64(32)}", "key id '' is invalid"),
        (f"k 1:{b64(32)}", "key id 'k 1' is invalid"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as caught:
        KeyRing.parse(text)
    assert "COUNTERSIGN_ENCRYPTION_KEYS" in str(caught.value)


def test_parse_accepts_spaces_and_urlsafe_base64() -> None:
    key = os.urandom(32)
    ring = KeyRing.parse(f" a:{base64.urlsafe_b64encode(key).decode()} , b:{b64(32)} ")
    assert ring.kids == ("a", "b")
    assert KeyRing({"a": key}).decrypt(ring.encrypt(b"x", **IDS), **IDS) == b"x"


def test_generate_key_and_from_env() -> None:
    entry = generate_key()
    kid, _, key = entry.partition(":")
    assert re.fullmatch(r"k\d{8}[0-9a-f]{4}", kid)
    assert len(base64.b64decode(key)) == 32
    assert generate_key() != entry
    ring = KeyRing.from_env({"COUNTERSIGN_ENCRYPTION_KEYS": entry})
    assert ring.active_kid == kid
    assert key not in repr(ring)
    with pytest.raises(ConfigurationError, match="COUNTERSIGN_ENCRYPTION_KEYS is empty"):
        KeyRing.from_env({})


def test_kid_of_garbage() -> None:
    with pytest.raises(CheckpointDecryptError):
        kid_of(b"")
    with pytest.raises(CheckpointDecryptError):
        kid_of(b"\x01\x05ab")


RING = KeyRing.parse(f"{NEW},{OLD}")


@given(plaintext=st.binary(max_size=4096), run_id=st.text(), request_id=st.text())
def test_any_bytes_round_trip(plaintext: bytes, run_id: str, request_id: str) -> None:
    blob = RING.encrypt(plaintext, run_id=run_id, request_id=request_id)
    assert RING.decrypt(blob, run_id=run_id, request_id=request_id) == plaintext


def test_the_key_id_is_read_from_an_envelopes_first_bytes_alone() -> None:
    ring = KeyRing.parse(generate_key("k-" + "x" * 62))
    for size in (10, 600):  # stored as it is, and compressed
        blob = ring.encrypt(os.urandom(size), run_id="run_1", request_id="req_1")
        assert kid_in_header(blob[:HEADER_BYTES]) == kid_of(blob) == "k-" + "x" * 62
    for junk in (b"", b"\x01", b"\x01\x09short", b"\x07\x02kA", b"\x01\x02\xff\xfe"):
        assert kid_in_header(junk) is None

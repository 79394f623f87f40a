"""The key file (`<data dir>/encryption.keys`, used while COUNTERSIGN_ENCRYPTION_KEYS is unset)
found empty or damaged: refused naming the file and saying to restore it, never to generate a
new key (every checkpoint written under the old ones would be lost), and left as it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent_host.durable.crypto import KeyRing, generate_key
from agent_host.durable.host import KEY_FILE, load_keyring
from agent_host.errors import ConfigurationError
from agent_host.settings import Settings, load_settings


def settings_on(data_dir: Path) -> Settings:
    return load_settings({"COUNTERSIGN_DATA_DIR": str(data_dir)})


def key_file_holding(data_dir: Path, content: bytes) -> Path:
    data_dir.mkdir(mode=0o700)
    path = data_dir / KEY_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    return path


@pytest.mark.parametrize("create", [True, False], ids=["serve", "keys-rotate"])
@pytest.mark.parametrize(
    ("content", "state"),
    [
        (b"", "is empty"),
        (b"\n  \n", "is empty"),
        (b"garbage, not keys\n", "is damaged"),
        (b"\x00\xff\xfe binary \x80", "is damaged"),
        (generate_key("k1")[:20].encode() + b"\n", "is damaged"),  # cut short
    ],
    ids=["empty", "blank", "garbage", "binary", "truncated"],
)
def test_an_empty_or_damaged_key_file_is_refused_naming_it_and_left_as_it_is(
    tmp_path: Path, content: bytes, state: str, create: bool
) -> None:
    path = key_file_holding(tmp_path / "data", content)
    before = path.stat()

    with pytest.raises(ConfigurationError) as refused:
        load_keyring(settings_on(tmp_path / "data"), create=create)

    said = str(refused.value)
    assert said.startswith(f"the encryption key file {path} {state}"), said
    assert "restore it from a backup" in said, said
    assert "set COUNTERSIGN_ENCRYPTION_KEYS to the keys it held" in said, said
    assert "do not generate a new key" in said, said
    assert "generate_key()" not in said and "is empty: set it" not in said, said
    assert path.read_bytes() == content  # nothing written over what may yet be restored
    after = path.stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    assert os.listdir(tmp_path / "data") == [KEY_FILE]


def test_a_good_key_file_still_opens(tmp_path: Path) -> None:
    key = generate_key("k1")
    key_file_holding(tmp_path / "data", f"{key}\n".encode())

    ring = load_keyring(settings_on(tmp_path / "data"))

    assert ring.kids == ("k1",)
    blob = ring.encrypt(b"state", run_id="r", request_id="q")
    assert KeyRing.parse(key).decrypt(blob, run_id="r", request_id="q") == b"state"

"""Hypothesis strategies the hostile tests share."""

from __future__ import annotations

from hypothesis import strategies as st

FORM = "application/x-www-form-urlencoded"


class Blob(bytes):
    """A large body that prints short in Hypothesis's report of a failing example."""

    def __repr__(self) -> str:
        return f"Blob({len(self)} bytes: {bytes(self[:48])!r}...{bytes(self[-16:])!r})"


def oversized(prefix: bytes, limit: int, suffix: bytes = b"") -> st.SearchStrategy[bytes]:
    """Bodies just over `limit` bytes."""
    return st.integers(1, 4096).map(
        lambda n: Blob(prefix + b"a" * (limit - len(prefix) - len(suffix) + n) + suffix)
    )


# Text a client could send: any character but lone surrogates (not encodable as UTF-8).
text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200)
# ... and that keeps an HTTP header on one line.
header_text = text.filter(lambda t: "\r" not in t and "\n" not in t)
hexes = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
content_types = st.one_of(
    st.sampled_from(
        [
            None,
            FORM,
            "application/json",
            "text/plain",
            "multipart/form-data; boundary=xyz",
            f"{FORM}; charset=latin-1",
            f"{FORM}; charset=utf-16",
            f"{FORM}; charset=no-such-charset",
            "application/json; charset=utf-32",
            "",
            "*/*",
        ]
    ),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)
# Raw header values, including bytes that are not UTF-8 and characters HTTP forbids.
raw_header_values = st.one_of(
    header_text.map(lambda t: t.encode()),
    st.binary(max_size=40).filter(lambda b: b"\r" not in b and b"\n" not in b),
)
# JSON nested far deeper than Python's recursion limit.
deep_json = st.integers(1_000, 100_000).flatmap(
    lambda n: st.sampled_from(
        [Blob(b"[" * n + b"]" * n), Blob(b'{"a":' * (n // 5) + b"1" + b"}" * (n // 5))]
    )
)

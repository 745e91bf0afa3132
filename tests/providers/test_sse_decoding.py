"""``daemon.providers.http.aiter_sse`` reads events as httpx-sse's own decoder does, however
the body is cut into chunks: comments as ``None``, LF, CRLF and lone CR line ends, fields
with and without their space, ``id`` kept across events, ``retry`` as an integer, an
unfinished event at the end dropped, and an oversized event refused."""

import httpx
import pytest
from httpx_sse._decoders import SSEDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.errors import ProviderError
from daemon.providers.base import StreamLimits
from daemon.providers.http import aiter_sse

pytestmark = pytest.mark.anyio

Decoded = tuple[str, str, str, int | None] | None


def reference(body: bytes) -> list[Decoded]:
    """Line by line through httpx-sse's ``SSEDecoder`` (what ``EventSource`` does), comments kept."""
    decoder, out = SSEDecoder(), []
    *complete, rest = body.split(b"\n")
    for number, line in enumerate([*complete, rest] if rest else complete):
        line = line.removesuffix(b"\r")
        for text in line.decode("utf-8", "replace").split("\r"):
            if text.startswith(":"):
                if number < len(complete):  # a comment after the last line break is not read
                    out.append(None)
                continue
            if (event := decoder.decode(text)) is not None:
                out.append((event.event, event.data, event.id, event.retry))
    return out


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self):  # type: ignore[no-untyped-def]
        for chunk in self.chunks:
            yield chunk


async def decoded(chunks: list[bytes], max_event_bytes: int = 1 << 20) -> list[Decoded]:
    response = httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        stream=Chunks(chunks),
        request=httpx.Request("POST", "http://127.0.0.1/v1/messages"),
    )
    limits = StreamLimits(max_event_bytes=max_event_bytes)
    return [
        None if event is None else (event.event, event.data, event.id, event.retry)
        async for event in aiter_sse(response, "test", limits)
    ]


LINES = st.sampled_from(
    [
        "",
        "data: {}",
        'data: {"type":"content_block_delta","delta":{"text":"é"}}',
        "data:no space",
        "data",
        "data:  two spaces",
        "event: content_block_delta",
        "event:ping",
        "id: 7",
        "id: a\0b",
        "retry: 1500",
        "retry: soon",
        ": keep-alive",
        ":",
        "unknown: field",
        "data: line one",
        "data: line two",
    ]
)
ENDS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    lines = draw(st.lists(st.tuples(LINES, ENDS), max_size=40))
    body = "".join(line + end for line, end in lines).encode()
    body += draw(st.sampled_from([b"", b"data: cut off", b": trailing comment"]))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    return body, [chunk for chunk in chunks if chunk]


@settings(max_examples=300, deadline=None)
@given(bodies())
def test_events_as_httpx_sse_reads_them_however_the_body_is_cut(case: tuple[bytes, list[bytes]]) -> None:
    import anyio

    body, chunks = case
    assert anyio.run(decoded, chunks) == reference(body)


async def test_a_typical_stream(anyio_backend: str) -> None:
    body = (
        b': hello\n\nevent: message_start\ndata: {"a":1}\n\n'
        b'event: content_block_delta\r\ndata: {"b":\r\ndata: 2}\r\n\r\n'
        b"id: 3\ndata: x\n\ndata: y\n\n"
    )
    assert await decoded([body[:7], body[7:40], body[40:]]) == [
        None,
        ("message_start", '{"a":1}', "", None),
        ("content_block_delta", '{"b":\n2}', "", None),
        ("message", "x", "3", None),
        ("message", "y", "3", None),  # the id stays
    ]


async def test_an_event_larger_than_the_limit_ends_the_stream(anyio_backend: str) -> None:
    big = b"data: " + b"x" * 300 + b"\n"
    with pytest.raises(ProviderError, match="larger than 256 bytes"):
        await decoded([b"data: small\n\n", big, b"\n"], max_event_bytes=256)
    # Comments do not count, and the size starts again with each event.
    comments = [b": " + b"z" * 100 + b"\n" for _ in range(5)]
    many = [b"data: " + b"y" * 100 + b"\n\n" for _ in range(10)]
    assert len(await decoded([b"data: a\n", *comments, b"\n", *many], max_event_bytes=256)) == 16

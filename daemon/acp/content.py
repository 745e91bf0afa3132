"""An ACP prompt (content blocks) as the text of ponder's user message, and a title from it.

Text blocks are kept as they are. A ``resource_link`` becomes a Markdown link where it
stands (the model can read the file with its tools). An embedded ``resource`` is linked
where it stands and its text is appended after the prompt in a ``<context>`` element, so
the question reads naturally and the context follows it. Binary resources that are not
UTF-8 text are named but not inlined; images and audio are refused (the agent does not
advertise them). Blocks that do not meet at whitespace are separated as a person would
read them: two text blocks are two paragraphs, a link gets a space from its neighbours.
"""

import base64
import binascii
import re
from urllib.parse import unquote, urlparse

from daemon.acp import types as t
from daemon.errors import InvalidParams

TITLE_CHARS = 60


def _resource_name(uri: str) -> str:
    path = urlparse(uri).path
    name = unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else ""
    return name or uri


def _resource_text(resource: t.ResourceContents) -> str | None:
    if resource.text is not None:
        return resource.text
    if resource.blob is None:
        return None
    try:
        data = base64.b64decode(resource.blob, validate=True)
    except (binascii.Error, ValueError):
        return None
    try:
        return data.decode("utf-8") if b"\0" not in data else None
    except UnicodeDecodeError:
        return None


def prompt_text(blocks: list[t.PromptBlock]) -> str:
    """The user message for ``blocks``; raises ``InvalidParams`` for what ponder cannot take."""
    inline: list[str] = []
    context: list[str] = []
    previous: t.PromptBlock | None = None
    for n, block in enumerate(blocks):
        if isinstance(block, (t.ImageContent, t.AudioContent)):
            kind = "image" if isinstance(block, t.ImageContent) else "audio"
            raise InvalidParams(
                f"ponder does not accept {kind} content in prompts (promptCapabilities.{kind} is false).",
                path=f"$.params.prompt[{n}]",
            )
        if isinstance(block, t.TextContent):
            piece = block.text
        elif isinstance(block, t.ResourceLink):
            piece = f"[{block.title or block.name}]({block.uri})"
        else:
            resource = block.resource
            piece = f"[{_resource_name(resource.uri)}]({resource.uri})"
            text = _resource_text(resource)
            if text is None:
                mime = f" ({resource.mime_type})" if resource.mime_type else ""
                context.append(f'<context uri="{resource.uri}">\n(binary content{mime}, not shown)\n</context>')
            else:
                context.append(f'<context uri="{resource.uri}">\n{text}\n</context>')
        if previous is not None and inline and piece:
            inline.append(_separator(previous, block, inline[-1], piece))
        if piece:
            inline.append(piece)
            previous = block
    text = "".join(inline)
    if context:
        text = (text + "\n\n" if text else "") + "\n\n".join(context)
    if not text.strip():
        raise InvalidParams("The prompt is empty; send at least one text block.", path="$.params.prompt")
    return text


def _separator(before: t.PromptBlock, after: t.PromptBlock, left: str, right: str) -> str:
    """What goes between two adjacent blocks so they read as a person would read them.

    Blocks that already meet at whitespace are joined as they are (editors interleave
    mentions with the text around them: ``"Look at "``, link, ``" please"``). Otherwise
    two text blocks are two paragraphs, and a link stands apart from its neighbours by a
    space, unless punctuation follows it (``[a.py](…), then``).
    """
    if left[-1:].isspace() or right[:1].isspace():
        return ""
    if isinstance(before, t.TextContent) and isinstance(after, t.TextContent):
        return "\n\n"
    if isinstance(after, t.TextContent) and right[:1] in _CLOSING:
        return ""
    return " "


_CLOSING = frozenset(",.;:!?)]}…'")  # what follows a word without a space (' for [a.py]'s)


def title_for(blocks: list[t.PromptBlock]) -> str | None:
    """A short session title: the prompt's first line, else the first resource's name."""
    for block in blocks:
        if isinstance(block, t.TextContent):
            for line in block.text.splitlines():
                line = re.sub(r"\s+", " ", line).strip()
                if line:
                    return _shorten(line)
    for block in blocks:
        if isinstance(block, t.ResourceLink):
            return _shorten(block.title or block.name)
        if isinstance(block, t.EmbeddedResource):
            return _shorten(_resource_name(block.resource.uri))
    return None


def _shorten(line: str) -> str:
    if len(line) <= TITLE_CHARS:
        return line
    cut = line[: TITLE_CHARS - 1]
    space = cut.rfind(" ")
    if space > TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"

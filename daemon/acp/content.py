"""An ACP prompt (content blocks) as ponder's prompt content, and a title from it.

ACP's blocks map one to one onto ``session/prompt``'s (PROTOCOL.md "Prompt content"): text,
image (base64 data), resource_link (read at admission when it is a file inside the cwd, kept
as a link otherwise) and embedded resource (text, or a blob: UTF-8 text is taken as text, an
image as an image). Audio is refused (the agent does not advertise it). Admission decides
the rest, with the same ``-32006`` sentences as on ponder's own protocol.
"""

import base64
import binascii
import re
from urllib.parse import unquote, urlparse

from daemon.acp import types as t
from daemon.errors import InvalidParams
from protocol.methods import ImageInput, InputBlock, ResourceInput, ResourceLinkInput, TextInput

TITLE_CHARS = 60


def _resource_name(uri: str) -> str:
    path = urlparse(uri).path
    name = unquote(path.rstrip("/").rsplit("/", 1)[-1]) if path else ""
    return name or uri


def _resource_text(resource: t.ResourceContents) -> str | None:
    """An embedded blob's text when it is UTF-8 text (editors embed text files both ways)."""
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


def prompt_content(blocks: list[t.PromptBlock]) -> list[InputBlock]:
    """ACP's blocks as ponder's prompt content, one to one; ``InvalidParams`` for audio or an empty prompt.

    A blob that is UTF-8 text becomes the resource's text; any other blob stays a blob, which
    admission takes when it is an image and refuses (``-32006``) otherwise.
    """
    content: list[InputBlock] = []
    for n, block in enumerate(blocks):
        if isinstance(block, t.AudioContent):
            raise InvalidParams(
                "ponder does not accept audio content in prompts (promptCapabilities.audio is false).",
                path=f"$.params.prompt[{n}]",
            )
        if isinstance(block, t.TextContent):
            content.append(TextInput(text=block.text))
        elif isinstance(block, t.ImageContent):
            content.append(ImageInput(data=block.data, mime_type=block.mime_type, name=_name(block.uri)))
        elif isinstance(block, t.ResourceLink):
            content.append(ResourceLinkInput(uri=block.uri, name=block.title or block.name, mime_type=block.mime_type))
        else:
            resource = block.resource
            text = resource.text if resource.text is not None else _resource_text(resource)
            if text is not None:
                content.append(ResourceInput(uri=resource.uri, text=text, mime_type=resource.mime_type))
            else:
                content.append(ResourceInput(uri=resource.uri, blob=resource.blob or "", mime_type=resource.mime_type))
    if not any(not isinstance(b, TextInput) or b.text.strip() for b in content):
        raise InvalidParams("The prompt is empty; send at least one text block.", path="$.params.prompt")
    return content


def _name(uri: str | None) -> str | None:
    return _resource_name(uri) if uri else None


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

"""A well-behaved MCP server built with the official ``mcp`` SDK (``MCPServer``, stdio).

It proves ponder's client interoperates with the reference implementation. Tools:
``search`` (annotated read-only), ``add`` (structured output), ``write_note`` (no
annotation, so mutating), ``fail`` (an error result), ``slow`` (progress, cancellable),
``more_tools`` (adds ``late`` and sends ``notifications/tools/list_changed``), ``chart`` (an
image result: a PNG of the colour asked for).
``tools/list`` is paginated two tools a page, to exercise cursors.

Environment: ``MCP_TEST_DIR`` (optional) receives ``docs.pid`` at start and a
``cancelled-<label>`` file when a ``slow`` call is cancelled.
"""

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult, ToolAnnotations
from pydantic import BaseModel

PAGE_SIZE = 2
STATE_DIR = Path(os.environ["MCP_TEST_DIR"]) if os.environ.get("MCP_TEST_DIR") else None


class PagedServer(MCPServer):
    async def _handle_list_tools(self, ctx, params):  # type: ignore[no-untyped-def]
        tools = await self.list_tools()
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + PAGE_SIZE
        return ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(tools) else None)


server = PagedServer("docs", version="1.0")


class Sum(BaseModel):
    total: int


@server.tool(description="Search the documentation.", annotations=ToolAnnotations(read_only_hint=True))
def search(query: str, limit: int = 3) -> str:
    return f"{limit} results for {query!r}: intro.md, guide.md, faq.md"


@server.tool(description="Add two integers.", annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> Sum:
    return Sum(total=a + b)


@server.tool(description="Write a note (changes state).")
def write_note(text: str) -> str:
    return f"noted: {text}"


@server.tool(description="Always fails.", annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str) -> str:
    raise ToolError(f"cannot do that: {reason}")


@server.tool(description="Works slowly, reporting progress.", annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float, label: str, ctx: Context) -> str:
    try:
        steps = 3
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps, f"{label}: step {step} of {steps}")
        await anyio.sleep(seconds)
        return f"{label} done"
    except anyio.get_cancelled_exc_class():
        if STATE_DIR is not None:
            (STATE_DIR / f"cancelled-{label}").write_text("cancelled")
        raise


@server.tool(
    description="Adds the tool 'late' and announces the change.", annotations=ToolAnnotations(read_only_hint=True)
)
async def more_tools(ctx: Context) -> str:
    server.add_tool(lambda: "late tool here", name="late", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "added"


@server.tool(description="Draws a chart (an image).", annotations=ToolAnnotations(read_only_hint=True))
def chart(width: int, height: int) -> Image:
    import io

    from PIL import Image as Picture

    out = io.BytesIO()
    Picture.new("RGB", (width, height), (250, 120, 0)).save(out, "PNG")
    return Image(data=out.getvalue(), format="png")


if __name__ == "__main__":
    if STATE_DIR is not None:
        (STATE_DIR / "docs.pid").write_text(str(os.getpid()))
    print("docs server starting", file=sys.stderr)
    server.run("stdio")

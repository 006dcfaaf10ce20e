"""A small MCP server on the official Python SDK (the `mcp` package installed beside
mcp-server-time), used by forge-mcp's tests where the reference servers cannot show what a client
sent: it appends every call it receives, with the request's `_meta`, to the file named by
FORGE_LEDGER, one JSON object per line.

Tools: `record` (an external write: the ledger line is its effect), `slow` (sleeps; a cancelled
call is recorded as such) and `crash` (the process exits, to test restarts)."""

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Context, MCPServer

LEDGER = os.environ["FORGE_LEDGER"]
server = MCPServer("forge-ledger", version="1.0.0")


def append(entry: dict) -> None:
    with open(LEDGER, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def meta_of(ctx: Context) -> dict:
    meta = ctx.request_context.meta
    if meta is None:
        return {}
    if hasattr(meta, "model_dump"):
        return meta.model_dump(by_alias=True, exclude_none=True)
    return dict(meta)


@server.tool(description="Records a note in the ledger.")
def record(note: str, ctx: Context) -> str:
    append({"tool": "record", "note": note, "meta": meta_of(ctx), "pid": os.getpid()})
    return f"recorded: {note}"


@server.tool(description="Sleeps for the given seconds, then answers.")
async def slow(seconds: float, ctx: Context) -> str:
    append({"tool": "slow", "event": "started", "meta": meta_of(ctx)})
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        append({"tool": "slow", "event": "cancelled"})
        raise
    append({"tool": "slow", "event": "finished"})
    return "done"


@server.tool(description="Ends the server process.")
def crash() -> str:
    append({"tool": "crash", "pid": os.getpid()})
    sys.stdout.flush()
    os._exit(3)


if __name__ == "__main__":
    server.run("stdio")

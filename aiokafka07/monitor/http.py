"""Listening with aiohttp: the one piece the exporter's server and the bridge's metrics
endpoint share (each answers its own routes, on its own loop)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["listen", "url"]


def url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 host in brackets."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def listen(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host``:``port`` (0: a free port) on the running loop; return
    the runner (``await runner.cleanup()`` stops it and ends open requests) and the port
    bound. Without access log and signal handlers: the tool that serves owns both.
    :class:`OSError` when the address cannot be bound (nothing is left listening)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        server: Any = site._server
        return runner, int(server.sockets[0].getsockname()[1])
    except BaseException:
        await runner.cleanup()
        raise

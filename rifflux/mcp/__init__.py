"""The MCP server: five tools over stdio and streamable HTTP.

``tools.py`` holds the tools as plain functions over a ``ToolContext``; ``server.py``
registers them with the MCP SDK (``build_server``) and runs a transport
(``run_server``); ``http.py`` and ``http_sessions.py`` bound the HTTP one; ``cli.py``
is the ``rifflux serve`` command, also reachable as ``python -m rifflux.mcp``. Nothing is
imported here, so registering the ``serve`` subcommand does not load the MCP SDK for
every other ``rifflux`` command.
"""

"""The MCP server: nine tools over stdio and streamable HTTP.

``tools.py`` holds the tools as plain functions over a ``ToolContext`` (the knowledge
tools in ``knowledge_tools.py``); ``server.py``
registers them with the MCP SDK (``build_server``) and runs a transport
(``run_server``); ``http.py`` and ``http_sessions.py`` bound the HTTP one, and
``http_workers.py`` serves it from several processes (``--http-workers``); ``cli.py``
is the ``rifflux serve`` command, also reachable as ``python -m rifflux.mcp``. Nothing is
imported here, so registering the ``serve`` subcommand does not load the MCP SDK for
every other ``rifflux`` command.
"""

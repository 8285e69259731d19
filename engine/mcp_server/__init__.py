"""Parley as an MCP server: ``speak``, ``listen`` and ``ask`` for an agent that talks with
its user through Parley's pipeline (``parley-cli mcp``, over stdio).

``engine/mcp_server/voice.py`` runs the one pipeline unit the tools share,
``engine/mcp_server/microphone.py`` is a recording standing in for the microphone, and
``engine/mcp_server/tools.py`` declares the tools on the MCP SDK's ``MCPServer``.
"""

"""``loadgen mcp``: loadgen's capabilities as a Model Context Protocol server.

An assistant (Claude Desktop, VS Code, Cursor, an agent framework) can deploy a
SageMaker endpoint, run sweeps and scenarios in the background, compare runs and
tear the endpoint down, through the official MCP Python SDK (the ``mcp`` extra).

Modules, read in this order:

- :mod:`.options`: the server's options (work directory, limits, ``--allow-deploy``).
- :mod:`.loadrun`: ``start_run``'s arguments and the one call into ``loadgen.api.sweep``.
- :mod:`.runs`: the run manager: background runs, their state on disk, cancel, limits.
- :mod:`.tools_runs`, :mod:`.tools_study`, :mod:`.tools_aws`: the tools, by area.
- :mod:`.confine`: what a client may make the server read, write, name and send to.
- :mod:`.arguments`: every tool's arguments checked against its schema, in one line.
- :mod:`.redact`: no credential ever leaves in a tool output.
- :mod:`.server`: wiring (tools, resources, lifespan, checks) and the transports.
- :mod:`.http`: ``--http``: Host/Origin checks for any bind, the bearer token.
- :mod:`loadgen.cli.mcp`: the click command; imports the SDK only when it runs.

Only :mod:`.options`, :mod:`.loadrun`, :mod:`.runs`, :mod:`.confine` and
:mod:`.arguments` import without the SDK installed.
"""

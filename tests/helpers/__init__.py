"""Test helpers: AWS isolation and moto (:mod:`.aws_env`), an MCP client session
(:mod:`.mcp_session`), a scripted raw HTTP server for transport faults
(:mod:`.raw_http_server`) and report fixtures from the case studies (:mod:`.report_fixtures`).

The SageMaker-runtime test server is :mod:`loadgen.simulator.sagemaker_server` (benchmarks
use it too).
"""

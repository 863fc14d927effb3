"""Test helpers: AWS isolation and moto (:mod:`.aws_env`), an MCP client session
(:mod:`.mcp_session`), a scripted raw HTTP server for transport faults
(:mod:`.raw_http_server`), report fixtures from the case studies (:mod:`.report_fixtures`),
and for exact engine scheduling tests virtual time (:mod:`.virtual_time`) with a target that
answers at scripted times (:mod:`.scripted_target`).

The SageMaker-runtime test server is :mod:`tests.helpers.sagemaker_server` (benchmarks
use it too).
"""

"""What a vLLM deployment says about itself: facts from its startup log, its ``/metrics``.

- :mod:`.facts`: :class:`~.facts.ServerFacts` (load time, KV-cache size, ...) and the
  startup-log parser.
- :mod:`.server_metrics`: the Prometheus ``/metrics`` reader and the sampler run beside a load.
- :mod:`.facts_table`: the facts as the table ``loadgen facts`` and the MCP tool print.
"""

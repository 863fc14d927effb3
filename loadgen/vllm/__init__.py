"""What a vLLM deployment says about itself: facts from its startup log, its ``/metrics``.

- :mod:`.facts`: load time, KV-cache size, quantization and the rest from the log lines.
- :mod:`.server_metrics`: the Prometheus ``/metrics`` reader and the sampler run beside a load.
"""

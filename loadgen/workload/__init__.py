"""What a run sends: prompts and their lengths, datasets, traces and the settings for them.

- :mod:`.settings`: :class:`~.settings.WorkloadSettings`, the workload options of a run.
- :mod:`.prompts`: synthetic prompts of a target length, shared prefixes, multi-turn sessions.
- :mod:`.tokenizer`: exact token counts from a local Hugging Face tokenizer (``[tokenizer]``).
- :mod:`.datasets`: ShareGPT, JSONL and text datasets, sampled with a seed.
- :mod:`.trace`: Mooncake trace replay (arrival times and lengths).
"""

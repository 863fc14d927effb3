"""The OpenAI request body for one prompt: plain data in, a dict out (no I/O).

The HTTP target posts it to ``/v1/chat/completions`` or ``/v1/completions``; the SageMaker
target sends the same body through InvokeEndpoint(WithResponseStream) for the AWS vLLM
container.
"""

from __future__ import annotations

from typing import Any

from ..config import RequestOptions
from ..record import Prompt


def openai_body(prompt: Prompt, options: RequestOptions, model: str | None) -> dict[str, Any]:
    """The OpenAI chat/completions request body for one prompt (also sent through SageMaker)."""
    body: dict[str, Any] = {
        "max_tokens": prompt.max_tokens,
        "temperature": options.temperature,
        "stream": options.stream,
    }
    if model:
        body["model"] = model
    if options.api == "chat":
        body["messages"] = (list(prompt.messages) if prompt.messages
                            else [{"role": "user", "content": prompt.text}])
    else:
        body["prompt"] = prompt.text
    if options.stream:
        stream_options = {"include_usage": True}
        if options.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        body["stream_options"] = stream_options
    if options.ignore_eos:
        body["ignore_eos"] = True
    if prompt.min_tokens is not None:
        body["min_tokens"] = prompt.min_tokens
    if prompt.top_logprobs is not None:
        if options.api == "chat":
            body["logprobs"] = True
            body["top_logprobs"] = prompt.top_logprobs
        else:
            body["logprobs"] = prompt.top_logprobs
    return body

"""Codecs: bytes in, tokens and records out (or a request's bytes out); no I/O anywhere.

Every module here is plain sync code a transport feeds with what it read and when:

- :mod:`.sse`: the Server-Sent Events decoder.
- :mod:`.openai_stream`: vLLM's OpenAI stream (chat and completions) into a record;
  :mod:`.openai_request`: the request body; :mod:`.openai_response`: one HTTP response.
- :mod:`.http1`: HTTP/1.1 request heads and the llhttp response reader.
- :mod:`.event_stream`: AWS event-stream frames (SageMaker's response stream);
  :mod:`.sagemaker_formats`: the payload formats inside them (OpenAI, LMI, TGI, raw).
"""

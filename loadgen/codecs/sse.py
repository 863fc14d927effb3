"""Incremental Server-Sent-Events decoder: bytes in, complete ``data`` payloads out.

Pure and synchronous (no I/O), like httpx's ``LineDecoder``: feed it whatever the
socket (or a SageMaker PayloadPart) delivered, split anywhere, even inside a
UTF-8 character. It works on bytes; payloads are only decoded by the JSON parser
once an event is complete.

Handles ``\\n`` and ``\\r\\n`` line ends, several events per feed, comment and
keep-alive lines (``: ping``), ``data:`` with or without the space, multi-line
data (joined with ``\\n`` as the SSE spec says), and a stream that ends without
a trailing blank line (:meth:`SSEDecoder.close` flushes it).
"""

from __future__ import annotations


class SSEDecoder:
    __slots__ = ("_tail", "_data")

    def __init__(self) -> None:
        self._tail = b""  # bytes after the last newline: an incomplete line
        self._data: list[bytes] = []  # data lines of the event being assembled

    def feed(self, chunk: bytes) -> list[bytes]:
        """Return the data payloads of every event completed by ``chunk``."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()
        events: list[bytes] = []
        data = self._data
        for line in lines:
            if line[-1:] == b"\r":
                line = line[:-1]
            if not line:  # blank line: dispatch
                if data:
                    events.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data = self._data = []
            elif line[:5] == b"data:":
                data.append(line[6:] if line[5:6] == b" " else line[5:])
            # Other fields (event:, id:, retry:) and comments (":...") carry nothing we use.
        return events

    def close(self) -> list[bytes]:
        """End of stream: flush an event that was not followed by a blank line."""
        events = self.feed(b"\n\n") if (self._tail or self._data) else []
        self._tail = b""
        self._data = []
        return events

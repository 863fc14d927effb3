"""Which requests of a run are this process's: its share of every level, and their ids.

One process generates a whole level by default. With ``--workers``/``--ray`` each worker
generates a share, and the union over workers is the one-process run: the same schedule,
request *i* (id *i* + 1) carrying ``PromptSource.prompt(i)`` in every process (one process
takes the same prompts by index), distinct request ids, and no data crossing processes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Iterator


@dataclass
class RequestIds:
    """Run-wide counters: request ids (unique across levels and warm-ups), and prompts
    taken (a multi-turn session is one prompt, its turns take one id each)."""

    value: int = 0
    prompts: int = 0


@dataclass(frozen=True)
class Share:
    """The part of every level this process generates: worker ``index`` of ``count``.

    Open loop: arrival k of the level's global schedule is this worker's when
    k mod count == index, so the union over workers is the one-process schedule.
    This process's k-th request of the run (0-based) has the run-wide index
    ``index + k * count``: it picks the request id; its k-th prompt (or multi-turn
    session) likewise picks its run-wide prompt index, so workers never share a prompt,
    a session or an id and no data crosses processes.
    """

    index: int = 0
    count: int = 1

    def arrivals(self, offsets: Iterable[int]) -> Iterator[int]:
        return itertools.islice(offsets, self.index, None, self.count)

    def request_index(self, local: int) -> int:
        return self.index + local * self.count

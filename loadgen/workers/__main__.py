"""``python -m loadgen.workers FD``: one worker process (started by the parent, see
:mod:`loadgen.workers.processes`); FD is its end of the parent's pipe."""

import sys

from .processes import child_main

if __name__ == "__main__":
    child_main(int(sys.argv[1]))

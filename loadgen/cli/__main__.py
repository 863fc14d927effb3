"""``python -m loadgen.cli``: the same as the ``loadgen`` command."""

from .main import main

if __name__ == "__main__":
    main()

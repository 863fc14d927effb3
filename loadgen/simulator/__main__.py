"""``python -m loadgen.simulator [OPTIONS]``: the mock server without the loadgen CLI."""

import sys

import click

from ..cli.simulator import mock_server_command
from ..errors import LoadgenError


def main() -> None:
    try:
        mock_server_command.main(standalone_mode=False, prog_name="python -m loadgen.simulator")
    except LoadgenError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.ClickException as err:
        err.show()
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)


if __name__ == "__main__":
    main()

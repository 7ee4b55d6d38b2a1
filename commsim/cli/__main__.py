"""`python -m commsim.cli`: the same as the `commsim` command."""

from commsim.cli.main import main

main()

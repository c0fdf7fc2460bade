"""`python -m taskfleet.cli`: the `taskfleet` command."""

from taskfleet.cli.main import main

main()

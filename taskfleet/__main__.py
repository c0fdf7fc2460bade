"""`python -m taskfleet`: the `taskfleet` command."""

from taskfleet.cli.main import main

main()

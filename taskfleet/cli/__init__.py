"""The `taskfleet` command, one module per command group (`main` wires them together)."""

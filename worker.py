"""Runs the taskfleet worker from a checkout: `python worker.py [--dev]`. A thin shim: the worker is
`taskfleet.worker` (installed as the `taskfleet-worker` command)."""

from taskfleet.worker import console_main

if __name__ == "__main__":
    console_main()

"""Errors that reach a person as one line."""


class StartupError(RuntimeError):
    """Bad configuration found at start; printed as one line, never a traceback."""

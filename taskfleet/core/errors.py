"""Errors that reach a person as one line."""


class StartupError(RuntimeError):
    """Bad configuration found at start; printed as one line, never a traceback."""


def root_cause_message(err: BaseException) -> str:
    """The innermost cause's message: for an activity failure, what the activity raised."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__


def cause_message(err: BaseException) -> str:
    """The innermost cause's message, without the `Type: ` an ApplicationError's str() adds."""
    while err.__cause__ is not None:
        err = err.__cause__
    return getattr(err, "message", None) or str(err) or type(err).__name__

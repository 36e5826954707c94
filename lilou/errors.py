"""Errors that describe bad user input.

Anything raised as :class:`LilouInputError` is shown by the CLI as one line on
stderr with exit status 2; anything else is an internal error (exit status 1).
"""


class LilouInputError(Exception):
    """The user's input (file, option, name) cannot be used; the message says why."""


class MissingDataError(LilouInputError):
    """A dataset the command needs is not on disk; the message says how to fetch it."""

"""The one way a run says "you asked for something I cannot do": raise a `UserError`.

`common.cli`'s hook prints a `UserError` as one line, `error: <message>`, exit status 2, without a
traceback; every other exception is a bug to report and keeps its traceback. So the message names
the fix (the flag to change, the package to install, the file to point at).

The subclasses below are also the built-in exception a caller would catch for that kind of
failure (`except FileNotFoundError` still catches a missing checkpoint), so nothing changes for
code that calls this library: only the class says "the user's input, not a bug".
"""

from __future__ import annotations


class UserError(ValueError):
    """A setting, input or environment the run cannot use; the message says what to change."""


class UserTypeError(UserError, TypeError):
    """An object of the wrong kind (an env that breaks the vec-env contract, a factory that is no
    callable)."""


class UserFileNotFoundError(UserError, FileNotFoundError):
    """A path the user gave (a checkpoint, a CSV, an algorithm file) that does not exist."""


class UserPermissionError(UserError, PermissionError):
    """A directory the user chose that the run cannot write to."""


class UserOSError(UserError, OSError):
    """A disk the run cannot write to (full, or too little free space to start)."""


class MissingPackage(UserError, ModuleNotFoundError):
    """An optional package the chosen feature needs; the message gives the `pip install` line."""


class Diverged(UserError, FloatingPointError):
    """A run that produced a NaN or Inf (common/guard.py): the message names the last good
    checkpoint."""

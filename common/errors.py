"""`UserError`: "you asked for something I cannot do". `common.cli` prints one as one line,
`error: <message>`, exit status 2, no traceback (any other exception is a bug and keeps its
traceback), so the message names the fix. Each subclass is also the built-in exception a caller
would catch (`except FileNotFoundError` still catches a missing checkpoint).
"""

from __future__ import annotations


class UserError(ValueError):
    """A setting, input or environment the run cannot use; the message says what to change."""


class UserTypeError(UserError, TypeError):
    """An object of the wrong kind (an env that breaks the contract, a factory not callable)."""


class UserFileNotFoundError(UserError, FileNotFoundError):
    """A path the user gave (checkpoint, CSV, algorithm file) that does not exist."""


class UserPermissionError(UserError, PermissionError):
    """A directory the user chose that the run cannot write to."""


class UserOSError(UserError, OSError):
    """A disk the run cannot write to (full, or too little free space to start)."""


class MissingPackage(UserError, ModuleNotFoundError):
    """An optional package the chosen feature needs; the message gives the `pip install` line."""


class Diverged(UserError, FloatingPointError):
    """A NaN or Inf in the run (common/guard.py); the message names the last good checkpoint."""

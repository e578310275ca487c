"""Errors that end a command with a one-line message and a documented exit code."""

from __future__ import annotations

from ascendctl.exitcodes import Exit


class AscendctlError(Exception):
    """An error the operator can act on. Printed as one line, never as a traceback."""

    exit_code: Exit = Exit.FAILED

    def __init__(self, message: str, *, exit_code: Exit | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class InputError(AscendctlError):
    """Bad input (inventory, arguments, files). Raised before any host is contacted."""

    exit_code = Exit.USAGE

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None):
        self.file, self.line, self.field = file, line, field
        self.reason = message           # without the location, to re-locate it elsewhere
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        if field:
            where += f"{field}: "
        super().__init__(where + message)


class LabUnavailable(AscendctlError):
    """This machine cannot run the lab (not root, no systemd-nspawn, ...)."""

    exit_code = Exit.USAGE

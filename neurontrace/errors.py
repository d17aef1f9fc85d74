"""Errors in one voice: each says what was expected, what was found, and what to do.

Every error a user can cause derives from :class:`NeurontraceError` and carries the exit code the
CLI returns for it, so the CLI maps errors to codes in one place and never prints a traceback
for a user mistake. The codes are part of the CLI's documented interface (README, "Exit codes").
"""

from __future__ import annotations

# Exit codes of the `neurontrace` command. Codes 10-19 are the CI gates (`--fail-on`, `--fail-on-regression`).
EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug in neurontrace: please report it with the traceback
EXIT_USAGE = 2  # bad command-line usage (argparse's own convention)
EXIT_NOT_FOUND = 3
EXIT_UNKNOWN_FORMAT = 4
EXIT_MALFORMED = 5
EXIT_OUTPUT_EXISTS = 6
EXIT_MISSING_DEPENDENCY = 7
EXIT_RESERVED = 8  # formerly "not built yet"; kept so codes never change meaning
EXIT_EXTERNAL_TOOL = 9  # neuron-explorer is missing, failed or timed out (the message has the command)
EXIT_FINDINGS = 10  # diagnose --fail-on: a finding reached the requested severity
EXIT_REGRESSION = 11  # diff / runs compare --fail-on-regression: a device's time per step grew by more than PCT


class NeurontraceError(Exception):
    """Base class of every error neurontrace raises on purpose."""

    exit_code = EXIT_INTERNAL


class UsageError(NeurontraceError):
    """The command line asks for something the command cannot do (argparse's own checks aside)."""

    exit_code = EXIT_USAGE


class InputNotFoundError(NeurontraceError, FileNotFoundError):
    """The path given does not exist."""

    exit_code = EXIT_NOT_FOUND


class UnknownFormatError(NeurontraceError):
    """The input exists but is not a format any registered parser reads."""

    exit_code = EXIT_UNKNOWN_FORMAT


class EmptyInputError(UnknownFormatError):
    """The input is a file of zero bytes (or a directory with nothing to load)."""


class MalformedTraceError(NeurontraceError):
    """The input looks like a known format but its content is broken beyond salvage."""

    exit_code = EXIT_MALFORMED


class InputTooLargeError(MalformedTraceError):
    """The input exceeds a documented safety limit (a gzip that inflates beyond its allowed ratio);
    the message names the setting that raises the limit."""


class TruncatedTraceError(MalformedTraceError):
    """The input was cut off before any complete event (nothing could be salvaged)."""


class OutputExistsError(NeurontraceError, FileExistsError):
    """Refusing to overwrite an existing output without ``force``."""

    exit_code = EXIT_OUTPUT_EXISTS


class MissingDependencyError(NeurontraceError, ImportError):
    """An optional feature needs a package that is not installed."""

    exit_code = EXIT_MISSING_DEPENDENCY


class NeffNotFoundError(InputNotFoundError):
    """An NTFF's paired NEFF (the compiled graph needed to decode it) could not be found."""


class NeffMismatchError(NeurontraceError):
    """The NEFF and NTFF given do not belong together (their numeric hashes differ)."""

    exit_code = EXIT_MALFORMED


class EmptyNtffError(EmptyInputError):
    """An NTFF of 0 bytes: the documented sign of a NeuronCore that ran nothing during capture."""


class NeuronToolMissingError(NeurontraceError):
    """Decoding an NTFF needs AWS's ``neuron-explorer`` (aws-neuronx-tools), which is not installed."""

    exit_code = EXIT_EXTERNAL_TOOL


class NeuronToolFailedError(NeurontraceError):
    """``neuron-explorer`` ran but failed (or produced no tables); the message carries its output."""

    exit_code = EXIT_EXTERNAL_TOOL


class NeuronToolTimeoutError(NeuronToolFailedError):
    """``neuron-explorer`` did not finish within the time allowed."""


class TraceWarning(UserWarning):
    """Something in the input was unusual but loading could continue; the message has counts."""


class TruncatedTraceWarning(TraceWarning):
    """The input was cut off; every complete event before the cut was kept."""


class NeuronProfileWarning(TraceWarning):
    """A row of Neuron Explorer's ``Warning`` table, or a gap in a Neuron profile (missing tables)."""


class SchemaVersionWarning(TraceWarning):
    """A Neuron Explorer schema version this neurontrace was not written against; columns were mapped
    by name and presence."""


class NeuronToolMissingWarning(TraceWarning):
    """A capture directory's device profiles were not decoded because neuron-explorer is missing;
    the framework trace was loaded alone."""


class CaptureWarning(TraceWarning):
    """A capture could not record or export something; the program ran on and the message says what."""

"""Errors in one voice: each says what was expected, what was found, and what to do.

Every error a user can cause derives from :class:`NeurontraceError` and carries the exit code the
CLI returns for it, so the CLI maps errors to codes in one place and never prints a traceback
for a user mistake. The codes are part of the CLI's documented interface (README, "Exit codes").
"""

from __future__ import annotations

# Exit codes of the `neurontrace` command. Codes 10-19 are the CI gates (`--fail-on`, `--fail-on-regression`).
EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2  # argparse's own convention
EXIT_NOT_FOUND = 3
EXIT_UNKNOWN_FORMAT = 4
EXIT_MALFORMED = 5
EXIT_OUTPUT_EXISTS = 6
EXIT_MISSING_DEPENDENCY = 7
EXIT_RESERVED = 8  # formerly "not built yet"; kept so codes never change meaning
EXIT_EXTERNAL_TOOL = 9
EXIT_FINDINGS = 10
EXIT_REGRESSION = 11
EXIT_PARTIAL = 12
EXIT_INTERRUPTED = 130  # 128 + SIGINT, the shell's convention
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`... | head`)

# The one table of what each code means: the CLI's --help epilog is rendered from it, and a test holds the
# README's table and the docs against it.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "success"),
    (EXIT_INTERNAL, "internal error (a bug: please report it, with `--traceback`)"),
    (EXIT_USAGE, "bad command-line usage"),
    (EXIT_NOT_FOUND, "input path not found"),
    (EXIT_UNKNOWN_FORMAT, "unknown or empty input format (the message says what was found, e.g. \"a PNG image\")"),
    (EXIT_MALFORMED, ("malformed or truncated input that could not be salvaged, or inputs that do not belong "
                      "together (unrelated runs)")),
    (EXIT_OUTPUT_EXISTS, "the output exists or cannot be written there (pass `--force` to replace it)"),
    (EXIT_MISSING_DEPENDENCY, "an optional dependency is missing (the message names the extra to install)"),
    (EXIT_RESERVED, "reserved (a command whose engine is not built yet; none at present)"),
    (EXIT_EXTERNAL_TOOL, ("an external tool failed or is missing: decoding an NTFF needs AWS's `neuron-explorer` "
                          "(the message shows the command to run on a Neuron instance)")),
    (EXIT_FINDINGS, "`diagnose --fail-on`: a finding reached the given severity"),
    (EXIT_REGRESSION, ("`diff` / `runs compare --fail-on-regression PCT`: a device's time per step grew by more "
                       "than PCT%")),
    (EXIT_PARTIAL, ("`diagnose` / `convert` of many ranks: some ranks could not be analysed (each is listed in the "
                    "report's warnings); the others' results were printed")),
    (EXIT_INTERRUPTED, "interrupted (Ctrl+C)"),
    (EXIT_BROKEN_PIPE, "the reader of the output went away (output piped into `head`, say); nothing is printed"),
)


def exit_codes_help() -> str:
    """The table as the ``--help`` epilog prints it."""
    return "exit codes:\n" + "".join(f"  {code:<2} {text.replace('`', '')}\n" for code, text in EXIT_CODES)


def exit_codes_markdown() -> str:
    """The table as README.md shows it (a test keeps the two equal)."""
    rows = "".join(f"| {code} | {text} |\n" for code, text in EXIT_CODES)
    return "| exit code | meaning |\n|---:|---|\n" + rows


class NeurontraceError(Exception):
    """Base class of every error neurontrace raises on purpose."""

    exit_code = EXIT_INTERNAL


class UsageError(NeurontraceError):
    """The command line asks for something the command cannot do (argparse's own checks aside)."""

    exit_code = EXIT_USAGE


class PortInUseError(UsageError):
    """``view --port N``: another program listens on that port (or it cannot be bound there)."""


class WindowError(UsageError):
    """``--window`` does not fit the trace (it lies outside it, or is malformed)."""


class SpeedupError(UsageError):
    """``whatif --speedup OP=FACTOR`` is malformed or names nothing in the trace."""


class MixedRunsError(NeurontraceError):
    """The inputs hold unrelated runs (other processes, other clocks, no ranks) that one analysis would stitch:
    the inputs, not the command line, are at fault (exit 5)."""

    exit_code = EXIT_MALFORMED


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


class UnsafePickleError(MalformedTraceError):
    """A pickle (a memory snapshot) asks for a class or function: it could run code, so it is refused unread."""


class TruncatedTraceError(MalformedTraceError):
    """The input was cut off before any complete event (nothing could be salvaged)."""


class OutputExistsError(NeurontraceError, FileExistsError):
    """Refusing to overwrite an existing output without ``force``."""

    exit_code = EXIT_OUTPUT_EXISTS


class OutputUnusableError(NeurontraceError):
    """The output path cannot hold what the command writes (under a file, or the directory it runs in)."""

    exit_code = EXIT_OUTPUT_EXISTS


class MissingDependencyError(NeurontraceError, ImportError):
    """An optional feature needs a package that is not installed."""

    exit_code = EXIT_MISSING_DEPENDENCY


class NeffNotFoundError(UsageError):
    """An NTFF's paired NEFF (the compiled graph needed to decode it) is not beside it: the input the user
    gave exists, so this is not "input path not found"; the message names the NEFF that is needed (its UUID
    and recorded name) and how to pass it (``--neff``)."""


class NeffMismatchError(NeurontraceError):
    """The NEFF and NTFF given do not belong together (their UUIDs or numeric hashes differ)."""

    exit_code = EXIT_MALFORMED


class EmptyNtffError(EmptyInputError):
    """An NTFF of 0 bytes: the documented sign of a NeuronCore that ran nothing during capture."""


class NtffVersionError(UnknownFormatError):
    """An NTFF format version above those the released decoders read (v1-7; inspect has written v129)."""


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

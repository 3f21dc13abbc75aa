"""What the command line's verb modules share (:mod:`wuji_jax.cli`, :mod:`wuji_jax.inspire_cli`):
the program's name and the error that means a bad command line or input value."""

from __future__ import annotations

__all__ = ["PROG", "UsageError", "checked_output", "add_smoothing_options"]

PROG = "wuji-jax"


class UsageError(ValueError):
    """A bad command line or input value: reported as one line, exit status 2."""


def checked_output(out, inputs=(), formats=None, what: str = "", default: str | None = None,
                   given: str | None = None, option: str = "-o") -> str | None:
    """A verb's output under the one output rule (:mod:`wuji_jax.outputs`), before any work: the format
    its suffix names (``formats``: suffix → format; None: not checked here), a mismatch being a
    :class:`UsageError`; then refused (:class:`wuji_jax.outputs.OutputError`, exit status 1) where it is,
    links to, or would be read as one of ``inputs``. Returns the format (None without ``formats``)."""
    from ..data.outputs import OutputError, check_output, output_format

    fmt = None
    if formats is not None:
        try:
            fmt = output_format(out, formats, what, default=default, given=given, option=option)
        except OutputError as e:
            raise UsageError(str(e)) from None
    check_output(out, inputs, option=option)
    return fmt


def add_smoothing_options(parser, default: str = "none") -> None:
    """The options of :func:`wuji_jax.inspire.smooth` / :class:`~wuji_jax.inspire.InspireStream`'s smoothing
    (``--smooth``, ``--tau``, ``--min-cutoff``, ``--beta``), which the verbs that make Inspire commands share."""
    parser.add_argument("--smooth", choices=("none", "exponential", "one_euro"), default=default,
                        help=f"temporal smoothing before rate limiting (default {default})")
    parser.add_argument("--tau", type=float, default=0.05, help="exponential smoothing time constant, s (default 0.05)")
    parser.add_argument("--min-cutoff", type=float, default=1.0, help="one-euro cutoff at rest, Hz (default 1)")
    parser.add_argument("--beta", type=float, default=0.5, help="one-euro speed coefficient (default 0.5)")


#: the environment variable that sets ``--command-map``'s default for every verb (``auto`` where unset)
ENV_COMMAND_MAP = "WUJI_JAX_COMMAND_MAP"
COMMAND_MAP_CHOICES = ("auto", "joint_map", "retarget")


def add_command_map_option(p, help_text: str) -> None:
    """``--command-map auto|joint_map|retarget``, its default ``$WUJI_JAX_COMMAND_MAP`` or ``auto``
    (a value outside the choices is a usage error when the option is read)."""
    import os

    default = os.environ.get(ENV_COMMAND_MAP, "").strip() or "auto"
    if default not in COMMAND_MAP_CHOICES:
        raise UsageError(f"{ENV_COMMAND_MAP}={default!r}: give one of {', '.join(COMMAND_MAP_CHOICES)}")
    p.add_argument("--command-map", choices=COMMAND_MAP_CHOICES, default=default,
                   help=help_text + f" (default: ${ENV_COMMAND_MAP}, else auto)")


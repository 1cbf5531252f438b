"""Go-compatible command lines for every binary: flag tables that compose (`table`), the
parser (`scan`), problems and exit-2 text (`problems`), `--help`/`--version` (`usage`), typed
values through each flag's parser (`values`) and the groups every binary repeats (`groups`).

Pure, no I/O: argv and the environment are parameters.
"""

from local_ccm.flags.problems import (
    Problem,
    invalid,
    invalid_env,
    missing,
    unexpected_argument,
    usage_error,
)
from local_ccm.flags.scan import Parsed, parse
from local_ccm.flags.table import Flag, FlagKind, FlagSet, Section, unite
from local_ccm.flags.usage import format_usage, format_version
from local_ccm.flags.values import Loader, blame

__all__ = [
    "Flag",
    "FlagKind",
    "FlagSet",
    "Loader",
    "Parsed",
    "Problem",
    "Section",
    "blame",
    "format_usage",
    "format_version",
    "invalid",
    "invalid_env",
    "missing",
    "parse",
    "unexpected_argument",
    "unite",
    "usage_error",
]

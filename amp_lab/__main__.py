"""Command line: ``python -m amp_lab doctor``."""

import sys

from .doctor import main as doctor

USAGE = "usage: python -m amp_lab doctor\n\n  doctor   check this machine and environment for the course"


def main(argv=None) -> int:
    """``python -m amp_lab COMMAND [ARGS]``: 0 or 1 from the command, 2 (with the usage on stderr) for a
    command line it does not understand, 0 for ``-h``/``--help``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["doctor"]:
        return doctor(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if argv:
        print(f"{USAGE}\n\namp_lab: error: unknown command {argv[0]!r}", file=sys.stderr)
    else:
        print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

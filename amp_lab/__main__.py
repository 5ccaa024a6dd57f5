"""Command line: ``python -m amp_lab doctor``."""

import sys

USAGE = "usage: python -m amp_lab doctor\n\n  doctor   check this machine and environment for the course"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["doctor"]:
        from .doctor import main as doctor

        return doctor(argv[1:])
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

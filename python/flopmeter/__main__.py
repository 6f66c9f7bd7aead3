"""``python -m flopmeter ...``: the flopmeter command-line tool (check, coefficients, estimate, import)."""

from ._cli import main

if __name__ == "__main__":
    main()

"""``python -m streamdeid``: the same command as ``streamdeid`` (streamdeid/cli.py)."""

from streamdeid.cli import main

main(prog_name="streamdeid")

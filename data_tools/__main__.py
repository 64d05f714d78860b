"""``python -m data_tools COMMAND ...`` is ``xpt-data COMMAND ...``."""
import sys

from data_tools.cli import main

sys.exit(main(prog="python -m data_tools"))

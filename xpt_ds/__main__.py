"""``python -m xpt_ds COMMAND ...`` is ``xpt-ds COMMAND ...``."""
import sys

from xpt_ds.cli import main

sys.exit(main())

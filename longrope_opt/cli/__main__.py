"""``python -m longrope_opt.cli`` is the same as ``longrope-opt``."""

import sys

from longrope_opt.cli import main


sys.exit(main())

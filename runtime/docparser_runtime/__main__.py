"""``python -m docparser_runtime`` is ``docparser-runtime``."""

import sys

from docparser_runtime.cli import main

sys.exit(main())

"""``python -m docparser_operator`` == ``docparser-operator``."""

import sys

from docparser_operator.cli.main import main

sys.exit(main())

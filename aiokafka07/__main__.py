"""``python -m aiokafka07 <command>``: the console tools (see :mod:`aiokafka07.cli`)."""

import sys

from .cli import main

sys.exit(main())

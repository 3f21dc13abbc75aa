"""``python -m wuji_jax``: the ``wuji-jax`` command line."""

import sys

from .cli import main

sys.exit(main())

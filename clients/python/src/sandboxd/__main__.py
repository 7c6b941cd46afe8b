"""`python -m sandboxd`: the command-line client, as sandboxd-cli."""

import sys

from .cli import main

sys.exit(main())

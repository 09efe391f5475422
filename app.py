"""The embedded relay: `python app.py` starts Redis, a worker, the clock and the web server."""

import sys

from oar.core import logs
from oar.engine.launcher import main

if __name__ == "__main__":
    logs.configure()
    sys.exit(main())

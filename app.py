"""The embedded relay: `python app.py` starts Redis, a worker, the clock and the web server."""

import logging
import os
import sys

from oar.launcher import main

if __name__ == "__main__":
    logging.basicConfig(level=os.environ.get("OAR_LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.exit(main())

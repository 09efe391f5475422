"""The embedded relay: `python app.py` starts Redis, a worker, the clock and the web server
(`python app.py --help` says how it is configured; `python -m oar --help` lists the other commands)."""

import sys

from oar.cli.main import serve

if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:], prog="app.py"))

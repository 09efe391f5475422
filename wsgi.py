"""`gunicorn wsgi:app` (settings in gunicorn.conf.py, read by default)."""

from oar.core import logs
from oar.web import create_app

# The web's own log lines (a line per agent call and owner write, warnings, errors) in the
# relay's format and level (docs/operations.md#logs); gunicorn's own go through its logger.
logs.configure()
app = create_app()

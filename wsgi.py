"""`gunicorn wsgi:app` (settings in gunicorn.conf.py, read by default)."""

from gunicorn.errors import AppImportError

from oar.core import logs
from oar.core.config import from_environment
from oar.owner.bootstrap import NewerSchema
from oar.web import create_app

# The web's own log lines (a line per agent call and owner write, warnings, errors) in the
# relay's format and level (docs/operations.md#logs); gunicorn's own go through its logger.
logs.configure()
try:
    app = create_app(from_environment())
except NewerSchema as newer:
    # gunicorn prints this sentence alone (no traceback) and stops with status 4: a node older
    # than the database does not serve (docs/operations.md#upgrading).
    raise AppImportError(str(newer)) from None

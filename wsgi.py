"""`gunicorn wsgi:app` (settings in gunicorn.conf.py, read by default)."""

from oar.web import create_app

app = create_app()

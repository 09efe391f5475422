"""gunicorn in a child forked from the embedded launcher: `gunicorn -c gunicorn.conf.py wsgi:app`
(the Procfile's `web`, with the same settings) without starting a new Python program, so that the
web shares the code the launcher loaded (oar.engine.forked)."""

from __future__ import annotations

from typing import Any

from gunicorn import util
from gunicorn.app.base import Application

from oar.engine.forked import PROJECT

CONFIG_FILE = PROJECT / "gunicorn.conf.py"
APP = "wsgi:app"


class EmbeddedWeb(Application):
    """gunicorn.conf.py, then `GUNICORN_CMD_ARGS` as gunicorn reads them; never the launcher's own
    command line (`app.py --data-dir …` is not gunicorn's)."""

    def load_config(self) -> None:
        self.load_config_from_file(str(CONFIG_FILE))
        from_environment = self.cfg.parser().parse_args(self.cfg.get_cmd_args_from_env())
        for name, value in vars(from_environment).items():
            if value is not None and name != "args":
                self.cfg.set(name.lower(), value)
        self.cfg.set("default_proc_name", APP)

    def load(self) -> Any:
        # Each web worker creates its app, as with `gunicorn wsgi:app`: the app's figures, traces
        # and connections are the worker's own; the modules it runs are the launcher's.
        return util.import_app(APP)


def serve() -> int:
    EmbeddedWeb(prog="app.py").run()
    return 0

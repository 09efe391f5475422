"""`GET /metrics`: the relay's figures in Prometheus' text format (docs/operations.md#watching-it).

Registered only when metrics are on (`OAR_METRICS=on`; off, the path is as unknown as any
other). It answers to the metrics token (`OAR_METRICS_TOKEN`) or the owner token; a missing or
wrong one is 401 and shows nothing. The answer adds up the files of every relay process of this
machine (prometheus-client's multiprocess collector) and reads the relay's states from the
database and Redis (`oar.owner.gauges`).
"""

from __future__ import annotations

from flask import Blueprint, Response
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from oar.core import ids
from oar.core.config import Config
from oar.owner.gauges import RelayGauges
from oar.web import runtime
from oar.web.auth import bearer_token, is_owner_token, unauthorized

blueprint = Blueprint("metrics", __name__)


def require_metrics_reader(config: Config) -> None:
    token = bearer_token()
    if token is None:
        raise unauthorized("Send the metrics token (or the owner token) as Authorization: Bearer <token>.")
    if config.metrics_token and ids.same_hash(token, ids.hash_token(config.metrics_token)):
        return
    if is_owner_token(config, token):
        return
    raise unauthorized("That token is neither the metrics token nor the owner token of this relay.")


@blueprint.get("/metrics")
def metrics() -> ResponseReturnValue:
    relay = runtime()
    require_metrics_reader(relay.config)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(relay.config.metrics_folder))
    registry.register(RelayGauges(relay))
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

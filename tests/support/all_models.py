"""Every table of the relay: the core's and each domain package's own (a package with a store of
its own keeps its models beside its code)."""

from __future__ import annotations

from oar.core.models import MODELS, BaseModel
from oar.notifications.models import MODELS as NOTIFICATION_MODELS

ALL_MODELS: tuple[type[BaseModel], ...] = MODELS + NOTIFICATION_MODELS

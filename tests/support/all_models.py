"""Every table of the relay: the core's and each domain package's own (a package with a store of
its own keeps its models beside its code)."""

from __future__ import annotations

from oar.core.models import MODELS, BaseModel
from oar.openclaw.models import MODELS as OPENCLAW_MODELS
from oar.team.models import TEAM_MODELS

ALL_MODELS: tuple[type[BaseModel], ...] = (*MODELS, *OPENCLAW_MODELS, *TEAM_MODELS)

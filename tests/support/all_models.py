"""Every table of the relay: the core's and each domain package's own (a package with a store of
its own keeps its models beside its code)."""

from __future__ import annotations

from oar.core.models import MODELS, BaseModel
from oar.federation.models import MODELS as FEDERATION_MODELS
from oar.mcp_tasks.models import MODELS as MCP_TASK_MODELS
from oar.notifications.models import MODELS as NOTIFICATION_MODELS
from oar.openclaw.models import MODELS as OPENCLAW_MODELS
from oar.team.models import TEAM_MODELS
from oar.watching.models import MODELS as WATCHING_MODELS

ALL_MODELS: tuple[type[BaseModel], ...] = (
    *MODELS, *FEDERATION_MODELS, *WATCHING_MODELS, *OPENCLAW_MODELS, *TEAM_MODELS, *NOTIFICATION_MODELS,
    *MCP_TASK_MODELS,
)

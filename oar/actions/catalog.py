"""Every action of the relay: importing the action modules runs their `@action` decorators."""

from __future__ import annotations

from oar.actions import control, prompts, questions, relays, schedules, sessions, subscriptions, tasks
from oar.actions.registry import ACTIONS, ActionSpec

# The modules are imported for what their decorators register.
ACTION_MODULES = (control, prompts, questions, relays, schedules, sessions, subscriptions, tasks)


def load_actions() -> dict[str, ActionSpec]:
    """The registry with every action in it."""
    return ACTIONS

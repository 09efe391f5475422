"""Every action of the relay: importing the action modules runs their `@action` decorators."""

from __future__ import annotations

from oar.actions import control, outside, prompts, questions, relays, schedules, sessions, subscriptions, tasks
from oar.actions.registry import ACTIONS, ActionSpec

# The modules are imported for what their decorators register. Their order is the reading
# order of every listing of the actions (system prompt, help, reference), whatever the
# order in which they happened to be imported.
ACTION_MODULES = (relays, sessions, tasks, prompts, outside, control, questions, subscriptions, schedules)


def load_actions() -> dict[str, ActionSpec]:
    """The registry with every action in it."""
    return ACTIONS


def ordered_actions() -> list[ActionSpec]:
    """Every action in reading order: by module as listed above, then as defined in its module."""
    position = {module.__name__: index for index, module in enumerate(ACTION_MODULES)}
    # sorted() is stable and a module registers its actions in the order they are defined.
    return sorted(ACTIONS.values(), key=lambda spec: position.get(spec.handler.__module__, len(position)))

"""The argument list a `cli` provider runs for a turn (docs/providers.md#cli-arguments).

Text that comes from agents (the prompt, a model or effort an agent set, the agent's own
session id) must never become an option of the command-line agent, nor be read as another
placeholder. So:

- placeholders are filled in one pass: text put in for `{prompt}` is never scanned again,
  so a prompt containing `{cwd}` arrives as written;
- an argument that starts with `{prompt}` (the prompt is its own argument) moves after an
  end-of-options marker `--` at the end of the list, behind `resume_args`, so a prompt such
  as `--dangerously-skip-permissions` stays the prompt. An owner whose agent has no `--` sets
  `end_of_options: false`: the template's order is kept, and a prompt starting with `-` is
  refused instead;
- any other placeholder that starts an argument and whose value starts with `-` is refused;
- the agent's session id is used only if it has a safe shape (`safe_agent_session_id`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLACEHOLDER = re.compile(r"\{(prompt|model|effort|cwd|session|agent_session)\}")
END_OF_OPTIONS = "--"


@dataclass(frozen=True)
class Refused(Exception):
    """The turn's values cannot be given to this command without becoming options."""

    message: str


def render(template: list[str], values: dict[str, str]) -> list[str]:
    """The argument list with placeholders filled in one pass; each argument stays one argument."""
    return [PLACEHOLDER.sub(lambda found: values.get(found[1], ""), argument) for argument in template]


def build(
    command: list[str], resume_args: list[str], values: dict[str, str], *, end_of_options: bool = True,
) -> list[str]:
    """The argv of one turn: `command`, then `resume_args` (empty when not resuming), with the
    prompt after `--` (see the module docstring). Raises Refused."""
    if END_OF_OPTIONS in command:
        cut = command.index(END_OF_OPTIONS)
        options, operands, marked = command[:cut], command[cut + 1 :], True
    else:
        options, operands, marked = list(command), [], False
    prompt_led = [argument for argument in options if argument.startswith("{prompt}")]
    if end_of_options and prompt_led:
        options = [argument for argument in options if not argument.startswith("{prompt}")]
        operands, marked = prompt_led + operands, True
    elif prompt_led and values.get("prompt", "").startswith("-"):
        raise Refused(
            "The prompt starts with '-', which this agent would read as an option (its provider sets "
            "end_of_options: false, so no '--' can come before the prompt). Nothing was run."
        )
    for argument in options + resume_args:
        found = PLACEHOLDER.match(argument)
        if found and found[1] != "prompt" and values.get(found[1], "").startswith("-"):
            raise Refused(f"The {found[1]} value starts with '-', which the agent would read as an option. Nothing was run.")
    arguments = render(options, values) + render(resume_args, values)
    if marked:
        arguments += [END_OF_OPTIONS, *render(operands, values)]
    return arguments

"""The demo tools: their declarations for inert and the model, and what running them does.

Nothing here reaches the outside world: ``send_email`` puts the message in an outbox and
``get_weather`` answers from a table, so that a run shows exactly which actions happened, and
how many times.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from attrs import define, field

from inert import Dispatch, InertError, ToolDeclaration

GET_WEATHER = ToolDeclaration(
    name="get_weather",
    description="The weather now in a city.",
    parameters={
        "type": "object",
        "properties": {"location": {"type": "string", "minLength": 1, "maxLength": 100}},
        "required": ["location"],
        "additionalProperties": False,
    },
)

SEND_EMAIL = ToolDeclaration(
    name="send_email",
    description="Send an email on the user's behalf.",
    parameters={
        "type": "object",
        "properties": {
            "to": {"type": "string", "minLength": 3, "maxLength": 254},
            "subject": {"type": "string", "maxLength": 200},
            "body": {"type": "string", "maxLength": 10_000},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    },
    # Sending cannot be taken back: the person confirms the exact arguments first.
    needs_confirmation=True,
)

TOOLS = (GET_WEATHER, SEND_EMAIL)


class ToolError(InertError):
    """A dispatched call names a tool the toolbox does not have."""


FORECASTS = {"paris": "light rain, 14 °C", "oslo": "snow, -3 °C", "lisbon": "sunny, 21 °C"}


@define
class Toolbox:
    """Runs the demo tools and counts every execution, per tool."""

    executions: Counter[str] = field(factory=Counter)
    outbox: list[dict[str, str]] = field(factory=list)

    def run(self, dispatch: Dispatch) -> dict[str, Any]:
        """Run one dispatched call; what it returns is shown to the person."""
        self.executions[dispatch.tool] += 1
        arguments: Mapping[str, Any] = dispatch.arguments
        if dispatch.tool == SEND_EMAIL.name:
            self.outbox.append({name: str(arguments[name]) for name in ("to", "subject", "body")})
            return {"sent_to": arguments["to"]}
        if dispatch.tool == GET_WEATHER.name:
            location = str(arguments["location"])
            return {
                "location": location,
                "forecast": FORECASTS.get(location.casefold(), "no forecast for this place"),
            }
        # The runtime dispatches only the tools a turn offered, all of which are above.
        raise ToolError(f"no tool named {dispatch.tool!r} in the toolbox")

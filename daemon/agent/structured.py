"""A turn's structured output (PROTOCOL.md "Structured output and headless runs"): how the model
is asked for it, how each answer is judged, and what it is told when an answer does not match.

The model is asked natively (the provider's own structured output, when ``Provider.structured_output``
takes the schema and the model has not refused it before: ``NativeRefusals``), else through a
``final_output`` tool whose input schema is the user's (wrapped when its root is not an object).
A reply that calls ``final_output`` answers with the call's arguments; a final reply without tool
calls answers with its text, which must be JSON. Each answer is validated against the schema as
given (``output_schema.validate``); an invalid one is sent back with its errors (as the
``final_output`` call's result, else as a user message with ``origin: "schema_retry"``) up to
``retries`` times, then the turn ends ``schema_failed``.
"""

import json
from typing import Any

import msgspec

from daemon.agent import output_schema
from daemon.conversation import ChatMessage, Part, ToolSpec
from daemon.errors import SchemaFailed
from daemon.providers.base import Provider, arguments_problem, invalid_arguments

FINAL_OUTPUT = "final_output"
ACCEPTED = "Accepted."
FINAL_OUTPUT_DESCRIPTION = (
    "Give your final answer. Call this exactly once, when you are done, with the whole answer as the "
    "arguments; they must match the input schema. Nothing else you write counts as the answer."
)


# Structs, not dataclasses: a session/start imports this module, and a dataclass compiles its
# generated methods at import (tests/server/test_start_path.py).
class OutputRequest(msgspec.Struct, frozen=True):
    """What a prompt asked of its turn's answer: the schema as given (checked at admission) and
    how many invalid answers are sent back before the turn ends ``schema_failed``."""

    schema: dict[str, Any]
    retries: int = 2


class NativeRefusals:
    """The models whose provider refused native structured output, for the life of the daemon:
    their turns go straight to the ``final_output`` tool."""

    def __init__(self) -> None:
        self._models: set[str] = set()

    def add(self, model_id: str) -> None:
        self._models.add(model_id)

    def __contains__(self, model_id: str) -> bool:
        return model_id in self._models


class TurnOutput(msgspec.Struct):
    """One turn's structured output as it goes: the mode, the invalid answers so far, the answer."""

    request: OutputRequest
    model_id: str
    refusals: NativeRefusals
    native: dict[str, Any] | None = None  # the schema the provider's native mode is sent; None: the tool
    # False for a model that takes no tools: without native mode it is asked for the JSON as its reply.
    takes_tools: bool = True
    invalid: int = 0
    answered: bool = False
    value: Any = None
    sent: dict[str, Any] = msgspec.field(default_factory=dict)  # the schema as the model is asked for it

    @classmethod
    def start(
        cls, request: OutputRequest, provider: Provider, model_id: str, refusals: NativeRefusals, *, takes_tools: bool
    ) -> "TurnOutput":
        sent = output_schema.wrap(request.schema)
        native = None if model_id in refusals else provider.structured_output(sent)
        return cls(
            request=request, model_id=model_id, refusals=refusals, native=native, sent=sent, takes_tools=takes_tools
        )

    @property
    def tool_mode(self) -> bool:
        """Whether the answer is asked for through the ``final_output`` tool."""
        return self.native is None and self.takes_tools

    def system_prompt(self, system_prompt: str | None) -> str | None:
        """The system prompt a request sends: without native mode or the tool (a model that takes no
        tools) the schema is said there, since nothing else carries it to the model."""
        if self.native is not None or self.tool_mode:
            return system_prompt
        schema = json.dumps(self.request.schema, ensure_ascii=False)
        said = f"Your final answer must be only JSON (no prose, no code fence) valid against this JSON Schema: {schema}"
        return f"{system_prompt}\n\n{said}" if system_prompt else said

    def fall_back(self) -> None:
        """The provider refused native mode for this model: the tool from now on, and for its later turns."""
        self.native = None
        self.refusals.add(self.model_id)

    def tools(self, tools: list[ToolSpec]) -> list[ToolSpec]:
        """The tools a request of this turn offers: the session's, plus ``final_output`` in tool mode."""
        if not self.tool_mode:
            return tools
        return [*tools, ToolSpec(name=FINAL_OUTPUT, description=FINAL_OUTPUT_DESCRIPTION, input_schema=self.sent)]

    def judge_call(self, call: Part) -> list[dict[str, str]]:
        """Judge a ``final_output`` call's arguments: ``[]`` (and the answer kept) when valid."""
        raw = invalid_arguments(call)
        if raw is not None:
            return [{"path": "$", "message": arguments_problem(raw)}]
        return self._judge(call.arguments or {}, wrapped=True)

    def judge_text(self, reply: ChatMessage) -> list[dict[str, str]]:
        """Judge a final reply's text as the answer: ``[]`` (and the answer kept) when valid."""
        text = "".join(p.text for p in reply.parts if p.type == "text" and p.text)
        value, errors = output_schema.parse_answer(text)
        if errors:
            if self.tool_mode:
                errors = [{"path": "$", "message": f"No answer was given: call {FINAL_OUTPUT} with it."}, *errors]
            return errors
        if self.native is None:
            # Not constrained natively: the JSON itself, as the schema asks, is an answer too (or wrapped).
            direct = output_schema.validate(self.request.schema, value)
            if not direct:
                self.answered, self.value = True, value
                return []
        return self._judge(value, wrapped=True)

    def _judge(self, value: Any, *, wrapped: bool) -> list[dict[str, str]]:
        if wrapped:
            value, errors = output_schema.unwrap(self.request.schema, value)
            if errors:
                return errors
        errors = output_schema.validate(self.request.schema, value)
        if not errors:
            self.answered, self.value = True, value
        return errors

    def count_invalid(self, errors: list[dict[str, str]]) -> None:
        """One more invalid answer; past ``retries`` the turn ends ``schema_failed``."""
        self.invalid += 1
        if self.invalid > self.request.retries:
            tries = "answer" if self.invalid == 1 else f"{self.invalid} answers"
            raise SchemaFailed(
                f"The model's {tries} did not match the output schema ({_first(errors)}).",
                errors,
            )

    def feedback(self, errors: list[dict[str, str]]) -> str:
        """What the model is told of an invalid answer."""
        listed = "\n".join(f"- {e['path']}: {e['message']}" for e in errors)
        how = (
            f"Call {FINAL_OUTPUT} again with the corrected answer."
            if self.tool_mode
            else ("Answer again with only the corrected JSON.")
        )
        return f"The answer does not match the required output schema:\n{listed}\n{how}"


def _first(errors: list[dict[str, str]]) -> str:
    first = errors[0] if errors else {"path": "$", "message": "invalid"}
    more = f", and {len(errors) - 1} more" if len(errors) > 1 else ""
    return f"{first['path']}: {first['message']}{more}"

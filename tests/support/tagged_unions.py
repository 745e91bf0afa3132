"""JSON Schema validation that checks tagged unions through their tag.

``jsonschema`` checks a ``oneOf`` by validating the instance against every member: for the
protocol's ``AgentEvent`` (26 events) that is ~3 ms a message, which was most of the time of the
suite's streaming tests. A union whose members are objects that each require a distinct constant
for one property (the tag) can match at most one member: the one its tag names. So such a ``oneOf``
is rewritten into a ``x-tagged`` keyword that validates the instance as an object whose tag is
one of the members' and then against that member alone. It accepts and refuses exactly what the
``oneOf`` does; only the error message differs.
"""

from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError


def _tagged(validator: Any, spec: dict[str, Any], instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        yield ValidationError(f"{instance!r} is not an object")
        return
    tag = instance.get(spec["property"])
    member = spec["members"].get(tag) if isinstance(tag, str) else None
    if member is None:
        yield ValidationError(f"{spec['property']} {tag!r} is not one of {sorted(spec['members'])}")
        return
    yield from validator.descend(instance, member)


Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"x-tagged": _tagged})


def _member_tag(member: Any, prop: str, defs: dict[str, Any]) -> str | None:
    """The constant ``member`` (inline, or a lone ``$ref`` into ``defs``) requires for ``prop``."""
    if isinstance(member, dict) and set(member) == {"$ref"}:
        member = defs.get(member["$ref"].removeprefix("#/$defs/"), {})
    if not isinstance(member, dict) or prop not in member.get("required", ()):
        return None
    tag = member.get("properties", {}).get(prop, {}).get("const")
    return tag if isinstance(tag, str) else None


def through_tags(node: Any, defs: dict[str, Any], tag_property: str | None) -> Any:
    """``node`` (a schema) with each tagged ``oneOf`` turned into ``x-tagged``. The tag is
    ``tag_property``, or with None each union's own OpenAPI ``discriminator.propertyName``."""
    if isinstance(node, list):
        return [through_tags(item, defs, tag_property) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: through_tags(value, defs, tag_property) for key, value in node.items()}
    prop = tag_property or node.get("discriminator", {}).get("propertyName")
    members = node.get("oneOf")
    if isinstance(prop, str) and isinstance(members, list) and members:
        tags = [_member_tag(member, prop, defs) for member in members]
        if None not in tags and len(set(tags)) == len(tags):
            del node["oneOf"]
            node["x-tagged"] = {"property": prop, "members": dict(zip(tags, members, strict=True))}
    return node

"""A tool schema from an untrusted server (MCP), made into a validator that is safe to run on the model's
arguments: checked once when the tools are built (an invalid schema, a regular expression that does not compile
or a ``$ref`` outside the schema raises :class:`MCPSchemaError` naming the tool); it retrieves nothing (no URL, no
file a schema names), and its regular expressions run with a time bound (:data:`PATTERN_TIMEOUT_S`)."""

from __future__ import annotations

from typing import Any

from agentr1_gym.errors import MissingDependencyError, ToolInfrastructureError

__all__ = ["PATTERN_TIMEOUT_S", "MCPSchemaError", "safe_validator"]

#: the longest a schema's regular expression may take on one value (then the value counts as not matching)
PATTERN_TIMEOUT_S = 0.05


class MCPSchemaError(ToolInfrastructureError):
    """A server's tool schema the env cannot use as given (invalid, a regular expression that does not compile, a
    ``$ref`` outside the schema). The server's fault, never the model's: fix the server or leave the tool out with
    ``mcp_tools(..., names=[...])``."""


def _pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, giving up (as no match) after
    :data:`PATTERN_TIMEOUT_S`: ``^(a+)+$`` on 35 characters would otherwise run for minutes."""
    import regex

    try:
        return regex.search(pattern, text, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        return False


def _bounded_keywords() -> dict[str, Any]:
    """jsonschema's three keywords that run regular expressions, on :func:`_pattern_search`."""
    from jsonschema.exceptions import ValidationError as SchemaValidationError

    def pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Any:
        if validator.is_type(instance, "string") and not _pattern_search(patrn, instance):
            yield SchemaValidationError(f"{instance[:80]!r} does not match {patrn!r}")

    def pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        for patrn, subschema in patterns.items():
            for k, v in instance.items():
                if _pattern_search(patrn, k):
                    yield from validator.descend(v, subschema, path=k, schema_path=patrn)

    def additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Any:
        if not validator.is_type(instance, "object"):
            return
        props, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
        extras = [k for k in instance if k not in props and not any(_pattern_search(p, k) for p in patterns)]
        if validator.is_type(ap, "object"):
            for extra in extras:
                yield from validator.descend(instance[extra], ap, path=extra)
        elif ap is False and extras:
            yield SchemaValidationError(
                f"unexpected argument(s) {', '.join(repr(e[:40]) for e in sorted(extras)[:5])}"
            )

    return {
        "pattern": pattern,
        "patternProperties": pattern_properties,
        "additionalProperties": additional_properties,
    }


def _walk(schema: Any) -> Any:
    """Every (key, value) pair in a schema, at any depth (iteratively)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                yield key, value
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def safe_validator(schema: Any, where: str) -> Any:
    """A jsonschema validator for a server's ``schema`` that retrieves nothing (no URL, no file), runs its
    regular expressions with a time bound, and was checked first: an invalid schema (unknown type, bad keyword
    value), a regular expression that does not compile, or a ``$ref`` outside the schema raises
    :class:`MCPSchemaError` naming ``where``."""
    try:
        import jsonschema
        import referencing
        import referencing.exceptions
        import regex
    except ImportError as exc:
        raise MissingDependencyError(
            f'MCP tools need jsonschema and regex ({exc}): pip install "agentr1-gym[mcp]"'
        ) from None
    if not isinstance(schema, dict):
        raise MCPSchemaError(f"{where}: its input schema is not a JSON object")
    base = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        base.check_schema(schema)
    except jsonschema.SchemaError as exc:
        at = "/".join(str(p) for p in exc.path) or "the top"
        raise MCPSchemaError(f"{where}: its input schema is invalid at {at}: {exc.message[:200]}") from None
    except RecursionError:
        raise MCPSchemaError(f"{where}: its input schema nests too deeply") from None
    for key, value in _walk(schema):
        if key in ("$ref", "$dynamicRef", "$recursiveRef") and not (
            isinstance(value, str) and value.startswith("#")
        ):
            raise MCPSchemaError(
                f"{where}: its input schema refers to {str(value)[:120]!r} outside itself; the env fetches no URL "
                "and reads no file a server names (inline the definition under $defs)"
            )
        patterns = [value] if key == "pattern" else list(value) if key == "patternProperties" else []
        for patrn in patterns:
            if not isinstance(patrn, str):
                continue  # check_schema has refused non-strings where they matter
            try:
                regex.compile(patrn)
            except (regex.error, OverflowError, RecursionError) as exc:
                raise MCPSchemaError(
                    f"{where}: its input schema's pattern {patrn[:80]!r} does not compile ({exc})"
                ) from None

    def refuse(uri: str) -> Any:
        raise referencing.exceptions.NoSuchResource(ref=uri)

    cls = jsonschema.validators.extend(base, _bounded_keywords())
    validator = cls(schema, registry=referencing.Registry(retrieve=refuse))
    try:  # every local reference must resolve, now rather than at the model's first call
        resolver = validator._resolver
        for key, value in _walk(schema):
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                resolver.lookup(value)
    except referencing.exceptions.Unresolvable as exc:
        raise MCPSchemaError(
            f"{where}: its input schema's reference {str(exc)[:120]} does not resolve"
        ) from None
    except AttributeError:
        pass  # an older jsonschema without _resolver: unresolvable references then fail at the first call
    return validator

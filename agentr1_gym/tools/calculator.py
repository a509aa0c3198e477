"""A safe calculator: arithmetic expressions evaluated exactly (``fractions.Fraction``) from their syntax tree.

Allowed: numbers, ``+ - * / // % **``, parentheses, unary signs, and the functions ``abs``, ``round``, ``min``,
``max``, ``sqrt``. Everything else (names, attribute access, strings, calls of anything else, comprehensions,
huge powers) is refused with a message that says what is allowed. Nothing is ever passed to ``eval``.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.tools.base import Tool, ToolResult

__all__ = ["CalculatorError", "CalculatorTool", "evaluate", "format_number"]

_MAX_BITS = 4096  # largest integer part a result may have
_MAX_EXPONENT = 1000
_ALLOWED = "numbers, + - * / // % **, parentheses and abs(), round(), min(), max(), sqrt()"


class CalculatorError(ValueError):
    """The expression is not allowed or cannot be computed; the message is meant for the agent."""


def _check_size(x: Fraction) -> Fraction:
    if (
        abs(x.numerator).bit_length() - abs(x.denominator).bit_length() > _MAX_BITS
        or x.denominator.bit_length() > _MAX_BITS
    ):
        raise CalculatorError("the result is too large")
    return x


def _power(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1:
        if base < 0:
            raise CalculatorError("a negative number to a fractional power is not a real number")
        return Fraction(float(base) ** float(exp))
    e = exp.numerator
    size = max(abs(base.numerator).bit_length(), base.denominator.bit_length(), 1)
    if abs(e) > _MAX_EXPONENT or (base not in (0, 1, -1) and abs(e) * size > _MAX_BITS):
        raise CalculatorError(f"the exponent {e} is too large")
    if base == 0 and e < 0:
        raise CalculatorError("division by zero")
    return base**e


def _sqrt(x: Fraction) -> Fraction:
    if x < 0:
        raise CalculatorError("sqrt of a negative number")
    n, d = math.isqrt(x.numerator), math.isqrt(x.denominator)
    if n * n == x.numerator and d * d == x.denominator:
        return Fraction(n, d)
    return Fraction(math.sqrt(x))


_MAX_ROUND_DIGITS = 100


def _round(args: list[Fraction]) -> Fraction:
    digits = args[1] if len(args) > 1 else Fraction(0)
    if digits.denominator != 1:
        raise CalculatorError("round()'s second argument must be a whole number")
    if abs(digits) > _MAX_ROUND_DIGITS:
        raise CalculatorError(f"round() to more than {_MAX_ROUND_DIGITS} digits is not allowed")
    return Fraction(round(args[0], int(digits)))


_FUNCS = {
    "abs": (1, 1, lambda a: abs(a[0])),
    "sqrt": (1, 1, lambda a: _sqrt(a[0])),
    "round": (1, 2, lambda a: _round(a)),
    "min": (1, 50, min),
    "max": (1, 50, max),
}


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(
                f"only numbers are allowed, not {type(node.value).__name__} {node.value!r:.40}"
            )
        if isinstance(node.value, float) and not math.isfinite(node.value):
            raise CalculatorError("only finite numbers are allowed")
        # decimal literals are exact: 0.1 is 1/10, not the nearest binary float
        return Fraction(repr(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        v = _eval(node.operand)
        return v if isinstance(node.op, ast.UAdd) else -v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left), _eval(node.right)
        op = node.op
        if isinstance(op, ast.Add):
            return _check_size(a + b)
        if isinstance(op, ast.Sub):
            return _check_size(a - b)
        if isinstance(op, ast.Mult):
            return _check_size(a * b)
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise CalculatorError("division by zero")
            if isinstance(op, ast.Div):
                return _check_size(a / b)
            return Fraction(a // b) if isinstance(op, ast.FloorDiv) else _check_size(a % b)
        if isinstance(op, ast.Pow):
            return _check_size(_power(a, b))
        raise CalculatorError(f"the operator {type(op).__name__} is not allowed; allowed: {_ALLOWED}")
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            raise CalculatorError(f"attribute access is not allowed; allowed: {_ALLOWED}")
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS:
            what = node.func.id if isinstance(node.func, ast.Name) else "this function"
            raise CalculatorError(f"calling {what} is not allowed; allowed: {_ALLOWED}")
        if node.keywords:
            raise CalculatorError("keyword arguments are not allowed")
        lo, hi, fn = _FUNCS[node.func.id]
        if not lo <= len(node.args) <= hi:
            raise CalculatorError(f"{node.func.id}() takes {lo} to {hi} arguments")
        return _check_size(fn([_eval(a) for a in node.args]))
    if isinstance(node, ast.Name):
        raise CalculatorError(f"unknown name {node.id!r}; allowed: {_ALLOWED}")
    if isinstance(node, ast.Attribute):
        raise CalculatorError(f"attribute access is not allowed; allowed: {_ALLOWED}")
    raise CalculatorError(f"{type(node).__name__} expressions are not allowed; allowed: {_ALLOWED}")


def evaluate(expression: str) -> Fraction:
    """Evaluate an arithmetic expression exactly. Raises :class:`CalculatorError` with an explanation."""
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > 500:
        raise CalculatorError("the expression is longer than 500 characters")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(
            f"cannot parse {expression[:80]!r} as arithmetic; allowed: {_ALLOWED}"
        ) from None
    except (ValueError, RecursionError, MemoryError):
        raise CalculatorError("the expression is malformed or nested too deeply") from None
    try:
        return _eval(tree)
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def format_number(x: Fraction) -> str:
    """Integers exactly; other values to 12 significant digits (with the exact fraction when it is short)."""
    if x.denominator == 1:
        digits = str(abs(x.numerator))
        if len(digits) > 40:
            return f"{'-' if x < 0 else ''}{digits[0]}.{digits[1:12]}e+{len(digits) - 1}"
        return str(x.numerator)
    if abs(x) >= 10**300 or abs(x) < Fraction(1, 10**300):  # beyond float's range: scientific, exactly
        exponent = len(str(abs(x.numerator))) - len(str(x.denominator))
        scaled = abs(x) / Fraction(10) ** exponent  # in [0.1, 10)
        while scaled >= 10:
            scaled, exponent = scaled / 10, exponent + 1
        while scaled < 1:
            scaled, exponent = scaled * 10, exponent - 1
        mantissa = f"{float(scaled):.12g}"
        return f"{'-' if x < 0 else ''}{mantissa}e{exponent:+d}"
    approx = f"{float(x):.12g}"
    return f"{approx} (= {x.numerator}/{x.denominator})" if x.denominator < 10_000 else approx


class CalculatorArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expression: str = Field(
        ..., min_length=1, max_length=500, description="An arithmetic expression, e.g. (12 + 30) * 4 / 7"
    )


class CalculatorTool(Tool):
    """Evaluates arithmetic exactly. ``metadata["value"]`` is the exact result as a ``Fraction``."""

    name: ClassVar[str] = "calculator"
    description: ClassVar[str] = f"Evaluate an arithmetic expression exactly ({_ALLOWED})."
    Args = CalculatorArgs

    def execute(self, args: BaseModel) -> ToolResult:
        try:
            value = evaluate(args.expression)  # type: ignore[attr-defined]
        except CalculatorError as exc:
            return ToolResult(f"Error: {exc}", success=False)
        return ToolResult(format_number(value), metadata={"value": value})

    def execute_batch(self, batch: Sequence[BaseModel]) -> list[ToolResult]:
        return [self.execute(a) for a in batch]

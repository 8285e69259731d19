"""A safe arithmetic evaluator for the calculator tool: the expression is parsed with
``ast`` and only numbers, + - * / // % **, parentheses, unary plus and minus, a few
``math`` functions and constants are evaluated — never ``eval``. Sizes are bounded (the
text, the exponent, the result's digits), so no input can hang the tool thread."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

MAX_CHARS = 500
MAX_EXPONENT = 1000  # an integer power's exponent; 10**1000 is already far past any use
MAX_INT_DIGITS = 1000  # an integer result longer than this is refused
MAX_DEPTH = 50

_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
}
_SYMBOLS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//",
            ast.Mod: "%", ast.Pow: "**"}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "log": math.log, "log10": math.log10,
    "exp": math.exp, "min": min, "max": max,
}
CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculatorError(ValueError):
    """The expression is not arithmetic the calculator does; the message says what is wrong."""


def calculate(expression: str) -> int | float:
    """The value of ``expression`` (e.g. ``"2 * (3 + 4) ** 2"``, ``"sqrt(2) / 3"``)."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("the expression is empty")
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"the expression is {len(expression)} characters long; at most {MAX_CHARS}")
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise CalculatorError(f"{expression!r} is not an arithmetic expression") from None
    try:
        value = _eval(tree.body, 0)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("the result is too large") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


def _eval(node: ast.expr, depth: int) -> int | float:
    if depth > MAX_DEPTH:
        raise CalculatorError(f"the expression is nested more than {MAX_DEPTH} deep")
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculatorError(f"{node.value!r} is not a number")
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _eval(node.operand, depth + 1)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _SYMBOLS:
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        return _checked(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; the constants are {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        return _call(node, depth)
    raise CalculatorError(f"{ast.unparse(node)!r} is not arithmetic: use numbers, + - * / // % **, "
                          "parentheses and the functions " + ", ".join(FUNCTIONS))


def _call(node: ast.Call, depth: int) -> int | float:
    name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
    function = FUNCTIONS.get(name)
    if function is None or node.keywords:
        raise CalculatorError(f"unknown function {name!r}; the functions are {', '.join(FUNCTIONS)}")
    args = [_eval(arg, depth + 1) for arg in node.args]
    try:
        return _checked(function(*args))
    except TypeError:
        raise CalculatorError(f"{name}() was given {len(args)} argument(s), which it does not take") from None
    except ValueError:
        raise CalculatorError(f"{name}({', '.join(map(str, args))}) is undefined") from None


def _power(base: int | float, exponent: int | float) -> int | float:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent {exponent:g} is too large; at most {MAX_EXPONENT}")
    if isinstance(base, int) and isinstance(exponent, int) and exponent >= 0 and abs(base) > 1:
        # The result's digits, before computing it: 9**1000 is fine, (10**999)**1000 is not.
        if exponent * math.log10(abs(base)) > MAX_INT_DIGITS:
            raise CalculatorError(f"the result would have more than {MAX_INT_DIGITS} digits")
    result = base ** exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return _checked(result)


def _checked(value: int | float) -> int | float:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_DIGITS * 3.33:
        raise CalculatorError(f"the result would have more than {MAX_INT_DIGITS} digits")
    return value

"""Parse and validate once: inert's strict parse and its compiled schema, beside ``json.loads``
and the ``jsonschema`` package, on the same arguments in the same run.

Run with ``python -m benchmarks.validation [--iterations N] [--large-iterations N] [--json]``.

Two arguments objects, each valid for its schema: about 300 bytes (a contact to add) and about
256 KiB (a batch of rows). inert: ``parse_arguments`` (strict: duplicate keys, NaN, depth,
sizes, lone surrogates; the canonical form and its digest) then the schema compiled once with
``jsonschema-rs`` (formats asserted), as the registry does for every call. Baseline:
``json.loads`` then a ``jsonschema`` ``Draft202012Validator`` compiled once (with its format
checker), which a careful server would otherwise write. Every operation is timed on its own;
the cases alternate, and the report gives operations/s, p50 and p99 per case, and the ratio of
the baseline's p99 to inert's. Target: p99 at most 50 ms at 256 KiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from inert import ArgumentLimits, ToolDeclaration
from inert.actors import ParsedArguments, parse_arguments
from inert.actors._places import SchemaPlaces
from inert.actors._schemas import compile_schema, schema_problems

SMALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "email": {"type": "string", "format": "email"},
        "phone": {"type": "string", "pattern": "^[+0-9 ()-]{6,20}$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "notes": {"type": "string", "maxLength": 1000},
    },
    "required": ["name", "email"],
    "additionalProperties": False,
}
ROW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0},
        "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{6}$"},
        "title": {"type": "string"},
        "price": {"type": "number", "minimum": 0},
        "in_stock": {"type": "boolean"},
    },
    "required": ["id", "sku", "title", "price", "in_stock"],
    "additionalProperties": False,
}
LARGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rows": {"type": "array", "items": ROW_SCHEMA}},
    "required": ["rows"],
    "additionalProperties": False,
}


def small_arguments() -> bytes:
    return json.dumps(
        {
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "phone": "+44 20 7946 0000",
            "tags": ["math", "engines", "poetry"],
            "notes": "Met at the analytical engine demo; follow up about the notes on Bernoulli"
            " numbers, the loom cards and the translation of Menabrea's paper, all three.",
        }
    ).encode()


def large_arguments(size: int = 256 * 1024) -> bytes:
    """As many rows as fit in ``size`` bytes of JSON."""
    rows: list[dict[str, Any]] = []
    length = len(b'{"rows": []}')
    while True:
        index = len(rows)
        row = {
            "id": index,
            "sku": f"ABC-{index:06d}",
            "title": f"Widget number {index} with a reasonably descriptive title",
            "price": round(index * 0.37, 2),
            "in_stock": index % 3 != 0,
        }
        length += len(json.dumps(row)) + (2 if rows else 0)
        if length > size:
            return json.dumps({"rows": rows}).encode()
        rows.append(row)


def inert_side(schema: dict[str, Any], limits: ArgumentLimits) -> Callable[[bytes], None]:
    compiled = compile_schema(ToolDeclaration(name="bench", parameters=schema))
    places = SchemaPlaces(schema)

    def run(data: bytes) -> None:
        parsed = parse_arguments(data, limits)
        if not isinstance(parsed, ParsedArguments) or schema_problems(compiled, parsed, places):
            raise RuntimeError("inert refused arguments that are valid")

    return run


def baseline_side(schema: dict[str, Any]) -> Callable[[bytes], None]:
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )

    def run(data: bytes) -> None:
        validator.validate(json.loads(data))

    return run


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure(
    sides: dict[str, Callable[[bytes], None]], data: bytes, iterations: int
) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in sides}
    for run in sides.values():
        run(data)  # warm-up, and a check that the arguments are valid for both
    for _ in range(iterations):
        for name, run in sides.items():
            start = time.perf_counter()
            run(data)
            times[name].append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--large-iterations", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args(argv)
    limits = ArgumentLimits(max_bytes=1 << 20, max_string_length=1 << 20, max_object_keys=10_000)
    cases = [
        ("300 B", small_arguments(), SMALL_SCHEMA, arguments.iterations),
        ("256 KiB", large_arguments(), LARGE_SCHEMA, arguments.large_iterations),
    ]
    results = []
    for label, data, schema, iterations in cases:
        sides = {"inert": inert_side(schema, limits), "baseline": baseline_side(schema)}
        times = measure(sides, data, iterations)
        entry: dict[str, Any] = {"case": label, "bytes": len(data), "iterations": iterations}
        for name, values in times.items():
            entry[name] = {
                "ops_per_s": len(values) / sum(values),
                "p50_ms": statistics.median(values) * 1000,
                "p99_ms": percentile(values, 0.99) * 1000,
            }
        entry["p99_ratio"] = entry["baseline"]["p99_ms"] / entry["inert"]["p99_ms"]
        results.append(entry)
    if arguments.json:
        print(json.dumps({"arguments": vars(arguments), "results": results}, indent=2))
        return 0
    print(
        "| arguments | inert ops/s | inert p50 | inert p99 | json.loads + jsonschema ops/s"
        " | its p50 | its p99 | p99 ratio | target p99 <= 50 ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for entry in results:
        mine, theirs = entry["inert"], entry["baseline"]
        met = "" if entry["case"] != "256 KiB" else ("yes" if mine["p99_ms"] <= 50 else "**no**")
        print(
            f"| {entry['case']} ({entry['bytes']:,} B) | {mine['ops_per_s']:,.0f}"
            f" | {mine['p50_ms']:.3f} ms | {mine['p99_ms']:.3f} ms | {theirs['ops_per_s']:,.0f}"
            f" | {theirs['p50_ms']:.3f} ms | {theirs['p99_ms']:.3f} ms"
            f" | {entry['p99_ratio']:.1f}x | {met} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

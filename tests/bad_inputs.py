"""The bad-input corpus: named argument bytes, each with the one stable code it must end with.

Written for inert from the rules of RFC 8259, I-JSON (RFC 7493), the interoperability failures
Bishop Fox surveyed, the kinds of case of the JSONTestSuite, and the stream regressions real
agent stacks reported; none is copied. Each case is the whole argument bytes of one call at its
end event; the code is the ledger's ``parse`` code (``ArgumentProblem``), or, for schema cases,
the kind of the schema problem (``schema_invalid``).
"""

from __future__ import annotations

import json

from attrs import frozen

DEPTH = 64
"""The default nesting limit the cases are written against."""


@frozen
class BadInput:
    name: str
    data: bytes
    code: str


def _cases() -> list[BadInput]:
    cases: list[BadInput] = []

    def add(name: str, data: bytes | str, code: str) -> None:
        cases.append(BadInput(name, data.encode() if isinstance(data, str) else data, code))

    # --- duplicate names (RFC 8259 §4, I-JSON): first-wins and last-wins parsers disagree ------
    add("duplicate key at the top", '{"a": 1, "a": 2}', "duplicate_key")
    add("duplicate key with equal values", '{"a": 1, "a": 1}', "duplicate_key")
    add("duplicate key nested", '{"o": {"b": 1, "b": 2}}', "duplicate_key")
    add("duplicate key in an array's object", '{"l": [{"c": 1, "c": 2}]}', "duplicate_key")
    add("duplicate key spelt with an escape", '{"a": 1, "\\u0061": 2}', "duplicate_key")
    add("duplicate key of the empty name", '{"": 1, "": 2}', "duplicate_key")
    add("duplicate key three times", '{"k": 1, "k": 2, "k": 3}', "duplicate_key")
    add("duplicate key after others", '{"a": 1, "b": 2, "c": 3, "a": 4}', "duplicate_key")
    add("duplicate key of different types", '{"a": "x", "a": {"y": 1}}', "duplicate_key")
    add("duplicate key deep down", '{"a": {"b": {"c": {"d": 1, "d": 2}}}}', "duplicate_key")
    add("duplicate key with an escaped quote", '{"\\"": 1, "\\"": 2}', "duplicate_key")
    add(
        "duplicate role key (privilege smuggling)",
        '{"role": "user", "role": "admin"}',
        "duplicate_key",
    )

    # --- non-finite numbers (RFC 8259 §6) -------------------------------------------------------
    for name, text in [
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("-Infinity", "-Infinity"),
        ("overflowing exponent", "1e400"),
        ("negative overflowing exponent", "-1e400"),
        ("overflowing mantissa", "9" * 400 + ".0"),
        ("overflowing with a fraction", "1.5e309"),
    ]:
        add(f"{name} as a value", f'{{"n": {text}}}', "non_finite_number")
        add(f"{name} in an array", f'{{"n": [1, {text}]}}', "non_finite_number")

    # --- numbers too large to be exact -----------------------------------------------------------
    for name, text in [
        ("5,000-digit integer", "1" * 5000),
        ("2^53", str(2**53)),
        ("-2^53", str(-(2**53))),
        ("2^64", str(2**64)),
        ("a 30-digit integer", "1" * 30),
    ]:
        add(f"{name}", f'{{"n": {text}}}', "number_too_large")

    for name, text in [
        ("2^53 + 1", str(2**53 + 1)),
        ("-(2^53 + 1)", str(-(2**53 + 1))),
        ("1e20 written out", "100000000000000000000"),
        ("1e20 as an exponent", "1e20"),
        ("a large float with a fraction", "100000000000000000000.5"),
        ("a negative 19-digit integer", "-1234567890123456789"),
    ]:
        add(f"{name}", f'{{"n": [{text}]}}', "number_too_large")

    # --- depth (RecursionError, not a parse error, in the standard library) --------------------
    add("arrays one past the depth", '{"a": ' + "[" * DEPTH + "]" * DEPTH + "}", "too_deep")
    add(
        "objects one past the depth",
        '{"a": ' + '{"a": ' * DEPTH + "1" + "}" * DEPTH + "}",
        "too_deep",
    )
    add("100,000 open brackets", '{"a": ' + "[" * 100_000, "too_deep")
    add("50,000 open braces", '{"a": ' + '{"a":' * 50_000, "too_deep")
    add(
        "alternating arrays and objects",
        '{"a": ' + '[{"a": ' * 40 + "1" + "}]" * 40 + "}",
        "too_deep",
    )

    # --- surrogates (RFC 8259 §8.2, I-JSON) ------------------------------------------------------
    for name, escape in [
        ("lone high surrogate", "\\ud800"),
        ("lone low surrogate", "\\udc00"),
        ("reversed pair", "\\udc00\\ud800"),
        ("high surrogate then a letter", "\\ud800a"),
        ("high surrogate at the end", "ab\\udbff"),
        ("two high surrogates", "\\ud800\\ud800"),
    ]:
        add(f"{name} in a value", f'{{"s": "{escape}"}}', "invalid_unicode")
        add(f"{name} in a key", f'{{"{escape}": 1}}', "invalid_unicode")

    for name, escape in [
        ("noncharacter U+FFFE", "\\ufffe"),
        ("noncharacter U+FFFF", "\\uffff"),
        ("noncharacter U+FDD0", "\\ufdd0"),
        ("noncharacter U+FDEF", "\\ufdef"),
        ("noncharacter U+1FFFE", "\\ud83f\\udffe"),
        ("noncharacter U+10FFFF", "\\udbff\\udfff"),
    ]:
        add(f"{name} in a value", f'{{"s": "{escape}"}}', "invalid_unicode")

    # --- bytes that are not UTF-8 (RFC 8259 §8.1) ------------------------------------------------
    for byte in range(0x80, 0xC0):
        add(
            f"lone continuation byte {byte:#04x}",
            b'{"s": "' + bytes([byte]) + b'"}',
            "invalid_utf8",
        )
    for byte in (0xC0, 0xC1, *range(0xF5, 0x100)):
        add(
            f"byte {byte:#04x} that never starts UTF-8",
            b'{"s": "' + bytes([byte, 0x80]) + b'"}',
            "invalid_utf8",
        )
    for name, raw in [
        ("overlong slash", b"\xc0\xaf"),
        ("overlong three-byte NUL", b"\xe0\x80\x80"),
        ("overlong four-byte", b"\xf0\x80\x80\xaf"),
        ("encoded surrogate (CESU-8)", b"\xed\xa0\x80"),
        ("encoded low surrogate", b"\xed\xbf\xbf"),
        ("beyond U+10FFFF", b"\xf4\x90\x80\x80"),
        ("two-byte start without its end", b"\xc3"),
        ("three-byte start cut after one", b"\xe2\x82"),
        ("four-byte start cut after two", b"\xf0\x9f\x98"),
        ("Latin-1 e acute", b"\xe9"),
        ("Windows-1252 quote", b"\x93"),
    ]:
        add(f"{name} in a value", b'{"s": "' + raw + b'"}', "invalid_utf8")
        add(f"{name} in a key", b'{"' + raw + b'": 1}', "invalid_utf8")
    # UTF-16 of ASCII is valid UTF-8 with NUL bytes between the characters: not JSON.
    add("UTF-16 little-endian text", '{"a": 1}'.encode("utf-16-le"), "syntax")
    add("UTF-16 with its byte order mark", '{"a": 1}'.encode("utf-16"), "invalid_utf8")

    # --- byte order mark (senders MUST NOT add one) ----------------------------------------------
    add("UTF-8 byte order mark", b"\xef\xbb\xbf{}", "bom")
    add("UTF-8 byte order mark before an object", b'\xef\xbb\xbf{"a": 1}', "bom")

    # --- NUL, which reaches C libraries, paths and logs ------------------------------------------
    add("escaped NUL in a value", '{"path": "a\\u0000b"}', "nul_character")
    add("escaped NUL in a key", '{"a\\u0000": 1}', "nul_character")
    add("escaped NUL alone", '{"s": "\\u0000"}', "nul_character")
    add("escaped NUL in an array", '{"l": ["\\u0000"]}', "nul_character")
    add("escaped NUL in a nested key", '{"o": {"k\\u0000": 1}}', "nul_character")
    add("escaped NUL after a path", '{"path": "/tmp/x\\u0000.png"}', "nul_character")

    # --- not an object at the top (tool arguments are an object) ---------------------------------
    for name, text in [
        ("an array", "[]"),
        ("an array of an object", '[{"a": 1}]'),
        ("a string", '"x"'),
        ("a number", "12"),
        ("a string holding an object", '"{\\"a\\": 1}"'),
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
        ("a negative number", "-1"),
        ("a float", "0.5"),
    ]:
        add(f"arguments that are {name}", text, "not_an_object")

    # --- syntax: what JSON is not ----------------------------------------------------------------
    for name, text in [
        ("empty input", ""),
        ("only white space", "   "),
        ("trailing comma in an object", '{"a": 1,}'),
        ("trailing comma in an array", '{"a": [1,]}'),
        ("leading comma", '{, "a": 1}'),
        ("double comma", '{"a": 1,, "b": 2}'),
        ("missing comma", '{"a": 1 "b": 2}'),
        ("missing colon", '{"a" 1}'),
        ("double colon", '{"a":: 1}'),
        ("missing value", '{"a": }'),
        ("unquoted key", "{a: 1}"),
        ("single-quoted key", "{'a': 1}"),
        ("single-quoted value", "{\"a\": 'x'}"),
        ("number as key", "{1: 1}"),
        ("line comment", '{"a": 1} // c'),
        ("block comment", '{"a": /* c */ 1}'),
        ("hash comment", '{"a": 1} # c'),
        ("unclosed object", '{"a": 1'),
        ("unclosed array", '{"a": [1, 2}'),
        ("unclosed string", '{"a": "x}'),
        ("extra closing brace", '{"a": 1}}'),
        ("extra closing bracket", '{"a": 1]'),
        ("two objects", '{"a": 1}{"b": 2}'),
        ("an empty object then the real one", '{}{"stock": "MSFT"}'),
        ("object then garbage", '{"a": 1} x'),
        ("leading zero", '{"n": 01}'),
        ("negative leading zero", '{"n": -01}'),
        ("leading dot", '{"n": .5}'),
        ("trailing dot", '{"n": 1.}'),
        ("plus sign", '{"n": +1}'),
        ("hexadecimal", '{"n": 0x1F}'),
        ("exponent without digits", '{"n": 1e}'),
        ("exponent sign without digits", '{"n": 1e+}'),
        ("minus alone", '{"n": -}'),
        ("double minus", '{"n": --1}'),
        ("infinity in lower case", '{"n": infinity}'),
        ("nan in lower case", '{"n": nan}'),
        ("True capitalised", '{"b": True}'),
        ("None for null", '{"b": None}'),
        ("truncated true", '{"b": tru}'),
        ("truncated null", '{"b": nul}'),
        ("undefined", '{"b": undefined}'),
        ("invalid escape", '{"s": "\\x41"}'),
        ("escaped single quote", '{"s": "\\\'"}'),
        ("short unicode escape", '{"s": "\\u12"}'),
        ("unicode escape with a non-hex digit", '{"s": "\\u00ZZ"}'),
        ("backslash at the end of a string", '{"s": "\\"}'),
        ("a truncated prefix 'repaired' nowhere", '{"path": "/etc/pas'),
        ("a prefix cut inside a key", '{"pa'),
        ("an object repeated by a chunk that repeats content", '{"a": 1}{"a": 1}'),
        ("leading bytes dropped", '"a": 1}'),
        ("key without a value at the end", '{"a": 1, "b"}'),
        ("array as a key", "{[1]: 2}"),
        ("object as a key", "{{}: 2}"),
        ("colon in an array", '{"a": [1: 2]}'),
        ("comma before the first element", '{"a": [,1]}'),
        ("JavaScript regular expression", '{"r": /x/}'),
        ("a concatenation of two strings", '{"s": "a" "b"}'),
        ("a Python tuple", '{"t": (1, 2)}'),
        ("an unquoted word", '{"w": hello}'),
        ("a bare backslash", '{"w": \\}'),
        ("a semicolon separator", '{"a": 1; "b": 2}'),
        ("an equals sign", '{"a" = 1}'),
        ("a percent-encoded body", "%7B%22a%22%3A1%7D"),
        ("a trailing NUL byte", '{"a": 1}\x00'),
        ("two numbers without a comma", '{"a": [1 2]}'),
        ("a keyword split by a space", '{"a": tru e}'),
        ("a fraction in the exponent", '{"n": 1e1.5}'),
        ("an exponent cut after its e", '{"n": 1.0e}'),
        ("a number with two dots", '{"n": 1.2.3}'),
        ("a number with a comma for a dot", '{"n": 1,5}'),
        ("an array closed by a brace", '{"a": [1}'),
        ("an object closed by a bracket", '{"a": {"b": 1]}'),
        ("a key without quotes after a good one", '{"a": 1, b: 2}'),
        ("a string with a raw line break", '{"s": "a\nb"}'),
        ("a YAML document", "a: 1"),
        ("an XML document", "<a>1</a>"),
        ("a Python dict with single quotes", "{'city': 'Paris'}"),
        ("a markdown code fence around JSON", '```json\n{"a": 1}\n```'),
    ]:
        add(name, text, "syntax")
    for code in [*range(0x00, 0x20), 0x7F]:
        if code == 0x7F:
            # DEL is not a control character in JSON: it is allowed raw.
            continue
        add(
            f"raw control character {code:#04x} in a string",
            b'{"s": "a' + bytes([code]) + b'b"}',
            "syntax",
        )

    # --- sizes -----------------------------------------------------------------------------------
    add("a string one past 64 KiB", '{"s": "' + "x" * (64 * 1024 + 1) + '"}', "string_too_long")
    add("a key one past 64 KiB", '{"' + "k" * (64 * 1024 + 1) + '": 1}', "string_too_long")
    add(
        "1,001 keys in one object",
        "{" + ", ".join(f'"k{index}": 0' for index in range(1001)) + "}",
        "too_many_keys",
    )
    add("arguments one past 256 KiB", '{"s": "' + "x" * (256 * 1024) + '"}', "too_large")
    add(
        "1,001 keys in a nested object",
        '{"o": {' + ", ".join(f'"k{index}": 0' for index in range(1001)) + "}}",
        "too_many_keys",
    )
    add(
        "an array element one past 64 KiB",
        '{"l": ["' + "y" * (64 * 1024 + 1) + '"]}',
        "string_too_long",
    )
    return cases


CANARY = "ANARY"
"""What every canary of ``CANARY_CASES`` and ``HOSTILE_KEYS`` holds, escaped or not
(``"\\u0043ANARY"`` is read as ``"CANARY"``): no detail, page, span or row may."""

HOSTILE_KEYS: list[str] = [
    # Names a model may write as the members of a map-typed parameter (headers, labels,
    # metadata), prompt-injected or not: each would be a secret in a path that showed it.
    "Authorization: Bearer sk-CANARY-KEY-100",
    "CANARY-KEY-101",
    "x-api-key CANARY-KEY-102",
    '"quoted" CANARY-KEY-103',
    "CANARY-KEY-104/with~slashes~1and~0tildes",
    "<script>CANARY-KEY-105</script>",
    "CANARY-KEY-106\nwith a line break",
    "\u0441\u0435\u043a\u0440\u0435\u0442 CANARY-KEY-107",
    "\U0001f511 CANARY-KEY-108",
    "CANARY-KEY-109 " * 40,
    "$.CANARY-KEY-110",
    ".<key #1> CANARY-KEY-111",
    "items[0] CANARY-KEY-112",
    "",
    "0",
]


def _canary_cases() -> list[BadInput]:
    """Refused arguments whose names and values hold canaries (``CANARY``), one per way the
    strict parse refuses them, each the whole argument bytes of one call."""
    cases: list[BadInput] = []

    def add(name: str, data: bytes | str, code: str) -> None:
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        cases.append(BadInput(f"canary: {name}", raw, code))

    add("a NUL in a name", '{"h": {"CANARY-KEY-1\\u0000": "CANARY-VAL-1"}}', "nul_character")
    add(
        "a NUL in a value under canary names",
        '{"CANARY-KEY-2": {"CANARY-KEY-3": ["CANARY-VAL-2\\u0000"]}}',
        "nul_character",
    )
    add("a NUL in an escaped name", '{"\\u0043ANARY-KEY-4\\u0000": 1}', "nul_character")
    add("a lone surrogate in a name", '{"CANARY-KEY-5\\ud800": 1}', "invalid_unicode")
    add("a noncharacter in a name", '{"CANARY-KEY-6\\uffff": 1}', "invalid_unicode")
    add(
        "a noncharacter in a value under a canary name",
        '{"CANARY-KEY-7": "\\ufdd0CANARY-VAL-7"}',
        "invalid_unicode",
    )
    add("an over-long name", '{"' + "CANARY-KEY-8-" * 6000 + '": 1}', "string_too_long")
    add(
        "an over-long value in an array under canary names",
        '{"CANARY-KEY-9": [{"CANARY-KEY-10": "' + "CANARY-VAL-9 " * 6000 + '"}]}',
        "string_too_long",
    )
    add(
        "1,001 canary names",
        "{" + ", ".join(f'"CANARY-KEY-11-{n}": {n}' for n in range(1001)) + "}",
        "too_many_keys",
    )
    add("a canary name twice", '{"CANARY-KEY-12": 1, "CANARY-KEY-12": 2}', "duplicate_key")
    add(
        "a canary name twice, once escaped",
        '{"CANARY-KEY-13": 1, "\\u0043ANARY-KEY-13": 2}',
        "duplicate_key",
    )
    add("NaN under a canary name", '{"CANARY-KEY-14": [NaN]}', "non_finite_number")
    add("2^53 under a canary name", '{"CANARY-KEY-15": 9007199254740992}', "number_too_large")
    add(
        "canary names nested past the depth",
        '{"CANARY-KEY-16": ' + '{"CANARY-KEY-16": ' * DEPTH + "1" + "}" * DEPTH + "}",
        "too_deep",
    )
    add("bytes that are not UTF-8 in a name", b'{"CANARY-KEY-17\xff": 1}', "invalid_utf8")
    add("a trailing comma after canaries", '{"CANARY-KEY-18": "CANARY-VAL-18",}', "syntax")
    add("a raw control character in a name", b'{"CANARY-KEY-19\x01": 1}', "syntax")
    add("a canary array for arguments", '["CANARY-VAL-20", {"CANARY-KEY-20": 1}]', "not_an_object")
    add("a byte order mark before canaries", b'\xef\xbb\xbf{"CANARY-KEY-21": 1}', "bom")
    add(
        "canary arguments past 256 KiB",
        '{"CANARY-KEY-22": "' + "CANARY-VAL-22" * 21_000 + '"}',
        "too_large",
    )
    for index, hostile in enumerate(HOSTILE_KEYS):
        add(
            f"hostile name {index} with a NUL in its value",
            json.dumps({"headers": {hostile: "CANARY-VAL-23\u0000"}}),
            "nul_character",
        )
    return cases


CANARY_CASES: list[BadInput] = _canary_cases()

CORPUS: list[BadInput] = _cases() + CANARY_CASES

SCHEMA_CASES: list[tuple[str, bytes, str]] = [
    # (name, arguments, the kind of the schema problem) against CONTACT_SCHEMA.
    (
        "an unknown property (a hallucinated parameter)",
        b'{"name": "a", "email": "a@b.co", "admin": true}',
        "additional_properties",
    ),
    (
        "an email that is not one (format asserted)",
        b'{"name": "a", "email": "not-an-email"}',
        "format",
    ),
    ("a required property missing", b'{"name": "a"}', "required"),
    (
        "a string where an integer is declared",
        b'{"name": "a", "email": "a@b.co", "age": "7"}',
        "type",
    ),
    ("an integer below its minimum", b'{"name": "a", "email": "a@b.co", "age": -1}', "minimum"),
    (
        "a float where an integer is declared",
        b'{"name": "a", "email": "a@b.co", "age": 7.5}',
        "type",
    ),
    ("an empty name", b'{"name": "", "email": "a@b.co"}', "min_length"),
    ("a value outside its enum", b'{"name": "a", "email": "a@b.co", "plan": "gold"}', "enum"),
    (
        "a pattern that is anchored",
        b'{"name": "a", "email": "a@b.co", "zip": "xx12345yy"}',
        "pattern",
    ),
    ("too many tags", b'{"name": "a", "email": "a@b.co", "tags": ["1","2","3","4"]}', "max_items"),
    ("a tag that is not a string", b'{"name": "a", "email": "a@b.co", "tags": [1]}', "type"),
    ("a null where a string is declared", b'{"name": null, "email": "a@b.co"}', "type"),
]

CONTACT_SCHEMA: dict[str, object] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0},
        "plan": {"enum": ["free", "pro"]},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "email"],
    "additionalProperties": False,
}

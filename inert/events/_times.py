"""Times as the log stores them: integer microseconds since the Unix epoch, in UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ._errors import CodecError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def datetime_to_micros(value: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise CodecError(f"naive datetime {value.isoformat()} cannot be stored; give it a tzinfo")
    try:
        value.astimezone(UTC)
    except OverflowError:
        raise CodecError(
            f"datetime {value.isoformat()} is outside the range of UTC datetimes"
        ) from None
    return (value - _EPOCH) // timedelta(microseconds=1)


def micros_to_datetime(value: int) -> datetime:
    """The UTC datetime of a count of microseconds since the Unix epoch."""
    return _EPOCH + timedelta(microseconds=value)

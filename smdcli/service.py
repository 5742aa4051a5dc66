"""The CLI's one door to the service: :class:`smdlab.Client` (SMD_URL, SMD_KEY), its errors turned into
a message on stderr and the CLI's exit status: 2 a rejected request (422; 404 where the command says),
3 over a quota (429; a quota that room can free is waited out first, as the client does everywhere, and each
wait is said on stderr), 1 any other HTTP error, an unreachable service or a reply that is not the service's
JSON, 130 interrupted (Ctrl-C)."""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any


def call(prog: str, run: Callable[[Any], int], not_found: int = 1) -> int:
    """``run(client)`` with a fresh :class:`smdlab.Client`, closed afterwards; ``prog`` prefixes each
    message (``"smd study"``); ``not_found`` is the exit status of a 404."""
    from smdlab import Client, NotFound, QuotaExceeded, SMDError, SMDValidationError

    def waiting(seconds: float, quota: str | None, detail: Any) -> None:   # a quota room will free: said, not silent
        print(f"{prog}: {detail} — waiting {seconds:g} s for room (Ctrl-C stops waiting)", file=sys.stderr)

    def retrying(reason: str, seconds: float) -> None:   # a failure of a service that answered: said, not silent
        span = "until it answers again" if math.isinf(seconds) else f"for up to {seconds:.3g} s"
        print(f"{prog}: {reason}; retrying {span} (Ctrl-C to stop)", file=sys.stderr)

    try:
        client = Client(on_quota_wait=waiting, on_retry=retrying)
    except SMDError as exc:   # e.g. an SMD_KEY that is no key
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    try:
        return run(client)
    except SMDValidationError as exc:
        print(f"{prog}: rejected (422):", file=sys.stderr)
        for error in exc.errors:
            loc = error["loc"][1:] if error["loc"][:1] == ["body"] else error["loc"]
            field = error["field"] or "(body)"
            if error["loc"][:1] == ["query"] and len(error["loc"]) == 2:   # a command's option, not "query.status"
                field = f"--{str(error['loc'][1]).replace('_', '-')}"
                loc = [field]
            print(f"  {error_line(loc, error['reason'], error['point'], field)}", file=sys.stderr)
        return 2
    except QuotaExceeded as exc:
        print(f"{prog}: {exc.detail}", file=sys.stderr)
        return 3
    except NotFound as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return not_found
    except SMDError as exc:
        hint = " (set SMD_KEY to your API key: an admin makes one with `smd keys create NAME`)" if exc.status == 401 else ""
        print(f"{prog}: {exc}{hint}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:   # Ctrl-C while following or waiting: what was submitted goes on
        print(f"{prog}: interrupted (what was already submitted keeps running on the service)", file=sys.stderr)
        return 130
    except (ValueError, KeyError) as exc:   # a reply that is not the service's JSON
        print(f"{prog}: unexpected reply from {client.url}: {exc!r}", file=sys.stderr)
        return 1
    finally:
        client.close()


def error_line(loc: list[Any], reason: str, point: dict[str, Any] | None = None, field: str | None = None) -> str:
    """One refused field as `smd` says it, alike for a study refused here (`smd study run`) and by the service:
    where (``axis PATH``, ``point I, FIELD``, else ``field`` or the dotted ``loc``), the reason, and for a
    point its axis values (the index alone does not say which values were refused)."""
    from smdlab.errors import at_point, field_said

    parts = [str(part) for part in loc]
    if parts[:1] == ["axis"]:
        where = f"axis {'.'.join(parts[1:])}"
    elif parts[:1] == ["point"] and len(parts) > 1:
        where = f"point {parts[1]}" + (f", {'.'.join(parts[2:])}" if len(parts) > 2 else "")
    else:
        where = field if field is not None else ".".join(parts)
    return f"{field_said(where, reason)}{at_point({'point': point})}"


def non_finite(value: Any, path: str = "") -> str | None:
    """The dotted path of a NaN or an infinity in a JSON-like value (Python's json reads them; no JSON request
    can carry them), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "(the value)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = non_finite(item, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def refuse_non_finite(prog: str, value: Any, what: str) -> None:
    """Exit 2, before any request, when ``value`` holds a NaN or an infinity."""
    where = non_finite(value)
    if where is not None:
        print(f"{prog}: {what}: {where}: expected a finite number, got NaN or Infinity", file=sys.stderr)
        raise SystemExit(2)


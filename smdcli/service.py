"""The CLI's one door to the service: :class:`smdlab.Client` (SMD_URL, SMD_KEY), its errors turned into
a message on stderr and the CLI's exit status: 2 a rejected request (422; 404 where the command says),
3 over a quota (429; a quota that room can free is waited out first, as the client does everywhere),
1 any other HTTP error, an unreachable service or a reply that is not the service's JSON."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def call(prog: str, run: Callable[[Any], int], not_found: int = 1) -> int:
    """``run(client)`` with a fresh :class:`smdlab.Client`, closed afterwards; ``prog`` prefixes each
    message (``"smd study"``); ``not_found`` is the exit status of a 404."""
    from smdlab import Client, NotFound, QuotaExceeded, SMDError, SMDValidationError

    client = Client()
    try:
        return run(client)
    except SMDValidationError as exc:
        print(f"{prog}: rejected (422):", file=sys.stderr)
        for error in exc.errors:
            print(f"  {error['field'] or '(body)'}: {error['reason']}", file=sys.stderr)
        return 2
    except QuotaExceeded as exc:
        print(f"{prog}: {exc.detail}", file=sys.stderr)
        return 3
    except NotFound as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return not_found
    except SMDError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except (ValueError, KeyError) as exc:   # a reply that is not the service's JSON
        print(f"{prog}: unexpected reply from {client.url}: {exc!r}", file=sys.stderr)
        return 1
    finally:
        client.close()

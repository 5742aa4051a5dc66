"""`smd users …` and `smd keys …`: manage who may use the server (run on the server, against its
database: SMD_DATABASE_URL). Their parsers; what they do is :mod:`smdcli.admin_commands`, imported when one
runs (every `smd` builds these parsers, and the store takes ~0.4 s to import)."""
from __future__ import annotations

import argparse


def add_parsers(sub) -> None:
    user_cmd = sub.add_parser("users", help="create and list users, set their quotas")
    user_sub = user_cmd.add_subparsers(dest="action", required=True)
    create = user_sub.add_parser("create", help="add a user (then give them a key: smd keys create NAME)")
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="role admin: sees, cancels and deletes every job")
    user_sub.add_parser("list", help="users with their role and quota overrides")
    quota = user_sub.add_parser("quota", help="override a user's quotas ('default' restores the server's)")
    quota.add_argument("name")
    quota.add_argument("--max-active-jobs", type=_limit, default=-1, metavar="N|default")
    quota.add_argument("--max-work", type=_limit, default=-1, metavar="N|default")

    key_cmd = sub.add_parser("keys", help="create, list and revoke API keys")
    key_sub = key_cmd.add_subparsers(dest="action", required=True)
    create = key_sub.add_parser("create", help="a new key for a user, printed once")
    create.add_argument("name", help="the user")
    create.add_argument("--label", help="what the key is for (e.g. 'laptop', 'dashboard')")
    listing = key_sub.add_parser("list", help="keys (never the secrets) with their state")
    listing.add_argument("name", nargs="?", help="only this user's keys")
    revoke = key_sub.add_parser("revoke", help="revoke a key at once (by its id or the key itself)")
    revoke.add_argument("key_id")


def _limit(text: str) -> int | None:
    if text == "default":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'default', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'default', got {value}")
    return value

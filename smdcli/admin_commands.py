"""What `smd users …` and `smd keys …` do (their parsers: :mod:`smdcli.admin`), against the server's database
(SMD_DATABASE_URL). Imported only by those commands: the store (SQLAlchemy, Alembic) is ~0.4 s of a start."""
from __future__ import annotations

import argparse
import logging
import sys
from datetime import datetime

from store import users
from store.migrate import upgrade_head
from store.models import as_utc
from store.settings import Settings


def run(args: argparse.Namespace, settings: Settings) -> int:
    logging.getLogger("alembic").setLevel(logging.WARNING)  # the command's own output is what matters
    upgrade_head(settings.db_url)
    try:
        return _ACTIONS[(args.command, args.action)](settings.db_url, args, settings)
    except users.UserError as exc:
        print(f"smd {args.command} {args.action}: {exc}", file=sys.stderr)
        return 2


def _users_create(db: str, args: argparse.Namespace, settings: Settings) -> int:
    user = users.create_user(db, args.name, "admin" if args.admin else "user")
    print(f"created user {user.name} ({user.role}); give them a key: smd keys create {user.name}")
    return 0


def _users_list(db: str, args: argparse.Namespace, settings: Settings) -> int:
    rows = [("name", "role", "max_active_jobs", "max_work")] + [
        (user.name, user.role, _show(user.max_active_jobs, settings.max_active_jobs),
         _show(user.max_work, settings.max_work)) for user in users.list_users(db)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]   # columns as wide as their longest value
    for row in rows:
        print(f"{row[0]:{widths[0]}} {row[1]:{widths[1]}} {row[2]:>{widths[2]}} {row[3]:>{widths[3]}}".rstrip())
    return 0


def _show(value: int | None, default: int) -> str:
    return str(value) if value is not None else f"{default} (default)"


def _users_quota(db: str, args: argparse.Namespace, settings: Settings) -> int:
    user = users.set_quota(db, args.name, max_active_jobs=args.max_active_jobs, max_work=args.max_work)
    print(f"{user.name}: max_active_jobs {_show(user.max_active_jobs, settings.max_active_jobs)}, "
          f"max_work {_show(user.max_work, settings.max_work)}")
    return 0


def _keys_create(db: str, args: argparse.Namespace, settings: Settings) -> int:
    key, secret = users.create_key(db, args.name, args.label)
    print(secret)
    print(f"key {key.id} for {args.name}: shown once, store it now (Authorization: Bearer <key>)", file=sys.stderr)
    return 0


def _keys_list(db: str, args: argparse.Namespace, settings: Settings) -> int:
    keys = users.list_keys(db, args.name or None)
    print(f"{'id':12} {'user':20} {'label':20} {'created':20} {'last used':20} state")
    for key in keys:
        print(f"{key.id:12} {key.user.name:20} {(key.label or '-'):20} {_when(key.created_at):20} "
              f"{_when(key.last_used_at):20} {'revoked ' + _when(key.revoked_at) if key.revoked_at else 'active'}")
    return 0


def _when(value: datetime | None) -> str:
    """A stored time in UTC, to the second."""
    return as_utc(value).strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _keys_revoke(db: str, args: argparse.Namespace, settings: Settings) -> int:
    key = users.revoke_key(db, args.key_id)
    print(f"key {key.id} of {key.user.name} revoked")
    return 0


_ACTIONS = {("users", "create"): _users_create, ("users", "list"): _users_list, ("users", "quota"): _users_quota,
            ("keys", "create"): _keys_create, ("keys", "list"): _keys_list, ("keys", "revoke"): _keys_revoke}

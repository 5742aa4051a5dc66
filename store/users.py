"""Users and API keys.

A key is ``smd_<id>_<secret>``: ``id`` (12 hex) finds the row, ``secret`` (32 random bytes,
url-safe) is checked against its stored SHA-256 with a constant-time compare. A plain hash is
enough (no slow KDF): the secret is random with 256 bits of entropy, not a password. The key is
shown once, at creation; the server cannot show it again.

Every public function is a unit of work (:func:`store.db.transaction`); the users and keys it
returns are detached rows (a key with its user loaded). A user argument is a row or a user name.
"""
from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Row, bindparam, select, update
from sqlalchemy.orm import Session, make_transient_to_detached

from store.db import Db, read, transaction
from store.models import ROLES, ApiKey, User, as_utc, utcnow

KEY_PREFIX = "smd_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
LOCAL_USER = "local"   # who submits when auth is off (SMD_AUTH=off, loopback only)
_KEY_PATTERN = re.compile(r"^smd_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})$")
_DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()
_TOUCH_EVERY = timedelta(seconds=60)  # last_used_at is written at most this often (polling is frequent)


class UserError(ValueError):
    """A user or key operation that cannot be done, with the reason."""


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction
def create_user(session: Session, name: str, role: str = "user") -> User:
    if not NAME_PATTERN.match(name):
        raise UserError(f"user name: expected 1-64 letters, digits or _.@- (starting with a letter or digit), "
                        f"got {name!r}")
    if role not in ROLES:
        raise UserError(f"role: expected one of {', '.join(ROLES)}, got {role!r}")
    if get_user(session, name) is not None:
        raise UserError(f"user {name!r} already exists")
    user = User(name=name, role=role, created_at=utcnow())
    session.add(user)
    session.flush()
    return user


@transaction
def get_user(session: Session, name: str) -> User | None:
    return session.scalar(select(User).where(User.name == name))


@transaction
def require_user(session: Session, name: str) -> User:
    user = get_user(session, name)
    if user is None:
        raise UserError(f"no user {name!r}")
    return user


@transaction
def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.name)))


# A request's user is read from the database on every request (a quota or role changed by `smd users` applies
# to the next one), on a plain connection (store.db.read): a row read before, unchanged, gives the same
# detached User back instead of a new one (making one costs as much as the read). {row values: user}.
_users_seen: dict[tuple[Any, ...], User] = {}
_users_lock = threading.Lock()
_USERS = User.__table__
_KEYS = ApiKey.__table__
_USER_NAMED = select(_USERS).where(_USERS.c.name == bindparam("name"))
_KEY_AND_USER = (select(_KEYS.c.secret_hash, _KEYS.c.revoked_at, _KEYS.c.last_used_at, *_USERS.c)
                 .join(_USERS, _USERS.c.id == _KEYS.c.user_id).where(_KEYS.c.id == bindparam("key_id")))


def _user_of(row: Row[Any]) -> User:
    values = tuple(row._mapping[c.name] for c in _USERS.c)
    with _users_lock:
        user = _users_seen.get(values)
    if user is None:
        user = User(**dict(zip(_USERS.c.keys(), values, strict=True)))
        make_transient_to_detached(user)   # a row of the database, as session.get would give
        with _users_lock:
            if len(_users_seen) >= 1024:
                _users_seen.clear()
            _users_seen[values] = user
    return user


def local_user(db: Db) -> User:
    """The user of an auth-off server (an admin: it is the only user), made on first use."""
    if isinstance(db, str):
        row = read(db, lambda c: c.execute(_USER_NAMED, {"name": LOCAL_USER}).first())
        if row is not None:
            return _user_of(row)
    return _make_local_user(db)


@transaction
def _make_local_user(session: Session) -> User:
    user = get_user(session, LOCAL_USER)
    if user is None:
        user = User(name=LOCAL_USER, role="admin", created_at=utcnow())
        session.add(user)
        session.flush()
    return user


@transaction
def _row(session: Session, user: User | str) -> User:
    """The user's row in this session (from a row of any session, or a name)."""
    row = session.get(User, user.id) if isinstance(user, User) else get_user(session, user)
    if row is None:
        raise UserError(f"no user {user.name if isinstance(user, User) else user!r}")
    return row


@transaction
def set_quota(session: Session, user: User | str, *, max_active_jobs: int | None = -1,
              max_work: int | None = -1) -> User:
    """Override a user's quotas; None restores the server default, -1 leaves a value unchanged.
    Returns the user as it is now."""
    user = _row(session, user)
    for field, value in (("max_active_jobs", max_active_jobs), ("max_work", max_work)):
        if value is None or value >= 1:
            setattr(user, field, value)
        elif value != -1:
            raise UserError(f"{field}: expected a positive integer or 'default', got {value}")
    session.flush()
    return user


@transaction
def create_key(session: Session, user: User | str, label: str | None = None) -> tuple[ApiKey, str]:
    """A new key for ``user``: the row and the key itself (shown once, never stored)."""
    user = _row(session, user)
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    key = ApiKey(id=key_id, user_id=user.id, label=label, secret_hash=_hash(secret), created_at=utcnow(), user=user)
    session.add(key)
    session.flush()
    return key, f"{KEY_PREFIX}{key_id}_{secret}"


@transaction
def list_keys(session: Session, user: User | str | None = None) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at)
    if user is not None:
        query = query.where(ApiKey.user_id == _row(session, user).id)
    return list(session.scalars(query))


@transaction
def revoke_key(session: Session, key_id: str) -> ApiKey:
    key = session.get(ApiKey, key_id.removeprefix(KEY_PREFIX).split("_")[0])
    if key is None:
        raise UserError(f"no key {key_id!r}")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.flush()
    return key


def authenticate(db: str, token: str) -> User | None:
    """The user a key belongs to, or None for a malformed, unknown or revoked key. Every path does
    one constant-time compare, so timing tells nothing about which ids exist. One read on a plain
    connection (the key and its user); a write only when last_used_at is older than _TOUCH_EVERY."""
    match = _KEY_PATTERN.match(token)
    row = read(db, lambda c: c.execute(_KEY_AND_USER, {"key_id": match.group(1)}).first()) if match else None
    secret = match.group(2) if match else ""
    expected = row.secret_hash if row is not None else _DUMMY_HASH
    if not hmac.compare_digest(_hash(secret), expected) or row is None or row.revoked_at is not None:
        return None
    now = utcnow()
    last = as_utc(row.last_used_at)
    if last is None or now - last > _TOUCH_EVERY:
        assert match is not None
        _touch(db, match.group(1), now)
    return _user_of(row)


@transaction
def _touch(session: Session, key_id: str, now: datetime) -> None:
    session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=now))

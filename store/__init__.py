"""The persistence layer: one Settings object, SQLAlchemy models, and every SQL statement and
transaction of the service (store.db.run is the one door for transactions).

Used by ``api``, ``worker`` and ``smdcli``; imports none of them.
"""

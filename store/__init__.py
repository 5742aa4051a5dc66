"""The shared persistence layer: one Settings object, SQLAlchemy models, sessions, migrations.

Used by both ``api`` and ``worker``; imports neither.
"""

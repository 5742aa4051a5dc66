"""Celery app and tasks. A task takes an experiment id, runs the engine, writes to SQL. No science here."""

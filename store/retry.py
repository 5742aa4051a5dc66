"""The retry policy for transient database errors lives here (placeholder: it runs each unit once).

store.db.run calls every unit of work (a whole transaction, safe to run again from the start)
through run(fn).
"""


def run(fn):
    return fn()

"""smdlab — the Python client of the SMD Lab service (:class:`Client`); see :mod:`smdlab.client`."""
from __future__ import annotations

from smdlab.client import Client, Experiment, Plot, Study
from smdlab.errors import Conflict, NotFound, QuotaExceeded, SMDError, SMDValidationError

__all__ = ["Client", "Conflict", "Experiment", "NotFound", "Plot", "QuotaExceeded", "SMDError", "SMDValidationError",
           "Study"]

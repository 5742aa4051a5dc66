"""The ``sde`` kind: continuous-time models of SMD (seeds 000–002) and the norm maps of seed 004.

One module per model behind :func:`smdengine.run`; ``params.model`` picks it.
"""

"""FastAPI app: routes, schemas, plots. No science beyond calling smdengine."""

"""Regenerates regime_golden.json: in-regime specs run and predicted by the engine *before* the out-of-regime
warnings existed (commit be3d8d0's parent); tests/engine/test_regime.py checks they are unchanged. Run from the
repository root with the venv python, on the commit whose behaviour is the reference."""
import json

import smdengine

SPECS = {
 "nrq_schedule": {"kind":"nrq","seed":3,"params":{"lr":0.1,"weight_decay":0.01,"trials":50,"steps":200,"record_every":10,"lr_schedule":[{"step":100,"lr_factor":0.1}]}},
 "nrq_momentum": {"kind":"nrq","seed":4,"params":{"lr":0.1,"weight_decay":0.01,"momentum":0.9,"trials":50,"steps":200,"record_every":10}},
 "sde_nrq": {"kind":"sde","seed":5,"params":{"model":"nrq","lr":0.1,"weight_decay":0.01,"dt":0.5,"trials":50,"steps":100,"record_every":10,"f_bins":10}},
 "sde_normalized_linear": {"kind":"sde","seed":6,"params":{"model":"normalized_linear","lr":0.01,"weight_decay":0.05,"trials":10,"record_trials":5,"steps":200,"record_every":20}},
 "sde_norm_map": {"kind":"sde","seed":7,"params":{"model":"norm_map","momentum":0.5,"trials":3,"steps":500,"record_every":50,"unit_grad_sq":{"noise":"uniform"}}},
 "sde_toy2d": {"kind":"sde","seed":8,"params":{"model":"toy2d","steps":50,"record_every":5,"trials":10}},
 "train": {"kind":"train","seed":9,"params":{"width":16,"depth":1,"steps":20,"record_every":5,"eval_every":10,"batch_size":32,"schedule":[{"step":10,"lr_factor":0.5}]}},
}
out = {}
for name, spec in SPECS.items():
    doc = smdengine.run(spec).to_document()
    out[name] = {"spec": spec, "document": doc, "predict": smdengine.json_safe(smdengine.predict(spec))}
json.dump(out, open("tests/engine/data/regime_golden.json","w"), allow_nan=False, sort_keys=True)
print("ok")

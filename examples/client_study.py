"""A notebook-style tour of the Python client: an nrq study of the equilibrium angular update.

Run it cell by cell (the ``# %%`` markers: VS Code, Jupyter's jupytext, Spyder) or as a script, against
a running service (``make run``; SMD_URL, SMD_KEY as for the CLI):

    .venv/bin/python examples/client_study.py [OUT.png]

It submits a 2 × 2 lr × weight_decay grid with two seeds, follows it with a progress bar, reads the
study table as a pandas DataFrame and plots the measured angular update per step against
√(2ηλ), the theory (seed 000): the points should sit on the line.
"""
# %%
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from smdlab import Client  # noqa: E402

client = Client()   # SMD_URL, SMD_KEY
out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SMD_EXAMPLE_PNG", "client_study.png")

# %% submit the study
base = {"kind": "nrq", "seed": 0,
        "params": {"dim": 10, "trials": 100, "steps": 8000, "record_every": 100, "noise_std": 1.0}}
study = client.study(base, grid={"params.lr": [0.05, 0.2], "params.weight_decay": [0.005, 0.02]}, seeds=[0, 1],
                     name="client example: AU vs ηλ")
print(study)

# %% wait for it, with a progress bar
study.wait()
print(study.data["status"], study.data["counts"])

# %% the table, one row per point (mean and standard error over the seeds)
table = study.table(group="point")
print(table[["params.lr", "params.weight_decay", "intrinsic_lr", "au_rms", "au_rms_se", "au_equilibrium"]]
      .to_string(index=False))

# %% measured AU against √(2ηλ), with pandas
fig, ax = plt.subplots(figsize=(5, 4))
line = table.sort_values("intrinsic_lr")
line.plot(x="intrinsic_lr", y="au_rms", yerr="au_rms_se", linestyle="none", marker="o", capsize=3, ax=ax,
          label="measured (tail RMS)")
line.plot(x="intrinsic_lr", y="au_equilibrium", style="k--", ax=ax, label="theory √(2ηλ)")
ax.set(xscale="log", yscale="log", xlabel="ηλ", ylabel="angular update per step", title=study.data.get("name"))
ax.xaxis.set_minor_formatter(NullFormatter())   # ticks at the grid's ηλ values instead
ax.set_xticks(sorted(line["intrinsic_lr"].unique()), [f"{v:.2g}" for v in sorted(line["intrinsic_lr"].unique())])
fig.tight_layout()
fig.savefig(out, dpi=100)
print(f"wrote {out}")

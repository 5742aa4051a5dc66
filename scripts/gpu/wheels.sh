#!/usr/bin/env bash
# Wheels the GPU machine lacks (issue 19), into .whl/ (git-ignored), for its Python 3.12: the engine's
# spec layer (pydantic) and what `smd serve` needs with the embedded defaults (SQLite, filesystem
# broker), and torchsde for bench/sde_vs_torchsde.py. The machine has its own torch, numpy, scipy, matplotlib, pyarrow, scikit-learn, httpx, tqdm
# and pytest (device tool: KINDS.md); nothing there can be fetched. Run here, from the repository root:
#     scripts/gpu/wheels.sh          # ~20 MB
# then scripts/gpu/check.sh there, with .whl carried (bench/README.md, "On a GPU").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PY=${PYTHON:-python3}
# the versions this checkout's .venv resolved (one of each: two versions stop the install there); click and
# typing-extensions too, though the image has them: celery and pydantic need newer ones than it may hold
PACKAGES=(alembic==1.20.1 amqp==5.4.2 annotated-doc==0.0.7 annotated-types==0.8.0 billiard==4.3.2 celery==5.7.0
          click==8.5.1 click-didyoumean==0.3.1 click-plugins==1.1.1.2 click-repl==0.4.1 fastapi==0.165.0 kombu==5.7.0
          fastapi-offline==1.7.7 mako==1.4.3 opentelemetry-api==1.45.2 plotly==7.1.0 prompt-toolkit==3.0.53 pydantic==2.14.4
          pydantic-core==2.50.5 pydantic-settings==2.16.3 python-dotenv==1.2.4 sqlalchemy==2.1.9
          starlette==1.10.0 typing-inspection==0.4.5 tzlocal==5.4.5 uvicorn==0.54.0 vine==5.1.0
          typing-extensions==4.16.0 wcwidth==0.9.4 torchsde==0.2.6 trampoline==0.1.2)
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${PACKAGES[@]}"
ls .whl | wc -l | xargs echo "wheels in .whl:"
du -sh .whl

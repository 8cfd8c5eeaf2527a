# marin-pipelines in one image: the Dagster code location (the default command) and the pods that train
# and evaluate (`python -m marin_pipelines.cli train|sft|eval --step-config FILE`, which the
# launcher sets as the pod's command). Build from the repository root:
#
#   docker build -t us-docker.pkg.dev/PROJECT/marin/marin-pipelines:1 --build-arg JAX_EXTRA=tpu .
#
# JAX_EXTRA picks JAX's accelerator runtime: tpu (libtpu, TPU slices), cuda12 (NVIDIA GPUs), or empty (CPU).
FROM python:3.11.13-slim-bookworm

ARG JAX_EXTRA=""
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DAGSTER_HOME=/opt/dagster/dagster_home \
    WANDB_MODE=offline

# not root: the chart mounts the instance config under DAGSTER_HOME; the home folder is the working one
RUN useradd --create-home --uid 10001 marin \
    && mkdir -p "$DAGSTER_HOME" \
    && chown marin "$DAGSTER_HOME"

# the exact versions the project is tested with: requirements.lock constrains every dependency. The project
# stays in /opt/marin-pipelines, installed editable from there (as Dagster's own images do): definitions.py
# finds the defs folder by the pyproject.toml ([tool.dg]) above the package, which a copy in site-packages
# lacks. Its bytecode is compiled now: the user that runs it cannot write there. The `cluster` extra is Ray's
# dashboard agent, which KubeRay's health probes ask when the image runs a Ray node (deploy/kuberay/).
WORKDIR /opt/marin-pipelines
COPY pyproject.toml requirements.lock README.md ./
COPY marin_pipelines ./marin_pipelines
RUN pip install -c requirements.lock -e '.[cluster]' \
    && if [ -n "$JAX_EXTRA" ]; then pip install -c requirements.lock "jax[$JAX_EXTRA]"; fi \
    && rm -rf build ./*.egg-info \
    && python -m compileall -q marin_pipelines

USER marin
WORKDIR /home/marin
EXPOSE 3030
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "3030", "-m", "marin_pipelines.definitions", \
     "--location-name", "marin_pipelines"]

# prexid: multi-stage image. The build stage makes wheels (prexid + its dependencies); the runtime
# stage installs them into a slim Python with no compiler, and runs as an unprivileged user.
# Checked by tests/unit/test_deploy_dockerfile.py (dockerfile-parse) and tests/integration/test_deploy_image.py.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md* ./
COPY detectors ./detectors
COPY service ./service
# prexid[k8s]: the Kubernetes client the quarantine action uses (off unless PREXID_QUARANTINE__ENABLED)
RUN pip wheel --wheel-dir /wheels '.[k8s]'

FROM python:3.11-slim-bookworm AS runtime
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    PREXID_HTTP_HOST=0.0.0.0 PREXID_HTTP_PORT=8000
RUN groupadd --system --gid 10001 prexid \
 && useradd --system --uid 10001 --gid prexid --no-create-home --shell /usr/sbin/nologin prexid
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links=/wheels 'prexid[k8s]' && rm -rf /wheels
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('PREXID_HTTP_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["prexid"]
CMD ["run"]

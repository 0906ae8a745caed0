# The switchyard operator image. Build: docker build -t switchyard:0.1.0 .
# The base is pinned by exact tag (no registry digest can be looked up offline).
# A machine that reaches no image registry passes its own Python 3.11 base,
# e.g. the one `make images` builds from Debian with debootstrap:
#   --build-arg BASE=localhost/switchyard-python:3.11-bookworm
# and, when pip cannot reach PyPI from inside the build, local wheels:
#   --build-arg PIP_INSTALL_OPTIONS="--no-index --find-links /wheels"
ARG BASE=python:3.11.11-slim-bookworm
FROM ${BASE} AS build
ARG PIP_INSTALL_OPTIONS=""
WORKDIR /src
COPY operator/ operator/
RUN python -m venv /opt/switchyard \
 && /opt/switchyard/bin/pip install --no-cache-dir $PIP_INSTALL_OPTIONS ./operator

FROM ${BASE}
COPY --from=build /opt/switchyard /opt/switchyard
# UID 65532 has no passwd entry; kopf names its peering identity after the user
# (getpass.getuser reads USER before asking the passwd file, where it would fail).
ENV PATH=/opt/switchyard/bin:$PATH PYTHONUNBUFFERED=1 USER=switchyard
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["switchyard"]
CMD ["run"]

# The switchyard operator image. Build: docker build -t switchyard:0.1.0 .
# The base is pinned by exact tag (no registry digest can be looked up offline).
# (No Docker engine runs on the development machines; the test suite runs
# these install steps in a clean virtual environment instead.)
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY operator/ operator/
RUN python -m venv /opt/switchyard \
 && /opt/switchyard/bin/pip install --no-cache-dir ./operator

FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/switchyard /opt/switchyard
ENV PATH=/opt/switchyard/bin:$PATH PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["switchyard"]
CMD ["run"]

"""A dask-gateway-server backend whose clusters are switchyard WorkerFleets.

Run it in the real gateway: `c.DaskGateway.backend_class =
"switchyard.gateway.backend.SwitchyardBackend"`. Each cluster is a root Secret
(TLS pair, API token) owning a `WorkerFleet` with `facilityRef` and the
gateway-speaking scheduler (manifests.py builds all three, purely). The
scheduler's preload talks to the gateway as with the gateway's own backends:
its first heartbeat brings the addresses (the cluster is then RUNNING and
proxied), and every heartbeat's worker count — from `scale(n)` or the
adaptive loop — becomes the fleet's replicas through its scale subresource.
`shutdown()`, and the scheduler's idle timeout, delete the root Secret; the
garbage collector removes the rest.

This module holds only the gateway glue and thin Kubernetes calls (the
gateway's own async client, kubernetes_asyncio, as its KubeBackend uses);
everything decided is in manifests.py and options.py.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections import defaultdict

from dask_gateway_server import models
from dask_gateway_server.backends.base import Backend, ClusterConfig, PublicException
from dask_gateway_server.proxy import Proxy
from dask_gateway_server.tls import new_keypair
from dask_gateway_server.traitlets import Type
from dask_gateway_server.utils import Flag, normalize_address
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.rest import ApiException
from traitlets import Bool, Dict, Float, Integer, List, Unicode, default

from . import manifests
from .options import cluster_options

GROUP, VERSION, PLURAL = "switchyard.dev", "v1alpha1", "workerfleets"


class SwitchyardClusterConfig(ClusterConfig):
    """One cluster's configuration: the gateway's limits (cluster_max_workers/cores/memory) plus image and template."""

    image = Unicode("", help="Worker and scheduler image (an option limited to SwitchyardBackend.images).", config=True)
    template = Unicode("default", help="Name of the fleet template (SwitchyardBackend.fleet_templates).", config=True)


class SwitchyardBackend(Backend):
    """dask-gateway clusters as switchyard WorkerFleets placed by a facility's plan."""

    cluster_config_class = Type(
        "switchyard.gateway.backend.SwitchyardClusterConfig",
        klass="dask_gateway_server.backends.base.ClusterConfig", config=True,
        help="The cluster config class to use",
    )
    namespace = Unicode("default", config=True, help="Namespace of the facility and of every cluster's objects.")
    facility = Unicode(config=True, help="Name of the AnalysisFacility whose plan places the fleets (facilityRef).")
    gateway_instance = Unicode(config=True, help="Label value that tells this gateway's objects from another's.")
    images = List(Unicode(), config=True,
                  help="Images a user may choose (the first is the default); list only images the facility's allowlist admits.")
    fleet_templates = Dict(
        {"default": {}}, config=True,
        help="Named partial WorkerFleet specs (readGbps, pool, staging, tolerations, rampUp, env) a user chooses by `template`.")
    max_worker_cores = Integer(16, min=1, config=True, help="Largest worker_cores option.")
    max_worker_memory = Float(64, config=True, help="Largest worker_memory option, in GiB.")
    max_clusters_per_user = Integer(0, min=0, config=True, help="Clusters one user may hold at once (0: no limit).")
    cluster_heartbeat_period = Integer(15, min=1, config=True, help="Seconds between scheduler heartbeats.")
    cluster_start_timeout = Float(
        600, min=0, config=True,
        help="Seconds a cluster may wait for its scheduler's first heartbeat (after creation or a gateway "
             "restart) before it is stopped as failed and its objects deleted (0: wait forever).")

    network_policies = Bool(
        True, config=True,
        help="Give each cluster's scheduler a NetworkPolicy admitting only its workers and the gateway "
             "(the chart's networkPolicies.enabled).")

    @default("gateway_instance")
    def _default_instance(self):
        return os.environ.get("DASK_GATEWAY_INSTANCE", "switchyard")

    @default("cluster_options")
    def _default_cluster_options(self):
        return cluster_options(self.images or ["ghcr.io/dask/dask:2024.12.1-py3.12"], sorted(self.fleet_templates),
                               max_cores=self.max_worker_cores, max_memory_gib=self.max_worker_memory)

    @default("api_url")
    def _default_api_url(self):
        scheme = "https" if self.proxy.tls_cert else "http"
        return f"{scheme}://{normalize_address(self.proxy.address, resolve_host=True)}{self.proxy.prefix}/api"

    # --- lifecycle -----------------------------------------------------------------

    async def setup(self, app):
        await super().setup(app)
        if not self.facility:
            raise ValueError("c.SwitchyardBackend.facility must name the AnalysisFacility")
        try:
            config.load_incluster_config()
        except config.ConfigException:
            await config.load_kube_config()
        self.api = client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.proxy = Proxy(parent=self, log=self.log)
        await self.proxy.setup(app)
        self.clusters: dict[str, models.Cluster] = {}
        self.replicas: dict[str, int] = {}
        self.waiters = defaultdict(Flag)
        self.pending_since: dict[str, float] = {}
        await self.restore_clusters()
        self.start_timer = asyncio.ensure_future(self.start_timeout_loop())
        self.log.info("switchyard backend: facility %s/%s, clusters reach the gateway at %s",
                      self.namespace, self.facility, self.api_url)

    async def cleanup(self):
        if hasattr(self, "start_timer"):
            self.start_timer.cancel()
        if hasattr(self, "proxy"):
            await self.proxy.cleanup()
        if hasattr(self, "api"):
            await self.api.close()
        await super().cleanup()

    # --- the gateway's calls ---------------------------------------------------------

    async def start_cluster(self, user, cluster_options):
        options, cfg = await self.process_cluster_options(user, cluster_options)
        if cfg.template not in self.fleet_templates:
            raise PublicException(f"unknown fleet template {cfg.template!r}")
        held = [c for c in self.clusters.values() if c.username == user.name and c.status <= models.ClusterStatus.RUNNING]
        if self.max_clusters_per_user and len(held) >= self.max_clusters_per_user:
            raise PublicException(f"User {user.name} already holds {len(held)} clusters, the limit of "
                                  f"{self.max_clusters_per_user}; shut one down first")
        name = uuid.uuid4().hex
        spec = self.describe(name, user.name, cfg)
        try:
            manifests.fleet_spec(spec)  # a template the fleet's model refuses fails here, before any write
        except ValueError as exc:
            raise PublicException(f"fleet template {cfg.template!r} is not a valid WorkerFleet: {exc}") from None
        token = uuid.uuid4().hex
        cert, key = new_keypair(name)
        root = await self.core.create_namespaced_secret(
            self.namespace, manifests.credentials(spec, cert, key, token, options, cfg.to_dict()))
        owner = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": root.metadata.name, "uid": root.metadata.uid}}
        try:
            for obj in manifests.children(spec, owner, self.network_policies):
                await self.create(obj)
        except Exception:
            await self.delete_root(spec)
            raise
        self.log.info("Created cluster %s (fleet %s/%s) for user %s", name, self.namespace, manifests.base_name(spec), user.name)
        self.clusters[name] = models.Cluster(
            name=name, username=user.name, token=token, options=options, config=cfg.to_dict(),
            status=models.ClusterStatus.PENDING, tls_cert=cert, tls_key=key, start_time=_now_ms())
        self.replicas[name] = 0
        self.pending_since[name] = time.monotonic()
        return name

    async def stop_cluster(self, cluster_name, failed=False):
        cluster = self.clusters.get(cluster_name)
        if cluster is None or cluster.status >= models.ClusterStatus.STOPPED:
            return
        self.log.info("Stopping cluster %s", cluster_name)
        cluster.status = models.ClusterStatus.STOPPING
        self.pending_since.pop(cluster_name, None)
        await self.proxy.remove_route(kind="PATH", path=f"/clusters/{cluster_name}")
        await self.proxy.remove_route(kind="SNI", sni=cluster_name)
        await self.delete_root(self.describe(cluster_name, cluster.username, None))
        cluster.status = models.ClusterStatus.FAILED if failed else models.ClusterStatus.STOPPED
        cluster.stop_time = _now_ms()
        self.waiters[cluster_name].set()

    async def get_cluster(self, cluster_name, wait=False):
        if wait and cluster_name in self.clusters:
            try:
                await asyncio.wait_for(self.waiters[cluster_name], 20)
            except asyncio.TimeoutError:
                pass
        return self.clusters.get(cluster_name)

    async def list_clusters(self, username=None, statuses=None):
        wanted = (lambda s: s <= models.ClusterStatus.RUNNING) if statuses is None else set(statuses).__contains__
        return [c for c in self.clusters.values() if wanted(c.status) and (username is None or c.username == username)]

    async def on_cluster_heartbeat(self, cluster_name, msg):
        cluster = self.clusters.get(cluster_name)
        if cluster is None or cluster.status > models.ClusterStatus.RUNNING:
            return
        if cluster.status < models.ClusterStatus.RUNNING:
            cluster.scheduler_address = msg["scheduler_address"]
            cluster.dashboard_address = msg["dashboard_address"]
            cluster.api_address = msg["api_address"]
            if cluster.dashboard_address:
                await self.proxy.add_route(kind="PATH", path=f"/clusters/{cluster_name}", target=cluster.dashboard_address)
            await self.proxy.add_route(kind="SNI", sni=cluster_name, target=cluster.scheduler_address)
            cluster.status = models.ClusterStatus.RUNNING
            self.pending_since.pop(cluster_name, None)
            self.waiters[cluster_name].set()
            self.log.info("Cluster %s is running (scheduler %s)", cluster_name, cluster.scheduler_address)
        count = manifests.worker_count(msg["count"], cluster.config.get("cluster_max_workers"))
        if count != self.replicas.get(cluster_name):
            self.log.info("Cluster %s: fleet replicas %s -> %d", cluster_name, self.replicas.get(cluster_name), count)
            await self.scale_fleet(self.describe(cluster_name, cluster.username, None), count)
            self.replicas[cluster_name] = count

    async def restore_clusters(self) -> None:
        """Know again the clusters whose root Secrets exist (after a gateway restart).

        Each comes back PENDING; its scheduler's next heartbeat brings the addresses
        and makes it RUNNING and routed again, and its count is written once more.
        """
        selector = f"{manifests.INSTANCE_LABEL}={self.gateway_instance},{manifests.COMPONENT_LABEL}=credentials"
        found = await self.core.list_namespaced_secret(self.namespace, label_selector=selector)
        for obj in found.items:
            known = manifests.restore(self.api.sanitize_for_serialization(obj))
            if known is None:
                continue
            self.clusters[known.name] = models.Cluster(
                name=known.name, username=known.username, token=known.token, options=known.options,
                config=known.config, status=models.ClusterStatus.PENDING, tls_cert=known.tls_cert,
                tls_key=known.tls_key, start_time=manifests.epoch_ms(known.created) or _now_ms())
            self.pending_since[known.name] = time.monotonic()
            self.log.info("Restored cluster %s of user %s from its root Secret", known.name, known.username)

    async def start_timeout_loop(self) -> None:
        """Stop, as failed, each cluster whose scheduler never heartbeats (its pod cannot start, say)."""
        period = max(1.0, min(30.0, self.cluster_start_timeout / 4 or 30.0))
        while True:
            await asyncio.sleep(period)
            for name in manifests.overdue(self.pending_since, time.monotonic(), self.cluster_start_timeout):
                self.log.warning("Cluster %s: no scheduler heartbeat in %.0f s; stopping it as failed",
                                 name, self.cluster_start_timeout)
                try:
                    await self.stop_cluster(name, failed=True)
                except Exception:
                    self.log.warning("Could not stop cluster %s", name, exc_info=True)

    # --- pure description and thin Kubernetes calls -----------------------------------

    def describe(self, name, username, cfg) -> manifests.GatewayCluster:
        """The cluster as the builders see it (`cfg` None: only the names matter)."""
        if cfg is None:
            return manifests.GatewayCluster(name=name, namespace=self.namespace, instance=self.gateway_instance,
                                            username=username, facility=self.facility, image="", worker_cores=1,
                                            worker_memory_bytes=2**30)
        return manifests.GatewayCluster(
            name=name, namespace=self.namespace, instance=self.gateway_instance, username=username,
            facility=self.facility, image=cfg.image, worker_cores=int(cfg.worker_cores),
            worker_memory_bytes=int(cfg.worker_memory), scheduler_cores=cfg.scheduler_cores,
            scheduler_memory_bytes=int(cfg.scheduler_memory), template=self.fleet_templates[cfg.template],
            api_url=self.api_url, adaptive_period=cfg.adaptive_period, idle_timeout=cfg.idle_timeout,
            heartbeat_period=self.cluster_heartbeat_period, environment=dict(cfg.environment))

    async def create(self, obj: dict) -> None:
        kind, ns = obj["kind"], obj["metadata"]["namespace"]
        if kind == "WorkerFleet":
            await self.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, obj)
        elif kind == "Deployment":
            await self.apps.create_namespaced_deployment(ns, obj)
        elif kind == "Service":
            await self.core.create_namespaced_service(ns, obj)
        elif kind == "NetworkPolicy":
            await self.networking.create_namespaced_network_policy(ns, obj)
        else:
            raise ValueError(f"no create verb for {kind}")

    async def scale_fleet(self, spec: manifests.GatewayCluster, replicas: int) -> None:
        try:
            await self.custom.patch_namespaced_custom_object_scale(
                GROUP, VERSION, spec.namespace, PLURAL, manifests.base_name(spec), {"spec": {"replicas": replicas}},
                _content_type="application/merge-patch+json")
        except ApiException as exc:
            if exc.status != 404:
                raise

    async def delete_root(self, spec: manifests.GatewayCluster) -> None:
        try:
            await self.core.delete_namespaced_secret(manifests.base_name(spec), spec.namespace,
                                                     propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def _now_ms() -> int:
    return int(time.time() * 1000)

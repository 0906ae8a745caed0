"""Where the API server is and how to prove who we are: the pod's service account, else a kubeconfig.

The operator needs a server address, its CA and a token or client certificate,
nothing of the `kubernetes` client library, whose generated models alone cost
about 40 MiB of resident memory in every operator process (and kopf imports the
library whenever it is installed). Supported: in-cluster service accounts (the
token is re-read when the kubelet rotates it), and kubeconfig users with a token,
a token file, a client certificate (files or data) or an exec credential plugin
(run without a shell, its token cached until it expires). Anything else is a
`KubeconfigError` naming what is missing.
"""

from __future__ import annotations

import atexit
import base64
import datetime
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

import urllib3
import yaml

SERVICE_ACCOUNT = pathlib.Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeconfigError(Exception):
    """No usable API server connection could be read from the environment."""


@dataclass
class Connection:
    """One API server endpoint and the credentials to use on it."""

    host: str
    ca_file: str | None = None
    insecure: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    exec_plugin: dict | None = None
    _cached: tuple = field(default=(None, None), repr=False)   # (mtime or expiry, token)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def pool(self) -> urllib3.PoolManager:
        if self.insecure:
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            return urllib3.PoolManager(num_pools=4, maxsize=8, cert_reqs="CERT_NONE",
                                       cert_file=self.cert_file, key_file=self.key_file)
        return urllib3.PoolManager(num_pools=4, maxsize=8, cert_reqs="CERT_REQUIRED", ca_certs=self.ca_file,
                                   cert_file=self.cert_file, key_file=self.key_file)

    def authorization(self) -> str | None:
        """The Authorization header's value, or None for certificate-only users."""
        if self.token:
            return f"Bearer {self.token}"
        if self.token_file:
            return f"Bearer {self._file_token()}"
        if self.exec_plugin:
            return f"Bearer {self._exec_token()}"
        return None

    def _file_token(self) -> str:
        # Bound service-account tokens rotate: read again whenever the file changes.
        mtime = os.stat(self.token_file).st_mtime
        with self._lock:
            if self._cached[0] != mtime:
                self._cached = (mtime, pathlib.Path(self.token_file).read_text().strip())
            return self._cached[1]

    def _exec_token(self) -> str:
        now = datetime.datetime.now(datetime.timezone.utc)
        with self._lock:
            expiry, token = self._cached
            if token is None or (expiry is not None and expiry - now < datetime.timedelta(seconds=30)):
                expiry, token = run_exec_plugin(self.exec_plugin)
                self._cached = (expiry, token)
            return token


def run_exec_plugin(spec: dict) -> tuple[datetime.datetime | None, str]:
    """Run a kubeconfig `exec` credential plugin (argv, no shell); return (expiry, token)."""
    env = dict(os.environ)
    env.update({e["name"]: e["value"] for e in spec.get("env") or ()})
    try:
        out = subprocess.run([spec["command"], *(spec.get("args") or ())], env=env, capture_output=True,
                             text=True, timeout=60, check=True).stdout
        status = json.loads(out)["status"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as exc:
        raise KubeconfigError(f"exec credential plugin {spec.get('command')!r} failed: {exc}") from None
    if "token" not in status:
        raise KubeconfigError(f"exec credential plugin {spec.get('command')!r} returned no token "
                              "(client certificates from plugins are not supported)")
    expiry = status.get("expirationTimestamp")
    return (datetime.datetime.fromisoformat(expiry.replace("Z", "+00:00")) if expiry else None), status["token"]


def load(kubeconfig: str | None = None) -> Connection:
    """In-cluster when running in a pod (and no kubeconfig is named), else the kubeconfig's current context."""
    if not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST") and (SERVICE_ACCOUNT / "token").exists():
        return in_cluster()
    return from_kubeconfig(kubeconfig)


def in_cluster() -> Connection:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:   # IPv6
        host = f"[{host}]"
    return Connection(host=f"https://{host}:{port}", ca_file=str(SERVICE_ACCOUNT / "ca.crt"),
                      token_file=str(SERVICE_ACCOUNT / "token"))


def from_kubeconfig(path: str | None = None) -> Connection:
    path = path or next((p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p and os.path.exists(p)),
                        os.path.expanduser("~/.kube/config"))
    try:
        config = yaml.safe_load(pathlib.Path(path).read_text()) or {}
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from None
    base = pathlib.Path(path).resolve().parent

    def named(section: str, name: str) -> dict:
        for entry in config.get(section) or ():
            if entry.get("name") == name:
                return entry.get(section[:-1]) or {}
        raise KubeconfigError(f"{path}: no {section[:-1]} named {name!r}")

    context = named("contexts", config.get("current-context") or "")
    cluster, user = named("clusters", context.get("cluster", "")), named("users", context.get("user", ""))
    if not cluster.get("server"):
        raise KubeconfigError(f"{path}: cluster {context.get('cluster')!r} has no server")
    if "auth-provider" in user:
        raise KubeconfigError(f"{path}: user {context.get('user')!r} uses an auth-provider, which is not supported; "
                              "use a token, a client certificate or an exec plugin")

    def file_of(key: str) -> str | None:
        """A path from `key`, or from `key-data` written to a private temporary file."""
        source = cluster if key == "certificate-authority" else user
        if source.get(f"{key}-data"):
            return _private_file(base64.b64decode(source[f"{key}-data"]))
        if source.get(key):
            return str(base / os.path.expanduser(source[key]))
        return None

    return Connection(
        host=cluster["server"].rstrip("/"), ca_file=file_of("certificate-authority"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        cert_file=file_of("client-certificate"), key_file=file_of("client-key"),
        token=user.get("token"), token_file=str(base / user["tokenFile"]) if user.get("tokenFile") else None,
        exec_plugin=user.get("exec"),
    )


_private_dir: str | None = None


def _private_file(data: bytes) -> str:
    """Certificates and keys given inline: urllib3 (like ssl) loads them only from files."""
    global _private_dir
    if _private_dir is None:
        _private_dir = tempfile.mkdtemp(prefix="switchyard-kube-")   # mode 0700
        atexit.register(shutil.rmtree, _private_dir, True)
    fd, name = tempfile.mkstemp(dir=_private_dir)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return name

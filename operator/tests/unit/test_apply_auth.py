"""How the client finds the API server and authenticates (switchyard.kubeconfig), without the kubernetes library."""

import base64
import os
import sys
import time

import pytest
import yaml

from switchyard import kubeconfig
from switchyard.apply import Kube
from switchyard.kubeconfig import KubeconfigError


def write_config(tmp_path, user: dict, cluster: dict | None = None, context: str = "c"):
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "k", "cluster": cluster or {"server": "https://127.0.0.1:6443/", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    return str(path)


def test_token_from_a_kubeconfig_becomes_the_authorization_header(tmp_path):
    kube = Kube.from_environment(write_config(tmp_path, {"token": "abc.def"}))
    assert kube.connection.host == "https://127.0.0.1:6443"
    assert kube.connection.authorization() == "Bearer abc.def"


def test_client_certificates_as_data_or_relative_paths(tmp_path):
    pem = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    conn = kubeconfig.from_kubeconfig(write_config(
        tmp_path, {"client-certificate-data": base64.b64encode(pem).decode(), "client-key": "pki/admin.key"},
        {"server": "https://10.0.0.1:443", "certificate-authority-data": base64.b64encode(b"CA").decode()}))
    assert conn.authorization() is None
    assert open(conn.cert_file, "rb").read() == pem and open(conn.ca_file, "rb").read() == b"CA"
    assert oct(os.stat(os.path.dirname(conn.cert_file)).st_mode & 0o777) == "0o700"
    assert conn.key_file == str(tmp_path / "pki" / "admin.key")
    assert not conn.insecure


def test_a_token_file_is_read_again_when_it_rotates(tmp_path):
    token = tmp_path / "token"
    token.write_text("first\n")
    conn = kubeconfig.from_kubeconfig(write_config(tmp_path, {"tokenFile": "token"}))
    assert conn.authorization() == "Bearer first"
    token.write_text("second\n")
    os.utime(token, (time.time() + 5, time.time() + 5))
    assert conn.authorization() == "Bearer second"


def test_exec_plugin_runs_without_a_shell_and_its_token_is_cached(tmp_path):
    calls = tmp_path / "calls"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, sys\n"
        f"open({str(calls)!r}, 'a').write(repr(sys.argv[1:]) + '\\n')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',\n"
        "                  'status': {'token': 'from-plugin', 'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n")
    conn = kubeconfig.from_kubeconfig(write_config(tmp_path, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
        "args": [str(plugin), "; touch pwned"], "env": [{"name": "X", "value": "1"}]}}))
    assert conn.authorization() == "Bearer from-plugin"
    assert conn.authorization() == "Bearer from-plugin"
    assert calls.read_text().splitlines() == ["['; touch pwned']"]   # one run, the argument passed as is
    assert not (tmp_path / "pwned").exists()


def test_a_failing_exec_plugin_is_a_kubeconfig_error(tmp_path):
    conn = kubeconfig.from_kubeconfig(write_config(tmp_path, {"exec": {"command": "/nonexistent/plugin"}}))
    with pytest.raises(KubeconfigError, match="/nonexistent/plugin"):
        conn.authorization()


@pytest.mark.parametrize("user, context, message", [
    ({"token": "t"}, "missing", "no context named 'missing'"),
    ({"auth-provider": {"name": "gcp"}}, "c", "auth-provider"),
])
def test_unusable_kubeconfigs_name_what_is_wrong(tmp_path, user, context, message):
    with pytest.raises(KubeconfigError, match=message):
        kubeconfig.from_kubeconfig(write_config(tmp_path, user, context=context))


def test_a_missing_kubeconfig_is_a_kubeconfig_error(tmp_path):
    with pytest.raises(KubeconfigError, match="cannot read kubeconfig"):
        kubeconfig.from_kubeconfig(str(tmp_path / "absent"))


def test_in_cluster_uses_the_service_account(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("CA")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    conn = kubeconfig.load()
    assert conn.host == "https://[fd00::1]:443"
    assert conn.ca_file == str(tmp_path / "ca.crt")
    assert conn.authorization() == "Bearer sa-token"


def test_the_operator_does_not_import_the_kubernetes_library():
    # The library is not in the operator's dependencies (kopf logs in without it too): any
    # switchyard module importing it fails here, with the library blocked.
    import subprocess
    code = ("import sys; sys.modules['kubernetes'] = sys.modules['kubernetes_asyncio'] = None\n"
            "import switchyard.cli, switchyard.handlers, switchyard.apply, switchyard.observe.exporter; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]

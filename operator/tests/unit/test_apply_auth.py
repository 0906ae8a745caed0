"""The client authenticates with a token kubeconfig (as the chart's ServiceAccount does)."""

import kubernetes
import yaml

from switchyard.apply import Kube, bearer_token


def test_token_from_a_kubeconfig_becomes_the_authorization_header(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "abc.def"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    kube = Kube.from_environment(str(config))
    assert bearer_token(kube.api.configuration) == "Bearer abc.def"


def test_no_token_no_header():
    assert bearer_token(kubernetes.client.Configuration()) is None

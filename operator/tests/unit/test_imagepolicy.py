"""The image allowlist: parsing, prefix and pattern matching, Docker Hub spellings, the refusal."""

from __future__ import annotations

import pytest

from switchyard.policy import imagepolicy
from switchyard.api.workerfleet import DEFAULT_DASK_IMAGE, DEFAULT_TASKVINE_IMAGE
from switchyard.api.xcachepool import DEFAULT_XCACHE_IMAGE
from switchyard.policy.imagepolicy import ImagePolicy, refusal, spellings

SITE = ImagePolicy.parse("ghcr.io/switchyard/, opensciencegrid/xcache:,,docker.io/library/python:3.12*")


@pytest.mark.parametrize("text", [None, "", " ", ",", " , ,"])
def test_unset_or_empty_allows_everything(text):
    policy = ImagePolicy.parse(text)
    assert not policy.enabled
    assert policy.disallowed_images(["anything:latest", "evil.example/x"]) == []
    assert refusal(["anything"], policy) is None


def test_parse_trims_deduplicates_and_sorts():
    assert ImagePolicy.parse(" b/ ,a/,b/ ").entries == ("a/", "b/")


@pytest.mark.parametrize("image, allowed", [
    ("ghcr.io/switchyard/dask:1", True),
    ("ghcr.io/switchyard/sub/path@sha256:" + "a" * 64, True),
    ("ghcr.io/switchyard-evil/dask:1", False),           # the entry ends with '/': no look-alikes
    ("ghcr.io/other/dask:1", False),
    ("opensciencegrid/xcache:23-release", True),
    ("docker.io/opensciencegrid/xcache:23-release", True),  # Docker Hub's long spelling of the same image
    ("opensciencegrid/xcache-evil:1", False),             # ':' in the entry pins the repository
    ("hub.opensciencegrid.org/opensciencegrid/xcache:23", False),  # another registry
    ("python:3.12-slim", True),                            # pattern against docker.io/library/python:3.12-slim
    ("library/python:3.12", True),
    ("python:3.11", False),
    ("docker.io/ghcr.io/switchyard/dask:1", False),        # a Hub repository posing as a ghcr.io image
])
def test_prefixes_and_patterns(image, allowed):
    assert SITE.allows(image) is allowed
    assert SITE.disallowed_images([image]) == ([] if allowed else [image])


def test_spellings():
    assert spellings("python") == ("python", "docker.io/library/python")
    assert spellings("docker.io/library/python:3") == ("docker.io/library/python:3", "python:3")
    assert spellings("user/app") == ("user/app", "docker.io/user/app")
    assert spellings("ghcr.io/a/b") == ("ghcr.io/a/b",)
    assert spellings("localhost/a") == ("localhost/a",)
    assert spellings("registry:5000/a") == ("registry:5000/a",)
    assert spellings("docker.io/ghcr.io/a") == ("docker.io/ghcr.io/a",)


def test_disallowed_images_sorted_unique():
    images = ["z.example/b:1", "ghcr.io/switchyard/ok:1", "a.example/c:1", "z.example/b:1"]
    assert SITE.disallowed_images(images) == ["a.example/c:1", "z.example/b:1"]


def test_refusal_is_ready_false_with_reason_and_image():
    states = refusal(["ghcr.io/switchyard/ok:1", "evil.example/miner:1"], SITE)
    assert states is not None
    ready = states["Ready"]
    assert (ready.status, ready.reason) == (False, "ImageNotAllowed")
    assert ready.message.startswith("image evil.example/miner:1 not allowed")
    assert imagepolicy.ENV in ready.message
    assert states["Progressing"].status is False and states["Degraded"].status is False
    assert refusal(["ghcr.io/switchyard/ok:1"], SITE) is None


def test_the_settings_read_the_environment():
    from switchyard.policy.settings import Settings
    settings = Settings.from_environment({imagepolicy.ENV: "ghcr.io/dask/", "SWITCHYARD_ALLOWED_HOST_PATHS": "/nvme/"})
    assert settings.images.disallowed_images([DEFAULT_DASK_IMAGE, DEFAULT_TASKVINE_IMAGE]) == [DEFAULT_TASKVINE_IMAGE]
    assert settings.host_paths.prefixes == ("/nvme/",)
    assert Settings.from_environment({}).images.enabled is False


def test_defaults_pass_an_allowlist_of_their_registries():
    policy = ImagePolicy.parse("ghcr.io/dask/,docker.io/cclnd/,hub.opensciencegrid.org/opensciencegrid/xcache:")
    assert policy.disallowed_images([DEFAULT_DASK_IMAGE, DEFAULT_TASKVINE_IMAGE, DEFAULT_XCACHE_IMAGE]) == []

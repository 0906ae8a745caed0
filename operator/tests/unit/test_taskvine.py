"""TaskVine workers cannot run here: their command lines are checked against
vine_worker's documented options instead (cctools: doc/man/m4/vine_worker.m4
and the long-option table of taskvine/src/worker/vine_worker_options.c)."""

import pytest

from switchyard.api import WorkerFleetSpec
from switchyard.api.plans import FleetPlan
from switchyard.builders.workerfleet import build_fleet, worker_command

# Long options that take an argument, with a check of the argument's form as
# vine_worker parses it (atoi/atoll, HOST:PORT, PORT[:PORT]).
def _int(text): return text.isdigit()
def _hostport(text):
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit()
def _port_range(text): return all(p.isdigit() for p in text.split(":")) and 1 <= len(text.split(":")) <= 2
def _any(text): return bool(text)

DOCUMENTED = {
    "--manager-name": _any, "-M": _any, "--catalog": _hostport, "-C": _hostport,
    "--cores": _int, "--memory": _int, "--disk": _int, "--gpus": _int,
    "--transfer-port": _port_range, "--contact-hostport": _hostport,
    "--idle-timeout": _int, "--connect-timeout": _int, "--timeout": _int, "-t": _int,
    "--workspace": _any, "--wall-time": _int, "--feature": _any, "--debug": _any, "-d": _any,
}


def parse(argv: list[str], env: dict[str, str]) -> tuple[dict, list[str]]:
    """Options and positional arguments as getopt_long would see them after the kubelet's $(VAR) expansion."""
    assert argv[0] == "vine_worker"
    options, positional, i = {}, [], 1
    while i < len(argv):
        arg = argv[i]
        for name, value in env.items():
            arg = arg.replace(f"$({name})", value)
        if arg.startswith("-"):
            assert arg in DOCUMENTED, f"{arg} is not a documented vine_worker option"
            value = argv[i + 1]
            for name, v in env.items():
                value = value.replace(f"$({name})", v)
            assert DOCUMENTED[arg](value), f"{arg} {value!r} is not what vine_worker parses"
            options[arg] = value
            i += 2
        else:
            positional.append(arg)
            i += 1
    return options, positional


def fleet(**taskvine) -> WorkerFleetSpec:
    return WorkerFleetSpec.model_validate({"facilityRef": {"name": "af"}, "cores": 8, "memoryGiB": 16,
                                           "taskvine": taskvine})


ENV = {"POD_IP": "10.1.2.3", "POD_NAME": "af-vine-rack-a-abc"}


def test_manager_by_host_and_port():
    options, positional = parse(worker_command("f", "ns", fleet(managerHost="mgr.example.org", managerPort=9200,
                                                                transferPort=9500, diskMiB=2048)), ENV)
    assert positional == ["mgr.example.org", "9200"]
    assert options["--cores"] == "8"
    assert options["--memory"] == str(16 * 1024)  # MB, as vine_worker documents
    assert options["--disk"] == "2048"
    assert options["--transfer-port"] == "9500"
    assert options["--contact-hostport"] == "10.1.2.3:9500"  # each pod advertises its own address


def test_manager_by_name_through_the_catalog():
    options, positional = parse(worker_command("f", "ns", fleet(managerName="coffea-run",
                                                                catalog="catalog.example.org:9097")), ENV)
    assert positional == []
    assert options["--manager-name"] == "coffea-run"
    assert options["--catalog"] == "catalog.example.org:9097"


@pytest.mark.parametrize("taskvine", [{"managerHost": "m.example"}, {"managerName": "p", "catalog": "c.example:9097"}])
def test_generated_pods_carry_exactly_that_command(taskvine):
    spec = fleet(**taskvine)
    plan = FleetPlan(facility="af", workers={"rack-a": 2})
    (deployment,) = build_fleet("f", "ns", spec, plan, helper_image="img:1")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = container["command"] + container["args"]
    parse(argv, ENV)
    env_names = {e["name"] for e in container["env"]}
    assert {"POD_IP", "POD_NAME"} <= env_names  # every $(VAR) the command uses is defined

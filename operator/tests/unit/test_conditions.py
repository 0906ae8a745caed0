from switchyard import conditions as cond


def test_transition_time_moves_only_on_status_change():
    first = cond.merge([], 1, "t1", **cond.progressing("Starting", "x"))
    second = cond.merge(first, 2, "t2", **cond.progressing("Starting", "y"))
    assert [c["lastTransitionTime"] for c in second] == ["t1", "t1", "t1"]
    assert all(c["observedGeneration"] == 2 for c in second)
    third = cond.merge(second, 2, "t3", **cond.ready())
    ready = cond.condition(third, "Ready")
    assert ready["status"] == "True" and ready["lastTransitionTime"] == "t3"
    assert cond.condition(third, "Degraded")["lastTransitionTime"] == "t1"

"""Unit tests of the framework registries (unknown-name errors with suggestions) and of the
scheduling profiles: lookup, the built-in profiles, validation of names and knobs."""

from __future__ import annotations

from typing import Any

import pytest

from trainyard.core import (
    PROFILES,
    Node,
    Profile,
    Snapshot,
    UnknownNameError,
    get_profile,
    run_cycle,
)
from trainyard.core.framework import Registry

# -- framework registries and profiles ----------------------------------------------------


def test_registry_error_suggests_the_close_name_and_lists_known_names() -> None:
    reg: Registry[int] = Registry("widget")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    assert reg.get("beta") == 2
    assert "alpha" in reg and "gamma" not in reg
    assert reg.names() == ["alpha", "beta"]
    with pytest.raises(UnknownNameError) as err:
        reg.get("alpah")
    message = str(err.value)
    assert "unknown widget 'alpah'" in message
    assert "did you mean 'alpha'?" in message
    assert "known: alpha, beta" in message
    assert isinstance(err.value, KeyError)
    with pytest.raises(UnknownNameError) as far:
        reg.get("zzz")
    assert "did you mean" not in str(far.value)
    assert "known: alpha, beta" in str(far.value)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("alpha", 3)


def test_profile_lookup_suggests_the_close_profile() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'default'") as err:
        get_profile("defualt")
    for name in PROFILES.names():
        assert name in str(err.value)
    with pytest.raises(UnknownNameError):
        run_cycle(Snapshot(0.0, (Node("n", 1),)), "no-such-profile")


def test_builtin_profiles_validate() -> None:
    assert {"default", "drf", "fifo", "las", "priority"} <= set(PROFILES.names())
    for name in PROFILES.names():
        get_profile(name).validate()


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"actions": ("allocate", "bakfill")}, UnknownNameError, "did you mean 'backfill'"),
        ({"job_order": "lifo"}, UnknownNameError, "unknown job order 'lifo'"),
        ({"queue_order": "drff"}, UnknownNameError, "did you mean 'drf'"),
        ({"scorers": (("topologgy", 1.0),)}, UnknownNameError, "did you mean 'topology'"),
        ({"scorers": (("binpack", -1.0),)}, ValueError, "binpack weight must be >= 0"),
        ({"max_reservations": -1}, ValueError, "max_reservations must be >= 0"),
        ({"las_thresholds": (10.0, 5.0)}, ValueError, "las_thresholds must be increasing"),
        ({"queue_tie_break": "biggest"}, ValueError, "queue_tie_break must be declared or"),
    ],
)
def test_profile_validate_rejects_bad_names_and_knobs(
    changes: dict[str, Any], error: type[Exception], match: str
) -> None:
    profile = Profile(name="custom")
    profile.validate()
    with pytest.raises(error, match=match):
        profile.with_overrides(**changes)
    bad = Profile(name="custom", **changes)
    with pytest.raises(error, match=match):
        bad.validate()
    with pytest.raises(error, match=match):
        run_cycle(Snapshot(0.0, (Node("n", 1),)), bad)

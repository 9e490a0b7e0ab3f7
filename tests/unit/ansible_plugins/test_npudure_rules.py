"""The alert-rules filter against the repository's rules file: the role's defaults install it unchanged,
an inventory's for: replaces that alert's alone, a bad name or duration is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_plugins.filter.npudure_rules import alert_for

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "monitoring" / "rules" / "npudure-alerts.yml"
RECORDING = ROOT / "monitoring" / "rules" / "npudure-recording.yml"
DEFAULTS = yaml.safe_load((ROOT / "roles" / "npudure_monitoring" / "defaults" / "main.yml").read_text())
SPECS = yaml.safe_load((ROOT / "roles" / "npudure_monitoring" / "meta" / "argument_specs.yml").read_text())


def _for(text: str) -> dict[tuple[str, str | None], str | None]:
    rules = yaml.safe_load(text)["groups"][0]["rules"]
    return {(r["alert"], r["labels"].get("reason")): r.get("for") for r in rules}


def test_the_defaults_install_the_rules_file_byte_for_byte() -> None:
    text = ALERTS.read_text()
    assert alert_for(text, DEFAULTS["npudure_monitoring_alert_for"]) == text
    spec = SPECS["argument_specs"]["main"]["options"]["npudure_monitoring_alert_for"]
    assert spec["default"] == DEFAULTS["npudure_monitoring_alert_for"]
    # Every alert with a for: has its default, named as the filter names it.
    with_for = {
        f"{name}/{reason}" if name == "NpudureBoardNotServing" else name: value
        for (name, reason), value in _for(text).items()
        if value is not None
    }
    assert with_for == DEFAULTS["npudure_monitoring_alert_for"]


def test_an_inventory_shortens_one_alert_and_leaves_the_others() -> None:
    text = ALERTS.read_text()
    out = alert_for(
        text, {"NpudureBoardClockDiverging": "30s", "NpudureBoardNotServing/drained_by_operator": "90s"}
    )
    before, after = _for(text), _for(out)
    assert after[("NpudureBoardClockDiverging", None)] == "30s"
    assert after[("NpudureBoardNotServing", "drained_by_operator")] == "90s"
    assert after[("NpudureBoardNotServing", "hung_npu_context")] == "1m"
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {
        ("NpudureBoardClockDiverging", None),
        ("NpudureBoardNotServing", "drained_by_operator"),
    }
    # Only those two lines differ: comments and layout stay.
    assert sum(a != b for a, b in zip(text.split("\n"), out.split("\n"), strict=True)) == 2


def test_a_recording_rules_file_is_left_as_it_is() -> None:
    text = RECORDING.read_text()
    assert alert_for(text, {"NpudureBoardClockDiverging": "30s"}) == text


@pytest.mark.parametrize(
    ("durations", "message"),
    [
        ({"NpudureBoardClockDivergin": "30s"}, "names no alert of the rules file: NpudureBoardClockDivergin"),
        ({"NpudureBoardNotServing": "1m"}, "names no alert of the rules file: NpudureBoardNotServing"),
        ({"NpudureBoardDown": "soon"}, "is not a Prometheus duration"),
        ({"NpudureContextRecoveries": "1m"}, "that alert has no for:"),
    ],
)
def test_a_bad_name_or_duration_is_refused(durations: dict, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        alert_for(ALERTS.read_text(), durations)

"""Alert bodies per receiver kind: Slack escaping and limits, PagerDuty dedup keys, Alertmanager endsAt."""

from __future__ import annotations

import json

from diagnosis.alert_payloads import (
    SLACK_SECTION_LIMIT,
    AlertEvent,
    alert_events,
    alertmanager_alert,
    generic_body,
    pagerduty_body,
    slack_body,
)
from diagnosis.incident import ChangeKind, Incident, IncidentChange, IncidentState, Resolution
from diagnosis.model import ComponentKind, IncidentKey, RepairAction, Severity
from tests.diagnosis.records import T0

KEY = IncidentKey("node1", ComponentKind.GPU, "GPU-aaaa", "xid:79")


def incident(summary: str = "NVRM: Xid 79", **fields: object) -> Incident:
    base = Incident(
        incident_id="abc",
        key=KEY,
        state=IncidentState.OPEN,
        severity=Severity.CRITICAL,
        action=RepairAction.REBOOT_NODE,
        rule="xid.79",
        summary=summary,
        first_seen=T0,
        last_seen=T0 + 5,
        occurrences=3,
        opened_at=T0,
    )
    return Incident(**{**{f: getattr(base, f) for f in base.__slots__}, **fields})  # type: ignore[arg-type]


def test_slack_escapes_a_channel_ping_in_a_log_line() -> None:
    body = slack_body(AlertEvent.OPENED, incident(summary="user wrote <!channel> & <@U123> in the log"))
    text = json.dumps(body)
    assert "<!channel>" not in text and "<@U123>" not in text
    assert "&lt;!channel&gt; &amp; &lt;@U123&gt;" in body["blocks"][1]["text"]["text"]


def test_slack_sections_stay_within_the_limit() -> None:
    body = slack_body(AlertEvent.OPENED, incident(summary="x" * 10_000))
    assert all(
        len(b["text"]["text"]) <= SLACK_SECTION_LIMIT for b in body["blocks"] if b["type"] == "section"
    )


def test_pagerduty_triggers_and_resolves_with_the_incident_key_as_dedup_key() -> None:
    trigger = pagerduty_body(AlertEvent.OPENED, incident())
    resolve = pagerduty_body(AlertEvent.RESOLVED, incident(state=IncidentState.RESOLVED))
    assert trigger["event_action"] == "trigger" and resolve["event_action"] == "resolve"
    assert trigger["dedup_key"] == resolve["dedup_key"] == "node1|gpu:GPU-aaaa|xid:79"
    assert trigger["payload"]["severity"] == "critical" and trigger["payload"]["source"] == "node1"


def test_alertmanager_alert_has_ends_at_only_once_resolved() -> None:
    firing = alertmanager_alert(incident())
    assert firing["labels"]["alertname"] == "FleetguardIncident" and "endsAt" not in firing
    resolved = alertmanager_alert(
        incident(state=IncidentState.RESOLVED, resolved_at=T0 + 60, resolution=Resolution.HEALTHY)
    )
    assert resolved["endsAt"] == "2023-11-14T22:14:20Z"
    assert resolved["labels"] == firing["labels"]  # the same identity


def test_generic_is_a_standard_webhooks_payload() -> None:
    body = generic_body(AlertEvent.RESOLVED, incident(), T0)
    assert body["type"] == "incident.resolved" and body["data"]["key"] == "node1|gpu:GPU-aaaa|xid:79"


def test_alertmanager_identity_stays_fixed_when_severity_and_counts_change() -> None:
    warning = alertmanager_alert(incident(severity=Severity.WARNING, occurrences=1))
    critical = alertmanager_alert(incident(severity=Severity.CRITICAL, occurrences=9, flaps=3))
    assert warning["labels"] == critical["labels"]
    assert set(warning["labels"]) == {"alertname", "host", "component", "fault", "incident_id"}
    assert (warning["annotations"]["severity"], critical["annotations"]["severity"]) == (
        "warning",
        "critical",
    )
    assert critical["annotations"]["flaps"] == "3"


def test_an_incident_opened_and_resolved_in_one_round_alerts_opened_then_resolved() -> None:
    both = IncidentChange(
        incident(state=IncidentState.RESOLVED, resolved_at=T0 + 1, resolution=Resolution.CANCELLED),
        (ChangeKind.OPENED, ChangeKind.RESOLVED),
    )
    assert alert_events(both) == (AlertEvent.OPENED, AlertEvent.RESOLVED)

"""Alert bodies for each receiver kind, from an incident change. Pure: the relay signs and sends them.

- generic: Standard Webhooks payload `{type, timestamp, data}` (`incident.opened|updated|resolved`);
- slack: Block Kit, every piece of data escaped (`<!channel>` in a log line must not ping anyone) and each
  section within Slack's 3,000 characters;
- pagerduty: Events v2 with dedup_key = the incident key (the routing key is added when sent);
- alertmanager: one alert of the push API (`POST /api/v2/alerts`), `endsAt` once resolved.

Identity is fixed for an incident's life (the key, the incident id, Alertmanager's labels, PagerDuty's
dedup_key); severity and counts travel as data and annotations, so an escalation updates the same alert.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from diagnosis.incident import ChangeKind, Incident, IncidentChange, IncidentState
from diagnosis.model import Severity

SLACK_SECTION_LIMIT = 3000
PAGERDUTY_SUMMARY_LIMIT = 1024
PAGERDUTY_DEDUP_LIMIT = 255
ALERTNAME = "FleetguardIncident"


class AlertEvent(StrEnum):
    OPENED = "incident.opened"
    UPDATED = "incident.updated"
    RESOLVED = "incident.resolved"

    @property
    def short(self) -> str:
        return self.value.removeprefix("incident.")


def alert_events(change: IncidentChange) -> tuple[AlertEvent, ...]:
    """The alerts a change makes, in order: an incident opened and resolved within one round makes both,
    so no receiver gets "resolved" for an incident it never heard opened."""
    event = alert_event(change)
    if event is AlertEvent.RESOLVED and change.opened:
        return (AlertEvent.OPENED, AlertEvent.RESOLVED)
    return () if event is None else (event,)


def alert_event(change: IncidentChange) -> AlertEvent | None:
    """Which alert a change makes, if any: opening, escalating and resolving do; counting up does not."""
    if ChangeKind.RESOLVED in change.kinds and change.incident.state is IncidentState.RESOLVED:
        return AlertEvent.RESOLVED
    if change.opened:
        return AlertEvent.OPENED
    if ChangeKind.ESCALATED in change.kinds:
        return AlertEvent.UPDATED
    return None


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def incident_data(incident: Incident) -> dict[str, Any]:
    key = incident.key
    return {
        "incident_id": incident.incident_id,
        "key": key.text(),
        "host": key.host,
        "component": key.component,
        "fault": key.fault,
        "state": incident.state.value,
        "severity": incident.severity.value,
        "action": incident.action.value,
        "rule": incident.rule,
        "summary": incident.summary,
        "occurrences": incident.occurrences,
        "first_seen": iso(incident.first_seen),
        "last_seen": iso(incident.last_seen),
        "opened_at": iso(incident.opened_at),
        "resolved_at": iso(incident.resolved_at) if incident.resolved_at is not None else None,
        "resolution": incident.resolution.value,
        "returns": incident.returns,
        "escalation_step": incident.escalation_step,
        "flaps": incident.flaps,
    }


def generic_body(event: AlertEvent, incident: Incident, now: float) -> dict[str, Any]:
    return {"type": event.value, "timestamp": iso(now), "data": incident_data(incident)}


def slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters; escaped, `<!channel>` is shown, not acted on."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_body(event: AlertEvent, incident: Incident) -> dict[str, Any]:
    key = incident.key
    icon = {
        Severity.CRITICAL: ":red_circle:",
        Severity.WARNING: ":warning:",
        Severity.INFO: ":information_source:",
    }
    mark = ":white_check_mark:" if event is AlertEvent.RESOLVED else icon[incident.severity]
    title = f"{event.short}: {key.fault} on {key.host} {key.component}"
    details = (
        f"*Severity* {incident.severity.value}   *Action* {incident.action.value}   "
        f"*Occurrences* {incident.occurrences}\n*Rule* {incident.rule}\n{incident.summary}"
    )
    text = _clip(slack_escape(f"{mark} {title}"), SLACK_SECTION_LIMIT)
    return {
        "text": text,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {
                "type": "section",
                "text": {"type": "mrkdwn", "text": _clip(slack_escape(details), SLACK_SECTION_LIMIT)},
            },
            {
                "type": "context",
                # Incoming webhooks cannot thread: the stable key is shown so replies can find the thread.
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": slack_escape(f"incident {incident.incident_id} · key {key.text()}"),
                    }
                ],
            },
        ],
    }


_PD_SEVERITY = {Severity.CRITICAL: "critical", Severity.WARNING: "warning", Severity.INFO: "info"}


def pagerduty_body(event: AlertEvent, incident: Incident) -> dict[str, Any]:
    key = incident.key
    body: dict[str, Any] = {
        "event_action": "resolve" if event is AlertEvent.RESOLVED else "trigger",
        "dedup_key": _clip(key.text(), PAGERDUTY_DEDUP_LIMIT),
    }
    if event is not AlertEvent.RESOLVED:
        body["payload"] = {
            "summary": _clip(
                f"{key.fault} on {key.host} {key.component}: {incident.summary}", PAGERDUTY_SUMMARY_LIMIT
            ),
            "source": key.host,
            "severity": _PD_SEVERITY[incident.severity],
            "timestamp": iso(incident.last_seen),
            "component": key.component,
            "group": key.fault.partition(":")[0],
            "class": key.fault,
            "custom_details": incident_data(incident),
        }
    return body


def alertmanager_alert(incident: Incident, generator_url: str = "") -> dict[str, Any]:
    """One alert of the push API; the label set is its identity (alertname, host, component, fault and
    incident_id, fixed for the incident's life), so re-sending it updates the same alert."""
    key = incident.key
    alert: dict[str, Any] = {
        "labels": {
            "alertname": ALERTNAME,
            "host": key.host,
            "component": key.component,
            "fault": key.fault,
            "incident_id": incident.incident_id,
        },
        # Severity and counts change over an incident's life: annotations, so that an escalation updates
        # the same alert (labels are its identity) and Alertmanager's own silences keep matching it.
        "annotations": {
            "severity": incident.severity.value,
            "summary": incident.summary,
            "action": incident.action.value,
            "occurrences": str(incident.occurrences),
            "flaps": str(incident.flaps),
            "rule": incident.rule,
        },
        "startsAt": iso(incident.opened_at),
    }
    if incident.state in (IncidentState.RESOLVED, IncidentState.CLOSED) and incident.resolved_at is not None:
        alert["endsAt"] = iso(max(incident.resolved_at, incident.opened_at))
    if generator_url:
        alert["generatorURL"] = generator_url
    return alert

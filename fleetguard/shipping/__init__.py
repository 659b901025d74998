"""Agent-side shipping to the fleet controller: the wire format, the on-disk spool, the shipper thread and the
command channel back from the controller (docs/controller.md)."""

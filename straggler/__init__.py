"""Heartbeat monitoring, straggler scoring and hang localisation: pure logic over records and a clock."""

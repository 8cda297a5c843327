"""What a run reports: each update's metrics line, ``metrics.jsonl`` and the trackers, the collapse alarms."""

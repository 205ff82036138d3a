"""Traffic: transfer schedules (collectives, storage), the plan format, metrics."""

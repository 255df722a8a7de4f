"""Firestore CloudEvents as plain values: the cheap skim (events), the whole version
(versions), the payload's shapes (payload), the runId (names), the `Value`s (values)."""

"""The flow around the worker: advance_flow's rules over the run's step graph, a new run's
status, and how a run moved between two reads (submit --wait, the stack's view)."""

"""The use cases: a step from claim to finalize, advance_flow, the reaper, and the ports they
call (protocols the adapters implement)."""

"""One CHART_EXPORT step's rules: which step to take, its claim and finalize, its inputs
validated into chart calls, what an earlier execution left that may be reused, the manifest,
what the step came to (success or the error recorded), the reaper's decision on an expired lease."""

"""The local stack you can watch: `worker-chart-export stack up` (see docs/stack.md)."""

from __future__ import annotations

from worker_chart_export.tools.devstack.command import add_stack_command, run_stack

__all__ = ["add_stack_command", "run_stack"]

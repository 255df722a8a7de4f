"""The `worker-chart-export` command: flags in, summaries and exit codes out."""

"""CHART-IMG's accounts and answers as rules: the plans, one account's usage document (daily
window, pacing, refunds), what a key's answers add up to, the set-aside and its probe, an
account's status row, what an answer means for the step, one request's retries."""

"""CHART-IMG over HTTP (worker contract §13): the `real` and `record` ChartApi adapters
(`assembly.build_http_chart_api` assembles them from plain values) and the account wing they
spend: the configured accounts, the limiter, its views and the key verdicts.

Empty on purpose: a module of the wing (the accounts file's parser, say) costs no HTTP client.
"""

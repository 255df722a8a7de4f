"""A chart template's rules: its own fields under a plan, CHART-IMG's documented lists, the
symbol grammar, the one check both step validation and `templates sync` run, and the request
body a template, a symbol and a timeframe make."""

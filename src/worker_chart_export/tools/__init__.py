"""Tools around the service, for developers and operators: the local stack, the run view,
templates sync."""

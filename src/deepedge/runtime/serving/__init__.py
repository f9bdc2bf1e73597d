"""Serving on Ray Serve: the data plane's controller and apps, the replicas' model server,
camera routing, HAProxy's pages on loopback, the data plane's own ingress in front of Serve."""

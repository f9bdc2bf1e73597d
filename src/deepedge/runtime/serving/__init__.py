"""Serving on Ray Serve: the data plane's controller and apps, the replicas' model server,
camera routing, HAProxy on loopback."""

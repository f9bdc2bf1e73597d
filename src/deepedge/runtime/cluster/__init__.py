"""Ray clusters: sessions, local multi-node clusters, node agents and their registry,
draining, the node watcher, service learners as Ray tasks, Ray's logs."""

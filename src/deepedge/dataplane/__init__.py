"""The data plane's transport-free parts: the inference handler, routing and keys, batching,
the sample store, the serving table and its decisions, and the check that a served graph is
data (the Ray Serve adapters are in runtime/)."""

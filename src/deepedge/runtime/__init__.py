"""The only package that imports Ray: parameter server, workers, edge-server actors."""

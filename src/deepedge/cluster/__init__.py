"""Node specs, node states (snapshots) and metrics sampling."""

"""What the benchmarks share, one module per concept: a benchmark's sizes (``scale``), the
service's HTTP client and inference keys (``http``), a real site on loopback or on a local
Ray cluster (``site``), cameras that send live requests with their true labels
(``cameras``), model updates on the emulated paper testbed (``testbed``), the
micro-profiler's grid of retraining configurations and what measuring it finds
(``microprofile``), the percentile of measured samples (``percentiles``) and the closing
RESULT line (``report``)."""

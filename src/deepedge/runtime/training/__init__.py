"""Training at the edge: the distributed model update (parameter server, workers, the
gradient channel, emulated devices), its launch on Ray or threads, the continuous-learning
loop and its trigger."""

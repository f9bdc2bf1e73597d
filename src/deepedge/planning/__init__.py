"""Pure decision code, one subpackage per family of policies:

* ``sharding``: Deep-Edge's workers, data shards and batch sizes for a model update;
* ``window``: Ekya's retraining window (thief scheduler, uniform baseline, oracle);
* ``placement``: MVSP's model variants, placement and routing.

The families never import each other. Nothing here does I/O, imports Ray or reads the wall
clock.
"""

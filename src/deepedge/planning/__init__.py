"""Pure decision code: sharding (Deep-Edge), thief (Ekya), placement (MVSP), packing.

Nothing here does I/O, imports Ray or reads the wall clock.
"""

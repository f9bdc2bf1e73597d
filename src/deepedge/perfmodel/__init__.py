"""Performance and interference estimators behind one Protocol (Deep-Edge, Section IV-C1)."""

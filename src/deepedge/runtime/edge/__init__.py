"""The edge server's joint retraining and inference, window by window (Ekya on Ray)."""

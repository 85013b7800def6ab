"""moelab's services; each imports `shared` and never another service."""

"""Memory plans: what one GPU holds for a config (weights, grads, optimizer, copies, activations)."""

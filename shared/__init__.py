"""moelab's shared library: model, kernels, precision, optimizers, data formats, config, tracking."""

"""moelab: the command-line entry point that ties shared/ and the services together."""

"""Exporter service: a moelab checkpoint as a Hugging Face model directory, checked by a round trip."""

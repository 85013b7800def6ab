"""lm-evaluation-harness adapter: a moelab checkpoint presented to `lm_eval` as the model `moelab`."""

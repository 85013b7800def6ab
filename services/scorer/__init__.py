"""Model-based quality scoring: oracle labels → Probe/Judge heads on a frozen backbone → calibrated cascade."""

"""Human-facing output of predictions (plots)."""

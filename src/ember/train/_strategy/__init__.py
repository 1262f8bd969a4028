"""Training strategies: where the model runs and how its gradients combine."""

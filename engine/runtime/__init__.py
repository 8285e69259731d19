"""What the stages run on: placement, devices, the model registry, memory, the MLX lock, caches."""

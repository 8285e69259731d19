"""What the backends run on: devices, memory, the MLX lock, the CPU's compute gate, hub and
paths, stats, and failures described with the device's memory figures."""

"""Which models run where: the known-model catalog, the registry that loads them,
placement on the machine's devices, the model cache, and the machine's measured speed
(calibration on kernels) that ``auto`` picks a stack from. Built on the backends and their
model ladder."""

"""Per-tensor statistics of checkpoints in one streaming pass: one tensor's moments and histogram
(tensor.py), its move since the previous checkpoint (weight_deltas.py), Adam's state (adam.py),
torch-free safetensors scans (safetensors_scan.py, array_kernels.py), the chunked thread pool they
share (chunk_runner.py), and the layers table that holds them all (layers.py)."""

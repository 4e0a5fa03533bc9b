"""Export DBAF to ONNX, build TensorRT engines, check parity (tools, not part of the runtime package)."""

"""What a user runs on a checkpoint or a run: `python -m tools.evaluate CKPT` (evaluate a saved
agent, on our env or gymnasium's, with a video), `python -m tools.export CKPT --onnx policy.onnx`
(a policy that runs without this library)."""

"""What the Triton backend and the native reference agree on, written once: quantized
dtypes and their ranges, default epsilons, RoPE's rotate styles and rotary widths, and the
GPUs launch configs are chosen for (``device.DeviceProfile``).

Nothing here imports ``aiter_lite.ops``: both backends import it, neither imports the
other, so a mistake in a rule shows up as a mismatch between them in the tests.
"""

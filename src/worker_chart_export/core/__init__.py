"""The pure core: plain values in, plain values out, no I/O."""

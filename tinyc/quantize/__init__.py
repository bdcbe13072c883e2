"""int8 quantization: calibrate ranges, choose grids, lower float regions to int8 ops, export QDQ.

The integer arithmetic those ops use, which every target must match bit for bit, lives below the
ops in ``tinyc.numerics.fixed_point``; the tensors' grids in ``tinyc.numerics.qparams``.
"""

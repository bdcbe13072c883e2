"""int8 quantization: the integer arithmetic (``arith``) that every target must match bit for bit."""
from .arith import (ADD_LEFT_SHIFT, INT8_MAX, INT8_MIN, INT32_MAX, INT32_MIN, WEIGHT_QMAX, WEIGHT_QMIN, AddParams,
                    activation_range, add_int8, add_params, build_lut, choose_qparams, dequantize,
                    dequantize_multiplier, lut_lookup, multiply_by_quantized_multiplier, quantize, quantize_bias,
                    quantize_multiplier, quantize_weights_per_channel, requant_params, requantize,
                    rounding_divide_by_pot, saturating_left_shift, srdhm)

__all__ = ["ADD_LEFT_SHIFT", "INT8_MAX", "INT8_MIN", "INT32_MAX", "INT32_MIN", "WEIGHT_QMAX", "WEIGHT_QMIN", "AddParams",
           "activation_range", "add_int8", "add_params", "build_lut", "choose_qparams", "dequantize",
           "dequantize_multiplier", "lut_lookup", "multiply_by_quantized_multiplier", "quantize", "quantize_bias",
           "quantize_multiplier", "quantize_weights_per_channel", "requant_params", "requantize",
           "rounding_divide_by_pot", "saturating_left_shift", "srdhm"]
